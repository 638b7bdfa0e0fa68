import type { Db } from '../platform';

/**
 * The dispatcher's side of webhook deliveries (workers/outbox-dispatcher.ts): one delivery per
 * (event, matching active subscription), which subscriptions are being retried, and deliveries
 * nobody is working on. The API's side (the log, a retry, ping) is domain/webhooks/webhooks.ts.
 */

export interface NewDelivery {
  id: string;
  workspace_id: string;
  subscription_id: string;
  event_id: string;
  status: string;
  attempts: number;
}

/** One delivery per (event, active subscription taking it); existing ones are returned as they are. */
export async function createDeliveries(db: Db, workspaceId: string, eventIds: string[]): Promise<NewDelivery[]> {
  if (eventIds.length === 0) return [];
  const { rows } = await db.raw<{ rows: NewDelivery[] }>(
    `INSERT INTO webhook_deliveries (workspace_id, subscription_id, event_id, event, payload)
     SELECT e.workspace_id, s.id, e.id, e.name, e.payload
       FROM outbox_events e
       JOIN webhook_subscriptions s
         ON s.workspace_id = e.workspace_id AND s.active AND (s.events @> ARRAY[e.name] OR s.events @> ARRAY['*'])
      WHERE e.workspace_id = ? AND e.id = ANY(?::uuid[])
      ORDER BY e.seq
     ON CONFLICT (subscription_id, event_id) WHERE event_id IS NOT NULL DO UPDATE SET event = EXCLUDED.event
     RETURNING id, workspace_id, subscription_id, event_id, status, attempts`,
    [workspaceId, eventIds],
  );
  return rows;
}

/** Of these subscriptions, those with a delivery being retried (its new deliveries go straight to workflows). */
export async function subscriptionsBeingRetried(db: Db, workspaceId: string, subscriptionIds: string[]): Promise<Set<string>> {
  const rows: { subscription_id: string }[] = await db('webhook_deliveries')
    .distinct('subscription_id')
    .where('workspace_id', workspaceId)
    .whereIn('subscription_id', subscriptionIds)
    .where('status', 'pending')
    .where('attempts', '>', 0);
  return new Set(rows.map((r) => r.subscription_id));
}

/**
 * Pending deliveries nobody is working on: created or last attempted over `afterSeconds` ago with
 * no attempt due (a worker died during a first attempt, or between recording it and starting the
 * workflow), 500 at most, oldest first, with the wait left before their next attempt.
 */
export async function orphanedDeliveries(db: Db, afterSeconds: number): Promise<(NewDelivery & { wait_ms: number })[]> {
  const { rows } = await db.raw<{ rows: (NewDelivery & { wait_ms: number })[] }>(
    `SELECT id, workspace_id, subscription_id, event_id, status, attempts,
            greatest(0, extract(epoch FROM (next_attempt_at - now())) * 1000)::int AS wait_ms
       FROM webhook_deliveries
      WHERE status = 'pending' AND event_id IS NOT NULL
        AND created_at < now() - make_interval(secs => ?)
        AND (last_attempt_at IS NULL OR last_attempt_at < now() - make_interval(secs => ?))
        AND (next_attempt_at IS NULL OR next_attempt_at < now() - make_interval(secs => ?))
      ORDER BY created_at
      LIMIT 500`,
    [afterSeconds, afterSeconds, afterSeconds],
  );
  return rows;
}
