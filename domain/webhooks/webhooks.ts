import { randomBytes } from 'node:crypto';
import {
  KeyRing,
  openText,
  SealBinding,
  sealText,
  type Db,
  safeRequest,
  SafeHttpError,
  assertPublicUrl,
  UrlPolicy,
  type ColumnResealer,
} from '../platform';
import { ApiError, notFound, iso, Page, pageWithTotal, isUuid } from '../kernel';
import { workspacePlan } from '../access';
import { WEBHOOK_EVENTS } from './outbox';
import { signWebhook } from './webhook-signature';
import type { AttemptInput, AttemptResult } from '../../types/webhooks';

/**
 * Outbound webhooks (docs/webhooks.md): subscriptions, the signed request, and the
 * delivery log. The durable part (dispatch, retries) lives in workers/outbox-dispatcher.ts and
 * workflows/webhook-delivery.ts; both use what is defined here.
 */

/** No answer within this is a failed attempt. */
export const WEBHOOK_TIMEOUT_MS = 10_000;
export const WEBHOOK_USER_AGENT = 'Service-Webhooks/1.0';
export const PING_EVENT = 'test.ping';
/** A subscription to every event. */
export const ALL_EVENTS = '*';
export const SUBSCRIBABLE_EVENTS = [ALL_EVENTS, ...WEBHOOK_EVENTS] as const;

export type DeliveryStatus = 'pending' | 'succeeded' | 'failed';

/**
 * The request body of an event, the same bytes on every attempt: `event`, `workspace_id` and
 * `timestamp` first, then the event's fields (PostgreSQL jsonb keeps them in a stable order).
 */
export function deliveryBody(payload: Record<string, unknown>): string {
  const { event, workspace_id, timestamp, ...fields } = payload;
  return JSON.stringify({ event, workspace_id, timestamp, ...fields });
}

export interface AttemptOutcome {
  ok: boolean;
  /** The receiver's HTTP status, or null when there was no answer. */
  statusCode: number | null;
  /** Why the attempt failed, in plain words; null on success. */
  error: string | null;
  /** The receiver answered 410 Gone: the subscription is to be disabled. */
  gone: boolean;
  durationMs: number;
}

/**
 * One signed POST of a webhook body. Never throws for what the receiver did (an answer, no
 * answer, a URL that now resolves to a private address): that is the attempt's outcome. A 2xx is
 * success; a redirect (not followed), any other status, or no answer within 10 s is a failure.
 *
 * The outcome carries the receiver's status, never what it said (its body, or where a redirect
 * pointed): the ping answers it to the caller, and the delivery log shows it to anyone with
 * `webhooks:read`, so echoing the answer would let a key read what a URL it chose serves.
 */
export async function postWebhook(input: {
  url: string;
  secret: string;
  event: string;
  deliveryId: string;
  /** The business event delivered (its id in the events feed); none for a ping. */
  eventId?: string | null;
  body: string;
  policy: UrlPolicy;
  timeoutMs?: number;
}): Promise<AttemptOutcome> {
  const started = Date.now();
  const timestamp = Math.floor(started / 1000);
  const outcome = (ok: boolean, statusCode: number | null, error: string | null, gone = false): AttemptOutcome => ({
    ok,
    statusCode,
    error,
    gone,
    durationMs: Date.now() - started,
  });
  try {
    const res = await safeRequest(input.url, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        'user-agent': WEBHOOK_USER_AGENT,
        'x-service-event': input.event,
        'x-service-delivery': input.deliveryId,
        ...(input.eventId ? { 'x-service-event-id': input.eventId } : {}),
        'x-service-signature': signWebhook(input.secret, timestamp, input.body),
      },
      body: input.body,
      timeoutMs: input.timeoutMs ?? WEBHOOK_TIMEOUT_MS,
      policy: input.policy,
      field: 'url',
      // Read (a short answer leaves the connection reusable) and dropped.
      maxBodyBytes: 300,
    });
    if (res.status >= 200 && res.status < 300) return outcome(true, res.status, null);
    if (res.status >= 300 && res.status < 400)
      return outcome(false, res.status, `The receiver answered a redirect (HTTP ${res.status}); redirects are not followed`);
    if (res.status === 410) return outcome(false, 410, 'The receiver answered 410 Gone', true);
    return outcome(false, res.status, `The receiver answered HTTP ${res.status}`);
  } catch (err) {
    if (err instanceof ApiError) return outcome(false, null, err.message);
    if (err instanceof SafeHttpError) return outcome(false, null, `No answer from the receiver: ${err.message}`);
    throw err;
  }
}

