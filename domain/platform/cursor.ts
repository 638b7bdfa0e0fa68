import { z } from 'zod';
import type { Db } from './db';

/**
 * Cursors for the fast paths of reading (the events feed, incremental sync): a cursor names the
 * position after the last row a page returned, so the next page costs the same at any depth (an
 * index range scan from the position, where `offset` walks every row before it).
 *
 * The text is `<kind>_<part>_<part>...` (e.g. `events_1763900000000000_42`). Clients treat it as
 * opaque; the kind stops a cursor of one list from being used on another. Every part has an exact
 * pattern, and the documented pattern is their concatenation: any text it matches is a valid
 * position, so a well-formed cursor is never refused (only a malformed one, 400 VALIDATION). A
 * part's pattern is a regular expression (no anchors) that must not match `_`.
 */

/** A timestamp at PostgreSQL's precision: microseconds since the epoch (JavaScript's Date keeps milliseconds, and a cursor rounded to them would skip or repeat rows written in the same millisecond). ±3,168 years around 1970. */
export const MICROS = '-?[0-9]{1,17}';
/** A row id. */
export const UUID = '[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}';
/** A bigserial. */
export const SERIAL = '[0-9]{1,18}';

/** Before and after every timestamp a row can carry, as MICROS. */
export const FIRST_MICROS = '-99999999999999999';
export const LAST_MICROS = '99999999999999999';

export function encodeCursor(kind: string, position: readonly (string | number)[]): string {
  return [kind, ...position.map(String)].join('_');
}

/**
 * The `cursor` query parameter of a list whose cursors are `kind` with these parts, decoded to the
 * parts' text. Anything else, including another list's cursor, is 400 VALIDATION.
 */
export function cursorParam(kind: string, parts: readonly string[]) {
  const pattern = `^${kind}_${parts.map((p) => `(${p})`).join('_')}$`;
  const matcher = new RegExp(pattern);
  return z
    .string()
    .regex(matcher, 'expected a cursor of this list: pass pagination.nextCursor back unchanged')
    .transform((text) => matcher.exec(text)!.slice(1))
    .meta({ type: 'string', pattern, description: '`pagination.nextCursor` of the previous page, passed back unchanged (opaque).' });
}

export interface CursorPagination {
  limit: number;
  hasMore: boolean;
  nextCursor: string;
}

/**
 * A cursor page from the `limit + 1` rows read after a position: the page, whether more follow,
 * and the cursor of its last row, or of the position read from when the page is empty, so a
 * client always has a position to store and resume from.
 */
export function cursorPage<Row>(
  found: Row[],
  limit: number,
  kind: string,
  positionOf: (row: Row) => readonly string[],
  from: readonly string[],
): { rows: Row[]; pagination: CursorPagination } {
  const rows = found.slice(0, limit);
  const last = rows.at(-1);
  return { rows, pagination: cursorPagination(kind, limit, found.length, last ? positionOf(last) : null, from) };
}

/** cursorPage's pagination from what was found: `found` rows read (at most limit + 1), the page's last position (null: an empty page). */
export function cursorPagination(
  kind: string,
  limit: number,
  found: number,
  last: readonly string[] | null,
  from: readonly string[],
): CursorPagination {
  return { limit, hasMore: found > limit, nextCursor: encodeCursor(kind, last ?? from) };
}

/** SQL for a column's microseconds since the epoch, as text (select it `AS` a name and put it in the cursor). */
export function microsOf(column: string): string {
  return `(floor(extract(epoch FROM ${column}) * 1000000))::bigint::text`;
}

/** SQL turning a `?` bound to MICROS text back into a timestamptz, exactly. */
export const FROM_MICROS = `('epoch'::timestamptz + (?::bigint * interval '1 microsecond'))`;

/**
 * The settled horizon: the start of the oldest transaction still open on this database (or now).
 * Every write stamps its rows with its transaction's start (`now()`), so a row stamped before the
 * horizon is committed, and no transaction still open can stamp another one there. A read that
 * pages by (timestamp, id) only up to the horizon therefore never passes a row that appears later
 * behind its cursor: a sync that reads while others write misses nothing. The price: a
 * transaction left open holds the horizon (and the newest rows) back until it ends.
 */
export const SETTLED_HORIZON = `(SELECT coalesce(min(xact_start), now()) FROM pg_stat_activity WHERE datname = current_database() AND backend_type = 'client backend' AND xact_start IS NOT NULL)`;

/**
 * The settled horizon as MICROS text, read in a statement of its own BEFORE the page's: read in
 * the page's statement, a transaction committing between the page's snapshot and the read of
 * pg_stat_activity would be neither visible nor counted as open, and the page could pass its rows.
 */
export async function settledHorizon(db: Db): Promise<string> {
  const { rows } = await db.raw(`SELECT ${microsOf('h.at')} AS micros FROM (SELECT ${SETTLED_HORIZON} AS at) h`);
  return rows[0].micros;
}
