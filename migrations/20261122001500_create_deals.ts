import type { Knex } from 'knex';

export async function up(knex: Knex): Promise<void> {
  await knex.raw(`
CREATE TABLE deals (
  id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
  workspace_id uuid NOT NULL REFERENCES workspaces(id) ON DELETE CASCADE,
  contact_id uuid NOT NULL,
  pipeline_id uuid NOT NULL,
  stage_id uuid NOT NULL,
  product_id uuid,
  assigned_to uuid,
  name text NOT NULL CHECK (length(name) BETWEEN 1 AND 200),
  status text NOT NULL DEFAULT 'open' CHECK (status IN ('open', 'won', 'lost')),
  lost_reason text CHECK (length(lost_reason) <= 1000),
  closed_at timestamptz,
  value numeric(14, 2) CHECK (value >= 0),
  source text NOT NULL DEFAULT 'api' CHECK (length(source) BETWEEN 1 AND 64),
  custom_values jsonb NOT NULL DEFAULT '{}'::jsonb CHECK (jsonb_typeof(custom_values) = 'object'),
  created_at timestamptz NOT NULL DEFAULT now(),
  updated_at timestamptz NOT NULL DEFAULT now(),
  UNIQUE (workspace_id, id),
  -- closedAt is set exactly when the deal is closed; a lost deal always has its reason
  CHECK ((status = 'open') = (closed_at IS NULL)),
  CHECK (status <> 'lost' OR lost_reason IS NOT NULL),
  FOREIGN KEY (workspace_id, contact_id) REFERENCES contacts (workspace_id, id),
  FOREIGN KEY (workspace_id, pipeline_id) REFERENCES pipelines (workspace_id, id),
  -- the stage belongs to the deal's pipeline
  FOREIGN KEY (pipeline_id, stage_id) REFERENCES stages (pipeline_id, id),
  FOREIGN KEY (workspace_id, product_id) REFERENCES products (workspace_id, id),
  FOREIGN KEY (workspace_id, assigned_to) REFERENCES members (workspace_id, id)
);
CREATE INDEX deals_workspace_created_idx ON deals (workspace_id, created_at DESC, id DESC);
CREATE INDEX deals_contact_idx ON deals (contact_id, pipeline_id, stage_id, status);
CREATE INDEX deals_pipeline_stage_status_idx ON deals (pipeline_id, stage_id, status, contact_id);
CREATE INDEX deals_stage_status_idx ON deals (stage_id, status, contact_id);
CREATE INDEX deals_assigned_idx ON deals (workspace_id, assigned_to) WHERE assigned_to IS NOT NULL;
  `);
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw(`DROP TABLE deals;`);
}
