import type { Knex } from 'knex';

export async function up(knex: Knex): Promise<void> {
  await knex.raw(`
CREATE TABLE webhook_subscriptions (
  id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
  workspace_id uuid NOT NULL REFERENCES workspaces(id) ON DELETE CASCADE,
  url text NOT NULL CHECK (length(url) BETWEEN 1 AND 2048),
  events text[] NOT NULL CHECK (cardinality(events) >= 1),
  -- the signing secret must be readable to sign; it is never logged nor returned after creation
  secret text NOT NULL,
  active boolean NOT NULL DEFAULT true,
  disabled_reason text,
  created_at timestamptz NOT NULL DEFAULT now(),
  updated_at timestamptz NOT NULL DEFAULT now(),
  UNIQUE (workspace_id, id)
);
CREATE INDEX webhook_subscriptions_active_idx ON webhook_subscriptions (workspace_id) WHERE active;
  `);
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw(`DROP TABLE webhook_subscriptions;`);
}
