import type { Knex } from 'knex';

export async function up(knex: Knex): Promise<void> {
  await knex.raw(`
CREATE TABLE automations (
  id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
  workspace_id uuid NOT NULL REFERENCES workspaces(id) ON DELETE CASCADE,
  name text NOT NULL CHECK (length(name) BETWEEN 1 AND 200),
  active boolean NOT NULL DEFAULT true,
  trigger_type text NOT NULL CHECK (trigger_type IN ('webhook_received', 'stage_changed', 'deal_won', 'deal_lost', 'card_created', 'contact_updated')),
  trigger jsonb NOT NULL DEFAULT '{}'::jsonb,
  actions jsonb NOT NULL DEFAULT '[]'::jsonb CHECK (jsonb_typeof(actions) = 'array'),
  -- inbound URL token (only for webhook_received); NULL when removed
  webhook_token text UNIQUE,
  created_at timestamptz NOT NULL DEFAULT now(),
  updated_at timestamptz NOT NULL DEFAULT now(),
  UNIQUE (workspace_id, id),
  CHECK (webhook_token IS NULL OR trigger_type = 'webhook_received')
);
CREATE INDEX automations_trigger_idx ON automations (workspace_id, trigger_type) WHERE active;
  `);
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw(`DROP TABLE automations;`);
}
