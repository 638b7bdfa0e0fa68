import type { Knex } from 'knex';

export async function up(knex: Knex): Promise<void> {
  await knex.raw(`
CREATE TABLE templates (
  id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
  workspace_id uuid NOT NULL,
  instance_id uuid NOT NULL,
  name text NOT NULL CHECK (length(name) BETWEEN 1 AND 512),
  language text NOT NULL CHECK (length(language) BETWEEN 2 AND 15),
  variable_count integer NOT NULL DEFAULT 0 CHECK (variable_count BETWEEN 0 AND 20),
  status text NOT NULL CHECK (status IN ('approved', 'pending', 'rejected', 'paused', 'disabled')),
  created_at timestamptz NOT NULL DEFAULT now(),
  FOREIGN KEY (workspace_id, instance_id) REFERENCES instances (workspace_id, id) ON DELETE CASCADE,
  UNIQUE (instance_id, name, language)
);
  `);
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw(`DROP TABLE templates;`);
}
