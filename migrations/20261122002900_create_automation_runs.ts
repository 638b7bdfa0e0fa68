import type { Knex } from 'knex';

export async function up(knex: Knex): Promise<void> {
  await knex.raw(`
CREATE TABLE automation_runs (
  id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
  workspace_id uuid NOT NULL,
  automation_id uuid NOT NULL,
  status text NOT NULL CHECK (status IN ('running', 'completed', 'failed', 'filtered', 'duplicate')),
  trigger jsonb NOT NULL DEFAULT '{}'::jsonb,
  external_id text,
  event_id uuid,
  depth integer NOT NULL DEFAULT 0,
  error text,
  created_at timestamptz NOT NULL DEFAULT now(),
  finished_at timestamptz,
  FOREIGN KEY (workspace_id, automation_id) REFERENCES automations (workspace_id, id) ON DELETE CASCADE
);
CREATE INDEX automation_runs_automation_idx ON automation_runs (automation_id, created_at DESC, id DESC);
  `);
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw(`DROP TABLE automation_runs;`);
}
