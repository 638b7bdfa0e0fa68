import type { Knex } from 'knex';

/**
 * One row per provider call a send intends to make, written before the call. A retried
 * activity that finds its row already `in_flight` knows an earlier attempt may have reached the
 * provider and does not call it again (the provider call must never run twice for one request).
 */
export async function up(knex: Knex): Promise<void> {
  await knex.raw(`
CREATE TABLE send_attempts (
  reference text PRIMARY KEY CHECK (length(reference) BETWEEN 1 AND 1000),
  workspace_id uuid NOT NULL REFERENCES workspaces(id) ON DELETE CASCADE,
  state text NOT NULL CHECK (state IN ('in_flight', 'sent', 'failed')),
  provider_message_id text,
  wa_id text,
  error text,
  created_at timestamptz NOT NULL DEFAULT now(),
  updated_at timestamptz NOT NULL DEFAULT now(),
  CHECK ((state = 'sent') = (provider_message_id IS NOT NULL))
);
  `);
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw(`DROP TABLE send_attempts;`);
}
