import { Client, WorkflowExecutionAlreadyStartedError, WorkflowIdReusePolicy } from '@temporalio/client';
import type { Logger } from 'pino';
import { keepWebhookBodyOnRun, REFUSALS_LISTED_PER_EVENT, runsForEvents, runWorkflowId } from '../domain/automations';
import { type Db, START_DEADLINE_MS, withDeadline, workspacePriority } from '../domain/platform';
import type { OutboxRow } from '../domain/webhooks';
import type { RunInput } from '../types/automations';
import { automationRunWorkflow } from '../workflows/automation-run';
import { signalInsightWorkflows } from './insights';

/** Run workflows started at once. */
const START_CONCURRENCY = 32;
/** Runs carried out at once by one dispatcher lane (each takes a pool connection while it runs a statement). */
const RUNS_HERE_CONCURRENCY = 8;

/**
 * The outbox dispatcher's handler for internal triggers: the runs the events start
 * (domain/automations/automation-triggers.ts decides and records them), each started as its workflow. The run
 * workflow's id derives from the event (`REJECT_DUPLICATE`), so a dispatcher taking a row again
 * after a crash neither records nor starts a second run.
 */
export function createTriggerHandler(options: {
  db: Db;
  temporal: () => Promise<Client>;
  taskQueue: string;
  waitScale: number;
  /** INSIGHT_DEBOUNCE_SECONDS: `conversation_activity` rows signal the contacts' insight workflows (workers/insights.ts). */
  insightDebounceSeconds?: number;
  logger?: Logger;
  /**
   * Runs are started with requestEagerStart: their first task comes back with the start and runs
   * in this process. Only for a client on a NativeConnection that a worker of `taskQueue` shares
   * (workers/main.ts); the SDK refuses the flag on any other connection.
   */
  eagerStarts?: boolean;
  /**
   * Carries out a run here when it can (activities/automations.ts createRunHere: only database
   * actions, no step failed in a way a retry may fix); the runs it leaves are started as workflows.
   * Without it every run is a workflow (AUTOMATION_RUNS_IN_DISPATCHER=false).
   */
  runHere?: (input: RunInput) => Promise<boolean>;
}) {
  const { db } = options;

  return async function onTriggers(triggers: OutboxRow[]): Promise<void> {
    const activity = triggers.filter((r) => r.name === 'conversation_activity');
    if (activity.length > 0)
      await signalInsightWorkflows(activity, {
        temporal: options.temporal,
        taskQueue: options.taskQueue,
        debounceSeconds: options.insightDebounceSeconds ?? 120,
      });
    const all = triggers.filter((r) => r.name !== 'conversation_activity');
    // Each run to start, with its workflow id.
    const starts: RunInput[] = [];
    const keys: string[] = [];
    const start = (run: Omit<RunInput, 'waitScale'>, workflowId: string) => {
      starts.push({ ...run, waitScale: options.waitScale });
      keys.push(workflowId);
    };
    // Runs the inbound receiver accepted already exist: they only need their workflow.
    for (const row of all.filter((r) => r.name === 'webhook_received')) {
      const run = row.payload as {
        runId: string;
        automationId: string;
        externalId?: string;
        webhookBody?: unknown;
        depth?: number;
        chain?: string;
      };
      if (run.webhookBody !== undefined) await keepWebhookBodyOnRun(db, row.workspace_id, run.runId, run.webhookBody);
      // The inbound call is the chain's root, unless one of our own webhook deliveries made it: then
      // it continues the chain of the event that delivery carried (the receiver says which).
      start(
        {
          workspaceId: row.workspace_id,
          automationId: run.automationId,
          runId: run.runId,
          depth: run.depth ?? 0,
          chain: run.chain ?? run.runId,
        },
        runWorkflowId(row.workspace_id, run.automationId, run.externalId ? { externalId: run.externalId } : { runId: run.runId }),
      );
    }
    const rows = all.filter((r) => r.name !== 'webhook_received');
    if (rows.length > 0) {
      const { runs, unlisted } = await runsForEvents(db, rows);
      for (const { eventId, ...run } of runs) start(run, runWorkflowId(run.workspaceId, run.automationId, { eventId }));
      if (unlisted.size > 0) {
        options.logger?.warn(
          { workspaceIds: [...new Set(rows.map((r) => r.workspace_id))], events: rows.length, refused: Object.fromEntries(unlisted) },
          `automation runs refused beyond the ${REFUSALS_LISTED_PER_EVENT} listed per event (counted here only, not in the automations' run lists)`,
        );
      }
    }
    if (starts.length === 0) return;
    // The runs carried out here are done; the others are started as workflows below.
    const toStart = options.runHere ? await runsLeft(starts, options.runHere) : starts.map((_, i) => i);
    if (toStart.length === 0) return;
    const client = await options.temporal();
    for (let i = 0; i < toStart.length; i += START_CONCURRENCY) {
      const results = await Promise.allSettled(
        toStart.slice(i, i + START_CONCURRENCY).map((n) =>
          withDeadline(client, START_DEADLINE_MS, () =>
            client.workflow.start(automationRunWorkflow, {
              workflowId: keys[n],
              taskQueue: options.taskQueue,
              args: [starts[n]],
              workflowIdReusePolicy: WorkflowIdReusePolicy.REJECT_DUPLICATE,
              priority: workspacePriority(starts[n].workspaceId),
              searchAttributes: { WorkspaceId: [starts[n].workspaceId], AutomationId: [starts[n].automationId] },
              requestEagerStart: options.eagerStarts === true,
            }),
          ),
        ),
      );
      const failed = results.find((r) => r.status === 'rejected' && !(r.reason instanceof WorkflowExecutionAlreadyStartedError));
      if (failed) throw (failed as PromiseRejectedResult).reason;
    }
  };
}

/** Runs carried out here at once (RUNS_HERE_CONCURRENCY at a time): the indexes of those left to a workflow. */
async function runsLeft(starts: RunInput[], runHere: (input: RunInput) => Promise<boolean>): Promise<number[]> {
  const left: number[] = [];
  for (let i = 0; i < starts.length; i += RUNS_HERE_CONCURRENCY) {
    const done = await Promise.all(starts.slice(i, i + RUNS_HERE_CONCURRENCY).map((input) => runHere(input).catch(() => false)));
    done.forEach((ok, j) => ok || left.push(i + j));
  }
  return left;
}
