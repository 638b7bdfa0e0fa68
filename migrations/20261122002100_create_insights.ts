import type { Knex } from 'knex';

export async function up(knex: Knex): Promise<void> {
  await knex.raw(`
CREATE TABLE insights (
  contact_id uuid PRIMARY KEY,
  workspace_id uuid NOT NULL,
  interest text,
  products jsonb,
  objections jsonb,
  next_step text,
  qualification jsonb,
  summary text,
  updated_at timestamptz NOT NULL DEFAULT now(),
  FOREIGN KEY (workspace_id, contact_id) REFERENCES contacts (workspace_id, id) ON DELETE CASCADE
);
  `);
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw(`DROP TABLE insights;`);
}
