import type { Knex } from 'knex';

// The events feed shows each event's deliveries (one per subscription), read by event id; the
// unique (subscription_id, event_id) index cannot serve that. Pruning an outbox row also sets its
// deliveries' event_id to NULL through this column, which without an index scans every delivery.
export async function up(knex: Knex): Promise<void> {
  await knex.raw(`CREATE INDEX webhook_deliveries_event_idx ON webhook_deliveries (event_id) WHERE event_id IS NOT NULL;`);
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw(`DROP INDEX webhook_deliveries_event_idx;`);
}
