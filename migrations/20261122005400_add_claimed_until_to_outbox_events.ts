import type { Knex } from 'knex';

// The outbox dispatcher leases the rows it works on: a dispatcher that dies mid-batch leaves a
// lease that expires, and the next one takes the rows again (workers/outbox-dispatcher.ts).
export async function up(knex: Knex): Promise<void> {
  await knex.raw(`ALTER TABLE outbox_events ADD COLUMN claimed_until timestamptz;`);
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw(`ALTER TABLE outbox_events DROP COLUMN claimed_until;`);
}
