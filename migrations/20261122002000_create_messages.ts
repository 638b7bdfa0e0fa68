import type { Knex } from 'knex';

export async function up(knex: Knex): Promise<void> {
  await knex.raw(`
CREATE TABLE messages (
  id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
  workspace_id uuid NOT NULL,
  conversation_id uuid NOT NULL,
  direction text NOT NULL CHECK (direction IN ('in', 'out')),
  type text NOT NULL CHECK (length(type) BETWEEN 1 AND 32),
  body text NOT NULL DEFAULT '',
  -- external https URL (may be exposed) or an internal storage reference (never exposed)
  media_url text,
  media_ref text,
  status text NOT NULL CHECK (status IN ('sent', 'delivered', 'received', 'read', 'failed')),
  provider_message_id text,
  sent_by_member_id uuid,
  timestamp timestamptz NOT NULL DEFAULT now(),
  created_at timestamptz NOT NULL DEFAULT now(),
  FOREIGN KEY (workspace_id, conversation_id) REFERENCES conversations (workspace_id, id) ON DELETE CASCADE
);
CREATE INDEX messages_conversation_idx ON messages (conversation_id, timestamp DESC, id DESC);
CREATE UNIQUE INDEX messages_provider_id_uq ON messages (workspace_id, provider_message_id)
  WHERE provider_message_id IS NOT NULL;
  `);
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw(`DROP TABLE messages;`);
}
