import type { Knex } from 'knex';
import { z } from 'zod';
import { ContactRowWithTags, serializeLeadsWithTags, tagListColumn } from './contacts';
import type { Db } from './db';
import { DEAL_STATUSES } from './deals';
import { isoInstant, likeContains, pageQuery, pageWithTotal, sortQuery } from './pagination';
import { canonical } from './refs';

/**
 * The lead list (GET /api/v1/leads): its query string, filters and the two statements of a page.
 * Performance-tuned: the bench EXPLAINs the same SQL through leadListQueries.
 */

/** Sortable columns of the lead list (each backed by an index on canonical contacts). */
const LEAD_SORT = { createdAt: 'contacts.created_at', updatedAt: 'contacts.updated_at', name: 'lower(contacts.name)' } as const;

export const leadListQuery = pageQuery()
  .extend({
    q: z.string().trim().min(1).max(200).optional(),
    tag: z.string().trim().min(1).max(100).optional(),
    pipelineId: z.uuid().optional(),
    stageId: z.uuid().optional(),
    status: z.enum(DEAL_STATUSES).optional(),
    createdAfter: isoInstant.optional(),
    createdBefore: isoInstant.optional(),
    updatedAfter: isoInstant.optional(),
  })
  .extend(sortQuery(LEAD_SORT, { sort: 'createdAt', order: 'desc' }).shape);
export type LeadFilters = z.infer<typeof leadListQuery>;
const LEAD_FILTERS = ['q', 'tag', 'pipelineId', 'stageId', 'status', 'createdAfter', 'createdBefore', 'updatedAfter'] as const satisfies readonly (keyof LeadFilters)[];

function applyLeadFilters(db: Db, q: Knex.QueryBuilder, workspaceId: string, f: LeadFilters): Knex.QueryBuilder {
  if (f.q) {
    const term = f.q.trim().toLowerCase();
    // A phone typed with separators ("+55 (11) 9...") searches its digits.
    const digits = /^[\d\s()+-]+$/.test(term) ? term.replace(/\D/g, '') : '';
    q.where((w) => {
      w.whereRaw(`(lower(contacts.name) || ' ' || contacts.phone || ' ' || coalesce(lower(contacts.email), '')) LIKE ?`, [likeContains(term)]);
      if (digits && digits !== term) w.orWhere('contacts.phone', 'like', `%${digits}%`);
    });
  }
  if (f.tag) {
    const tag = f.tag.trim();
    q.whereExists(
      db('contact_tags as ct')
        .join('tags as t', 't.id', 'ct.tag_id')
        .whereRaw('ct.contact_id = contacts.id')
        .where('t.workspace_id', workspaceId)
        .where((w) => {
          if (z.uuid().safeParse(tag).success) w.where('t.id', tag);
          w.orWhereRaw('lower(t.name) = lower(?)', [tag]);
        })
        .select(db.raw('1')),
    );
  }
  // pipelineId, stageId and status describe ONE deal that must satisfy all of them.
  if (f.pipelineId || f.stageId || f.status) {
    const deal = db('deals as d').whereRaw('d.contact_id = contacts.id').where('d.workspace_id', workspaceId).select(db.raw('1'));
    if (f.pipelineId) deal.where('d.pipeline_id', f.pipelineId);
    if (f.stageId) deal.where('d.stage_id', f.stageId);
    if (f.status) deal.where('d.status', f.status);
    q.whereExists(deal);
  }
  if (f.createdAfter) q.where('contacts.created_at', '>=', f.createdAfter);
  if (f.createdBefore) q.where('contacts.created_at', '<', f.createdBefore);
  if (f.updatedAfter) q.where('contacts.updated_at', '>=', f.updatedAfter);
  return q;
}

/** The lead list's scope (workspace, canonical, filters) and page shape; the bench EXPLAINs the same SQL. */
export function leadListQueries(db: Db, workspaceId: string, query: LeadFilters) {
  const scope = applyLeadFilters(db, canonical(db('contacts').where('contacts.workspace_id', workspaceId)), workspaceId, query);
  const shape = (q: Knex.QueryBuilder) => q.orderByRaw(`${LEAD_SORT[query.sort]} ${query.order}, contacts.id ${query.order}`).select('contacts.*', tagListColumn(db));
  return { scope, shape, filtered: LEAD_FILTERS.some((name) => query[name] !== undefined) };
}

/** One page of leads with their tags and the exact total: two statements whatever the filters. */
/** The workspace's canonical contacts: the sum of its maintained count's shards (migration shard_contact_counts). */
export function contactTotalQuery(db: Db, workspaceId: string) {
  return db('contact_counts').where({ workspace_id: workspaceId }).select(db.raw('coalesce(sum(canonical), 0)::bigint AS canonical'));
}

export async function listLeads(db: Db, workspaceId: string, query: LeadFilters) {
  const { scope, shape, filtered } = leadListQueries(db, workspaceId, query);
  if (filtered) {
    const { rows, total } = await pageWithTotal<ContactRowWithTags>(scope, query, shape);
    return { rows: serializeLeadsWithTags(rows), total };
  }
  // Unfiltered, the exact total is the maintained count (migration contact_counts), not a
  // count(*) of the workspace, read in the page's own statement; a page past the end reads it alone.
  const totalSql = contactTotalQuery(db, workspaceId);
  const rows: (ContactRowWithTags & { total: number })[] = await shape(scope).select(db.raw('(?) AS total', [totalSql])).limit(query.limit).offset(query.offset);
  const total = rows.length > 0 ? Number(rows[0].total) : Number((await totalSql.first())?.canonical ?? 0);
  return { rows: serializeLeadsWithTags(rows), total };
}
