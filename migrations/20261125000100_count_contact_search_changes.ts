import type { Knex } from 'knex';

// A search's exact total (`GET /api/v1/leads?q=`) counts every match: no maintained count can
// answer a substring. What can be known cheaply is whether anything a search reads has changed
// since a total was counted: `search_changes`, kept on the shards of contact_counts in the same
// transaction as every change that can alter any search's matches (a canonical contact created or
// removed, one becoming or ceasing to be canonical, or its name, phone or e-mail changing). A
// total counted in the same snapshot as the shards' sum is exact for as long as the sum reads the
// same (domain/leads/lead-list.ts). Each shard's search_changes only grows, so an equal sum means no
// change. Creations and removals already upsert a shard row (contact_counts_add) and bump it in the
// same statement; an update bumps it from a row trigger that fires only on a searchable change.
const SHARDS = 32;

export async function up(knex: Knex): Promise<void> {
  await knex.raw(`
ALTER TABLE contact_counts ADD COLUMN search_changes bigint NOT NULL DEFAULT 0;

CREATE OR REPLACE FUNCTION contact_counts_add(ws uuid, d bigint) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
  IF d = 0 THEN
    RETURN;
  END IF;
  -- A workspace being deleted (its contacts cascading) may already be gone: nothing to count then.
  INSERT INTO contact_counts AS c (workspace_id, shard, canonical, search_changes)
    SELECT ws, pg_backend_pid() % ${SHARDS}, d, 1 WHERE EXISTS (SELECT 1 FROM workspaces WHERE id = ws)
  ON CONFLICT (workspace_id, shard) DO UPDATE SET canonical = c.canonical + EXCLUDED.canonical, search_changes = c.search_changes + 1;
END $$;

CREATE FUNCTION contact_search_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO contact_counts AS c (workspace_id, shard, canonical, search_changes)
    SELECT NEW.workspace_id, pg_backend_pid() % ${SHARDS}, 0, 1 WHERE EXISTS (SELECT 1 FROM workspaces WHERE id = NEW.workspace_id)
  ON CONFLICT (workspace_id, shard) DO UPDATE SET search_changes = c.search_changes + 1;
  RETURN NULL;
END $$;

CREATE TRIGGER contact_search_changed AFTER UPDATE OF name, phone, email, merged_into_id, deleted_at, is_group ON contacts
  FOR EACH ROW WHEN (
    old.name IS DISTINCT FROM new.name OR old.phone IS DISTINCT FROM new.phone OR old.email IS DISTINCT FROM new.email
    OR (old.merged_into_id IS NULL AND old.deleted_at IS NULL AND NOT old.is_group) IS DISTINCT FROM (new.merged_into_id IS NULL AND new.deleted_at IS NULL AND NOT new.is_group)
  ) EXECUTE FUNCTION contact_search_changed();
  `);
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw(`
DROP TRIGGER contact_search_changed ON contacts;
DROP FUNCTION contact_search_changed();
CREATE OR REPLACE FUNCTION contact_counts_add(ws uuid, d bigint) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
  IF d = 0 THEN
    RETURN;
  END IF;
  INSERT INTO contact_counts AS c (workspace_id, shard, canonical)
    SELECT ws, pg_backend_pid() % ${SHARDS}, d WHERE EXISTS (SELECT 1 FROM workspaces WHERE id = ws)
  ON CONFLICT (workspace_id, shard) DO UPDATE SET canonical = c.canonical + EXCLUDED.canonical;
END $$;
ALTER TABLE contact_counts DROP COLUMN search_changes;`);
}
