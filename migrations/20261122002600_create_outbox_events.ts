import type { Knex } from 'knex';

export async function up(knex: Knex): Promise<void> {
  await knex.raw(`
CREATE TABLE outbox_events (
  id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
  seq bigserial UNIQUE,
  workspace_id uuid NOT NULL REFERENCES workspaces(id) ON DELETE CASCADE,
  -- 'webhook': an outbound business event; 'trigger': an internal automation trigger
  kind text NOT NULL CHECK (kind IN ('webhook', 'trigger')),
  name text NOT NULL CHECK (length(name) BETWEEN 1 AND 64),
  payload jsonb NOT NULL,
  -- automation chain depth that caused this event (loop protection)
  depth integer NOT NULL DEFAULT 0 CHECK (depth >= 0),
  created_at timestamptz NOT NULL DEFAULT now(),
  dispatched_at timestamptz
);
CREATE INDEX outbox_events_pending_idx ON outbox_events (seq) WHERE dispatched_at IS NULL;
CREATE INDEX outbox_events_workspace_idx ON outbox_events (workspace_id, created_at);
  `);
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw(`DROP TABLE outbox_events;`);
}
