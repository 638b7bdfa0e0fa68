import type { Knex } from 'knex';

// The dispatcher's claim reads pending rows by workspace (outbox_events_pending_workspace_idx).
// With this index beside it, statistics that say no row is pending (the outbox is drained almost
// always) let PostgreSQL walk every pending row by seq to find one workspace's: after a burst of
// 10,000 events the claim ran 15 s (domain/webhooks/outbox.ts CLAIM_PENDING_SQL).
export async function up(knex: Knex): Promise<void> {
  await knex.raw(`DROP INDEX IF EXISTS outbox_events_pending_idx;`);
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw(`CREATE INDEX outbox_events_pending_idx ON outbox_events (seq) WHERE dispatched_at IS NULL;`);
}
