import type { Knex } from 'knex';

// A lead shows its tags with their names and colours: renaming, recolouring or deleting a tag
// changes every lead that carries it, so their updated_at moves (same transaction, same now()) and
// an incremental sync reads them again. Only canonical contacts: a tombstone's updated_at stays
// the moment it left. Before the delete, while contact_tags still names the contacts (the cascade
// removes those rows after).
export async function up(knex: Knex): Promise<void> {
  await knex.raw(`
CREATE FUNCTION touch_contacts_of_tag() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  -- Locked in id order first: two tags changed at once, sharing leads, wait for each other
  -- instead of deadlocking.
  PERFORM 1 FROM contacts c
    JOIN contact_tags ct ON ct.contact_id = c.id
   WHERE ct.tag_id = OLD.id AND c.workspace_id = OLD.workspace_id AND c.merged_into_id IS NULL AND c.deleted_at IS NULL
   ORDER BY c.id FOR NO KEY UPDATE OF c;
  UPDATE contacts c SET updated_at = now()
    FROM contact_tags ct
   WHERE ct.tag_id = OLD.id AND c.id = ct.contact_id AND c.workspace_id = OLD.workspace_id
     AND c.merged_into_id IS NULL AND c.deleted_at IS NULL;
  RETURN OLD;
END $$;
CREATE TRIGGER tags_touch_contacts_on_change AFTER UPDATE OF name, color ON tags
  FOR EACH ROW WHEN (OLD.name IS DISTINCT FROM NEW.name OR OLD.color IS DISTINCT FROM NEW.color)
  EXECUTE FUNCTION touch_contacts_of_tag();
CREATE TRIGGER tags_touch_contacts_on_delete BEFORE DELETE ON tags
  FOR EACH ROW EXECUTE FUNCTION touch_contacts_of_tag();`);
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw(`
DROP TRIGGER tags_touch_contacts_on_change ON tags;
DROP TRIGGER tags_touch_contacts_on_delete ON tags;
DROP FUNCTION touch_contacts_of_tag();`);
}
