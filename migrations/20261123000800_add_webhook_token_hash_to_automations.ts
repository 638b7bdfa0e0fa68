import type { Knex } from 'knex';

// An automation's inbound token is looked up by its SHA-256 (this column, unique) and stored
// sealed (domain/platform/encryption.ts) in webhook_token, which the worker's pass seals at start: the
// plain token, a credential, is no longer kept at rest. Existing tokens get their hash here.
export async function up(knex: Knex): Promise<void> {
  await knex.raw(`
ALTER TABLE automations ADD COLUMN webhook_token_hash text;
UPDATE automations SET webhook_token_hash = encode(sha256(convert_to(webhook_token, 'UTF8')), 'hex') WHERE webhook_token IS NOT NULL;
CREATE UNIQUE INDEX automations_webhook_token_hash_uq ON automations (webhook_token_hash);
ALTER TABLE automations ADD CONSTRAINT automations_webhook_token_hash_check CHECK ((webhook_token IS NULL) = (webhook_token_hash IS NULL));`);
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw(`
ALTER TABLE automations DROP CONSTRAINT automations_webhook_token_hash_check;
DROP INDEX automations_webhook_token_hash_uq;
ALTER TABLE automations DROP COLUMN webhook_token_hash;`);
}
