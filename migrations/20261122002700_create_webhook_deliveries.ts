import type { Knex } from 'knex';

export async function up(knex: Knex): Promise<void> {
  await knex.raw(`
CREATE TABLE webhook_deliveries (
  id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
  workspace_id uuid NOT NULL,
  subscription_id uuid NOT NULL,
  event_id uuid REFERENCES outbox_events(id) ON DELETE SET NULL,
  event text NOT NULL,
  payload jsonb NOT NULL,
  status text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'succeeded', 'failed')),
  attempts integer NOT NULL DEFAULT 0 CHECK (attempts >= 0),
  last_status_code integer,
  last_error text,
  next_attempt_at timestamptz,
  created_at timestamptz NOT NULL DEFAULT now(),
  delivered_at timestamptz,
  FOREIGN KEY (workspace_id, subscription_id) REFERENCES webhook_subscriptions (workspace_id, id) ON DELETE CASCADE,
  CHECK ((status = 'succeeded') = (delivered_at IS NOT NULL))
);
-- one delivery per (event, subscription): a re-dispatch cannot deliver twice
CREATE UNIQUE INDEX webhook_deliveries_event_sub_uq ON webhook_deliveries (subscription_id, event_id) WHERE event_id IS NOT NULL;
CREATE INDEX webhook_deliveries_sub_created_idx ON webhook_deliveries (subscription_id, created_at DESC, id DESC);
  `);
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw(`DROP TABLE webhook_deliveries;`);
}
