import type { Knex } from 'knex';

export async function up(knex: Knex): Promise<void> {
  await knex.raw(`
CREATE TABLE stages (
  id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
  workspace_id uuid NOT NULL,
  pipeline_id uuid NOT NULL,
  name text NOT NULL CHECK (length(name) BETWEEN 1 AND 200),
  position integer NOT NULL CHECK (position >= 0),
  created_at timestamptz NOT NULL DEFAULT now(),
  UNIQUE (workspace_id, id),
  UNIQUE (pipeline_id, id),
  UNIQUE (pipeline_id, position),
  FOREIGN KEY (workspace_id, pipeline_id) REFERENCES pipelines (workspace_id, id) ON DELETE CASCADE
);
CREATE UNIQUE INDEX stages_pipeline_name_uq ON stages (pipeline_id, lower(name));
  `);
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw(`DROP TABLE stages;`);
}
