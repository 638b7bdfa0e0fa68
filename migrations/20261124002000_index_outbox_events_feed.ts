import type { Knex } from 'knex';

// GET /api/v1/events pages a workspace's business events by (created_at, seq) from a cursor, in
// either direction: an index range scan from the position costs the same at any depth. Trigger
// rows are internal and never listed, so they stay out of the index.
export async function up(knex: Knex): Promise<void> {
  await knex.raw(`CREATE INDEX outbox_events_feed_idx ON outbox_events (workspace_id, created_at, seq) WHERE kind = 'webhook';`);
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw(`DROP INDEX outbox_events_feed_idx;`);
}
