import type { Knex } from 'knex';

/**
 * A broadcast recipient's row holds its delivery status itself (`delivered`, `read`, `failed` as
 * the provider reports them on its message), so a broadcast's counts and its recipient list read
 * the broadcast's own rows only. They used to join each recipient to its message; on a new
 * workspace (statistics not yet gathered) the planner walked the workspace's messages once per
 * recipient, and reading a 10,000-recipient broadcast during its run passed the 15 s statement
 * timeout (measured by the bench).
 *
 * A trigger on `messages` moves the recipient whenever its message's status moves (the message's
 * status only moves forward: domain/messaging/inbound.ts); a recipient recorded sent after its
 * message already moved takes the message's status then (domain/broadcasts markRecipientsSent).
 */
export async function up(knex: Knex): Promise<void> {
  await knex.raw(`
CREATE INDEX broadcast_recipients_message_idx ON broadcast_recipients (message_id) WHERE message_id IS NOT NULL;

CREATE FUNCTION broadcast_recipient_follows_message() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  UPDATE broadcast_recipients SET status = NEW.status, updated_at = now()
   WHERE message_id = NEW.id AND workspace_id = NEW.workspace_id
     AND status IN ('sent', 'delivered', 'read') AND status <> NEW.status;
  RETURN NULL;
END $$;
CREATE TRIGGER messages_move_broadcast_recipient AFTER UPDATE OF status ON messages
  FOR EACH ROW WHEN (OLD.status IS DISTINCT FROM NEW.status AND NEW.status IN ('delivered', 'read', 'failed'))
  EXECUTE FUNCTION broadcast_recipient_follows_message();

UPDATE broadcast_recipients r SET status = m.status
  FROM messages m
 WHERE m.id = r.message_id AND m.workspace_id = r.workspace_id
   AND r.status = 'sent' AND m.status IN ('delivered', 'read', 'failed');
  `);
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw(`
DROP TRIGGER messages_move_broadcast_recipient ON messages;
DROP FUNCTION broadcast_recipient_follows_message();
DROP INDEX broadcast_recipients_message_idx;
UPDATE broadcast_recipients SET status = 'sent' WHERE status IN ('delivered', 'read') OR (status = 'failed' AND message_id IS NOT NULL);
  `);
}
