import type { Knex } from 'knex';

// Incremental sync of leads with includeDeleted reads canonical, deleted and merged contacts alike
// (group chats never) in (updated_at, id) order from a cursor: an index range scan from the
// position at any depth. Without tombstones it reads contacts_canonical_updated_idx.
export async function up(knex: Knex): Promise<void> {
  await knex.raw(`CREATE INDEX contacts_sync_idx ON contacts (workspace_id, updated_at, id) WHERE NOT is_group;`);
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw(`DROP INDEX contacts_sync_idx;`);
}
