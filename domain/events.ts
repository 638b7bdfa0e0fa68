import type { Knex } from 'knex';
import { z } from 'zod';
import type { Db } from './db';
import { cursorPage, cursorParam, FIRST_MICROS, FROM_MICROS, LAST_MICROS, MICROS, microsOf, SERIAL, settledHorizon } from './cursor';
import { WEBHOOK_EVENTS } from './outbox';
import { isoInstant, pageQuery } from './pagination';
import { iso } from './time';
import { deliveryBody, type DeliveryStatus } from './webhooks';

/**
 * The events feed (GET /api/v1/events): every business event the webhooks carry, read back from
 * the outbox rows they are delivered from (same names, same bodies), so an integrator whose
 * receiver was down past the retry schedule, or who subscribed late, pulls what it missed.
 * Events are kept RETENTION_DAYS after dispatch (domain/retention.ts).
 */

/** A position in the feed: the event's creation time (microseconds) and its outbox sequence. */
type Position = string[];
const CURSOR_KIND = 'events';
const FIRST: Position = [FIRST_MICROS, '0'];
const LAST: Position = [LAST_MICROS, '0'];

/** `type`: one event name or several, comma-separated. */
const eventTypes = z
  .string()
  .max(1000)
  .transform((value) => value.split(',').map((name) => name.trim()))
  .pipe(z.array(z.enum(WEBHOOK_EVENTS)).min(1).max(WEBHOOK_EVENTS.length))
  .meta({ type: 'string', description: `Event names, comma-separated: ${WEBHOOK_EVENTS.join(', ')}.`, example: 'lead.created,contact.deleted' });

export const eventListQuery = pageQuery()
  .pick({ limit: true })
  .extend({
    type: eventTypes.optional(),
    createdAfter: isoInstant.optional().openapi({ description: 'Inclusive (ISO 8601; without a zone, UTC).' }),
    createdBefore: isoInstant.optional().openapi({ description: 'Exclusive (ISO 8601; without a zone, UTC).' }),
    order: z.enum(['desc', 'asc']).default('desc').openapi({ description: '`desc` (default): newest first; `asc`: oldest first, the order to catch up in.' }),
    cursor: cursorParam(CURSOR_KIND, [MICROS, SERIAL]).optional(),
  });
export type EventListQuery = z.infer<typeof eventListQuery>;

interface EventRow {
  id: string;
  name: string;
  payload: Record<string, unknown>;
  created_at: Date;
  dispatched_at: Date | null;
  position_at: string;
  position_seq: string;
  deliveries: { subscription_id: string; id: string; status: DeliveryStatus; attempts: number; last_status_code: number | null; last_error: string | null; delivered_at: string | null }[];
}

function serializeEvent(row: EventRow) {
  return {
    id: row.id,
    type: row.name,
    createdAt: iso(row.created_at)!,
    // The exact body a subscriber receives (same fields, same order).
    payload: JSON.parse(deliveryBody(row.payload)) as Record<string, unknown>,
    dispatchedAt: iso(row.dispatched_at),
    deliveries: row.deliveries.map((d) => ({
      subscriptionId: d.subscription_id,
      deliveryId: d.id,
      status: d.status,
      attempts: d.attempts,
      lastStatusCode: d.last_status_code,
      lastError: d.last_error,
      deliveredAt: iso(d.delivered_at),
    })),
  };
}

/**
 * One page of the workspace's events after (asc) or before (desc) the cursor, read only up to the
 * settled horizon (domain/cursor.ts, read before the page): an event still being written by an
 * open transaction cannot appear later behind a cursor already handed out. `nextCursor` is always given: the last event's
 * position, or where the read stood when it found nothing.
 */
export async function listEvents(db: Db, workspaceId: string, query: EventListQuery) {
  const asc = query.order === 'asc';
  const dir = asc ? 'ASC' : 'DESC';
  const horizon = await settledHorizon(db);
  const where: string[] = ['e.workspace_id = ?', "e.kind = 'webhook'", `e.created_at < ${FROM_MICROS}`];
  const bindings: Knex.Value[] = [workspaceId, horizon];
  if (query.type) where.push('e.name = ANY(?::text[])'), bindings.push(query.type);
  if (query.createdAfter) where.push('e.created_at >= ?'), bindings.push(query.createdAfter);
  if (query.createdBefore) where.push('e.created_at < ?'), bindings.push(query.createdBefore);
  if (query.cursor) where.push(`(e.created_at, e.seq) ${asc ? '>' : '<'} (${FROM_MICROS}, ?::bigint)`), bindings.push(...query.cursor);
  const { rows } = await db.raw<{ rows: EventRow[] }>(
    `SELECT e.id, e.name, e.payload, e.created_at, e.dispatched_at, ${microsOf('e.created_at')} AS position_at, e.seq::text AS position_seq,
            (SELECT coalesce(json_agg(json_build_object('subscription_id', d.subscription_id, 'id', d.id, 'status', d.status,
                    'attempts', d.attempts, 'last_status_code', d.last_status_code, 'last_error', d.last_error, 'delivered_at', d.delivered_at)
                    ORDER BY d.created_at, d.id), '[]'::json)
               FROM webhook_deliveries d WHERE d.event_id = e.id AND d.workspace_id = e.workspace_id) AS deliveries
       FROM outbox_events e
      WHERE ${where.join(' AND ')}
      ORDER BY e.created_at ${dir}, e.seq ${dir}
      LIMIT ?`,
    [...bindings, query.limit + 1],
  );
  const page = cursorPage(rows, query.limit, CURSOR_KIND, (row) => [row.position_at, row.position_seq], query.cursor ?? (asc ? FIRST : LAST));
  return { data: page.rows.map(serializeEvent), pagination: page.pagination };
}
