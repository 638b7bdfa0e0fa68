import type { Knex } from 'knex';

// A tag's contacts in the lead list's creation order (created_at, id; either direction), for
// `GET /api/v1/leads?tag=` sorted by createdAt: a page is the index's next entries, whatever the
// tag's share of the leads (domain/leads/lead-list.ts, membershipWalk). Led by the workspace, so the
// walk's workspace condition is an index condition.
export async function up(knex: Knex): Promise<void> {
  await knex.raw(
    `CREATE INDEX contact_tags_tag_created_idx ON contact_tags (workspace_id, tag_id, contact_created_at DESC, contact_id DESC);`,
  );
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw(`DROP INDEX contact_tags_tag_created_idx;`);
}
