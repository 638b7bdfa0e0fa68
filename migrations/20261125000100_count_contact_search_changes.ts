import type { Knex } from 'knex';

// A search's exact total (`GET /api/v1/leads?q=`) counts every match: no maintained count can
// answer a substring. What can be known cheaply is whether anything a search reads has changed
// since a total was counted: this version, per workspace, moves in the same transaction as every
// change that can alter any search's matches (a canonical contact created or removed, one becoming
// or ceasing to be canonical, or its name, phone or e-mail changing). A total counted in the same
// snapshot as a version is exact for as long as the version reads the same (domain/lead-list.ts).
// Spread over SHARDS rows per workspace (backend pid modulo SHARDS) like contact_counts, so
// concurrent writers do not queue on one row. Every shard only grows, so equal sums mean no change.
const SHARDS = 32;

export async function up(knex: Knex): Promise<void> {
  await knex.raw(`
CREATE TABLE contact_search_versions (
  workspace_id uuid NOT NULL REFERENCES workspaces(id) ON DELETE CASCADE,
  shard smallint NOT NULL,
  changes bigint NOT NULL,
  PRIMARY KEY (workspace_id, shard)
);

CREATE FUNCTION contact_search_versions_bump(ws uuid) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
  -- A workspace being deleted (its contacts cascading) may already be gone: nothing to version then.
  INSERT INTO contact_search_versions AS v (workspace_id, shard, changes)
    SELECT ws, pg_backend_pid() % ${SHARDS}, 1 WHERE EXISTS (SELECT 1 FROM workspaces WHERE id = ws)
  ON CONFLICT (workspace_id, shard) DO UPDATE SET changes = v.changes + 1;
END $$;

-- Inserts and deletes: once per statement and workspace with a canonical contact among its rows.
CREATE FUNCTION contact_search_versions_on_rows() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  ws uuid;
BEGIN
  IF TG_OP = 'INSERT' THEN
    FOR ws IN SELECT DISTINCT workspace_id FROM new_rows WHERE merged_into_id IS NULL AND deleted_at IS NULL AND NOT is_group ORDER BY workspace_id LOOP
      PERFORM contact_search_versions_bump(ws);
    END LOOP;
  ELSE
    FOR ws IN SELECT DISTINCT workspace_id FROM old_rows WHERE merged_into_id IS NULL AND deleted_at IS NULL AND NOT is_group ORDER BY workspace_id LOOP
      PERFORM contact_search_versions_bump(ws);
    END LOOP;
  END IF;
  RETURN NULL;
END $$;

CREATE FUNCTION contact_search_versions_on_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM contact_search_versions_bump(NEW.workspace_id);
  RETURN NULL;
END $$;

CREATE TRIGGER contact_search_versions_insert AFTER INSERT ON contacts REFERENCING NEW TABLE AS new_rows
  FOR EACH STATEMENT EXECUTE FUNCTION contact_search_versions_on_rows();
CREATE TRIGGER contact_search_versions_delete AFTER DELETE ON contacts REFERENCING OLD TABLE AS old_rows
  FOR EACH STATEMENT EXECUTE FUNCTION contact_search_versions_on_rows();
-- Updates: only a row whose searchable text or canonical state changed (the WHEN costs nothing otherwise).
CREATE TRIGGER contact_search_versions_update AFTER UPDATE OF name, phone, email, merged_into_id, deleted_at, is_group ON contacts
  FOR EACH ROW WHEN (
    old.name IS DISTINCT FROM new.name OR old.phone IS DISTINCT FROM new.phone OR old.email IS DISTINCT FROM new.email
    OR (old.merged_into_id IS NULL AND old.deleted_at IS NULL AND NOT old.is_group) IS DISTINCT FROM (new.merged_into_id IS NULL AND new.deleted_at IS NULL AND NOT new.is_group)
  ) EXECUTE FUNCTION contact_search_versions_on_update();
  `);
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw(`
DROP TRIGGER contact_search_versions_update ON contacts;
DROP TRIGGER contact_search_versions_delete ON contacts;
DROP TRIGGER contact_search_versions_insert ON contacts;
DROP FUNCTION contact_search_versions_on_update();
DROP FUNCTION contact_search_versions_on_rows();
DROP FUNCTION contact_search_versions_bump(uuid);
DROP TABLE contact_search_versions;`);
}
