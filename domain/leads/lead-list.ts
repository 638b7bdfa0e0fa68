import type { Knex } from 'knex';
import { z } from 'zod';
import { CONTACT_ROW_COLUMNS, LEAD_RECORD_SQL, tagListColumn } from './contacts';
import {
  compiledOnce,
  jsonPage,
  type JsonPageRow,
  prepared,
  type Db,
  SyncRead,
  SyncSource,
  syncJsonPage,
  instantSql,
  syncParams,
  updatedAfterParam,
} from '../platform';
import {
  DEAL_STATUSES,
  isoInstant,
  likeContains,
  PAGE_TOTAL,
  pageQuery,
  queryBoolean,
  sortQuery,
  isUuid,
  JsonRecords,
  trimmedText,
} from '../kernel';
import { canonical } from './contact-refs';

/**
 * The lead list (GET /api/v1/leads): its query string, filters and the two statements of a page.
 * Performance-tuned: the bench EXPLAINs the same SQL through leadListQueries.
 */

/** Sortable columns of the lead list (each backed by an index on canonical contacts). */
const LEAD_SORT = { createdAt: 'contacts.created_at', updatedAt: 'contacts.updated_at', name: 'lower(contacts.name)' } as const;
/** The column each sort reads. */
const LEAD_SORT_COLUMN: Record<keyof typeof LEAD_SORT, string> = {
  createdAt: 'contacts.created_at',
  updatedAt: 'contacts.updated_at',
  name: 'contacts.name',
};

/**
 * A lead page written by PostgreSQL (jsonPage): LEAD_RECORD_SQL in the page's own order, with
 * `aggregates` of its rows (the total, the search version, the ids) beside it.
 */
function leadPage(
  db: Db,
  statement: Knex.QueryBuilder | Knex.Raw,
  query: Pick<LeadFilters, 'sort' | 'order'>,
  aggregates?: Record<string, string>,
) {
  return jsonPage(db, statement, { record: LEAD_RECORD_SQL, order: pageOrder(query), aggregates });
}
/** The lead list's order (leadListQueries) over a page's rows `r`. */
const pageOrder = (query: Pick<LeadFilters, 'sort' | 'order'>) =>
  `${LEAD_SORT[query.sort].replace('contacts.', 'r.')} ${query.order}, r.id ${query.order}`;
/** What a lead page's statement answers (leadPage): its records, and the aggregates asked for. */
type LeadPageAnswer = JsonPageRow & { [PAGE_TOTAL]?: string | number | null; [SEARCH_VERSION]?: string | null; ids?: string[] | null };
const PAGE_TOTAL_OF_ROWS = { [PAGE_TOTAL]: `min(r.${PAGE_TOTAL})` };

export const leadListQuery = pageQuery()
  .extend({
    q: trimmedText(200).optional(),
    tag: trimmedText(100).optional(),
    pipelineId: z.uuid().optional(),
    stageId: z.uuid().optional(),
    status: z.enum(DEAL_STATUSES).optional(),
    temperature: z
      .enum(['cold', 'warm', 'hot'])
      .optional()
      .describe('Leads whose insight (derived or written) has this temperature (`qualification.temperature`).'),
    createdAfter: isoInstant.optional(),
    createdBefore: isoInstant.optional(),
    updatedAfter: updatedAfterParam,
    ...syncParams('leads'),
    includeDeleted: queryBoolean.optional().meta({
      description:
        'Cursor paging only: `true` also returns deleted and merged leads, as tombstones `{ id, deleted: true, deletedAt, mergedIntoId, updatedAt }`.',
    }),
  })
  .extend(sortQuery(LEAD_SORT, { sort: 'createdAt', order: 'desc' }).shape);
export type LeadFilters = z.infer<typeof leadListQuery>;
const LEAD_FILTERS = [
  'q',
  'tag',
  'pipelineId',
  'stageId',
  'status',
  'temperature',
  'createdAfter',
  'createdBefore',
  'updatedAfter',
] as const satisfies readonly (keyof LeadFilters)[];

/**
 * The workspace's tag a `tag=` value names: its id, else its name (case-insensitive; names are
 * unique per workspace). One tag, so the filter and its maintained count agree.
 */
function tagIdQuery(db: Db, workspaceId: string, tag: string, given: Given = {}): Knex.QueryBuilder {
  const q = db('tags').where('tags.workspace_id', workspaceId).select('tags.id').limit(1, { skipBinding: true });
  if (!(given.tagIsId ?? isUuid(tag))) return q.whereRaw('lower(tags.name) = lower(?)', [tag]);
  return q.where((w) => w.where('tags.id', tag).orWhereRaw('lower(tags.name) = lower(?)', [tag])).orderByRaw('tags.id = ? DESC', [tag]);
}

