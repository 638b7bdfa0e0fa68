import type { Knex } from 'knex';

// A row the dispatcher cannot hand over (a bug meeting one payload) is set aside with its error
// and retried with backoff, instead of failing every pass of the batch it sits in and blocking
// every tenant's events behind it.
export async function up(knex: Knex): Promise<void> {
  await knex.raw(`
ALTER TABLE outbox_events
  ADD COLUMN dispatch_failures integer NOT NULL DEFAULT 0 CHECK (dispatch_failures >= 0),
  ADD COLUMN last_dispatch_error text;
  `);
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw(`ALTER TABLE outbox_events DROP COLUMN dispatch_failures, DROP COLUMN last_dispatch_error;`);
}
