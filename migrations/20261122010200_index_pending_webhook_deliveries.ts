import type { Knex } from 'knex';

// The dispatcher's two new questions, kept cheap however long a subscription's history grows:
// which subscriptions have a delivery being retried (their new deliveries skip the first-attempt
// fast path), and which pending deliveries nobody is working on (the orphan sweep).
export async function up(knex: Knex): Promise<void> {
  await knex.raw(`
CREATE INDEX webhook_deliveries_retrying_idx ON webhook_deliveries (subscription_id) WHERE status = 'pending' AND attempts > 0;
CREATE INDEX webhook_deliveries_pending_idx ON webhook_deliveries (created_at) WHERE status = 'pending';
  `);
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw(`DROP INDEX webhook_deliveries_retrying_idx; DROP INDEX webhook_deliveries_pending_idx;`);
}