/** What `q` searches: its term lower-cased and, for a phone typed with separators ("+55 (11) 9..."), its digits. */
interface LeadSearch {
  term: string;
  digits?: string;
}

/**
 * What the statements would otherwise learn from the filters' values, given when those values are
 * placeholders (compiledOnce): what `q` searches, and whether `tag` is an id.
 */
interface Given {
  search?: LeadSearch;
  tagIsId?: boolean;
  /** The deal filters' sub-query (DealFilterQuery), needed when `pipelineId`, `stageId` or `status` is given. */
  deals?: DealFilterQuery;
}

/**
 * The deals of the contact `contactIdColumn` names that match the filters, as a sub-query of the
 * lead list's statement: deals are sales' rows and leads cannot import sales, so the caller gives
 * domain/sales `matchingDealsOfContact` (the API's lead list, the bench).
 */
export type DealFilterQuery = (
  db: Db,
  workspaceId: string,
  contactIdColumn: string,
  f: Pick<LeadFilters, 'pipelineId' | 'stageId' | 'status'>,
) => Knex.QueryBuilder;

function leadSearch(q: string): LeadSearch {
  const term = q.trim().toLowerCase();
  const digits = /^[\d\s()+-]+$/.test(term) ? term.replace(/\D/g, '') : '';
  return digits && digits !== term ? { term, digits } : { term };
}

/**
 * `search`: what `f.q` searches (leadSearch), given when its values are placeholders (compiledOnce).
 * `perRow`: the tag and deal tests as a probe per row (a sublink the planner cannot turn into a
 * join), for a bounded prefix of the sort order, where hashing every contact of the tag (or deal
 * of the stage) first costs more than a few hundred index probes; over every match, the join is
 * the better plan. The search, likewise, as a test per row rather than an index condition.
 */
function applyLeadFilters(
  db: Db,
  q: Knex.QueryBuilder,
  workspaceId: string,
  f: LeadFilters,
  options: { perRow?: boolean } & Given = {},
): Knex.QueryBuilder {
  if (f.q) {
    const { term, digits } = options.search ?? leadSearch(f.q);
    // The trigram index's expression (migration instagram_contacts): a phoneless contact is found by name, e-mail or Instagram username.
    const searched = `(lower(contacts.name) || ' ' || coalesce(contacts.phone, '') || ' ' || coalesce(lower(contacts.email), '') || ' ' || coalesce(lower(contacts.instagram_username), ''))`;
    q.where((w) => {
      if (options.perRow) {
        // The same substring test as LIKE '%term%' (the trigram index is no use in a prefix walk),
        // but one the planner prices alike for every term: the prepared prefix keeps its generic
        // plan, where a LIKE's estimate follows its pattern and is planned again each time (0.45 ms).
        w.whereRaw(`strpos(${searched}, ?) > 0`, [term]);
        if (digits) w.orWhereRaw('strpos(contacts.phone, ?) > 0', [digits]);
      } else {
        w.whereRaw(`${searched} LIKE ?`, [likeContains(term)]);
        if (digits) w.orWhere('contacts.phone', 'like', `%${digits}%`);
      }
    });
  }
  if (f.tag) {
    const tagged = db('contact_tags as ct')
      .whereRaw('ct.contact_id = contacts.id')
      .where('ct.tag_id', tagIdQuery(db, workspaceId, f.tag.trim(), options));
    if (options.perRow) q.whereRaw('coalesce((?), false)', [tagged.select(db.raw('true')).limit(1, { skipBinding: true })]);
    else q.whereExists(tagged.select(db.raw('1')));
  }
  // pipelineId, stageId and status describe ONE deal that must satisfy all of them.
  if (f.pipelineId || f.stageId || f.status) {
    if (!options.deals)
      throw new Error('The lead list filters by deal with the deals sub-query it is given (domain/sales matchingDealsOfContact)');
    const deal = options.deals(db, workspaceId, 'contacts.id', f);
    // Per row (deals_contact_idx) also in the prefix's generic plan, which would otherwise hash
    // every deal of the stage: 2.4 ms against 0.8 for 2,000 deals, and growing with them.
    if (options.perRow) q.whereRaw('coalesce((?), false)', [deal.select(db.raw('true')).limit(1, { skipBinding: true })]);
    else q.whereExists(deal.select(db.raw('1')));
  }
  if (f.temperature) {
    // The insight's temperature column (insights_workspace_temperature_idx), one row per contact.
    const warm = db('insights')
      .whereRaw('insights.contact_id = contacts.id')
      .where({ 'insights.workspace_id': workspaceId, 'insights.temperature': f.temperature });
    q.whereExists(warm.select(db.raw('1')));
  }
  if (f.createdAfter) q.where('contacts.created_at', '>=', f.createdAfter);
  if (f.createdBefore) q.where('contacts.created_at', '<', f.createdBefore);
  if (f.updatedAfter) q.where('contacts.updated_at', '>=', f.updatedAfter);
  return q;
}

