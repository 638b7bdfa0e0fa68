import { Client, WorkflowExecutionAlreadyStartedError, WorkflowIdReusePolicy } from '@temporalio/client';
import type { Logger } from 'pino';
import {
  type Db,
  isDatabaseUnavailable,
  isTemporalUnreachable,
  START_DEADLINE_MS,
  withDeadline,
  workspacePriority,
} from '../domain/platform';
import {
  claimPendingFairly,
  createDeliveries,
  deliveryWorkflowId,
  markDispatched,
  type NewDelivery,
  orphanedDeliveries,
  type OutboxRow,
  releaseClaims,
  setAside as setAsideRow,
  subscriptionsBeingRetried,
} from '../domain/webhooks';
import { retryWaitMs, type AttemptInput, type AttemptResult, type DeliveryInput } from '../types/webhooks';
import { webhookDeliveryWorkflow } from '../workflows/webhook-delivery';

/**
 * Turns committed outbox rows into durable work. Business transactions only write the outbox
 * (domain/webhooks/outbox.ts); this loop, in the worker process, leases undispatched rows, creates one
 * delivery per (event, matching active subscription), starts one Temporal workflow per delivery
 * (or makes its first attempt here), starts the automation runs the triggers call for, and only
 * then marks the rows dispatched. Every step is idempotent, so a crash at any point (API or
 * worker) loses nothing and doubles nothing: the lease expires, the next pass takes the rows
 * again, the delivery insert finds the existing rows (unique on subscription and event), and a
 * workflow id that already exists is not started twice (`REJECT_DUPLICATE`).
 *
 * Every tenant shares this loop, so it is fair by construction: rows are claimed per workspace (at
 * most ROWS_PER_WORKSPACE of one workspace's oldest, in `seq` order), the workspaces taken in turn
 * (round-robin from the last one served), and each workspace's rows are dispatched in a lane of
 * their own, beside the others (at most LANES at once). A workspace whose rows are slow to
 * dispatch (many automations, a backlog) holds only its own lane: another workspace's event is
 * claimed on the next pass, at most `pollMs` after its commit, whatever the first one does.
 */
