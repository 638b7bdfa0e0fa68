import type { Knex } from 'knex';

// The exact number of canonical contacts carrying each tag, kept by triggers in the
// same transaction as the change (like contact_counts): `GET /api/v1/leads?tag=` reads its total
// here instead of counting every tagged contact. Spread over SHARDS rows per tag (backend pid
// modulo SHARDS), so concurrent taggings of one tag do not queue on one row; the total is the sum.
// Two events move a count: a tag added to or removed from a canonical contact (contact_tags), and
// a tagged contact becoming or ceasing to be canonical (merged, deleted, a group: contacts).
const SHARDS = 32;

export async function up(knex: Knex): Promise<void> {
  await knex.raw(`
CREATE TABLE tag_contact_counts (
  workspace_id uuid NOT NULL,
  tag_id uuid NOT NULL,
  shard smallint NOT NULL,
  contacts bigint NOT NULL,
  PRIMARY KEY (tag_id, shard),
  FOREIGN KEY (workspace_id, tag_id) REFERENCES tags (workspace_id, id) ON DELETE CASCADE
);

CREATE FUNCTION tag_contact_counts_add(ws uuid, tag uuid, d bigint) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
  IF d = 0 THEN
    RETURN;
  END IF;
  -- A tag (or workspace) being deleted, its contact_tags cascading, is already gone: nothing to count then.
  INSERT INTO tag_contact_counts AS c (workspace_id, tag_id, shard, contacts)
    SELECT ws, tag, pg_backend_pid() % ${SHARDS}, d WHERE EXISTS (SELECT 1 FROM tags WHERE id = tag)
  ON CONFLICT (tag_id, shard) DO UPDATE SET contacts = c.contacts + EXCLUDED.contacts;
END $$;

CREATE FUNCTION tag_contact_counts_on_tagging() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  delta record;
BEGIN
  IF TG_OP = 'INSERT' THEN
    FOR delta IN SELECT n.workspace_id, n.tag_id, count(*)::bigint AS d FROM new_rows n
                   JOIN contacts c ON c.id = n.contact_id AND c.merged_into_id IS NULL AND c.deleted_at IS NULL AND NOT c.is_group
                  GROUP BY n.workspace_id, n.tag_id ORDER BY n.tag_id LOOP
      PERFORM tag_contact_counts_add(delta.workspace_id, delta.tag_id, delta.d);
    END LOOP;
  ELSE
    FOR delta IN SELECT o.workspace_id, o.tag_id, -count(*)::bigint AS d FROM old_rows o
                   JOIN contacts c ON c.id = o.contact_id AND c.merged_into_id IS NULL AND c.deleted_at IS NULL AND NOT c.is_group
                  GROUP BY o.workspace_id, o.tag_id ORDER BY o.tag_id LOOP
      PERFORM tag_contact_counts_add(delta.workspace_id, delta.tag_id, delta.d);
    END LOOP;
  END IF;
  RETURN NULL;
END $$;

-- A contact becoming or ceasing to be canonical moves every tag it carries.
CREATE FUNCTION tag_contact_counts_on_contact_change() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  tag uuid;
BEGIN
  FOR tag IN SELECT ct.tag_id FROM contact_tags ct WHERE ct.contact_id = NEW.id ORDER BY ct.tag_id LOOP
    PERFORM tag_contact_counts_add(NEW.workspace_id, tag, CASE WHEN NEW.merged_into_id IS NULL AND NEW.deleted_at IS NULL AND NOT NEW.is_group THEN 1 ELSE -1 END);
  END LOOP;
  RETURN NULL;
END $$;

CREATE TRIGGER tag_contact_counts_insert AFTER INSERT ON contact_tags REFERENCING NEW TABLE AS new_rows
  FOR EACH STATEMENT EXECUTE FUNCTION tag_contact_counts_on_tagging();
CREATE TRIGGER tag_contact_counts_delete AFTER DELETE ON contact_tags REFERENCING OLD TABLE AS old_rows
  FOR EACH STATEMENT EXECUTE FUNCTION tag_contact_counts_on_tagging();
-- Per row, only when canonical-ness changes: every other contact update costs nothing.
CREATE TRIGGER tag_contact_counts_contact_update AFTER UPDATE ON contacts FOR EACH ROW
  WHEN ((OLD.merged_into_id IS NULL AND OLD.deleted_at IS NULL AND NOT OLD.is_group) IS DISTINCT FROM (NEW.merged_into_id IS NULL AND NEW.deleted_at IS NULL AND NOT NEW.is_group))
  EXECUTE FUNCTION tag_contact_counts_on_contact_change();

INSERT INTO tag_contact_counts (workspace_id, tag_id, shard, contacts)
  SELECT ct.workspace_id, ct.tag_id, 0, count(*) FROM contact_tags ct
    JOIN contacts c ON c.id = ct.contact_id AND c.merged_into_id IS NULL AND c.deleted_at IS NULL AND NOT c.is_group
   GROUP BY ct.workspace_id, ct.tag_id;
  `);
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw(`
DROP TRIGGER tag_contact_counts_insert ON contact_tags;
DROP TRIGGER tag_contact_counts_delete ON contact_tags;
DROP TRIGGER tag_contact_counts_contact_update ON contacts;
DROP FUNCTION tag_contact_counts_on_tagging();
DROP FUNCTION tag_contact_counts_on_contact_change();
DROP FUNCTION tag_contact_counts_add(uuid, uuid, bigint);
DROP TABLE tag_contact_counts;`);
}
