import type { Knex } from 'knex';

// `GET /api/v1/leads?tag=` in creation order walks the tag's contacts in the list's order
// (index_contact_tags_by_contact_created) instead of probing the newest contacts one by one for the
// tag: a tag on 5% of the leads probed about 500 leads to find a page of 25. That needs the
// contact's creation instant on its tag rows. It is copied from the contact when a tag row is
// written, and follows the contact if its created_at is ever rewritten (nothing in the service
// does: a contact's creation is fixed when it is inserted), so the copy is always the contact's.
export async function up(knex: Knex): Promise<void> {
  await knex.raw(`
ALTER TABLE contact_tags ADD COLUMN contact_created_at timestamptz;
UPDATE contact_tags ct SET contact_created_at = c.created_at FROM contacts c WHERE c.id = ct.contact_id;
ALTER TABLE contact_tags ALTER COLUMN contact_created_at SET NOT NULL;

CREATE FUNCTION contact_tags_copy_contact_created_at() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  SELECT c.created_at INTO NEW.contact_created_at FROM contacts c WHERE c.id = NEW.contact_id;
  RETURN NEW;
END $$;
CREATE TRIGGER contact_tags_copy_contact_created_at BEFORE INSERT OR UPDATE OF contact_id, contact_created_at ON contact_tags
  FOR EACH ROW EXECUTE FUNCTION contact_tags_copy_contact_created_at();

CREATE FUNCTION contacts_created_at_to_tags() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  UPDATE contact_tags SET contact_created_at = NEW.created_at WHERE contact_id = NEW.id;
  RETURN NULL;
END $$;
CREATE TRIGGER contacts_created_at_to_tags AFTER UPDATE OF created_at ON contacts
  FOR EACH ROW WHEN (old.created_at IS DISTINCT FROM new.created_at) EXECUTE FUNCTION contacts_created_at_to_tags();
  `);
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw(`
DROP TRIGGER contacts_created_at_to_tags ON contacts;
DROP FUNCTION contacts_created_at_to_tags();
DROP TRIGGER contact_tags_copy_contact_created_at ON contact_tags;
DROP FUNCTION contact_tags_copy_contact_created_at();
ALTER TABLE contact_tags DROP COLUMN contact_created_at;`);
}
