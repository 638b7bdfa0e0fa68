import type { Knex } from 'knex';

// `q` searched one trigram index over every workspace's contacts and then dropped the other
// workspaces' rows on the heap: 7,000 rechecks for 1,000 matches in a 20k workspace among 140k
// contacts (12 ms per count). With workspace_id leading the GIN index (btree_gin), the bitmap holds
// only the workspace's matches: 1.6 ms, whatever the other workspaces hold.
export async function up(knex: Knex): Promise<void> {
  await knex.raw(`
CREATE EXTENSION IF NOT EXISTS btree_gin;
CREATE INDEX contacts_workspace_search_trgm_idx ON contacts
  USING gin (workspace_id, (lower(name) || ' ' || phone || ' ' || coalesce(lower(email), '')) gin_trgm_ops)
  WHERE merged_into_id IS NULL AND deleted_at IS NULL AND NOT is_group;
DROP INDEX contacts_search_trgm_idx;
  `);
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw(`
CREATE INDEX contacts_search_trgm_idx ON contacts
  USING gin ((lower(name) || ' ' || phone || ' ' || coalesce(lower(email), '')) gin_trgm_ops)
  WHERE merged_into_id IS NULL AND deleted_at IS NULL AND NOT is_group;
DROP INDEX contacts_workspace_search_trgm_idx;
DROP EXTENSION IF EXISTS btree_gin;
  `);
}
