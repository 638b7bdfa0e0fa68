import type { Knex } from 'knex';

// One row per (run, action) applied, written in the action's own transaction: a retried activity
// (its first attempt timed out but committed, or the worker died after the commit) finds the row
// and returns the recorded context instead of creating a second deal, task or note.
export async function up(knex: Knex): Promise<void> {
  await knex.raw(`
CREATE TABLE automation_action_effects (
  run_id uuid NOT NULL REFERENCES automation_runs(id) ON DELETE CASCADE,
  action_index integer NOT NULL CHECK (action_index >= 0),
  context jsonb,
  created_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (run_id, action_index)
);`);
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw(`DROP TABLE automation_action_effects;`);
}
