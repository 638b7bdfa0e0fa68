import type { Knex } from 'knex';

/**
 * Templates follow the provider (issue 37, part 3): a template read from the WhatsApp Business
 * account keeps its category, its components (header, body, buttons, in our lower-case shape; null
 * for an operator's row that never came from the provider), the provider's template id (what a
 * `message_template_status_update` names) and when it last changed. `variable_count` stays the
 * body's variable count, which sends check.
 */
export async function up(knex: Knex): Promise<void> {
  await knex.raw(`
ALTER TABLE templates
  ADD COLUMN category text CHECK (category IS NULL OR (length(category) BETWEEN 1 AND 32)),
  ADD COLUMN components jsonb CHECK (components IS NULL OR jsonb_typeof(components) = 'object'),
  ADD COLUMN provider_template_id text CHECK (provider_template_id IS NULL OR (length(provider_template_id) BETWEEN 1 AND 64)),
  ADD COLUMN updated_at timestamptz NOT NULL DEFAULT now();

CREATE INDEX templates_workspace_created ON templates (workspace_id, created_at, id);
CREATE INDEX templates_provider_id ON templates (instance_id, provider_template_id) WHERE provider_template_id IS NOT NULL;
  `);
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw(`
DROP INDEX templates_provider_id;
DROP INDEX templates_workspace_created;
ALTER TABLE templates DROP COLUMN updated_at, DROP COLUMN provider_template_id, DROP COLUMN components, DROP COLUMN category;
  `);
}
