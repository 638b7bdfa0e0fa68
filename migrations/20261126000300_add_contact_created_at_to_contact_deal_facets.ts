import type { Knex } from 'knex';

// `GET /api/v1/leads` with deal filters (`stageId&status`, ...) in creation order walks the facet's
// contacts in the list's order (index_contact_deal_facets_by_contact_created), as `tag=` walks the
// tag's (add_contact_created_at_to_contact_tags): contact_deal_facets already holds each contact
// once per facet it has deals in, so it needs only the contact's creation instant, copied when a
// row is written and followed if the contact's is ever rewritten.
export async function up(knex: Knex): Promise<void> {
  await knex.raw(`
ALTER TABLE contact_deal_facets ADD COLUMN contact_created_at timestamptz;
UPDATE contact_deal_facets f SET contact_created_at = c.created_at FROM contacts c WHERE c.id = f.contact_id;
ALTER TABLE contact_deal_facets ALTER COLUMN contact_created_at SET NOT NULL;

CREATE FUNCTION contact_deal_facets_copy_contact_created_at() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  SELECT c.created_at INTO NEW.contact_created_at FROM contacts c WHERE c.id = NEW.contact_id;
  RETURN NEW;
END $$;
CREATE TRIGGER contact_deal_facets_copy_contact_created_at BEFORE INSERT OR UPDATE OF contact_id, contact_created_at ON contact_deal_facets
  FOR EACH ROW EXECUTE FUNCTION contact_deal_facets_copy_contact_created_at();

CREATE FUNCTION contacts_created_at_to_deal_facets() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  UPDATE contact_deal_facets SET contact_created_at = NEW.created_at WHERE contact_id = NEW.id;
  RETURN NULL;
END $$;
CREATE TRIGGER contacts_created_at_to_deal_facets AFTER UPDATE OF created_at ON contacts
  FOR EACH ROW WHEN (old.created_at IS DISTINCT FROM new.created_at) EXECUTE FUNCTION contacts_created_at_to_deal_facets();
  `);
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw(`
DROP TRIGGER contacts_created_at_to_deal_facets ON contacts;
DROP FUNCTION contacts_created_at_to_deal_facets();
DROP TRIGGER contact_deal_facets_copy_contact_created_at ON contact_deal_facets;
DROP FUNCTION contact_deal_facets_copy_contact_created_at();
ALTER TABLE contact_deal_facets DROP COLUMN contact_created_at;`);
}
