import type { Knex } from 'knex';

export async function up(knex: Knex): Promise<void> {
  await knex.raw(`
CREATE TABLE tasks (
  id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
  workspace_id uuid NOT NULL REFERENCES workspaces(id) ON DELETE CASCADE,
  title text NOT NULL CHECK (length(title) BETWEEN 1 AND 500),
  type text NOT NULL DEFAULT 'task' CHECK (length(type) BETWEEN 1 AND 64),
  due_at timestamptz,
  status text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'done')),
  completed_at timestamptz,
  contact_id uuid,
  deal_id uuid,
  assigned_to uuid,
  created_at timestamptz NOT NULL DEFAULT now(),
  updated_at timestamptz NOT NULL DEFAULT now(),
  UNIQUE (workspace_id, id),
  CHECK ((status = 'done') = (completed_at IS NOT NULL)),
  FOREIGN KEY (workspace_id, contact_id) REFERENCES contacts (workspace_id, id) ON DELETE CASCADE,
  FOREIGN KEY (workspace_id, deal_id) REFERENCES deals (workspace_id, id) ON DELETE CASCADE,
  FOREIGN KEY (workspace_id, assigned_to) REFERENCES members (workspace_id, id)
);
CREATE INDEX tasks_workspace_due_idx ON tasks (workspace_id, due_at, id);
CREATE INDEX tasks_workspace_created_idx ON tasks (workspace_id, created_at, id);
CREATE INDEX tasks_workspace_updated_idx ON tasks (workspace_id, updated_at, id);
CREATE INDEX tasks_contact_idx ON tasks (contact_id) WHERE contact_id IS NOT NULL;
CREATE INDEX tasks_deal_idx ON tasks (deal_id) WHERE deal_id IS NOT NULL;
CREATE INDEX tasks_assigned_idx ON tasks (workspace_id, assigned_to, status);
  `);
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw(`DROP TABLE tasks;`);
}
