import type { Knex } from 'knex';

// The retention job (domain/maintenance/retention.ts) deletes dispatched outbox rows, finished webhook
// deliveries and finished automation runs older than RETENTION_DAYS, oldest first, in batches:
// each table needs its creation time indexed for that walk.
export async function up(knex: Knex): Promise<void> {
  await knex.raw(`
CREATE INDEX outbox_events_created_idx ON outbox_events (created_at);
CREATE INDEX webhook_deliveries_created_idx ON webhook_deliveries (created_at);
CREATE INDEX automation_runs_created_idx ON automation_runs (created_at);`);
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw(
    `DROP INDEX outbox_events_created_idx; DROP INDEX webhook_deliveries_created_idx; DROP INDEX automation_runs_created_idx;`,
  );
}
