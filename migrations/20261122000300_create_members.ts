import type { Knex } from 'knex';

export async function up(knex: Knex): Promise<void> {
  await knex.raw(`
CREATE TABLE members (
  id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
  workspace_id uuid NOT NULL REFERENCES workspaces(id) ON DELETE CASCADE,
  name text NOT NULL CHECK (length(name) BETWEEN 1 AND 200),
  email text NOT NULL CHECK (length(email) BETWEEN 3 AND 320),
  created_at timestamptz NOT NULL DEFAULT now(),
  UNIQUE (workspace_id, id)
);
CREATE UNIQUE INDEX members_workspace_email_uq ON members (workspace_id, lower(email));
CREATE INDEX members_workspace_name_idx ON members (workspace_id, lower(name));
  `);
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw(`DROP TABLE members;`);
}
