import type { Knex } from 'knex';

export async function up(knex: Knex): Promise<void> {
  await knex.raw(`
CREATE TABLE conversations (
  id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
  workspace_id uuid NOT NULL,
  contact_id uuid NOT NULL,
  instance_id uuid NOT NULL,
  channel text NOT NULL CHECK (channel IN ('whatsapp', 'instagram')),
  status text NOT NULL DEFAULT 'open' CHECK (status IN ('open', 'waiting', 'snoozed', 'closed')),
  last_message_at timestamptz,
  -- the last message received from the contact: opens the 24-hour window
  last_inbound_at timestamptz,
  created_at timestamptz NOT NULL DEFAULT now(),
  updated_at timestamptz NOT NULL DEFAULT now(),
  UNIQUE (workspace_id, id),
  -- one conversation per contact per connection
  UNIQUE (instance_id, contact_id),
  FOREIGN KEY (workspace_id, contact_id) REFERENCES contacts (workspace_id, id) ON DELETE CASCADE,
  FOREIGN KEY (workspace_id, instance_id) REFERENCES instances (workspace_id, id) ON DELETE CASCADE
);
CREATE INDEX conversations_workspace_last_idx ON conversations (workspace_id, last_message_at DESC NULLS LAST, id);
CREATE INDEX conversations_contact_idx ON conversations (contact_id);
  `);
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw(`DROP TABLE conversations;`);
}
