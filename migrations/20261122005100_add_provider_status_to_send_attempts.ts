import type { Knex } from 'knex';

/**
 * The latest status callback of a sent attempt, kept on the attempt so a `delivered` that arrives
 * before the message row is recorded is not lost (recordSent applies it). Indexed by the
 * provider's message id, which is how status callbacks name a message.
 */
export async function up(knex: Knex): Promise<void> {
  await knex.raw(`
ALTER TABLE send_attempts ADD COLUMN provider_status text CHECK (provider_status IN ('sent', 'delivered', 'read', 'failed'));
CREATE INDEX send_attempts_provider_message_idx ON send_attempts (workspace_id, provider_message_id) WHERE provider_message_id IS NOT NULL;
  `);
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw(`
DROP INDEX send_attempts_provider_message_idx;
ALTER TABLE send_attempts DROP COLUMN provider_status;
  `);
}
