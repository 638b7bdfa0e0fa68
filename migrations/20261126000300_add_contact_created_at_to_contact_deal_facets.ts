import type { Knex } from 'knex';

// `GET /api/v1/leads` with deal filters (`stageId&status`, ...) in creation order walks the facet's
// contacts in the list's order (index_contact_deal_facets_by_contact_created), as `tag=` walks the
// tag's (add_contact_created_at_to_contact_tags): contact_deal_facets already holds each contact
// once per facet it has deals in, so it needs only the contact's creation instant. deal_facets_move,
// the one writer of these rows, already reads the contact: it now writes its created_at too (a
// BEFORE INSERT trigger cost a stage move 0.1-0.3 ms, one call per facet entered or left), and a
// contact's rewritten created_at, which nothing in the service does, is followed.
// CREATE OR REPLACE restates deal_facets_move whole; down restates it as it was.
const SHARDS = 32;
const CANONICAL = (t: string) => `(${t}.merged_into_id IS NULL AND ${t}.deleted_at IS NULL AND NOT ${t}.is_group)`;

export async function up(knex: Knex): Promise<void> {
  await knex.raw(`
ALTER TABLE contact_deal_facets ADD COLUMN contact_created_at timestamptz;
UPDATE contact_deal_facets f SET contact_created_at = c.created_at FROM contacts c WHERE c.id = f.contact_id;
ALTER TABLE contact_deal_facets ALTER COLUMN contact_created_at SET NOT NULL;

-- One contact's deals in each facet move by d; a facet's count moves when that number crosses zero
-- and the contact is canonical. A contact already gone (its workspace being deleted) counts nothing.
CREATE OR REPLACE FUNCTION deal_facets_move(ws uuid, contact uuid, facets text[], d integer) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
  one text;
  after integer;
  counted boolean;
  created timestamptz;
BEGIN
  SELECT ${CANONICAL('k')}, k.created_at INTO counted, created FROM contacts k WHERE k.id = contact;
  IF NOT FOUND THEN
    RETURN;
  END IF;
  FOREACH one IN ARRAY facets LOOP
    INSERT INTO contact_deal_facets AS f (workspace_id, contact_id, facet, deals, contact_created_at) VALUES (ws, contact, one, d, created)
    ON CONFLICT (contact_id, facet) DO UPDATE SET deals = f.deals + EXCLUDED.deals
    RETURNING f.deals INTO after;
    IF counted AND (after > 0) <> (after - d > 0) THEN
      INSERT INTO deal_facet_counts AS n (workspace_id, facet, shard, contacts)
        VALUES (ws, one, pg_backend_pid() % ${SHARDS}, CASE WHEN after > 0 THEN 1 ELSE -1 END)
      ON CONFLICT (workspace_id, facet, shard) DO UPDATE SET contacts = n.contacts + EXCLUDED.contacts;
    END IF;
    IF after = 0 THEN
      DELETE FROM contact_deal_facets c WHERE c.contact_id = contact AND c.facet = one;
    END IF;
  END LOOP;
END $$;

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
CREATE OR REPLACE FUNCTION deal_facets_move(ws uuid, contact uuid, facets text[], d integer) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
  one text;
  after integer;
  counted boolean;
BEGIN
  SELECT ${CANONICAL('k')} INTO counted FROM contacts k WHERE k.id = contact;
  IF NOT FOUND THEN
    RETURN;
  END IF;
  FOREACH one IN ARRAY facets LOOP
    INSERT INTO contact_deal_facets AS f (workspace_id, contact_id, facet, deals) VALUES (ws, contact, one, d)
    ON CONFLICT (contact_id, facet) DO UPDATE SET deals = f.deals + EXCLUDED.deals
    RETURNING f.deals INTO after;
    IF counted AND (after > 0) <> (after - d > 0) THEN
      INSERT INTO deal_facet_counts AS n (workspace_id, facet, shard, contacts)
        VALUES (ws, one, pg_backend_pid() % ${SHARDS}, CASE WHEN after > 0 THEN 1 ELSE -1 END)
      ON CONFLICT (workspace_id, facet, shard) DO UPDATE SET contacts = n.contacts + EXCLUDED.contacts;
    END IF;
    IF after = 0 THEN
      DELETE FROM contact_deal_facets c WHERE c.contact_id = contact AND c.facet = one;
    END IF;
  END LOOP;
END $$;
ALTER TABLE contact_deal_facets DROP COLUMN contact_created_at;`);
}