/** The workspace's canonical contacts: the sum of its maintained count's shards (migration shard_contact_counts). */
function contactTotalQuery(db: Db, workspaceId: string): Knex.QueryBuilder {
  return db('contact_counts').where({ workspace_id: workspaceId }).select(db.raw('coalesce(sum(canonical), 0)::bigint AS total'));
}

/**
 * The maintained table that lists a filter set's contacts once each, if any: `tag` alone
 * (contact_tags, counted in tag_contact_counts) or deal filters alone (contact_deal_facets, counted
 * in deal_facet_counts; pipelineId with stageId has no facet: its key is NULL). Other filters
 * have none.
 */
function maintainedFilter(f: LeadFilters): 'tag' | 'facet' | undefined {
  const used = LEAD_FILTERS.filter((name) => f[name] !== undefined);
  if (used.length === 1 && f.tag) return 'tag';
  if (used.length > 0 && used.every((name) => DEAL_FILTERS.includes(name as never))) return 'facet';
  return undefined;
}

/** The deal facet the filters name (deal_facet_key, the one place a combination becomes a facet). */
function dealFacetKey(db: Db, f: LeadFilters): Knex.Raw {
  return db.raw('deal_facet_key(?::uuid, ?::uuid, ?::text)', [f.pipelineId ?? null, f.stageId ?? null, f.status ?? null]);
}

/**
 * The exact total of a filter that a maintained count answers, without visiting the matches: none
 * (the workspace's contact count), or a maintainedFilter (NULL for a facet with no key). Other
 * filters have none: they count.
 */
function maintainedTotalQuery(db: Db, workspaceId: string, f: LeadFilters, given: Given = {}): Knex.QueryBuilder | undefined {
  if (LEAD_FILTERS.every((name) => f[name] === undefined)) return contactTotalQuery(db, workspaceId);
  const kind = maintainedFilter(f);
  if (kind === 'tag') {
    return db('tag_contact_counts')
      .where('workspace_id', workspaceId)
      .where('tag_id', tagIdQuery(db, workspaceId, f.tag!.trim(), given))
      .select(db.raw('coalesce(sum(contacts), 0)::bigint AS total'));
  }
  if (kind === 'facet') {
    const key = dealFacetKey(db, f);
    return db('deal_facet_counts')
      .where('workspace_id', workspaceId)
      .where('facet', key)
      .select(db.raw('CASE WHEN ? IS NULL THEN NULL ELSE coalesce(sum(contacts), 0) END::bigint AS total', [key]));
  }
  return undefined;
}
const DEAL_FILTERS = ['pipelineId', 'stageId', 'status'] as const;

/**
 * A filtered page is first read from a bounded prefix of the sort order (the sort index walked
 * for at most PROBE rows): when that prefix holds the whole page, it is the page, whatever the
 * filter's selectivity estimate; otherwise the page is read over every match.
 */
const PROBE = { min: 1000, perRow: 40, max: 20000 };

/**
 * A maintainedFilter's table, whose rows carry their contact's creation instant (migrations
 * add_contact_created_at_to_contact_tags and ..._to_contact_deal_facets). In creation order a page
 * is that table's index walked in the list's own order: the next entries, at any offset, whatever
 * the filter's share of the leads. Undefined for any other filter or sort, and for pipelineId with
 * stageId (no facet: that combination counts).
 */
function membershipWalk(
  db: Db,
  workspaceId: string,
  f: LeadFilters,
  given: Given = {},
): { table: string; where: (q: Knex.QueryBuilder) => Knex.QueryBuilder } | undefined {
  const kind = walkedFilter(f);
  if (kind === 'tag')
    return {
      table: 'contact_tags',
      where: (q) => q.where('m.workspace_id', workspaceId).where('m.tag_id', tagIdQuery(db, workspaceId, f.tag!.trim(), given)),
    };
  if (kind === 'facet')
    return { table: 'contact_deal_facets', where: (q) => q.where('m.workspace_id', workspaceId).where('m.facet', dealFacetKey(db, f)) };
  return undefined;
}

