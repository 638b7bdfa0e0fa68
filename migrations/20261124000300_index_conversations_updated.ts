import type { Knex } from 'knex';

// Incremental sync of conversations pages in (updated_at, id) order from a cursor: an index range
// scan from the position at any depth.
export async function up(knex: Knex): Promise<void> {
  await knex.raw(`CREATE INDEX conversations_workspace_updated_idx ON conversations (workspace_id, updated_at, id);`);
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw(`DROP INDEX conversations_workspace_updated_idx;`);
}
