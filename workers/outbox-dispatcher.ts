import { Client, WorkflowExecutionAlreadyStartedError, WorkflowIdReusePolicy } from '@temporalio/client';
import type { Logger } from 'pino';
import type { Db } from '../domain/db';
import { deliveryWorkflowId } from '../domain/webhooks';
import type { DeliveryInput } from '../workflows/webhook-types';
import { isDatabaseUnavailable } from '../domain/db';
import { isTemporalUnreachable, START_DEADLINE_MS, withDeadline } from '../domain/temporal';

/**
 * Turns committed outbox rows into durable work. Business transactions only write the outbox
 * (domain/outbox.ts); this loop, in the worker process, leases undispatched rows in `seq` order,
 * creates one delivery per (event, matching active subscription), starts one Temporal workflow per
 * delivery, and only then marks the rows dispatched. Every step is idempotent, so a crash at any
 * point (API or worker) loses nothing and doubles nothing: the lease expires, the next pass takes
 * the rows again, the delivery insert finds the existing rows (unique on subscription and event),
 * and a workflow id that already exists is not started twice (`REJECT_DUPLICATE`).
 */
export interface DispatcherOptions {
  db: Db;
  temporal: () => Promise<Client>;
  taskQueue: string;
  retryScale: number;
  logger: Logger;
  /** Rows per pass (default 500). */
  batchSize?: number;
  /** Wait between passes when the outbox is empty (default 100 ms). */
  pollMs?: number;
  /** How long a pass owns its rows before another may take them (default 60 s). */
  leaseSeconds?: number;
  /** Automation triggers (issue 6 wires the automation runs here); default: nothing to start. */
  onTriggers?: (rows: OutboxRow[]) => Promise<void>;
}

export interface OutboxRow {
  id: string;
  workspace_id: string;
  kind: 'webhook' | 'trigger';
  name: string;
  payload: Record<string, unknown>;
  depth: number;
}

interface NewDelivery {
  id: string;
  workspace_id: string;
  subscription_id: string;
  event_id: string;
  status: string;
  attempts: number;
}

const START_CONCURRENCY = 64;

/** An outage holds back every row alike; only other failures single a row out. */
const isOutage = (err: unknown): boolean => isDatabaseUnavailable(err) || isTemporalUnreachable(err);

