import type { Knex } from 'knex';

export async function up(knex: Knex): Promise<void> {
  await knex.raw(`
CREATE TABLE workspaces (
  id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
  name text NOT NULL CHECK (length(name) BETWEEN 1 AND 200),
  -- Plan limits: NULL means unlimited.
  deal_limit integer CHECK (deal_limit >= 0),
  daily_message_quota integer CHECK (daily_message_quota >= 0),
  broadcast_limit integer CHECK (broadcast_limit >= 0),
  inbound_webhook_quota integer CHECK (inbound_webhook_quota >= 0),
  webhook_quota integer CHECK (webhook_quota >= 0),
  api_access boolean NOT NULL DEFAULT true,
  active boolean NOT NULL DEFAULT true,
  created_at timestamptz NOT NULL DEFAULT now(),
  updated_at timestamptz NOT NULL DEFAULT now()
);
  `);
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw(`DROP TABLE workspaces;`);
}
