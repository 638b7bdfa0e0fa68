import type { Knex } from 'knex';

// Limits a tenant controls have defaults, never unlimited: an unlimited automation count, webhook
// subscription count or run rate let one workspace make the shared dispatcher, worker and
// PostgreSQL work for it alone (issue 32). New workspaces get the defaults; existing ones whose
// value was NULL (unlimited) get them too, and NULL is no longer stored.
export async function up(knex: Knex): Promise<void> {
  await knex.raw(`
ALTER TABLE workspaces
  ALTER COLUMN automation_limit SET DEFAULT 100,
  ALTER COLUMN webhook_quota SET DEFAULT 10,
  ALTER COLUMN automation_runs_per_minute SET DEFAULT 600;
UPDATE workspaces
   SET automation_limit = coalesce(automation_limit, 100),
       webhook_quota = coalesce(webhook_quota, 10),
       automation_runs_per_minute = coalesce(automation_runs_per_minute, 600)
 WHERE automation_limit IS NULL OR webhook_quota IS NULL OR automation_runs_per_minute IS NULL;
ALTER TABLE workspaces
  ALTER COLUMN automation_limit SET NOT NULL,
  ALTER COLUMN webhook_quota SET NOT NULL,
  ALTER COLUMN automation_runs_per_minute SET NOT NULL;
  `);
}

// Back to nullable columns with the defaults they had (none, none, 600). The values filled in stay:
// which workspaces were unlimited before is not kept.
export async function down(knex: Knex): Promise<void> {
  await knex.raw(`
ALTER TABLE workspaces
  ALTER COLUMN automation_limit DROP NOT NULL,
  ALTER COLUMN webhook_quota DROP NOT NULL,
  ALTER COLUMN automation_runs_per_minute DROP NOT NULL,
  ALTER COLUMN automation_limit DROP DEFAULT,
  ALTER COLUMN webhook_quota DROP DEFAULT;
  `);
}
