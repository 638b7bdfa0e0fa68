import type { Knex } from 'knex';

// GET /api/v1/lists/{id}/contacts pages a list's contacts most recently added first.
export async function up(knex: Knex): Promise<void> {
  await knex.raw(`CREATE INDEX list_members_list_added_idx ON list_members (list_id, created_at DESC, contact_id DESC);`);
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw(`DROP INDEX list_members_list_added_idx;`);
}