/** The maintainedFilter a page walks in its own index (membershipWalk), if any. */
function walkedFilter(f: LeadFilters): 'tag' | 'facet' | undefined {
  if (f.sort !== 'createdAt') return undefined;
  const kind = maintainedFilter(f);
  return kind === 'facet' && f.pipelineId && f.stageId ? undefined : kind;
}

/** A lead page's row columns, named (a prepared `SELECT *` breaks when a migration adds a column). */
const LEAD_ROW_COLUMNS = CONTACT_ROW_COLUMNS.map((c) => `contacts.${c}`);

/**
 * The lead list's statements, for the API and the bench's EXPLAIN alike: the page (over every
 * match, and from the sort order's prefix), the exact count, and the maintained total if any.
 * `pagePlanFixed`: the page's best plan is the same whatever its values (no filter, or a filter
 * walked in its own index: membershipWalk), so it may run prepared, like the prefix, whose walk is
 * bounded by construction. A filtered page over every
 * match is planned for its values each time: its plan follows the filter's selectivity.
 */
export function leadListQueries(db: Db, workspaceId: string, query: LeadFilters, given: Given = {}) {
  const order = `${LEAD_SORT[query.sort]} ${query.order}, contacts.id ${query.order}`;
  const visible = () => canonical(db('contacts').where('contacts.workspace_id', workspaceId));
  // LIMITs written into the text, columns named: the page and the prefix may run prepared (see `prepared`).
  const limit = { skipBinding: true };
  // The tags are read for the page's rows only: under the Limit, the subquery would run for every
  // row an offset skips (seconds at offset 20,000, a statement timeout at 100,000).
  const withTags = (rows: Knex.QueryBuilder) =>
    db
      .from(rows.as('contacts'))
      .orderByRaw(order)
      .select(...LEAD_ROW_COLUMNS, tagListColumn(db));
  const filtered = LEAD_FILTERS.some((name) => query[name] !== undefined);
  // The prefix carries only the columns the sort and the filters read (for a date sort with tag or
  // deal filters, an index-only scan); the page's rows are read in full only once found. A search
  // reads each prefix row from the heap anyway: its prefix carries the rows in full, and the page
  // is what it found (reading the found rows again by key cost a tenth of the statement).
  const columns = new Set<string>(['contacts.id', LEAD_SORT_COLUMN[query.sort]]);
  if (query.createdAfter || query.createdBefore) columns.add('contacts.created_at');
  if (query.updatedAfter) columns.add('contacts.updated_at');
  const probePage = (rows: number): Knex.QueryBuilder => {
    const prefixRows = visible()
      .orderByRaw(order)
      .limit(rows, limit)
      .select(query.q ? LEAD_ROW_COLUMNS : [...columns])
      .as('contacts');
    const found = applyLeadFilters(db, db.from(prefixRows), workspaceId, query, { perRow: true, ...given })
      .orderByRaw(order)
      .limit(query.limit, limit)
      .offset(query.offset);
    if (query.q) return withTags(found.select(LEAD_ROW_COLUMNS));
    return db('contacts')
      .join(found.select('contacts.id').as('found'), 'found.id', 'contacts.id')
      .where('contacts.workspace_id', workspaceId)
      .orderByRaw(order)
      .select(...LEAD_ROW_COLUMNS, tagListColumn(db));
  };
  const prefix = Math.min(Math.max(PROBE.perRow * (query.offset + query.limit), PROBE.min), PROBE.max);
  const count = applyLeadFilters(db, visible(), workspaceId, query, given).count<{ total: number }[]>({ total: '*' });
  const maintained = maintainedTotalQuery(db, workspaceId, query, given);
  const walk = membershipWalk(db, workspaceId, query, given);
  if (walk) {
    // Each entry checked canonical by the contact's key; the tags read for the page's rows only. The
    // workspace is a condition on the walked table (its foreign key ties the contact to the same
    // workspace): on contacts, PostgreSQL prices the generic plan above the custom ones and plans
    // every request again (1 ms of planning for 0.4 of execution).
    const rows = canonical(walk.where(db(`${walk.table} as m`)).join('contacts', 'contacts.id', 'm.contact_id'))
      .orderByRaw(`m.contact_created_at ${query.order}, m.contact_id ${query.order}`)
      .select(LEAD_ROW_COLUMNS)
      .limit(query.limit, limit)
      .offset(query.offset);
    return { page: withTags(rows), probe: undefined, pagePlanFixed: true, count, maintained };
  }
  const rows = applyLeadFilters(db, visible(), workspaceId, query, given)
    .orderByRaw(order)
    .select(LEAD_ROW_COLUMNS)
    .limit(query.limit, limit)
    .offset(query.offset);
  return {
    page: withTags(rows),
    probe: filtered && query.offset + query.limit <= prefix ? probePage(prefix) : undefined,
    pagePlanFixed: !filtered,
    count,
    maintained,
  };
}