export interface DispatcherOptions {
  db: Db;
  temporal: () => Promise<Client>;
  /** Task queue of the delivery workflows it starts (TEMPORAL_WEBHOOK_TASK_QUEUE). */
  taskQueue: string;
  retryScale: number;
  logger: Logger;
  /** Rows one workspace's lane takes per pass (default ROWS_PER_WORKSPACE). */
  rowsPerWorkspace?: number;
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

const START_CONCURRENCY = 64;
/** Workspaces whose rows are being dispatched at once in this process, each in its own lane. */
export const LANES = 8;
/** Rows one lane takes per pass: a lane's work is bounded, and the workspace is taken again next turn. */
export const ROWS_PER_WORKSPACE = 50;
/** First attempts in flight at once in this process; beyond it, new deliveries go to workflows. */
const FIRST_ATTEMPT_SLOTS = 128;
/**
 * First attempts in flight at once for one workspace: a subscriber that answers slowly holds at
 * most these, never every slot; its workspace's other new deliveries go to workflows after
 * FIRST_ATTEMPT_WAIT_MS.
 */
export const FIRST_ATTEMPT_SLOTS_PER_WORKSPACE = 16;
/**
 * How long a lane waits for one of its workspace's first-attempt slots to free, counted from the
 * last attempt it started, before the rest of its new deliveries go to workflows. Most receivers
 * answer in milliseconds, so a burst is carried by the same slots instead of a workflow per
 * delivery (workflows are what limits throughput: 63-75 deliveries a second through them against
 * 757 on first attempts, docs/performance.md); a slow receiver frees none in that time, and its
 * workspace's other deliveries go to workflows. Only the workspace's own lane waits, which also
 * paces a workspace that floods.
 */
export const FIRST_ATTEMPT_WAIT_MS = 250;
/** A pending delivery untouched this long (not created, not attempted) is checked for a workflow. */
const ORPHAN_AFTER_SECONDS = 60;

/** An outage holds back every row alike; only other failures single a row out. */
const isOutage = (err: unknown): boolean => isDatabaseUnavailable(err) || isTemporalUnreachable(err);
const errorText = (err: unknown): string => (err instanceof Error ? err.message : String(err));

export function createOutboxDispatcher(options: DispatcherOptions) {
  const { db, logger } = options;
  const rowsPerWorkspace = options.rowsPerWorkspace ?? ROWS_PER_WORKSPACE;
  const pollMs = options.pollMs ?? 100;
  const leaseSeconds = options.leaseSeconds ?? 60;
  let running = false;
  let loop: Promise<void> | undefined;
  let wake: (() => void) | undefined;
  /** The lanes under way, by workspace: a workspace is never in two lanes of this process. */
  const lanes = new Map<string, Promise<void>>();
  /** The last workspace given a lane: the next claim starts after it (round-robin). */
  let lastServed = '00000000-0000-0000-0000-000000000000';
  /** Set by a lane that met an outage (PostgreSQL or Temporal away): the loop backs off. */
  let outage: unknown;

  /** The delivery's workflow (REJECT_DUPLICATE: one that exists already is left alone). */
  async function startWorkflow(
    d: Pick<NewDelivery, 'id' | 'workspace_id' | 'subscription_id' | 'event_id'>,
    resume: Pick<DeliveryInput, 'attemptsDone' | 'firstWaitMs'> = {},
  ): Promise<void> {
    const client = await options.temporal();
    const input: DeliveryInput = { workspaceId: d.workspace_id, deliveryId: d.id, retryScale: options.retryScale, ...resume };
    try {
      await withDeadline(client, START_DEADLINE_MS, () =>
        client.workflow.start(webhookDeliveryWorkflow, {
          workflowId: deliveryWorkflowId(d.workspace_id, d.subscription_id, d.event_id),
          taskQueue: options.taskQueue,
          args: [input],
          workflowIdReusePolicy: WorkflowIdReusePolicy.REJECT_DUPLICATE,
          priority: workspacePriority(d.workspace_id),
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
  const firstAttemptsByWorkspace = new Map<string, number>();

  /**
   * Whether a first attempt may start now: a free slot in this process and in the workspace's
   * share of them. Only the workspace's own lane waits for one (FIRST_ATTEMPT_WAIT_MS at most).
   */
  function firstAttemptSlot(workspaceId: string): boolean {
    return (
      firstAttemptsInFlight < FIRST_ATTEMPT_SLOTS && (firstAttemptsByWorkspace.get(workspaceId) ?? 0) < FIRST_ATTEMPT_SLOTS_PER_WORKSPACE
    );
  }

  /** Lanes waiting for a first-attempt slot to free: each is woken when any first attempt ends. */
  const slotWaiters = new Set<() => void>();

  /** Resolves when a first attempt ends, or after `ms`. */
  function slotFreed(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const done = () => {
        clearTimeout(timer);
        slotWaiters.delete(done);
        resolve();
      };
      const timer = setTimeout(done, ms);
      slotWaiters.add(done);
    });
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
    firstAttemptsByWorkspace.set(d.workspace_id, (firstAttemptsByWorkspace.get(d.workspace_id) ?? 0) + 1);
    attempting.add(d.id);
    const firstWaitMs = retryWaitMs(1, options.retryScale, Math.random());
    const attempt: Promise<unknown> = options.attempt!({
      workspaceId: d.workspace_id,
      deliveryId: d.id,
      final: false,
      nextAttemptInMs: firstWaitMs,
    })
      .then(
        async (result) => {
          if (result.status !== 'pending') return;
          // Recorded as attempt 1; if the workflow cannot start now, the sweep starts it from there.
          await startWorkflow(d, { attemptsDone: 1, firstWaitMs }).catch((err) =>
            logger.warn(
              { deliveryId: d.id, err: errorText(err) },
              'retries of a webhook delivery not started yet; the sweep will start them',
            ),
          );
        },
        async (err) => {
          // The attempt could not run or be recorded: the workflow makes it (again, with the same delivery id).
          logger.warn({ deliveryId: d.id, err: errorText(err) }, 'first webhook attempt failed to run; handing it to a workflow');
          await startWorkflow(d).catch(() => undefined); // if this fails too, the sweep starts it
        },
      )
      .finally(() => {
        firstAttemptsInFlight -= 1;
        const left = (firstAttemptsByWorkspace.get(d.workspace_id) ?? 1) - 1;
        if (left > 0) firstAttemptsByWorkspace.set(d.workspace_id, left);
        else firstAttemptsByWorkspace.delete(d.workspace_id);
        attempting.delete(d.id);
        firstAttempts.delete(attempt);
        for (const wake of [...slotWaiters]) wake();
      });
    firstAttempts.add(attempt);
  }

  async function startDeliveries(workspaceId: string, deliveries: NewDelivery[]): Promise<void> {
    // A delivery that has already run (an earlier pass crashed before marking its rows), or whose
    // first attempt is under way, is left alone.
    const fresh = deliveries.filter((d) => d.status === 'pending' && d.attempts === 0 && !attempting.has(d.id));
    // Subscriptions with a delivery being retried: their new deliveries go straight to workflows.
    const retrying =
      options.attempt && fresh.length > 0
        ? await subscriptionsBeingRetried(db, workspaceId, [...new Set(fresh.map((d) => d.subscription_id))])
        : new Set<string>();
    const toWorkflows: NewDelivery[] = [];
    const forFirstAttempts: NewDelivery[] = [];
    for (const d of fresh) {
      if (options.attempt && !retrying.has(d.subscription_id)) forFirstAttempts.push(d);
      else toWorkflows.push(d);
    }
    // As many first attempts as the slots allow; the rest wait for slots to free (this lane only)
    // as long as the receiver keeps freeing them: the wait is FIRST_ATTEMPT_WAIT_MS since the last
    // attempt this lane started, not since the pass began, so a busy machine that answers each
    // attempt in 100 ms still carries a burst. Those left when no slot freed in that long go to workflows.
    let deadline = Date.now() + FIRST_ATTEMPT_WAIT_MS;
    while (forFirstAttempts.length > 0) {
      let started = false;
      while (forFirstAttempts.length > 0 && firstAttemptSlot(workspaceId)) {
        attemptFirst(forFirstAttempts.shift()!);
        started = true;
      }
      if (started) deadline = Date.now() + FIRST_ATTEMPT_WAIT_MS;
      const left = deadline - Date.now();
      if (forFirstAttempts.length === 0 || left <= 0 || !running) break;
      await slotFreed(left);
    }
    toWorkflows.push(...forFirstAttempts);
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
    const rows = await orphanedDeliveries(db, ORPHAN_AFTER_SECONDS);
    for (const d of rows) await startWorkflow(d, d.attempts > 0 ? { attemptsDone: d.attempts, firstWaitMs: Math.max(1, d.wait_ms) } : {});
    return rows.length;
  }

  /** Hands one workspace's rows over (deliveries and their workflows, automation runs) and marks them dispatched. */
  async function dispatch(workspaceId: string, rows: OutboxRow[]): Promise<void> {
    const deliveries = await createDeliveries(
      db,
      workspaceId,
      rows.filter((r) => r.kind === 'webhook').map((r) => r.id),
    );
    await startDeliveries(workspaceId, deliveries);
    const triggers = rows.filter((r) => r.kind === 'trigger');
    if (triggers.length > 0 && options.onTriggers) await options.onTriggers(triggers);
    await markDispatched(
      db,
      workspaceId,
      rows.map((r) => r.id),
    );
  }

  /** Gives rows back at once: the next pass (after the error backoff) takes them again. */
  async function release(rows: OutboxRow[]): Promise<void> {
    await releaseClaims(
      db,
      rows.map((r) => r.id),
    ).catch(() => undefined);
  }

  /**
   * One lane: one workspace's claimed rows, dispatched together. When that fails for a reason
   * that is not an outage (PostgreSQL or Temporal away: the rows are given back and the loop backs
   * off), each row is tried on its own, and one that still fails is set aside with its error and
   * retried with a growing backoff (up to an hour), so one bad row never holds back the others.
   */
  async function dispatchLane(workspaceId: string, rows: OutboxRow[]): Promise<void> {
    try {
      await dispatch(workspaceId, rows);
      return;
    } catch (err) {
      if (isOutage(err)) {
        await release(rows);
        throw err;
      }
      if (rows.length === 1) {
        await setAside(rows[0], err);
        return;
      }
    }
    for (const [i, row] of rows.entries()) {
      try {
        await dispatch(workspaceId, [row]);
      } catch (err) {
        if (isOutage(err)) {
          await release(rows.slice(i));
          throw err;
        }
        await setAside(row, err);
      }
    }
  }

  async function setAside(row: OutboxRow, err: unknown): Promise<void> {
    const message = errorText(err);
    const failures = await setAsideRow(db, row.id, message);
    logger.error(
      { outboxEventId: row.id, workspaceId: row.workspace_id, event: row.name, failures, err: message },
      'outbox row set aside after a failed dispatch; it will be retried',
    );
  }

  function startLane(workspaceId: string, rows: OutboxRow[]): void {
    const lane = dispatchLane(workspaceId, rows)
      .catch((err) => {
        outage = err;
      })
      .finally(() => {
        lanes.delete(workspaceId);
        // A free lane: the loop claims again at once (this workspace's next rows, or another's).
        wake?.();
      });
    lanes.set(workspaceId, lane);
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

  /**
   * One turn of the loop: claims rows for as many workspaces as there are free lanes, and starts
   * their lanes. Returns how many lanes it started.
   */
  async function claimLanes(): Promise<number> {
    const free = LANES - lanes.size;
    if (free <= 0) return 0;
    // Rows for up to `free` more workspaces, none of those in a lane now.
    const busy = [...lanes.keys()];
    const claimed = await claimPendingFairly(db, { busy, after: lastServed, workspaces: free, rowsPerWorkspace, leaseSeconds });
    for (const [workspaceId, rows] of claimed) startLane(workspaceId, rows);
    // The turn ends at the last workspace in claim's order: those after lastServed, then the wrapped ones.
    const ids = [...claimed.keys()].sort();
    const wrapped = ids.filter((id) => id <= lastServed);
    if (ids.length > 0) lastServed = (wrapped.length > 0 ? wrapped : ids).at(-1)!;
    return claimed.size;
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
        if (outage !== undefined) {
          const err = outage;
          outage = undefined;
          throw err;
        }
        const started = await claimLanes();
        failures = 0;
        // Nothing more to claim now (or every lane busy): wait for new rows, or for a lane to end.
        if (started === 0 || lanes.size >= LANES) await pause(pollMs);
      } catch (err) {
        failures += 1;
        const backoff = Math.min(pollMs * 2 ** failures, 5000);
        if (failures === 1 || failures % 20 === 0) {
          logger.warn({ err: errorText(err), failures, retryInMs: backoff }, 'outbox dispatch failed; retrying');
        }
        await pause(backoff);
      }
    }
  }

  return {
    sweepOrphans,
    start(): void {
      if (running) return;
      running = true;
      loop = run();
      logger.info({ pollMs, lanes: LANES, rowsPerWorkspace }, 'outbox dispatcher started');
    },
    async stop(): Promise<void> {
      running = false;
      wake?.();
      await loop;
      await Promise.allSettled([...lanes.values()]);
      // First attempts under way finish and record (each is bounded by the 10 s webhook timeout).
      await Promise.allSettled([...firstAttempts]);
    },
  };
}
