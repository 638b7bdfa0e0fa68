import type { Knex } from 'knex';

/**
 * The AI-derived insight (domain/insights): a workspace's model configuration (`ai_*`, the API key
 * sealed like every secret), the tokens its derivations used per São Paulo day (`ai_usage`, against
 * `ai_daily_token_budget`), and on the insight where it came from (`source`: null for one a person
 * wrote) and its temperature as a column the lead list filters on.
 */
export async function up(knex: Knex): Promise<void> {
  await knex.raw(`
ALTER TABLE workspaces
  ADD COLUMN ai_enabled boolean NOT NULL DEFAULT false,
  ADD COLUMN ai_base_url text CHECK (ai_base_url IS NULL OR length(ai_base_url) BETWEEN 1 AND 2048),
  ADD COLUMN ai_api_key text,
  ADD COLUMN ai_model text CHECK (ai_model IS NULL OR length(ai_model) BETWEEN 1 AND 200),
  ADD COLUMN ai_daily_token_budget integer CHECK (ai_daily_token_budget IS NULL OR ai_daily_token_budget >= 1);

CREATE TABLE ai_usage (
  workspace_id uuid NOT NULL REFERENCES workspaces (id) ON DELETE CASCADE,
  day date NOT NULL,
  tokens bigint NOT NULL DEFAULT 0 CHECK (tokens >= 0),
  derivations integer NOT NULL DEFAULT 0 CHECK (derivations >= 0),
  PRIMARY KEY (workspace_id, day)
);

ALTER TABLE insights
  ADD COLUMN source jsonb CHECK (source IS NULL OR jsonb_typeof(source) = 'object'),
  ADD COLUMN temperature text GENERATED ALWAYS AS (
    CASE WHEN qualification->>'temperature' IN ('cold', 'warm', 'hot') THEN qualification->>'temperature' END
  ) STORED;
CREATE INDEX insights_workspace_temperature_idx ON insights (workspace_id, temperature, contact_id) WHERE temperature IS NOT NULL;

-- The automation trigger a derived insight fires (filter: temperature).
ALTER TABLE automations DROP CONSTRAINT automations_trigger_type_check;
ALTER TABLE automations ADD CONSTRAINT automations_trigger_type_check
  CHECK (trigger_type IN ('webhook_received', 'stage_changed', 'deal_won', 'deal_lost', 'card_created', 'contact_updated', 'insight_updated'));
  `);
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw(`
DELETE FROM automations WHERE trigger_type = 'insight_updated';
ALTER TABLE automations DROP CONSTRAINT automations_trigger_type_check;
ALTER TABLE automations ADD CONSTRAINT automations_trigger_type_check
  CHECK (trigger_type IN ('webhook_received', 'stage_changed', 'deal_won', 'deal_lost', 'card_created', 'contact_updated'));
DROP INDEX insights_workspace_temperature_idx;
ALTER TABLE insights DROP COLUMN temperature, DROP COLUMN source;
DROP TABLE ai_usage;
ALTER TABLE workspaces
  DROP COLUMN ai_daily_token_budget, DROP COLUMN ai_model, DROP COLUMN ai_api_key, DROP COLUMN ai_base_url, DROP COLUMN ai_enabled;
  `);
}