/**
 * Search totals (`q`, alone or with creation dates: filters on what the search version
 * covers) as last counted, each with the workspace's search version read in the same snapshot.
 * While the version reads the same, nothing a search reads has changed, so the total is still
 * exact: paging through a search, or repeating it, counts its matches once. Per process, bounded,
 * least recently used out first.
 */
const searchTotals = new Map<string, { version: number; total: number }>();
const SEARCH_TOTALS_MAX = 5000;

/** `entry` kept under `key` as the most recently used; past `max` entries, the least recently used leaves. */
function remember<T>(memo: Map<string, T>, max: number, key: string, entry: T): void {
  memo.delete(key);
  memo.set(key, entry);
  if (memo.size > max) memo.delete(memo.keys().next().value!);
}
const SEARCH_VERSIONED: readonly (typeof LEAD_FILTERS)[number][] = ['q', 'createdAfter', 'createdBefore'];
const SEARCH_VERSION = '__search_version';

function searchTotalKey(workspaceId: string, f: LeadFilters): string | undefined {
  if (!f.q || LEAD_FILTERS.some((name) => f[name] !== undefined && !SEARCH_VERSIONED.includes(name))) return undefined;
  // The search applyLeadFilters runs: its term lower-cased.
  return JSON.stringify([workspaceId, leadSearch(f.q).term, f.createdAfter ?? null, f.createdBefore ?? null]);
}

/** The workspace's search version: the sum of its contact_counts shards' search_changes (migration count_contact_search_changes). */
function searchVersionQuery(db: Db, workspaceId: string): Knex.QueryBuilder {
  return db('contact_counts').where({ workspace_id: workspaceId }).select(db.raw('coalesce(sum(search_changes), 0)::bigint'));
}

function rememberSearchTotal(key: string, entry: { version: number; total: number }): void {
  remember(searchTotals, SEARCH_TOTALS_MAX, key, entry);
}

/** Search counts under way in this process, by search (searchTotalKey). */
const searchCounts = new Map<string, Promise<{ version: number; total: number }>>();

/** The count of this search under way in this process, or a new one that later requests will share. */
function sharedSearchCount(
  key: string,
  count: () => Promise<{ version: number; total: number }>,
): Promise<{ version: number; total: number }> {
  let counting = searchCounts.get(key);
  if (!counting) {
    const started = count();
    counting = started;
    searchCounts.set(key, started);
    const done = () => {
      if (searchCounts.get(key) === started) searchCounts.delete(key);
    };
    started.then(done, done);
  }
  return counting;
}

/** The remembered total of this search if the version read with the page is the one it was counted at. */
function rememberedSearchTotal(key: string, version: unknown): number | undefined {
  const entry = searchTotals.get(key);
  if (!entry || Number(version) !== entry.version) return undefined;
  rememberSearchTotal(key, entry);
  return entry.total;
}

/**
 * The unfiltered page with the workspace's maintained total: the leadListQueries statement, one text
 * per sort, order and page size, compiled once (building and compiling it was about a fifth of the
 * request's CPU under load).
 */
const allLeadsPage = compiledOnce(
  (db, v: { workspaceId: string; offset?: number }, shape: Pick<LeadFilters, 'sort' | 'order' | 'limit'>) => {
    const { page, maintained } = leadListQueries(db, v.workspaceId, {
      sort: shape.sort,
      order: shape.order,
      limit: shape.limit,
      offset: v.offset ?? 0,
    } as LeadFilters);
    return leadPage(db, page.select({ [PAGE_TOTAL]: maintained! }), shape, PAGE_TOTAL_OF_ROWS);
  },
  // The first page has no OFFSET (knex writes none for 0), and must keep it so: with a bound OFFSET
  // PostgreSQL prices the generic plan above the custom one and plans every request (twice the
  // statement's CPU). A later page's OFFSET is bound, as leadListQueries writes it.
  (shape) => `${shape.sort} ${shape.order} ${shape.limit}`,
);

