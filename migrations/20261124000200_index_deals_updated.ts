import type { Knex } from 'knex';

// Incremental sync of deals pages in (updated_at, id) order from a cursor: an index range scan
// from the position at any depth.
export async function up(knex: Knex): Promise<void> {
  await knex.raw(`CREATE INDEX deals_workspace_updated_idx ON deals (workspace_id, updated_at, id);`);
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw(`DROP INDEX deals_workspace_updated_idx;`);
}
