import { Client, WorkflowExecutionAlreadyStartedError, WorkflowIdReusePolicy } from '@temporalio/client';
import type { Logger } from 'pino';
import { isDatabaseUnavailable, type Db } from '../domain/db';
import { deliveryWorkflowId } from '../domain/webhooks';
import { retryWaitMs, type AttemptInput, type AttemptResult, type DeliveryInput } from '../types/webhooks';
import { isTemporalUnreachable, START_DEADLINE_MS, withDeadline } from '../domain/temporal';
import { webhookDeliveryWorkflow } from '../workflows/webhook-delivery';

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
  /** Automation triggers (workers/automation-triggers.ts starts the runs); default: nothing to start. */
  onTriggers?: (rows: OutboxRow[]) => Promise<void>;
  /**
   * The webhook attempt (activities/webhooks.ts). Given, a new delivery's first attempt is made
   * here, without a workflow, when its subscription has no delivery being retried; a workflow
   * takes over only for the retries. Without it every delivery starts as a workflow.
   */
  attempt?: (input: AttemptInput) => Promise<AttemptResult>;
  /** How often to look for pending deliveries that lost their attempt (default 10 s). */
  sweepMs?: number;
}

export interface OutboxRow {
  id: string;
  workspace_id: string;
  kind: 'webhook' | 'trigger';
  name: string;
  payload: Record<string, unknown>;
  depth: number;
  /** The automation chain the event belongs to (its root event's id), or null for a root event. */
  chain_id: string | null;
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
/** First attempts in flight at once in this process; beyond it, new deliveries go to workflows. */
const FIRST_ATTEMPT_SLOTS = 128;
/** How long a pass waits for a free first-attempt slot before handing a delivery to a workflow. */
const SLOT_WAIT_MS = 1_000;
/** A pending delivery untouched this long (not created, not attempted) is checked for a workflow. */
const ORPHAN_AFTER_SECONDS = 60;

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
        RETURNING id, workspace_id, kind, name, payload, depth, chain_id`,
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

  /** The delivery's workflow (REJECT_DUPLICATE: one that exists already is left alone). */
  async function startWorkflow(d: Pick<NewDelivery, 'id' | 'workspace_id' | 'subscription_id' | 'event_id'>, resume: Pick<DeliveryInput, 'attemptsDone' | 'firstWaitMs'> = {}): Promise<void> {
    const client = await options.temporal();
    const input: DeliveryInput = { workspaceId: d.workspace_id, deliveryId: d.id, retryScale: options.retryScale, ...resume };
    try {
      await withDeadline(client, START_DEADLINE_MS, () =>
        client.workflow.start(webhookDeliveryWorkflow, {
          workflowId: deliveryWorkflowId(d.workspace_id, d.subscription_id, d.event_id),
          taskQueue: options.taskQueue,
          args: [input],
          workflowIdReusePolicy: WorkflowIdReusePolicy.REJECT_DUPLICATE,
          searchAttributes: { WorkspaceId: [d.workspace_id] },
        }),
      );
    } catch (err) {
      if (!(err instanceof WorkflowExecutionAlreadyStartedError)) throw err;
    }
  }

  const firstAttempts = new Set<Promise<unknown>>();
  /** Deliveries whose first attempt is under way here: a pass that meets them again (rows given back after a failure) leaves them alone. */
  const attempting = new Set<string>();
  let firstAttemptsInFlight = 0;
  const slotWaiters: (() => void)[] = [];

  /**
   * A first-attempt slot, waiting up to SLOT_WAIT_MS for one to free: healthy receivers answer in
   * milliseconds, so a burst waits a moment instead of spilling into workflows; receivers slow
   * enough to hold every slot that long push the rest to workflows (no pass waits longer).
   */
  async function firstAttemptSlot(): Promise<boolean> {
    const deadline = Date.now() + SLOT_WAIT_MS;
    while (firstAttemptsInFlight >= FIRST_ATTEMPT_SLOTS) {
      const left = deadline - Date.now();
      if (left <= 0) return false;
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, left);
        slotWaiters.push(() => {
          clearTimeout(timer);
          resolve();
        });
      });
    }
    return true;
  }

  /**
   * The first attempt without a workflow: most receivers answer 2xx at once, and a workflow per
   * delivery is what limits throughput (each one several round trips with Temporal). It runs
   * beside the dispatch loop, so a slow receiver holds no pass up; a failed attempt (recorded on
   * the delivery) hands the schedule to a workflow. A worker dying mid-attempt leaves the
   * delivery pending with no workflow: the sweep finds it (sweepOrphans).
   */
  function attemptFirst(d: NewDelivery): void {
    firstAttemptsInFlight += 1;
    attempting.add(d.id);
    const firstWaitMs = retryWaitMs(1, options.retryScale, Math.random());
    const message = (err: unknown) => (err instanceof Error ? err.message : String(err));
    const attempt: Promise<unknown> = options.attempt!({ workspaceId: d.workspace_id, deliveryId: d.id, final: false, nextAttemptInMs: firstWaitMs })
      .then(
        async (result) => {
          if (result.status !== 'pending') return;
          // Recorded as attempt 1; if the workflow cannot start now, the sweep starts it from there.
          await startWorkflow(d, { attemptsDone: 1, firstWaitMs }).catch((err) => logger.warn({ deliveryId: d.id, err: message(err) }, 'retries of a webhook delivery not started yet; the sweep will start them'));
        },
        async (err) => {
          // The attempt could not run or be recorded: the workflow makes it (again, with the same delivery id).
          logger.warn({ deliveryId: d.id, err: message(err) }, 'first webhook attempt failed to run; handing it to a workflow');
          await startWorkflow(d).catch(() => undefined); // if this fails too, the sweep starts it
        },
      )
      .finally(() => {
        firstAttemptsInFlight -= 1;
        attempting.delete(d.id);
        firstAttempts.delete(attempt);
        slotWaiters.shift()?.();
      });
    firstAttempts.add(attempt);
  }

  /** Subscriptions with a delivery being retried: their new deliveries go straight to workflows. */
  async function retryingSubscriptions(deliveries: NewDelivery[]): Promise<Set<string>> {
    if (!options.attempt || deliveries.length === 0) return new Set();
    const ids = [...new Set(deliveries.map((d) => d.subscription_id))];
    const rows: { subscription_id: string }[] = await db('webhook_deliveries').distinct('subscription_id').whereIn('subscription_id', ids).where('status', 'pending').where('attempts', '>', 0);
    return new Set(rows.map((r) => r.subscription_id));
  }

  async function startDeliveries(deliveries: NewDelivery[]): Promise<void> {
    // A delivery that has already run (an earlier pass crashed before marking its rows), or whose
    // first attempt is under way, is left alone.
    const fresh = deliveries.filter((d) => d.status === 'pending' && d.attempts === 0 && !attempting.has(d.id));
    const retrying = await retryingSubscriptions(fresh);
    const toWorkflows: NewDelivery[] = [];
    for (const d of fresh) {
      if (options.attempt && !retrying.has(d.subscription_id) && (await firstAttemptSlot())) attemptFirst(d);
      else toWorkflows.push(d);
    }
    for (let i = 0; i < toWorkflows.length; i += START_CONCURRENCY) {
      const results = await Promise.allSettled(toWorkflows.slice(i, i + START_CONCURRENCY).map((d) => startWorkflow(d)));
      const failed = results.find((r) => r.status === 'rejected');
      if (failed) throw (failed as PromiseRejectedResult).reason;
    }
  }

  /**
   * Pending deliveries nobody is working on: created or last attempted over a minute ago with no
   * attempt due (a worker died during a first attempt, or between recording it and starting the
   * workflow). Starting their workflow is harmless when one exists (REJECT_DUPLICATE).
   */
  async function sweepOrphans(): Promise<number> {
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
      [ORPHAN_AFTER_SECONDS, ORPHAN_AFTER_SECONDS, ORPHAN_AFTER_SECONDS],
    );
    for (const d of rows) await startWorkflow(d, d.attempts > 0 ? { attemptsDone: d.attempts, firstWaitMs: Math.max(1, d.wait_ms) } : {});
    return rows.length;
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
      if (isOutage(err)) {
        await release(rows);
        throw err;
      }
      if (rows.length === 1) {
        await setAside(rows[0], err);
        return 0;
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
    let sweptAt = Date.now();
    while (running) {
      try {
        if (options.attempt && Date.now() - sweptAt >= (options.sweepMs ?? 10_000)) {
          sweptAt = Date.now();
          const swept = await sweepOrphans();
          if (swept > 0) logger.warn({ deliveries: swept }, 'pending deliveries without an attempt under way were handed to workflows');
        }
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
    sweepOrphans,
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
      // First attempts under way finish and record (each is bounded by the 10 s webhook timeout).
      await Promise.allSettled([...firstAttempts]);
    },
  };
}