/**
 * A page walked in its filter's own index (membershipWalk) with its maintained total: the
 * leadListQueries statement, one text per order, page size, whether the tag is named by id, and
 * which filters and whether an offset are given, compiled once (like allLeadsPage).
 */
const WALKED_FILTERS = ['tag', 'pipelineId', 'stageId', 'status'] as const;
const walkedPage = compiledOnce(
  (db, v: Record<string, string | number>, shape: Pick<LeadFilters, 'order' | 'limit'> & { tagIsId: boolean; deals?: DealFilterQuery }) => {
    const filters = {
      sort: 'createdAt',
      order: shape.order,
      limit: shape.limit,
      offset: v.offset ?? 0,
      ...Object.fromEntries(WALKED_FILTERS.map((name) => [name, v[name]])),
    } as LeadFilters;
    const { page, maintained } = leadListQueries(db, v.workspaceId as string, filters, { tagIsId: shape.tagIsId, deals: shape.deals });
    return leadPage(db, page.select({ [PAGE_TOTAL]: maintained! }), filters, PAGE_TOTAL_OF_ROWS);
  },
  (shape) => `${shape.order} ${shape.limit} ${shape.tagIsId}`,
);

/** A compiled page (allLeadsPage, walkedPage) and the maintained total it carries. */
async function compiledPageWithTotal(db: Db, workspaceId: string, query: LeadFilters, statement: Knex.Raw) {
  const [page] = ((await prepared(statement)) as { rows: LeadPageAnswer[] }).rows;
  // A page past the end has no row to carry the total.
  const total = page[PAGE_TOTAL] ?? (await maintainedTotalQuery(db, workspaceId, query)!.first()).total;
  return { rows: new JsonRecords(page.records, page.count), total: Number(total) };
}

/**
 * One page of leads with their tags and the exact total: usually one statement, whatever the
 * filters. `deals`: the deal filters' sub-query (DealFilterQuery), needed for `pipelineId`,
 * `stageId` and `status`.
 */
export async function listLeads(db: Db, workspaceId: string, query: LeadFilters, deals?: DealFilterQuery) {
  if (LEAD_FILTERS.every((name) => query[name] === undefined)) {
    const values = query.offset === 0 ? { workspaceId } : { workspaceId, offset: query.offset };
    return compiledPageWithTotal(db, workspaceId, query, allLeadsPage(db, values, query));
  }
  const searchKey = searchTotalKey(workspaceId, query);
  if (searchKey) return listSearch(db, workspaceId, query, searchKey);
  if (walkedFilter(query)) {
    const values: Record<string, string | number> = { workspaceId };
    for (const name of WALKED_FILTERS) if (query[name] !== undefined) values[name] = query[name]!.trim();
    if (query.offset !== 0) values.offset = query.offset;
    const shape = { order: query.order, limit: query.limit, tagIsId: query.tag !== undefined && isUuid(query.tag.trim()), deals };
    return compiledPageWithTotal(db, workspaceId, query, walkedPage(db, values, shape));
  }
  const { page, probe, count, maintained, pagePlanFixed } = leadListQueries(db, workspaceId, query, { deals });
  const read = async (q: Knex.QueryBuilder, total: Knex.QueryBuilder | undefined, prepare: boolean): Promise<LeadPageAnswer> => {
    const statement = leadPage(db, total ? q.select({ [PAGE_TOTAL]: total }) : q, query, total ? PAGE_TOTAL_OF_ROWS : {});
    return ((await (prepare ? prepared(statement) : statement)) as { rows: LeadPageAnswer[] }).rows[0];
  };
  // The prefix carries only a maintained total: a count there would be paid twice if the prefix falls short.
  let found = probe ? await read(probe, maintained, true) : undefined;
  if (!found || found.count < query.limit) found = await read(page, maintained ?? count, pagePlanFixed);
  let total = found[PAGE_TOTAL];
  // A page past the end has no row to carry the total; a filter without a maintained total counts.
  if (found.count === 0 && maintained) total = (await maintained.clone().first())?.total;
  if (total === undefined || total === null) total = (await count.clone().first())?.total ?? 0;
  return { rows: new JsonRecords(found.records, found.count), total: Number(total) };
}

