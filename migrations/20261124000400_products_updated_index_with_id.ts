import type { Knex } from 'knex';

// Incremental sync of products pages in (updated_at, id) order from a cursor: the id joins the
// updated_at index, so a position inside one timestamp is still an index range scan. The index
// keeps serving sort=updatedAt.
export async function up(knex: Knex): Promise<void> {
  await knex.raw(`
CREATE INDEX products_workspace_updated_id_idx ON products (workspace_id, updated_at, id);
DROP INDEX products_workspace_updated_idx;`);
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw(`
CREATE INDEX products_workspace_updated_idx ON products (workspace_id, updated_at);
DROP INDEX products_workspace_updated_id_idx;`);
}
