import { createCipheriv, createDecipheriv, hkdfSync, randomBytes } from 'node:crypto';
import type { Knex } from 'knex';
import { extendZodWithOpenApi } from '@asteasolutions/zod-to-openapi';
import { z } from 'zod';
import { type Db, cursorPage, FIRST_MICROS, FROM_MICROS, LAST_MICROS, microsOf, settledHorizon, type KeyRing } from '../platform';
import { ApiError, isoInstant, pageQuery, iso } from '../kernel';
import { WEBHOOK_EVENTS } from './outbox';
import { deliveryBody, type DeliveryStatus } from './webhooks';

// The feed's query schema carries OpenAPI descriptions; extending zod here (a no-op when the API
// already did) lets this module load on its own, as a worker or a unit test loads it.
extendZodWithOpenApi(z);

/**
 * The events feed (GET /api/v1/events): every business event the webhooks carry, read back from
 * the outbox rows they are delivered from (same names, same bodies), so an integrator whose
 * receiver was down past the retry schedule, or who subscribed late, pulls what it missed.
 * Events are kept RETENTION_DAYS after dispatch (domain/maintenance/retention.ts).
 */

/** A position in the feed: the event's creation time (microseconds) and its outbox sequence. */
type Position = string[];
const CURSOR_KIND = 'events';
const FIRST: Position = [FIRST_MICROS, '0'];
const LAST: Position = [LAST_MICROS, '0'];

/**
 * The cursor a client sees: the position sealed (AES-256-GCM) with a key derived from
 * ENCRYPTION_KEYS, the workspace id as associated data. The outbox sequence inside counts every
 * tenant's events, so it is never shown; and a cursor opens only in the workspace it was issued
 * for. `ev1.<keyId>.<base64url of iv | tag | ciphertext>`: the key id lets a cursor outlive a
 * rotation while its key stays listed.
 */
const SEALED_CURSOR = /^ev1\.([A-Za-z0-9_-]{1,32})\.([A-Za-z0-9_-]{40,120})$/;
const cursorKeys = new Map<Buffer, Buffer>();
function cursorKey(key: Buffer): Buffer {
  let derived = cursorKeys.get(key);
  if (!derived) {
    derived = Buffer.from(hkdfSync('sha256', key, 'crm-events-cursor', 'events cursor v1', 32));
    cursorKeys.set(key, derived);
  }
  return derived;
}

function sealCursor(ring: KeyRing, workspaceId: string, position: readonly string[]): string {
  const iv = randomBytes(12);
  const cipher = createCipheriv('aes-256-gcm', cursorKey(ring.current.key), iv);
  cipher.setAAD(Buffer.from(`events-cursor:${workspaceId}`));
  const body = Buffer.concat([cipher.update(position.join('_'), 'utf8'), cipher.final()]);
  return `ev1.${ring.current.id}.${Buffer.concat([iv, cipher.getAuthTag(), body]).toString('base64url')}`;
}

const POSITION = /^(-?[0-9]{1,17})_([0-9]{1,18})$/;
const cursorRefused = () =>
  new ApiError('VALIDATION', 'Invalid query.cursor: not a cursor this workspace was given', {
    hint: 'query.cursor: pass pagination.nextCursor of this list back unchanged (cursors are bound to the workspace; those issued before the cursor format changed are refused: start again without a cursor).',
  });

function openCursor(ring: KeyRing, workspaceId: string, cursor: string): Position {
  const match = SEALED_CURSOR.exec(cursor);
  const key = match && ring.byId.get(match[1]);
  if (!match || !key) throw cursorRefused();
  const data = Buffer.from(match[2], 'base64url');
  if (data.length < 29) throw cursorRefused();
  try {
    const decipher = createDecipheriv('aes-256-gcm', cursorKey(key), data.subarray(0, 12));
    decipher.setAAD(Buffer.from(`events-cursor:${workspaceId}`));
    decipher.setAuthTag(data.subarray(12, 28));
    const text = Buffer.concat([decipher.update(data.subarray(28)), decipher.final()]).toString('utf8');
    const position = POSITION.exec(text);
    if (!position) throw new Error('not a position');
    return [position[1], position[2]];
  } catch {
    throw cursorRefused();
  }
}

/** `type`: one event name or several, comma-separated. */
const eventTypes = z
  .string()
  .max(1000)
  .transform((value) => value.split(',').map((name) => name.trim()))
  .pipe(z.array(z.enum(WEBHOOK_EVENTS)).min(1).max(WEBHOOK_EVENTS.length))
  .meta({
    type: 'string',
    description: `Event names, comma-separated: ${WEBHOOK_EVENTS.join(', ')}.`,
    example: 'lead.created,contact.deleted',
  });

export const eventListQuery = pageQuery()
  .pick({ limit: true })
  .extend({
    type: eventTypes.optional(),
    createdAfter: isoInstant.optional().openapi({ description: 'Inclusive (ISO 8601; without a zone, UTC).' }),
    createdBefore: isoInstant.optional().openapi({ description: 'Exclusive (ISO 8601; without a zone, UTC).' }),
    order: z
      .enum(['desc', 'asc'])
      .default('desc')
      .openapi({ description: '`desc` (default): newest first; `asc`: oldest first, the order to catch up in.' }),
    cursor: z
      .string()
      .regex(SEALED_CURSOR, 'expected a cursor of this list: pass pagination.nextCursor back unchanged')
      .meta({
        description:
          '`pagination.nextCursor` of the previous page, passed back unchanged (opaque, valid only in the workspace that was given it).',
      })
      .optional(),
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
  deliveries: {
    subscription_id: string;
    id: string;
    status: DeliveryStatus;
    attempts: number;
    last_status_code: number | null;
    last_error: string | null;
    delivered_at: string | null;
  }[];
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
 * settled horizon (domain/platform/cursor.ts, read before the page): an event still being written by an
 * open transaction cannot appear later behind a cursor already handed out. `nextCursor` is always given: the last event's
 * position, or where the read stood when it found nothing.
 */
export async function listEvents(db: Db, ring: KeyRing, workspaceId: string, query: EventListQuery) {
  const asc = query.order === 'asc';
  const cursor = query.cursor === undefined ? undefined : openCursor(ring, workspaceId, query.cursor);
  const dir = asc ? 'ASC' : 'DESC';
  const horizon = await settledHorizon(db);
  const where: string[] = ['e.workspace_id = ?', "e.kind = 'webhook'", `e.created_at < ${FROM_MICROS}`];
  const bindings: Knex.Value[] = [workspaceId, horizon];
  const and = (condition: string, ...values: Knex.Value[]) => {
    where.push(condition);
    bindings.push(...values);
  };
  if (query.type) and('e.name = ANY(?::text[])', query.type);
  if (query.createdAfter) and('e.created_at >= ?', query.createdAfter);
  if (query.createdBefore) and('e.created_at < ?', query.createdBefore);
  if (cursor) and(`(e.created_at, e.seq) ${asc ? '>' : '<'} (${FROM_MICROS}, ?::bigint)`, ...cursor);
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
  const page = cursorPage(rows, query.limit, CURSOR_KIND, (row) => [row.position_at, row.position_seq], cursor ?? (asc ? FIRST : LAST));
  const position = page.pagination.nextCursor.slice(CURSOR_KIND.length + 1).split('_');
  return { data: page.rows.map(serializeEvent), pagination: { ...page.pagination, nextCursor: sealCursor(ring, workspaceId, position) } };
}