/**
 * A search's first page from the sort order's prefix (leadListQueries' probe) with the workspace's
 * search version: one text per sort, order, page size and whether the term is a phone's digits,
 * compiled once (building the lead list's statements and compiling this one was about a fifth of
 * a search's CPU in the API).
 */
type SearchValues = { workspaceId: string; term: string } | { workspaceId: string; term: string; digits: string };
const searchFirstPage = compiledOnce(
  (db, v: SearchValues, shape: Pick<LeadFilters, 'sort' | 'order' | 'limit'>) => {
    const filters = { sort: shape.sort, order: shape.order, limit: shape.limit, offset: 0, q: v.term } as LeadFilters;
    const { probe } = leadListQueries(db, v.workspaceId, filters, {
      search: { term: v.term, digits: 'digits' in v ? v.digits : undefined },
    });
    return searchPage(db, probe!.select({ [SEARCH_VERSION]: searchVersionQuery(db, v.workspaceId) }), filters);
  },
  (shape) => `${shape.sort} ${shape.order} ${shape.limit}`,
);

/**
 * Which contacts a search's page in creation order held (their ids, in page order), at the search
 * version it was read at. While the version reads the same, nothing that decides a search's
 * matches or their creation order has changed (migration count_creation_instant_as_search_change),
 * so the page holds the same contacts: they are read again by key, fresh, instead of testing the
 * sort order's prefix row by row (about a third of a repeated search's CPU). Per process, bounded,
 * least recently used out first; keyed by search (searchTotalKey), order, page size and offset.
 */
const SEARCH_PAGES_MAX = 1000;
const searchPages = new Map<string, { version: number; ids: string[] }>();

/** A remembered search page's contacts by key, with the search version, in one statement. */
const searchPageByIds = compiledOnce(
  (db, v: { workspaceId: string; ids: string }, shape: Pick<LeadFilters, 'order'>) =>
    searchPage(
      db,
      canonical(db('contacts').where('contacts.workspace_id', v.workspaceId))
        .whereRaw('contacts.id = ANY(?::uuid[])', [v.ids])
        .select(...LEAD_ROW_COLUMNS, tagListColumn(db), { [SEARCH_VERSION]: searchVersionQuery(db, v.workspaceId) }),
      { sort: 'createdAt', order: shape.order },
    ),
  (shape) => shape.order,
);

/**
 * A search's page (leadPage) with the search version it was read at, its contacts' ids in page
 * order (what searchPages remembers) and, when the statement counts, its total.
 */
function searchPage(db: Db, statement: Knex.QueryBuilder, query: Pick<LeadFilters, 'sort' | 'order'>, counted = false) {
  return leadPage(db, statement, query, {
    [SEARCH_VERSION]: `min(r.${SEARCH_VERSION})`,
    ids: `array_agg(r.id ORDER BY ${pageOrder(query)})`,
    ...(counted ? PAGE_TOTAL_OF_ROWS : {}),
  });
}

function rememberSearchPage(pageKey: string, page: { version: number; ids: string[] }): void {
  remember(searchPages, SEARCH_PAGES_MAX, pageKey, page);
}

/** The remembered page (searchPages) read again by key, if the search version still reads the same; else undefined. */
async function searchPageAgain(db: Db, workspaceId: string, query: LeadFilters, pageKey: string): Promise<LeadPageAnswer | undefined> {
  const remembered = searchPages.get(pageKey);
  if (!remembered) return undefined;
  const [page] = (
    (await prepared(searchPageByIds(db, { workspaceId, ids: `{${remembered.ids.join(',')}}` }, query))) as { rows: LeadPageAnswer[] }
  ).rows;
  if (page.count !== remembered.ids.length || Number(page[SEARCH_VERSION]) !== remembered.version) {
    searchPages.delete(pageKey);
    return undefined;
  }
  rememberSearchPage(pageKey, remembered);
  return page;
}

/**
 * A search's page carries the workspace's search version; its total is the remembered one if
 * counted at that version, else counted now with the version in one statement (one snapshot). A
 * search with no remembered total at all counts in the page's statement when the page is read
 * over every match (the prefix does not: a count there would be paid twice if it falls short).
 */
