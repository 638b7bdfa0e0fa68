import type { Knex } from 'knex';

// Conversations of an archived connection are not listed: archiving or restoring one makes its
// conversations leave or come back, so their updated_at moves (same transaction, same now()) and
// an incremental sync started before reads the restored ones again.
export async function up(knex: Knex): Promise<void> {
  await knex.raw(`
CREATE FUNCTION touch_conversations_of_instance() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  UPDATE conversations SET updated_at = now() WHERE workspace_id = NEW.workspace_id AND instance_id = NEW.id;
  RETURN NULL;
END $$;
CREATE TRIGGER instances_touch_conversations AFTER UPDATE OF archived ON instances
  FOR EACH ROW WHEN (OLD.archived IS DISTINCT FROM NEW.archived)
  EXECUTE FUNCTION touch_conversations_of_instance();`);
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw(`
DROP TRIGGER instances_touch_conversations ON instances;
DROP FUNCTION touch_conversations_of_instance();`);
}