/* ------------------------------------------------------------------------------------------------
 * Subscriptions
 * ---------------------------------------------------------------------------------------------- */

interface SubscriptionRow {
  id: string;
  url: string;
  events: string[];
  active: boolean;
  disabled_reason: string | null;
  created_at: Date;
  updated_at: Date;
}

const SUBSCRIPTION_COLUMNS = ['id', 'url', 'events', 'active', 'disabled_reason', 'created_at', 'updated_at'];

export function serializeSubscription(row: SubscriptionRow) {
  return {
    id: row.id,
    url: row.url,
    events: row.events,
    active: row.active,
    disabledReason: row.disabled_reason,
    createdAt: row.created_at.toISOString(),
    updatedAt: row.updated_at.toISOString(),
  };
}

/** `["*"]` alone, or distinct event names in the documented order. */
function normaliseEvents(events: string[]): string[] {
  if (events.includes(ALL_EVENTS)) {
    if (events.length > 1) throw new ApiError('VALIDATION', 'Invalid body.events: "*" (every event) cannot be combined with event names');
    return [ALL_EVENTS];
  }
  return WEBHOOK_EVENTS.filter((e) => events.includes(e));
}

const webhookNotFound = () => notFound('Webhook');

/** A signing secret is sealed bound to its subscription's workspace (domain/platform/encryption.ts SealBinding). */
export const webhookSecretBinding = (workspaceId: string): SealBinding => ({ workspaceId, purpose: 'webhook.secret' });

/** The secret is stored sealed (domain/platform/encryption.ts) and shown once, in this answer. */
export async function createSubscription(
  db: Db,
  ring: KeyRing,
  workspaceId: string,
  input: { url: string; events: string[]; active?: boolean },
  policy: UrlPolicy,
) {
  // The anti-SSRF check of a subscriber URL, with DNS (private addresses only under ALLOW_PRIVATE_URLS).
  await assertPublicUrl(input.url, policy, { field: 'url' });
  const events = normaliseEvents(input.events);
  const secret = `whsec_${randomBytes(32).toString('base64url')}`; // 256 random bits
  const row: SubscriptionRow = await db.transaction(async (trx) => {
    // The plan's quota is always set (default 10): the workspace row lock makes concurrent creations count one by one against it.
    const plan = await workspacePlan(trx, workspaceId, ['webhook_quota'], { lock: true });
    const { count } = await trx('webhook_subscriptions').where({ workspace_id: workspaceId }).first(trx.raw('count(*)::int AS count'));
    if (plan && count >= plan.webhook_quota) {
      throw new ApiError('WEBHOOK_LIMIT_REACHED', `The plan allows ${plan.webhook_quota} webhook subscriptions`, {
        hint: 'Delete a subscription you no longer use, or upgrade the plan.',
      });
    }
    const [created] = await trx('webhook_subscriptions')
      .insert({
        workspace_id: workspaceId,
        url: input.url,
        events,
        secret: sealText(ring, secret, webhookSecretBinding(workspaceId)),
        active: input.active ?? true,
      })
      .returning(SUBSCRIPTION_COLUMNS);
    return created;
  });
  return { ...serializeSubscription(row), secret };
}

export async function listSubscriptions(db: Db, workspaceId: string, page: Page) {
  const scope = db('webhook_subscriptions').where({ workspace_id: workspaceId });
  const { rows, total } = await pageWithTotal<SubscriptionRow>(scope, page, (q) =>
    q.select(SUBSCRIPTION_COLUMNS).orderBy([{ column: 'created_at' }, { column: 'id' }]),
  );
  return { rows: rows.map(serializeSubscription), total };
}

export async function getSubscription(db: Db, workspaceId: string, id: string) {
  if (!isUuid(id)) throw webhookNotFound();
  const row: SubscriptionRow | undefined = await db('webhook_subscriptions')
    .where({ workspace_id: workspaceId, id })
    .first(SUBSCRIPTION_COLUMNS);
  if (!row) throw webhookNotFound();
  return serializeSubscription(row);
}