async function listSearch(db: Db, workspaceId: string, query: LeadFilters, key: string) {
  const search = leadSearch(query.q!);
  let built: ReturnType<typeof leadListQueries> | undefined;
  const q = () => (built ??= leadListQueries(db, workspaceId, query, { search }));
  const read = async (source: Knex.QueryBuilder, options: { withCount?: boolean; prepare?: boolean }): Promise<LeadPageAnswer> => {
    const columns = { [SEARCH_VERSION]: searchVersionQuery(db, workspaceId), ...(options.withCount ? { [PAGE_TOTAL]: q().count } : {}) };
    const statement = searchPage(db, source.select(columns), query, options.withCount);
    return ((await (options.prepare ? prepared(statement) : statement)) as { rows: LeadPageAnswer[] }).rows[0];
  };
  const pageKey = query.sort === 'createdAt' ? `${key}\u0000${query.order} ${query.limit} ${query.offset}` : undefined;
  let page = pageKey ? await searchPageAgain(db, workspaceId, query, pageKey) : undefined;
  if (!page) {
    // The prefix runs prepared (see leadListQueries); a search's page over every match does not.
    if (query.offset === 0 && query.createdAfter === undefined && query.createdBefore === undefined) {
      const values: SearchValues =
        search.digits === undefined ? { workspaceId, term: search.term } : { workspaceId, term: search.term, digits: search.digits };
      page = ((await prepared(searchFirstPage(db, values, query))) as { rows: LeadPageAnswer[] }).rows[0];
    } else if (q().probe) page = await read(q().probe!, { prepare: true });
    if (!page || page.count < query.limit) page = await read(q().page, { withCount: !searchTotals.has(key) });
    if (pageKey && page.count > 0) rememberSearchPage(pageKey, { version: Number(page[SEARCH_VERSION]), ids: page.ids! });
  }
  const first = page.count > 0 ? page : undefined;
  let total: number | undefined;
  if (first && first[PAGE_TOTAL] !== undefined && first[PAGE_TOTAL] !== null) {
    total = Number(first[PAGE_TOTAL]);
    rememberSearchTotal(key, { version: Number(first[SEARCH_VERSION]), total });
  } else if (first) total = rememberedSearchTotal(key, first[SEARCH_VERSION]);
  if (total === undefined) {
    const countNow = async () => {
      const counted = await db.select({ version: searchVersionQuery(db, workspaceId), total: q().count.clone() }).first();
      return { version: Number(counted.version), total: Number(counted.total) };
    };
    // Requests of one search arriving together (a client's 32 connections, a dashboard opened by
    // many) wait for one count instead of each counting (32 counts of 120 ms each at 200 k
    // contacts). A count shared with a page read at another search version is not that page's
    // total: such a request counts for itself.
    let counted = first ? await sharedSearchCount(key, countNow) : await countNow();
    if (first && counted.version !== Number(first[SEARCH_VERSION])) counted = await countNow();
    total = counted.total;
    rememberSearchTotal(key, counted);
  }
  return { rows: new JsonRecords(page.records, page.count), total };
}

/**
 * The lead list's incremental sync: canonical contacts in (updated_at, id) order, or with
 * `includeDeleted` deleted and merged ones too (never group chats), for the tombstones.
 */
export function leadSyncSource(db: Db, workspaceId: string, options: { includeDeleted: boolean }): SyncSource {
  const contacts = db('contacts').where('contacts.workspace_id', workspaceId);
  return {
    scope: options.includeDeleted ? contacts.where('contacts.is_group', false) : canonical(contacts),
    updatedAt: 'contacts.updated_at',
    id: 'contacts.id',
    columns: ['contacts.*', tagListColumn(db)],
  };
}

/**
 * A sync page's record of a row `r` of leadSyncSource: the lead (LEAD_RECORD_SQL), or, for a lead
 * that left (soft-deleted, or merged into `mergedIntoId`), its tombstone, for a sync to remove its
 * copy: `deletedAt` is when it left (a merge stamps updated_at and nothing else).
 */
export const LEAD_SYNC_RECORD_SQL = `CASE WHEN r.deleted_at IS NOT NULL OR r.merged_into_id IS NOT NULL
  THEN json_build_object('id', r.id, 'deleted', true, 'deletedAt', ${instantSql('coalesce(r.deleted_at, r.updated_at)')},
    'mergedIntoId', r.merged_into_id, 'updatedAt', ${instantSql('r.updated_at')})
  ELSE ${LEAD_RECORD_SQL} END`;

/** One sync page of leads (and, with `includeDeleted`, tombstones), written by PostgreSQL. */
export function syncLeads(db: Db, workspaceId: string, read: SyncRead, options: { includeDeleted: boolean }) {
  return syncJsonPage(db, 'leads', leadSyncSource(db, workspaceId, options), read, LEAD_SYNC_RECORD_SQL);
}
