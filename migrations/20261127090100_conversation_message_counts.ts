import type { Knex } from 'knex';

/**
 * Each conversation counts its messages by direction (`messages_in`, `messages_out`), so the
 * exact `total` of `GET /api/v1/messages` offset pages is a sum over the workspace's visible
 * conversations instead of a count over every message joined to them (0.46-0.58 s at 2 M messages
 * in one workspace, per page, on the bench's machine: each page of a big tenant held a core of the
 * database that long). Kept by triggers in the transaction that writes the messages, whichever path
 * writes them: a statement's inserted and deleted rows at once (a broadcast page records 25, a
 * conversation's deletion cascades to all of its messages), a message moved to another
 * conversation (a lead merge) row by row.
 */
export async function up(knex: Knex): Promise<void> {
  await knex.raw(`
ALTER TABLE conversations
  ADD COLUMN messages_in integer NOT NULL DEFAULT 0,
  ADD COLUMN messages_out integer NOT NULL DEFAULT 0;

-- Both statement triggers name their transition table "changed": the inserted rows count up, the deleted ones down.
CREATE FUNCTION conversation_counts_messages() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  sign integer := CASE TG_OP WHEN 'INSERT' THEN 1 ELSE -1 END;
BEGIN
  -- A conversation deleted with its messages (ON DELETE CASCADE) is no longer there to update.
  UPDATE conversations c
     SET messages_in = c.messages_in + sign * d.n_in, messages_out = c.messages_out + sign * d.n_out
    FROM (SELECT workspace_id, conversation_id,
                 count(*) FILTER (WHERE direction = 'in') AS n_in, count(*) FILTER (WHERE direction <> 'in') AS n_out
            FROM changed GROUP BY 1, 2) d
   WHERE c.workspace_id = d.workspace_id AND c.id = d.conversation_id;
  RETURN NULL;
END $$;
CREATE TRIGGER messages_count_added AFTER INSERT ON messages
  REFERENCING NEW TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION conversation_counts_messages();
CREATE TRIGGER messages_count_removed AFTER DELETE ON messages
  REFERENCING OLD TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION conversation_counts_messages();

CREATE FUNCTION conversation_counts_moved_message() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  UPDATE conversations SET messages_in = messages_in - (OLD.direction = 'in')::int, messages_out = messages_out - (OLD.direction <> 'in')::int
   WHERE workspace_id = OLD.workspace_id AND id = OLD.conversation_id;
  UPDATE conversations SET messages_in = messages_in + (NEW.direction = 'in')::int, messages_out = messages_out + (NEW.direction <> 'in')::int
   WHERE workspace_id = NEW.workspace_id AND id = NEW.conversation_id;
  RETURN NULL;
END $$;
CREATE TRIGGER messages_count_moved AFTER UPDATE OF conversation_id, direction ON messages
  FOR EACH ROW WHEN (OLD.conversation_id IS DISTINCT FROM NEW.conversation_id OR OLD.direction IS DISTINCT FROM NEW.direction)
  EXECUTE FUNCTION conversation_counts_moved_message();

UPDATE conversations c
   SET messages_in = d.n_in, messages_out = d.n_out
  FROM (SELECT workspace_id, conversation_id,
               count(*) FILTER (WHERE direction = 'in') AS n_in, count(*) FILTER (WHERE direction <> 'in') AS n_out
          FROM messages GROUP BY 1, 2) d
 WHERE c.workspace_id = d.workspace_id AND c.id = d.conversation_id;
  `);
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw(`
DROP TRIGGER messages_count_moved ON messages;
DROP FUNCTION conversation_counts_moved_message();
DROP TRIGGER messages_count_added ON messages;
DROP TRIGGER messages_count_removed ON messages;
DROP FUNCTION conversation_counts_messages();
ALTER TABLE conversations DROP COLUMN messages_in, DROP COLUMN messages_out;
  `);
}
