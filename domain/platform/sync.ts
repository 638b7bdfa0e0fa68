import type { Knex } from 'knex';
import { z } from 'zod';
import {
  CursorPagination,
  cursorPage,
  cursorPagination,
  cursorParam,
  FIRST_MICROS,
  FROM_MICROS,
  MICROS,
  microsOf,
  settledHorizon,
  UUID,
} from './cursor';
import { type Db, type JsonPageRow, jsonPage } from './db';
import { ApiError, isoInstant, JsonRecords } from '../kernel';

/**
 * Incremental sync (cursor paging) of the record lists: leads, deals, tasks, products,
 * conversations and messages, in (updatedAt, id) order from a position, read only up to the settled horizon
 * (domain/platform/cursor.ts), so a job reading "everything changed since my last run" while others write
 * neither misses nor repeats a row. The list routes answer offset pages unless asked for this.
 */

/** The lists that sync, each its own cursor kind: a deals cursor on leads is 400 VALIDATION. */
export type SyncKind = 'leads' | 'deals' | 'tasks' | 'products' | 'conversations' | 'messages';

/** A position in (updatedAt, id) order: after the row whose updated_at (in microseconds since the epoch) and id these are. */
export type Position = string[];

/** The greatest uuid: with a timestamp's previous microsecond, a position before every row stamped at it. */
const LAST_ID = 'ffffffff-ffff-ffff-ffff-ffffffffffff';

/** The position before every row stamped at or after `instant` (updatedAfter is inclusive). */
function before(instant: Date): Position {
  return [String(BigInt(instant.getTime()) * 1000n - 1n), LAST_ID];
}
/** The position before every row (the events feed starts from the same instant). */
export const BEGINNING: Position = [FIRST_MICROS, LAST_ID];

/** The query parameters that choose cursor paging and its start, added to a list's own. */
export function syncParams(kind: SyncKind) {
  return {
    paging: z.enum(['cursor']).optional().meta({
      description:
        '`cursor`: the first page of an incremental sync (cursor paging, in `updatedAt`, `id` order). See the operation description.',
    }),
    cursor: cursorParam(kind, [MICROS, UUID]).optional(),
  };
}

/** `updatedAfter`: an offset list's filter, and the start of a sync's first page. */
export const updatedAfterParam = isoInstant
  .optional()
  .meta({ description: 'Changed at or after this instant (ISO 8601; inclusive). With cursor paging: where the first page starts.' });

/** The parameters cursor paging takes; the list's others (offset, sort, order, filters but its sync filters) are refused with it. */
const SYNC_PARAMS = ['paging', 'cursor', 'updatedAfter', 'limit'];

/**
 * What the operation descriptions of the syncing lists say about cursor paging. `filters`: the
 * list's sync filters (syncRead's `filters`), which cursor paging takes too.
 */
export function syncDescription(extra = '', filters: readonly string[] = []): string {
  const takes = filters.length
    ? `\`limit\`${extra} and the filters ${filters.map((f) => `\`${f}\``).join(' and ')} (the same ones on every page of a ` +
      'pass: a cursor holds a position, never a filter)'
    : `\`limit\`${extra}`;
  return (
    'Incremental sync: `paging=cursor` (first page; `updatedAfter` to start at an instant) or `cursor=<pagination.nextCursor>` ' +
    '(later pages) answers `{ data, pagination: { limit, hasMore, nextCursor } }` in (`updatedAt`, `id`) order, each row once, ' +
    'even while others write; store `nextCursor` (always present) and resume from it on the next run. Cursor paging takes only ' +
    `${takes}; \`offset\`, \`sort\`, \`order\` or ${filters.length ? 'another' : 'a'} filter with it is 400 \`VALIDATION\`. ` +
    'Rows changed in the last moments appear once no transaction that began before them is still open. Without `paging` or ' +
    '`cursor`: offset pages as usual.'
  );
}

export interface SyncRead {
  /** The page starts after this position. */
  after: Position;
  limit: number;
}

const refuse = (name: string, problem: string, hint: string) =>
  new ApiError('VALIDATION', `Invalid query.${name}: ${problem}`, { hint: `query.${name}: ${hint}` });

/**
 * The sync read a list request asks for, or undefined when it asks for an offset page. `raw` is
 * the query string as received (a parameter with a default is refused only when it was sent),
 * `known` the list's parameters (unknown ones are ignored, as everywhere), `cursorOnly` those that
 * only cursor paging takes (400 VALIDATION on an offset page), `filters` the list's filters that
 * cursor paging takes too. The caller applies them to the page's scope; they must select on what
 * a row's updated_at covers, so a row changed into the filter is read again after the position
 * (the cursor holds the position only, never the filters).
 */
