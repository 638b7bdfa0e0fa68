import type { Knex } from 'knex';

/**
 * Broadcasts become a resource (issue 36): what to send (instance, template, audience), when and
 * how fast, and one recipient row per contact of the frozen audience, whose statuses make the
 * counts (so they always add up to the total). `paused` joins the statuses; `draft` stays for the
 * admin route.
 */
export async function up(knex: Knex): Promise<void> {
  await knex.raw(`
ALTER TABLE broadcasts
  ADD COLUMN name text NOT NULL DEFAULT '' CHECK (length(name) <= 200),
  ADD COLUMN instance_id uuid,
  ADD COLUMN audience jsonb NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(audience) = 'object'),
  ADD COLUMN template jsonb CHECK (template IS NULL OR jsonb_typeof(template) = 'object'),
  ADD COLUMN scheduled_at timestamptz,
  ADD COLUMN started_at timestamptz,
  ADD COLUMN finished_at timestamptz,
  ADD COLUMN waiting_until timestamptz,
  ADD COLUMN rate_per_second integer NOT NULL DEFAULT 20 CHECK (rate_per_second BETWEEN 1 AND 80),
  ADD COLUMN updated_at timestamptz NOT NULL DEFAULT now(),
  ADD CONSTRAINT broadcasts_instance_fkey FOREIGN KEY (workspace_id, instance_id) REFERENCES instances (workspace_id, id);
ALTER TABLE broadcasts DROP CONSTRAINT broadcasts_status_check;
ALTER TABLE broadcasts ADD CONSTRAINT broadcasts_status_check
  CHECK (status IN ('draft', 'scheduled', 'in_progress', 'paused', 'completed', 'cancelled'));
CREATE INDEX broadcasts_workspace_created_idx ON broadcasts (workspace_id, created_at DESC, id DESC);
CREATE INDEX broadcasts_instance_idx ON broadcasts (instance_id) WHERE instance_id IS NOT NULL;

CREATE TABLE broadcast_recipients (
  workspace_id uuid NOT NULL,
  broadcast_id uuid NOT NULL,
  contact_id uuid NOT NULL,
  phone text NOT NULL,
  position integer NOT NULL CHECK (position >= 0),
  status text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'sent', 'delivered', 'read', 'failed', 'skipped')),
  code text CHECK (code IS NULL OR length(code) <= 100),
  message_id uuid,
  conversation_id uuid,
  sent_at timestamptz,
  reference text NOT NULL UNIQUE,
  created_at timestamptz NOT NULL DEFAULT now(),
  updated_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (broadcast_id, contact_id),
  FOREIGN KEY (workspace_id, broadcast_id) REFERENCES broadcasts (workspace_id, id) ON DELETE CASCADE
);
CREATE INDEX broadcast_recipients_pending_idx ON broadcast_recipients (broadcast_id, position) WHERE status = 'pending';
CREATE INDEX broadcast_recipients_status_idx ON broadcast_recipients (broadcast_id, status, position);
  `);
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw(`
DROP TABLE broadcast_recipients;
DROP INDEX broadcasts_instance_idx;
DROP INDEX broadcasts_workspace_created_idx;
UPDATE broadcasts SET status = 'in_progress' WHERE status = 'paused';
ALTER TABLE broadcasts DROP CONSTRAINT broadcasts_status_check;
ALTER TABLE broadcasts ADD CONSTRAINT broadcasts_status_check
  CHECK (status IN ('draft', 'scheduled', 'in_progress', 'completed', 'cancelled'));
ALTER TABLE broadcasts
  DROP CONSTRAINT broadcasts_instance_fkey,
  DROP COLUMN name,
  DROP COLUMN instance_id,
  DROP COLUMN audience,
  DROP COLUMN template,
  DROP COLUMN scheduled_at,
  DROP COLUMN started_at,
  DROP COLUMN finished_at,
  DROP COLUMN waiting_until,
  DROP COLUMN rate_per_second,
  DROP COLUMN updated_at;
  `);
}
