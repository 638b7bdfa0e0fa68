import type { Knex } from 'knex';

// A deal facet's contacts in the lead list's creation order (created_at, id; either direction),
// for `GET /api/v1/leads` with deal filters sorted by createdAt (domain/leads/lead-list.ts,
// membershipWalk). Led by the workspace: a status facet ('status:open') is named alike in every one.
export async function up(knex: Knex): Promise<void> {
  await knex.raw(
    `CREATE INDEX contact_deal_facets_facet_created_idx ON contact_deal_facets (workspace_id, facet, contact_created_at DESC, contact_id DESC);`,
  );
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw(`DROP INDEX contact_deal_facets_facet_created_idx;`);
}
