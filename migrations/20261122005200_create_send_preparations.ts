import type { Knex } from 'knex';

/**
 * What a send's prepare step did (contact and conversation created, counters taken), written in
 * the same transaction. A prepare retried after its commit (its worker died, its answer was lost)
 * returns this instead of taking the quota again; the compensation marks it undone in its own
 * transaction, so a retried compensation never gives a unit back twice.
 */
export async function up(knex: Knex): Promise<void> {
  await knex.raw(`
CREATE TABLE send_preparations (
  reference text PRIMARY KEY CHECK (length(reference) BETWEEN 1 AND 1000),
  workspace_id uuid NOT NULL REFERENCES workspaces(id) ON DELETE CASCADE,
  prepared jsonb NOT NULL,
  undone_at timestamptz,
  created_at timestamptz NOT NULL DEFAULT now()
);
  `);
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw(`DROP TABLE send_preparations;`);
}
