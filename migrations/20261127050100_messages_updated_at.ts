import type { Knex } from 'knex';

/**
 * The message sync (issue 37, part 5): `GET /api/v1/messages` pages by (updated_at, id) like the
 * other syncs, so a message's updated_at must move, in the transaction of the change, whenever its
 * JSON does:
 *
 * - its status (a status notification; the UPDATE in domain/messaging/inbound.ts stamps it);
 * - its `media` (pending -> stored / unavailable): a record showing another record, so a trigger
 *   on `message_media` touches the message, whichever path changes the file's row;
 * - its `conversationId` (a lead merge moves the duplicate's messages into the survivor's
 *   conversation, domain/leads/contacts.ts): a trigger on the column, so every path that moves a
 *   message stamps it.
 *
 * A new row is stamped by the default (its transaction's now()). Existing rows: their creation, or
 * their media's last change when later (the latest status time is not kept). Indexes: the sync's
 * order within a workspace, and within a conversation (the `conversationId` filter); the offset
 * list's order (newest `timestamp` first) within a workspace (within a conversation,
 * messages_conversation_idx already serves it).
 */
export async function up(knex: Knex): Promise<void> {
  await knex.raw(`
ALTER TABLE messages ADD COLUMN updated_at timestamptz NOT NULL DEFAULT now();
UPDATE messages m
   SET updated_at = greatest(m.created_at, (SELECT mm.updated_at FROM message_media mm WHERE mm.message_id = m.id));

CREATE INDEX messages_workspace_updated_idx ON messages (workspace_id, updated_at, id);
CREATE INDEX messages_conversation_updated_idx ON messages (conversation_id, updated_at, id);
CREATE INDEX messages_workspace_timestamp_idx ON messages (workspace_id, timestamp DESC, id DESC);

CREATE FUNCTION touch_message_of_media() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  UPDATE messages SET updated_at = now() WHERE workspace_id = NEW.workspace_id AND id = NEW.message_id;
  RETURN NULL;
END $$;
CREATE TRIGGER message_media_touch_message AFTER UPDATE OF status, mime_type, size, file_name, sha256, reason ON message_media
  FOR EACH ROW
  WHEN ((OLD.status, OLD.mime_type, OLD.size, OLD.file_name, OLD.sha256, OLD.reason)
        IS DISTINCT FROM (NEW.status, NEW.mime_type, NEW.size, NEW.file_name, NEW.sha256, NEW.reason))
  EXECUTE FUNCTION touch_message_of_media();

CREATE FUNCTION stamp_moved_message() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  NEW.updated_at := now();
  RETURN NEW;
END $$;
CREATE TRIGGER messages_stamp_move BEFORE UPDATE OF conversation_id ON messages
  FOR EACH ROW WHEN (OLD.conversation_id IS DISTINCT FROM NEW.conversation_id)
  EXECUTE FUNCTION stamp_moved_message();`);
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw(`
DROP TRIGGER messages_stamp_move ON messages;
DROP FUNCTION stamp_moved_message();
DROP TRIGGER message_media_touch_message ON message_media;
DROP FUNCTION touch_message_of_media();
DROP INDEX messages_workspace_timestamp_idx;
DROP INDEX messages_conversation_updated_idx;
DROP INDEX messages_workspace_updated_idx;
ALTER TABLE messages DROP COLUMN updated_at;`);
}
