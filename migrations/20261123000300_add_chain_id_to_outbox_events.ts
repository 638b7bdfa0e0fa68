import type { Knex } from 'knex';

// The automation chain an event belongs to (the root event's id; NULL for a root event itself):
// with it, loop protection bounds how many runs one root event may cause in all, not only how deep.
export async function up(knex: Knex): Promise<void> {
  await knex.raw(`ALTER TABLE outbox_events ADD COLUMN chain_id uuid;`);
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw(`ALTER TABLE outbox_events DROP COLUMN chain_id;`);
}