export function createOutboxDispatcher(options: DispatcherOptions) {
  const { db, logger } = options;
  const batchSize = options.batchSize ?? 500;
  const pollMs = options.pollMs ?? 100;
  const leaseSeconds = options.leaseSeconds ?? 60;
  let running = false;
  let loop: Promise<void> | undefined;
  let wake: (() => void) | undefined;

  async function claim(): Promise<OutboxRow[]> {
    const { rows } = await db.raw(
      `UPDATE outbox_events SET claimed_until = now() + make_interval(secs => ?)
        WHERE id IN (
          SELECT id FROM outbox_events
           WHERE dispatched_at IS NULL AND (claimed_until IS NULL OR claimed_until < now())
           ORDER BY seq
           LIMIT ?
           FOR UPDATE SKIP LOCKED)
        RETURNING id, workspace_id, kind, name, payload, depth`,
      [leaseSeconds, batchSize],
    );
    return rows;
  }

  /** One delivery per (event, active subscription taking it); existing ones are returned as they are. */
  async function createDeliveries(eventIds: string[]): Promise<NewDelivery[]> {
    if (eventIds.length === 0) return [];
    const { rows } = await db.raw(
      `INSERT INTO webhook_deliveries (workspace_id, subscription_id, event_id, event, payload)
       SELECT e.workspace_id, s.id, e.id, e.name, e.payload
         FROM outbox_events e
         JOIN webhook_subscriptions s
           ON s.workspace_id = e.workspace_id AND s.active AND (s.events @> ARRAY[e.name] OR s.events @> ARRAY['*'])
        WHERE e.id = ANY(?::uuid[])
        ORDER BY e.seq
       ON CONFLICT (subscription_id, event_id) WHERE event_id IS NOT NULL DO UPDATE SET event = EXCLUDED.event
       RETURNING id, workspace_id, subscription_id, event_id, status, attempts`,
      [eventIds],
    );
    return rows;
  }

  async function startDeliveries(deliveries: NewDelivery[]): Promise<void> {
    const client = await options.temporal();
    // A delivery that has already run (an earlier pass crashed before marking its rows) is left alone.
    const fresh = deliveries.filter((d) => d.status === 'pending' && d.attempts === 0);
    for (let i = 0; i < fresh.length; i += START_CONCURRENCY) {
      const results = await Promise.allSettled(
        fresh.slice(i, i + START_CONCURRENCY).map((d) => {
          const input: DeliveryInput = { workspaceId: d.workspace_id, deliveryId: d.id, retryScale: options.retryScale };
          return withDeadline(client, START_DEADLINE_MS, () =>
            client.workflow.start('webhookDeliveryWorkflow', {
              workflowId: deliveryWorkflowId(d.workspace_id, d.subscription_id, d.event_id),
              taskQueue: options.taskQueue,
              args: [input],
              workflowIdReusePolicy: WorkflowIdReusePolicy.REJECT_DUPLICATE,
              searchAttributes: { WorkspaceId: [d.workspace_id] },
            }),
          );
        }),
      );
      const failed = results.find((r) => r.status === 'rejected' && !(r.reason instanceof WorkflowExecutionAlreadyStartedError));
      if (failed) throw (failed as PromiseRejectedResult).reason;
    }
  }

  /** Hands rows over (deliveries and their workflows, automation runs) and marks them dispatched. */
  async function dispatch(rows: OutboxRow[]): Promise<void> {
    const deliveries = await createDeliveries(rows.filter((r) => r.kind === 'webhook').map((r) => r.id));
    await startDeliveries(deliveries);
    const triggers = rows.filter((r) => r.kind === 'trigger');
    if (triggers.length > 0 && options.onTriggers) await options.onTriggers(triggers);
    await db('outbox_events').whereIn('id', rows.map((r) => r.id)).update({ dispatched_at: db.fn.now(), claimed_until: null });
  }

  /** Gives rows back at once: the next pass (after the error backoff) takes them again. */
  async function release(rows: OutboxRow[]): Promise<void> {
    await db('outbox_events').whereIn('id', rows.map((r) => r.id)).whereNull('dispatched_at').update({ claimed_until: null }).catch(() => undefined);
  }

  /**
   * One pass: returns how many outbox rows it dispatched. When the batch fails for a reason that
   * is not an outage (PostgreSQL or Temporal away: the whole batch waits), each row is tried on
   * its own, and one that still fails is set aside with its error and retried with a growing
   * backoff (up to an hour), so one bad row never holds back the other rows or tenants.
   */
  async function dispatchOnce(): Promise<number> {
    const rows = await claim();
    if (rows.length === 0) return 0;
    try {
      await dispatch(rows);
      return rows.length;
    } catch (err) {
      if (rows.length === 1 || isOutage(err)) {
        if (rows.length === 1 && !isOutage(err)) await setAside(rows[0], err);
        else await release(rows);
        throw err;
      }
    }
    let dispatched = 0;
    for (const [i, row] of rows.entries()) {
      try {
        await dispatch([row]);
        dispatched += 1;
      } catch (err) {
        if (isOutage(err)) {
          await release(rows.slice(i));
          throw err;
        }
        await setAside(row, err);
      }
    }
    return dispatched;
  }

  async function setAside(row: OutboxRow, err: unknown): Promise<void> {
    const message = err instanceof Error ? err.message : String(err);
    const [{ dispatch_failures: failures }] = await db('outbox_events')
      .where({ id: row.id })
      .update({
        dispatch_failures: db.raw('dispatch_failures + 1'),
        last_dispatch_error: message.slice(0, 1000),
        claimed_until: db.raw(`now() + least(interval '1 hour', interval '1 second' * power(2, dispatch_failures))`),
      })
      .returning('dispatch_failures');
    logger.error({ outboxEventId: row.id, workspaceId: row.workspace_id, event: row.name, failures, err: message }, 'outbox row set aside after a failed dispatch; it will be retried');
  }

  function pause(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const timer = setTimeout(resolve, ms);
      wake = () => {
        clearTimeout(timer);
        resolve();
      };
    });
  }

  async function run(): Promise<void> {
    let failures = 0;
    while (running) {
      try {
        const dispatched = await dispatchOnce();
        failures = 0;
        if (dispatched < batchSize) await pause(pollMs);
      } catch (err) {
        failures += 1;
        const backoff = Math.min(pollMs * 2 ** failures, 5000);
        if (failures === 1 || failures % 20 === 0) {
          logger.warn({ err: err instanceof Error ? err.message : String(err), failures, retryInMs: backoff }, 'outbox dispatch failed; retrying');
        }
        await pause(backoff);
      }
    }
  }

  return {
    dispatchOnce,
    start(): void {
      if (running) return;
      running = true;
      loop = run();
      logger.info({ pollMs, batchSize }, 'outbox dispatcher started');
    },
    async stop(): Promise<void> {
      running = false;
      wake?.();
      await loop;
    },
  };
}
