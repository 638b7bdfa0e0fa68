import type { Knex } from 'knex';

// Idempotency-Key is enforced by the send workflow's id in Temporal (api/send.ts); this table was
// never written. Dropping it keeps one place for the rule.
export async function up(knex: Knex): Promise<void> {
  await knex.raw(`DROP TABLE idempotency_keys;`);
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw(`
CREATE TABLE idempotency_keys (
  workspace_id uuid NOT NULL REFERENCES workspaces(id) ON DELETE CASCADE,
  key text NOT NULL CHECK (length(key) BETWEEN 1 AND 255),
  request_hash text,
  status_code integer,
  response jsonb,
  created_at timestamptz NOT NULL DEFAULT now(),
  expires_at timestamptz NOT NULL,
  PRIMARY KEY (workspace_id, key)
);
CREATE INDEX idempotency_keys_expires_idx ON idempotency_keys (expires_at);
  `);
}