export function syncRead(
  raw: Record<string, unknown>,
  query: { paging?: 'cursor'; cursor?: Position; updatedAfter?: Date; limit: number },
  known: readonly string[],
  cursorOnly: readonly string[] = [],
  filters: readonly string[] = [],
): SyncRead | undefined {
  const sent = known.filter((name) => raw[name] !== undefined);
  if (query.paging !== 'cursor' && query.cursor === undefined) {
    const misplaced = sent.find((name) => cursorOnly.includes(name));
    if (misplaced) throw refuse(misplaced, 'only with cursor paging', 'send it with paging=cursor or cursor=<pagination.nextCursor>.');
    return undefined;
  }
  const takes = [...SYNC_PARAMS, ...cursorOnly, ...filters];
  const refused = sent.find((name) => !takes.includes(name));
  if (refused) {
    throw refuse(
      refused,
      'not with cursor paging',
      `cursor paging takes only ${takes.map((n) => `\`${n}\``).join(', ')}; its order is (updatedAt, id).`,
    );
  }
  if (query.cursor && query.updatedAfter)
    throw refuse('updatedAfter', 'not with a cursor', 'only the first page takes it; the cursor carries the position.');
  return { after: query.cursor ?? (query.updatedAfter ? before(query.updatedAfter) : BEGINNING), limit: query.limit };
}

/** A list's rows for a sync page: its visibility rule and the columns its records are built from. */
export interface SyncSource {
  /** The workspace's visible rows (workspace and visibility conditions; a selection is replaced by `columns`). */
  scope: Knex.QueryBuilder;
  /** The SQL names of the row's updated_at and id, as the scope reads them. */
  updatedAt: string;
  id: string;
  columns: (string | Knex.Raw)[];
}

/** The column carrying a row's updated_at in microseconds (a name no table has). */
const ROW_MICROS = '__sync_micros';

/** The page statement (also EXPLAINed by the bench): limit + 1 rows after the position, below the horizon. */
export function syncPageQuery(db: Db, source: SyncSource, read: SyncRead, horizon: string): Knex.QueryBuilder {
  const { updatedAt, id } = source;
  return source.scope
    .clone()
    .clearSelect()
    .whereRaw(`(${updatedAt}, ${id}) > (${FROM_MICROS}, ?::uuid)`, read.after)
    .whereRaw(`${updatedAt} < ${FROM_MICROS}`, [horizon])
    .orderByRaw(`${updatedAt}, ${id}`)
    .limit(read.limit + 1)
    .select([...source.columns, db.raw(`${microsOf(updatedAt)} AS ${ROW_MICROS}`)]);
}

/** One sync page of raw rows (each with an `id`) and its pagination (cursorPage). */
export async function syncPage<Row extends { id: string }>(
  db: Db,
  kind: SyncKind,
  source: SyncSource,
  read: SyncRead,
): Promise<{ rows: Row[]; pagination: CursorPagination }> {
  const horizon = await settledHorizon(db);
  const found: (Row & { [ROW_MICROS]?: string })[] = await syncPageQuery(db, source, read, horizon);
  const page = cursorPage(found, read.limit, kind, (row) => [row[ROW_MICROS]!, row.id], read.after);
  for (const row of found) delete row[ROW_MICROS];
  return page;
}

/** The column numbering a sync page's rows in its order (syncJsonPage; a name no table has). */
const ROW_NUMBER = '__sync_row';

/**
 * One sync page written by PostgreSQL (jsonPage): `record`, a json expression over a row `r` of the
 * source's columns, for each of the page's rows, and the pagination syncPage gives. The `limit + 1`
 * rows read are numbered in the page's order: the first `limit` are the page and the last of them
 * its cursor; one more means more follow. The API passes the records on as text (no row objects).
 */
export async function syncJsonPage(
  db: Db,
  kind: SyncKind,
  source: SyncSource,
  read: SyncRead,
  record: string,
): Promise<{ rows: JsonRecords; pagination: CursorPagination }> {
  const horizon = await settledHorizon(db);
  const numbered = syncPageQuery(db, source, read, horizon).select(
    db.raw(`row_number() OVER (ORDER BY ${source.updatedAt}, ${source.id}) AS ${ROW_NUMBER}`),
  );
  const inPage = `r.${ROW_NUMBER} <= ${Number(read.limit)}`;
  const { rows } = (await jsonPage(db, numbered, {
    record,
    order: `r.${ROW_NUMBER}`,
    within: inPage,
    // The page's last row: its position's two parts (an array of arrays would be two-dimensional).
    aggregates: {
      found: 'count(*)::int',
      last_micros: `(array_agg(r.${ROW_MICROS} ORDER BY r.${ROW_NUMBER} DESC) FILTER (WHERE ${inPage}))[1]`,
      last_id: `(array_agg(r.id::text ORDER BY r.${ROW_NUMBER} DESC) FILTER (WHERE ${inPage}))[1]`,
    },
  })) as { rows: (JsonPageRow & { found: number; last_micros: string | null; last_id: string | null })[] };
  const [page] = rows;
  const last = page.last_micros === null ? null : [page.last_micros, page.last_id!];
  return {
    rows: new JsonRecords(page.records, page.count),
    pagination: cursorPagination(kind, read.limit, page.found, last, read.after),
  };
}
