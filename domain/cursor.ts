import { z } from 'zod';

/**
 * Opaque cursors for the fast paths of reading (the events feed, incremental sync): a cursor
 * names the position after the last row a page returned, so the next page costs the same at any
 * depth (an index range scan from the position, where `offset` walks every row before it).
 *
 * The text is `<kind>_<base64url of a JSON array>`: clients must treat it as opaque; the kind
 * stops a cursor of one list from being replayed on another (400 VALIDATION).
 */
export function encodeCursor(kind: string, position: readonly (string | number | boolean)[]): string {
  return `${kind}_${Buffer.from(JSON.stringify(position)).toString('base64url')}`;
}

/**
 * The `cursor` query parameter of a list whose cursors are `kind`, decoded to its position by
 * `shape` (a zod tuple). Anything else, including another list's cursor, is 400 VALIDATION.
 */
export function cursorParam<T extends z.ZodType>(kind: string, shape: T) {
  const prefix = `${kind}_`;
  return z
    .string()
    .max(512)
    .regex(new RegExp(`^${kind}_[A-Za-z0-9_-]+$`), `expected a cursor from this list's pagination.nextCursor`)
    .transform((text, ctx): z.infer<T> => {
      let position: unknown;
      try {
        position = JSON.parse(Buffer.from(text.slice(prefix.length), 'base64url').toString('utf8'));
      } catch {
        position = undefined;
      }
      const parsed = shape.safeParse(position);
      if (!parsed.success) {
        ctx.addIssue({ code: 'custom', message: "not a cursor of this list: pass pagination.nextCursor back unchanged" });
        return z.NEVER;
      }
      return parsed.data;
    })
    .meta({ type: 'string', description: "`pagination.nextCursor` of the previous page, passed back unchanged (opaque)." });
}

/**
 * A timestamp at PostgreSQL's precision (microseconds since the epoch, as digits) for a cursor:
 * JavaScript's Date keeps milliseconds, and a cursor rounded to them would skip or repeat rows
 * written in the same millisecond.
 */
export const MICROS = z.string().regex(/^-?[0-9]{1,18}$/);

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
