import type { Knex } from 'knex';

// A record whose JSON changes must get a new updated_at, or an incremental sync never reads it
// again. Some records show their contact: a task its contact's id only while the contact is
// canonical, a conversation its contact's name and phone; deals and conversations are listed only
// while their contact is canonical. So when a contact's name, phone or visibility changes (an
// edit, a soft delete, a merge, whichever path makes it), those records are touched in the same
// transaction, with the same now().
export async function up(knex: Knex): Promise<void> {
  await knex.raw(`
CREATE FUNCTION touch_records_of_contact() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF (OLD.merged_into_id IS NULL AND OLD.deleted_at IS NULL) IS DISTINCT FROM (NEW.merged_into_id IS NULL AND NEW.deleted_at IS NULL) THEN
    UPDATE tasks SET updated_at = now() WHERE workspace_id = NEW.workspace_id AND contact_id = NEW.id;
    UPDATE deals SET updated_at = now() WHERE workspace_id = NEW.workspace_id AND contact_id = NEW.id;
    UPDATE conversations SET updated_at = now() WHERE workspace_id = NEW.workspace_id AND contact_id = NEW.id;
  ELSIF OLD.name IS DISTINCT FROM NEW.name OR OLD.phone IS DISTINCT FROM NEW.phone THEN
    UPDATE conversations SET updated_at = now() WHERE workspace_id = NEW.workspace_id AND contact_id = NEW.id;
  END IF;
  RETURN NULL;
END $$;
CREATE TRIGGER contacts_touch_records AFTER UPDATE OF name, phone, merged_into_id, deleted_at ON contacts
  FOR EACH ROW
  WHEN (OLD.name IS DISTINCT FROM NEW.name OR OLD.phone IS DISTINCT FROM NEW.phone
        OR OLD.merged_into_id IS DISTINCT FROM NEW.merged_into_id OR OLD.deleted_at IS DISTINCT FROM NEW.deleted_at)
  EXECUTE FUNCTION touch_records_of_contact();`);
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw(`
DROP TRIGGER contacts_touch_records ON contacts;
DROP FUNCTION touch_records_of_contact();`);
}
