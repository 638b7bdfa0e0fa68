import type { Knex } from 'knex';

export async function up(knex: Knex): Promise<void> {
  await knex.raw(`
CREATE TABLE daily_counters (
  workspace_id uuid NOT NULL REFERENCES workspaces(id) ON DELETE CASCADE,
  -- the calendar day in America/Sao_Paulo
  day date NOT NULL,
  kind text NOT NULL CHECK (kind IN ('messages', 'cold_conversations')),
  count integer NOT NULL DEFAULT 0 CHECK (count >= 0),
  PRIMARY KEY (workspace_id, day, kind)
);
  `);
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw(`DROP TABLE daily_counters;`);
}
