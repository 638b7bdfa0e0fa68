import type { Knex } from 'knex';

export async function up(knex: Knex): Promise<void> {
  await knex.raw(`
CREATE TABLE pipelines (
  id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
  workspace_id uuid NOT NULL REFERENCES workspaces(id) ON DELETE CASCADE,
  name text NOT NULL CHECK (length(name) BETWEEN 1 AND 200),
  position integer NOT NULL CHECK (position >= 0),
  created_at timestamptz NOT NULL DEFAULT now(),
  UNIQUE (workspace_id, id)
);
CREATE UNIQUE INDEX pipelines_workspace_name_uq ON pipelines (workspace_id, lower(name));
CREATE INDEX pipelines_workspace_position_idx ON pipelines (workspace_id, position);
  `);
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw(`DROP TABLE pipelines;`);
}
