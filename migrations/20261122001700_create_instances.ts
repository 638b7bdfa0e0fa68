import type { Knex } from 'knex';

export async function up(knex: Knex): Promise<void> {
  await knex.raw(`
CREATE TABLE instances (
  id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
  workspace_id uuid NOT NULL REFERENCES workspaces(id) ON DELETE CASCADE,
  name text NOT NULL CHECK (length(name) BETWEEN 1 AND 200),
  channel text NOT NULL CHECK (channel IN ('whatsapp', 'instagram')),
  provider text NOT NULL CHECK (provider IN ('cloud', 'web')),
  connected boolean NOT NULL DEFAULT false,
  archived boolean NOT NULL DEFAULT false,
  -- baseUrl, phoneNumberId, accessToken, appSecret: secrets, never returned by the API
  config jsonb NOT NULL DEFAULT '{}'::jsonb CHECK (jsonb_typeof(config) = 'object'),
  created_at timestamptz NOT NULL DEFAULT now(),
  updated_at timestamptz NOT NULL DEFAULT now(),
  UNIQUE (workspace_id, id)
);
CREATE INDEX instances_workspace_idx ON instances (workspace_id, created_at) WHERE NOT archived;
  `);
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw(`DROP TABLE instances;`);
}
