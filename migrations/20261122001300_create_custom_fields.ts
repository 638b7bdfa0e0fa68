import type { Knex } from 'knex';

export async function up(knex: Knex): Promise<void> {
  await knex.raw(`
CREATE TABLE custom_fields (
  id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
  workspace_id uuid NOT NULL REFERENCES workspaces(id) ON DELETE CASCADE,
  -- NULL pipeline: a global field, valid on every pipeline of the workspace
  pipeline_id uuid,
  key text NOT NULL CHECK (key ~ '^[A-Za-z][A-Za-z0-9_]{0,63}$'),
  label text NOT NULL CHECK (length(label) BETWEEN 1 AND 200),
  type text NOT NULL CHECK (type IN ('text', 'number', 'date', 'boolean', 'select', 'multiselect', 'url', 'email', 'phone')),
  position integer NOT NULL DEFAULT 0,
  created_at timestamptz NOT NULL DEFAULT now(),
  FOREIGN KEY (workspace_id, pipeline_id) REFERENCES pipelines (workspace_id, id) ON DELETE CASCADE
);
CREATE UNIQUE INDEX custom_fields_key_uq
  ON custom_fields (workspace_id, coalesce(pipeline_id, '00000000-0000-0000-0000-000000000000'::uuid), key);
  `);
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw(`DROP TABLE custom_fields;`);
}