/** Re-enabling (`active: true`) clears the reason an automatic disable (410) left. */
export async function updateSubscription(
  db: Db,
  workspaceId: string,
  id: string,
  patch: { url?: string; events?: string[]; active?: boolean },
  policy: UrlPolicy,
) {
  if (!isUuid(id)) throw webhookNotFound();
  if (patch.url !== undefined) await assertPublicUrl(patch.url, policy, { field: 'url' });
  const changes: Record<string, unknown> = { updated_at: db.fn.now() };
  if (patch.url !== undefined) changes.url = patch.url;
  if (patch.events !== undefined) changes.events = normaliseEvents(patch.events);
  if (patch.active !== undefined) {
    changes.active = patch.active;
    changes.disabled_reason = patch.active ? null : 'Disabled through the API';
  }
  const [row] = await db('webhook_subscriptions').where({ workspace_id: workspaceId, id }).update(changes).returning(SUBSCRIPTION_COLUMNS);
  if (!row) throw webhookNotFound();
  return serializeSubscription(row);
}

/** Deleting a subscription deletes its delivery log; a delivery waiting for a retry stops at its next attempt. */
export async function deleteSubscription(db: Db, workspaceId: string, id: string): Promise<{ id: string; deleted: true }> {
  if (!isUuid(id)) throw webhookNotFound();
  const deleted = await db('webhook_subscriptions').where({ workspace_id: workspaceId, id }).delete();
  if (!deleted) throw webhookNotFound();
  return { id, deleted: true };
}

/** The URL and secret to sign with: for the ping (API) and each delivery attempt (activity). */
export async function subscriptionTarget(
  db: Db,
  ring: KeyRing,
  workspaceId: string,
  id: string,
): Promise<{ id: string; url: string; secret: string; active: boolean }> {
  if (!isUuid(id)) throw webhookNotFound();
  const row = await db('webhook_subscriptions').where({ workspace_id: workspaceId, id }).first('id', 'url', 'secret', 'active');
  if (!row) throw webhookNotFound();
  return { ...row, secret: openText(ring, row.secret, webhookSecretBinding(workspaceId)) };
}

/* ------------------------------------------------------------------------------------------------
 * Deliveries
 * ---------------------------------------------------------------------------------------------- */

interface DeliveryRow {
  id: string;
  event_id: string | null;
  event: string;
  status: DeliveryStatus;
  attempts: number;
  last_status_code: number | null;
  last_error: string | null;
  last_attempt_at: Date | null;
  next_attempt_at: Date | null;
  created_at: Date;
  delivered_at: Date | null;
}

const DELIVERY_COLUMNS = [
  'id',
  'event_id',
  'event',
  'status',
  'attempts',
  'last_status_code',
  'last_error',
  'last_attempt_at',
  'next_attempt_at',
  'created_at',
  'delivered_at',
];
// The payload stays out of the log: it carries contact data that `webhooks:read` alone must not expose.

export function serializeDelivery(row: DeliveryRow) {
  return {
    id: row.id,
    event: row.event,
    status: row.status,
    attempts: row.attempts,
    lastStatusCode: row.last_status_code,
    lastError: row.last_error,
    lastAttemptAt: iso(row.last_attempt_at),
    nextAttemptAt: iso(row.next_attempt_at),
    createdAt: row.created_at.toISOString(),
    deliveredAt: iso(row.delivered_at),
  };
}

/** Newest first. A foreign or unknown subscription is 404 (never an empty page). */
export async function listDeliveries(db: Db, workspaceId: string, subscriptionId: string, query: Page & { status?: DeliveryStatus }) {
  await getSubscription(db, workspaceId, subscriptionId);
  const scope = db('webhook_deliveries').where({ workspace_id: workspaceId, subscription_id: subscriptionId });
  if (query.status) scope.where({ status: query.status });
  const { rows, total } = await pageWithTotal<DeliveryRow>(scope, query, (q) =>
    q.select(DELIVERY_COLUMNS).orderBy([
      { column: 'created_at', order: 'desc' },
      { column: 'id', order: 'desc' },
    ]),
  );
  return { rows: rows.map(serializeDelivery), total };
}

