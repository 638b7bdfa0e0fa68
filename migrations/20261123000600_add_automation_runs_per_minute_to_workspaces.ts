import type { Knex } from 'knex';

// The plan's rate of triggered automation runs per minute (NULL: no limit). New and existing
// workspaces get 600: enough for any real flow, and a ceiling on what a loop of automations can
// make the shared worker, Temporal and PostgreSQL do for one tenant.
export async function up(knex: Knex): Promise<void> {
  await knex.raw(
    `ALTER TABLE workspaces ADD COLUMN automation_runs_per_minute integer DEFAULT 600 CHECK (automation_runs_per_minute >= 0);`,
  );
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw(`ALTER TABLE workspaces DROP COLUMN automation_runs_per_minute;`);
}
