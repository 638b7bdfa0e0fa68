import type { Knex } from 'knex';
import { z } from 'zod';

/** The deepest `offset` a list accepts; past it, narrow the list with its filters. */
export const MAX_OFFSET = 100_000;

/** `limit` 1..max (default per endpoint) and `offset` 0..MAX_OFFSET, as numbers in the query string. */
export function pageQuery(options: { defaultLimit?: number; maxLimit?: number } = {}) {
  const max = options.maxLimit ?? 100;
  return z.object({
    limit: wholeNumber(1, max, options.defaultLimit ?? 25),
    // Deeper pages cost a walk over every row before them: bounded, so no request walks millions.
    offset: wholeNumber(0, MAX_OFFSET, 0),
  });
}

/**
 * A whole number in a query string: digits only (an empty value, `1e3` or `0x10` is 400
 * VALIDATION, not a number JavaScript would make of it), documented as the integer it is.
 */
function wholeNumber(min: number, max: number, fallback: number) {
  return z
    .string()
    .regex(/^[0-9]{1,15}$/, 'expected a whole number')
    .transform(Number)
    .pipe(z.number().int().min(min).max(max))
    .default(fallback)
    .meta({ type: 'integer', minimum: min, maximum: max, default: fallback });
}

export interface Page {
  limit: number;
  offset: number;
}

export interface Pagination extends Page {
  total: number;
  hasMore: boolean;
}

/** The column carrying a page's total (a name no table has). */
export const PAGE_TOTAL = '__page_total';

/**
 * One page of a filtered query and its exact total. `scope` carries only the workspace scope and
 * filters; `shape` adds order and selected columns to the page query. `total`, when given, is a
 * query of one row whose `total` column is the scope's exact count, read from counts kept
 * elsewhere (otherwise the scope's rows are counted).
 */
export async function pageWithTotal<T>(
  scope: Knex.QueryBuilder,
  page: Page,
  shape: (q: Knex.QueryBuilder) => Knex.QueryBuilder,
  total?: Knex.QueryBuilder,
): Promise<{ rows: T[]; total: number }> {
  const count = total ?? scope.clone().clearSelect().clearOrder().count<{ total: number }[]>({ total: '*' });
  // The page and its exact total in one statement: one round trip, where each statement costs the
  // API a socket write (the largest share of its CPU under load). A page past the end has no row
  // to carry the total, so that rare case counts on its own.
  const rows: (T & { [PAGE_TOTAL]?: string | number })[] = await shape(scope.clone())
    .select({ [PAGE_TOTAL]: count })
    .limit(page.limit)
    .offset(page.offset);
  const counted = rows.length > 0 ? Number(rows[0][PAGE_TOTAL]) : Number((await count)[0].total);
  for (const row of rows) delete row[PAGE_TOTAL];
  return { rows, total: counted };
}

/** Newest first: `createdAt` descending, then `id` descending (a tie never straddles two pages). */
export function newestFirst(createdAt = 'created_at', id = 'id'): { column: string; order: 'desc' }[] {
  return [
    { column: createdAt, order: 'desc' },
    { column: id, order: 'desc' },
  ];
}

/**
 * A page's records as PostgreSQL wrote them: the text of one JSON array of `count` records, passed
 * to the answer as it is. A lead page read as rows made about 100 KB of objects and strings per
 * request that the API turned into the same text (a third of its CPU per page, and most of the
 * garbage V8 promotes under load: docs/performance.md, the API's memory).
 */
export class JsonRecords {
  constructor(
    readonly json: string,
    readonly count: number,
  ) {}
}

/** The list envelope's `pagination`. */
export function paginationOf(total: number, page: Page, count: number): Pagination {
  return { total, limit: page.limit, offset: page.offset, hasMore: page.offset + count < total };
}

/** The list envelope: `{ data, pagination: { total, limit, offset, hasMore } }`. */
export function listEnvelope<T>(data: T[], total: number, page: Page): { data: T[]; pagination: Pagination } {
  return {
    data,
    pagination: paginationOf(total, page, data.length),
  };
}

/**
 * `sort` over a documented set of columns (an unknown one is 400 VALIDATION naming the allowed
 * values) and `order`; `columns` maps the API's names to SQL expressions.
 */
export function sortQuery<K extends string>(columns: Record<K, string>, defaults: { sort: K; order: 'asc' | 'desc' }) {
  const names = Object.keys(columns) as [K, ...K[]];
  return z.object({
    sort: z.enum(names).default(defaults.sort as never),
    order: z.enum(['asc', 'desc']).default(defaults.order),
  });
}

/** An ISO 8601 instant in a query string (`2026-01-31` or `2026-01-31T12:00:00.000Z`), parsed to a Date. */
export const isoInstant = z
  .string()
  // Months, days, hours, minutes, seconds and offsets in range, so the document's pattern says what
  // parses (JavaScript rolls a day past the month's end over, as it does here).
  .regex(
    /^(?:[1-9][0-9]{3}|0[1-9][0-9]{2}|00[1-9][0-9]|000[1-9])-(?:0[1-9]|1[0-2])-(?:0[1-9]|[12][0-9]|3[01])(?:T(?:[01][0-9]|2[0-3]):[0-5][0-9](?::[0-5][0-9](?:\.[0-9]{1,6})?)?(?:Z|[+-](?:[01][0-9]|2[0-3]):?[0-5][0-9])?)?$/,
    'expected an ISO 8601 date or date-time',
  )
  .transform((value, ctx) => {
    // A date-time without a zone is read as UTC, like a bare date.
    const date = new Date(/T[^Z+-]*$/.test(value) ? `${value}Z` : value);
    if (Number.isNaN(date.getTime())) {
      ctx.addIssue({ code: 'custom', message: 'not a valid date' });
      return z.NEVER;
    }
    // Four-digit years after the offset is applied too (9999-12-31T23:59-14:00 is year 10000,
    // which would come back as "+010000-..."); year 0 is not a calendar date anyone means.
    const year = date.getUTCFullYear();
    if (year < 1 || year > 9999) {
      ctx.addIssue({ code: 'custom', message: 'the year must be between 0001 and 9999' });
      return z.NEVER;
    }
    return date;
  });

/** A query-string boolean: only `true` or `false`. */
export const queryBoolean = z.enum(['true', 'false']).transform((v) => v === 'true');

/** A case-insensitive "contains" LIKE pattern: `%`, `_` and `\` in the term match themselves. */
export function likeContains(term: string): string {
  return `%${term.toLowerCase().replace(/[\\%_]/g, (c) => `\\${c}`)}%`;
}