export async function getDelivery(db: Db, workspaceId: string, subscriptionId: string, deliveryId: string): Promise<DeliveryRow> {
  if (!isUuid(subscriptionId) || !isUuid(deliveryId)) throw notFound('Delivery');
  const row: DeliveryRow | undefined = await db('webhook_deliveries')
    .where({ workspace_id: workspaceId, subscription_id: subscriptionId, id: deliveryId })
    .first(DELIVERY_COLUMNS);
  if (!row) throw notFound('Delivery');
  return row;
}

/**
 * A manual retry reopens only a settled (succeeded or failed) delivery; false when it is not
 * settled. A pending one may still be waiting for the dispatcher to start its schedule, which a
 * one-attempt run must not replace.
 */
export async function reopenDelivery(db: Db, workspaceId: string, deliveryId: string): Promise<boolean> {
  const reopened = await db('webhook_deliveries')
    .where({ workspace_id: workspaceId, id: deliveryId })
    .whereIn('status', ['succeeded', 'failed'])
    .update({ status: 'pending', delivered_at: null, next_attempt_at: null });
  return reopened > 0;
}

/** Undoes reopenDelivery when nothing will attempt the delivery: the log goes back to what it said. */
export async function restoreDelivery(
  db: Db,
  workspaceId: string,
  before: Pick<DeliveryRow, 'id' | 'status' | 'delivered_at' | 'next_attempt_at'>,
): Promise<void> {
  await db('webhook_deliveries')
    .where({ workspace_id: workspaceId, id: before.id, status: 'pending' })
    .update({ status: before.status, delivered_at: before.delivered_at, next_attempt_at: before.next_attempt_at });
}

/** A delivery as an inbound call that says it carries it is checked against it: the event's chain position and the subscription's sealed secret. */
export interface DeliveryToVerify {
  workspace_id: string;
  event_id: string | null;
  /** Sealed with webhookSecretBinding(workspace_id). */
  secret: string;
  /** The event's depth and chain (null when the event row is gone). */
  depth: number | null;
  chain_id: string | null;
}

/**
 * The delivery `deliveryId` (a uuid), whatever its workspace, with its subscription's secret and
 * its event's chain position, in one statement; none when the delivery or its subscription is gone.
 * domain/automations deliveryChain: the chain an inbound call made by one of our deliveries continues.
 */
export async function deliveryToVerify(db: Db, deliveryId: string): Promise<DeliveryToVerify | undefined> {
  const { rows } = await db.raw<{ rows: DeliveryToVerify[] }>(
    `SELECT d.workspace_id, d.event_id, s.secret, e.depth, e.chain_id
       FROM webhook_deliveries d
       JOIN webhook_subscriptions s ON s.workspace_id = d.workspace_id AND s.id = d.subscription_id
       LEFT JOIN outbox_events e ON e.workspace_id = d.workspace_id AND e.id = d.event_id
      WHERE d.id = ?`,
    [deliveryId],
  );
  return rows[0];
}

/** A delivery whose last attempt could not even run (database down through its retries) is failed, with the reason. */
export async function recordDeliveryFailed(db: Db, workspaceId: string, deliveryId: string, error: string): Promise<void> {
  await db('webhook_deliveries')
    .where({ workspace_id: workspaceId, id: deliveryId, status: 'pending' })
    .update({ status: 'failed', last_error: error.slice(0, 1000), next_attempt_at: null });
}

/** A delivery as its attempt reads it, with its subscription's current URL, sealed secret and state (a PATCH between retries takes effect). */
interface DeliveryToAttempt {
  id: string;
  event_id: string;
  event: string;
  payload: Record<string, unknown>;
  status: DeliveryStatus;
  subscription_id: string;
  url: string;
  secret: string;
  active: boolean;
}

/**
 * One delivery attempt (workflows/webhook-delivery.ts through activities/webhooks.ts, and the
 * dispatcher's first attempt): read the delivery with its subscription's current URL and secret (a
 * PATCH between retries takes effect), POST it signed, record the outcome. Two queries per attempt.
 * The receiver's answer is the result, never a throw: only a database that did not answer throws
 * (the activity's retry). If the record fails after the POST, the retry posts again with the same
 * X-Service-Delivery, which is how receivers recognise a repeat (at-least-once). `final`: a failure
 * makes the delivery `failed`; a 410 Gone does too, and disables the subscription.
 */
