import type { Knex } from 'knex';

// When the last attempt ran, for the delivery log (next_attempt_at says when the next one will).
export async function up(knex: Knex): Promise<void> {
  await knex.raw(`ALTER TABLE webhook_deliveries ADD COLUMN last_attempt_at timestamptz;`);
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw(`ALTER TABLE webhook_deliveries DROP COLUMN last_attempt_at;`);
}