export async function attemptDelivery(
  db: Db,
  options: { ring: KeyRing; allowPrivateUrls: boolean },
  input: AttemptInput,
): Promise<AttemptResult> {
  const { workspaceId, deliveryId } = input;
  // One query: the delivery and its subscription (none when either was deleted).
  const { rows } = await db.raw<{ rows: DeliveryToAttempt[] }>(
    `SELECT d.id, d.event_id, d.event, d.payload, d.status, s.id AS subscription_id, s.url, s.secret, s.active
       FROM webhook_deliveries d
       JOIN webhook_subscriptions s ON s.workspace_id = d.workspace_id AND s.id = d.subscription_id
      WHERE d.workspace_id = ? AND d.id = ?`,
    [workspaceId, deliveryId],
  );
  const delivery = rows[0];
  if (!delivery) return { status: 'stopped', statusCode: null, error: 'The delivery or its subscription was deleted' };
  // Already settled (a repeat of an attempt that was recorded): never post twice for it.
  if (delivery.status !== 'pending') return { status: delivery.status, statusCode: null, error: null };

  const outcome = delivery.active
    ? await postWebhook({
        url: delivery.url,
        secret: openText(options.ring, delivery.secret, webhookSecretBinding(workspaceId)),
        event: delivery.event,
        deliveryId: delivery.id,
        eventId: delivery.event_id,
        body: deliveryBody(delivery.payload),
        policy: { allowPrivate: options.allowPrivateUrls },
      })
    : { ok: false, statusCode: null, error: 'The subscription is disabled, so the delivery stopped', gone: true, durationMs: 0 };

  const status: AttemptResult['status'] = outcome.ok ? 'succeeded' : input.final || outcome.gone ? 'failed' : 'pending';
  // Posted: the request was made (an attempt of a disabled subscription's delivery is not counted
  // and keeps its last attempt time).
  const posted = delivery.active;
  const gone = outcome.gone && posted;
  const error = gone ? `${outcome.error}; the subscription is disabled` : outcome.error;
  const record = (trx: Db) =>
    trx('webhook_deliveries')
      .where({ workspace_id: workspaceId, id: deliveryId, status: 'pending' })
      .update({
        attempts: posted ? trx.raw('attempts + 1') : trx.raw('attempts'),
        status,
        last_status_code: outcome.statusCode,
        last_error: error ? error.slice(0, 1000) : null,
        last_attempt_at: posted ? trx.fn.now() : trx.raw('last_attempt_at'),
        next_attempt_at:
          status === 'pending' && input.nextAttemptInMs !== null
            ? trx.raw(`now() + make_interval(secs => ?)`, [input.nextAttemptInMs / 1000])
            : null,
        delivered_at: outcome.ok ? trx.fn.now() : null,
      });
  // The receiver answered 410: the subscription is disabled with the attempt, atomically;
  // otherwise one statement, no transaction round trips.
  if (!gone) await record(db);
  else
    await db.transaction(async (trx) => {
      await trx('webhook_subscriptions')
        .where({ workspace_id: workspaceId, id: delivery.subscription_id, active: true })
        .update({
          active: false,
          disabled_reason: `The receiver answered 410 Gone at ${new Date().toISOString()}`,
          updated_at: trx.fn.now(),
        });
      await record(trx);
    });
  return { status, statusCode: outcome.statusCode, error };
}

/** The delivery workflow's id: one per (event, subscription), so a re-dispatch cannot start a second. */
export function deliveryWorkflowId(workspaceId: string, subscriptionId: string, eventId: string): string {
  return `webhook/${workspaceId}/${subscriptionId}/${eventId}`;
}

/** Subscriptions' signing secrets re-sealed with the current key (domain/maintenance sealStoredSecrets); answers how many. */
export function resealSubscriptionSecrets(resealColumn: ColumnResealer): Promise<number> {
  return resealColumn('webhook_subscriptions', 'secret', 'webhook.secret');
}
