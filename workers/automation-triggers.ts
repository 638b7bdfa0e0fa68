import { Client, WorkflowExecutionAlreadyStartedError, WorkflowIdReusePolicy } from '@temporalio/client';
import { CHAIN_RUN_BUDGET, CONTACT_FIELDS, MAX_CHAIN_DEPTH, runWorkflowId, TriggerConfig } from '../domain/automations';
import { consume } from '../domain/rate-limit';
import { suspension } from '../domain/workspaces';
import type { Db } from '../domain/db';
import { START_DEADLINE_MS, withDeadline } from '../domain/temporal';
import type { RunInput } from '../types/automations';
import { automationRunWorkflow } from '../workflows/automation-run';
import type { OutboxRow } from './outbox-dispatcher';

interface WorkspacePlan {
  automation_runs_per_minute: number | null;
  active: boolean;
  api_access: boolean;
}

interface Candidate {
  id: string;
  workspace_id: string;
  trigger_type: string;
  trigger: TriggerConfig;
}

/** Whether an automation's trigger options take this event (card_created pipelineId; contact_updated fields). */
function matches(automation: Candidate, variables: Record<string, unknown>): boolean {
  if (automation.trigger_type === 'card_created' && automation.trigger.pipelineId) return variables.pipelineId === automation.trigger.pipelineId;
  if (automation.trigger_type === 'contact_updated') {
    const changed = String(variables.changedFields ?? '')
      .split(',')
      .filter((f) => (CONTACT_FIELDS as readonly string[]).includes(f));
    if (changed.length === 0) return false;
    const wanted = automation.trigger.fields;
    return !wanted || wanted.some((f) => changed.includes(f));
  }
  return true;
}

/**
 * The outbox dispatcher's handler for internal triggers: one run per (business event, matching
 * active automation), exactly once. The run row is unique per (automation, event) and the run
 * workflow's id derives from the event (`REJECT_DUPLICATE`), so a dispatcher taking a row again
 * after a crash neither records nor starts a second run. A trigger whose event an automation
 * caused deeper than MAX_CHAIN_DEPTH records a failed run instead (loop protection), and so does
 * one refused by `refusal` (the chain's run budget, no self-retrigger, the workspace's run rate).
 */
export function createTriggerHandler(options: { db: Db; temporal: () => Promise<Client>; taskQueue: string; waitScale: number }) {
  const { db } = options;

  /**
   * Why a run of `automation` for this event must not start, or null. One root event (an API call,
   * an inbound webhook) may cause at most CHAIN_RUN_BUDGET runs through its whole chain, however
   * many automations fire each other; an automation never runs again on the record (deal, else
   * contact) it already ran on in the same chain; a workspace starts at most its plan's
   * `automationRunsPerMinute` triggered runs a minute. Without them, N automations that fire each other make about N^5 runs.
   */
  async function refusal(row: OutboxRow, automation: Candidate, chain: string, plan: WorkspacePlan | undefined): Promise<string | null> {
    if (row.depth >= MAX_CHAIN_DEPTH) return `Loop protection: this event comes from a chain of automations ${row.depth} deep; the limit is ${MAX_CHAIN_DEPTH}`;
    const variables = row.payload as Record<string, unknown>;
    const record = String(variables.dealId ?? variables.contactId ?? '');
    // A run already recorded for this automation and event (a dispatcher taking the row again) is this run, not an earlier one.
    const earlier = db('automation_runs').where({ chain_id: chain }).whereRaw('(event_id IS DISTINCT FROM ? OR automation_id <> ?)', [row.id, automation.id]);
    const again = await earlier.clone().where({ automation_id: automation.id }).whereRaw(`coalesce(trigger->>'dealId', trigger->>'contactId') = ?`, [record]).first('id');
    if (again) return 'Loop protection: this automation already ran on this record in the same chain of automations';
    const { count } = await earlier.clone().first(db.raw('count(*)::int AS count'));
    if (count >= CHAIN_RUN_BUDGET) return `Loop protection: the event that began this chain of automations has caused ${count} runs; the limit is ${CHAIN_RUN_BUDGET}`;
    const suspended = plan && suspension(plan, 'automationRun');
    if (suspended) return suspended.message;
    const limit: number | null = plan?.automation_runs_per_minute ?? null;
    if (limit === null) return null;
    const [rate] = await consume(db, [{ name: `runs:${row.workspace_id}`, limit, code: 'RATE_LIMITED' }]);
    if (rate.count > limit) return `Rate limit: the plan allows ${limit} triggered runs a minute; this one was not started`;
    return null;
  }

  /** Internal triggers: a run (recorded once per automation and event) for each active automation the event matches. */
  async function matchTriggers(rows: OutboxRow[], starts: RunInput[], keys: string[]): Promise<void> {
    const workspaces = [...new Set(rows.map((r) => r.workspace_id))];
    const types = [...new Set(rows.map((r) => r.name))];
    // An automation deactivated after an earlier pass recorded its run (`running`) but failed to
    // start it is still taken for that event: its run then starts, sees the automation inactive
    // and closes as failed, instead of staying `running` for ever.
    const eventIds = rows.map((r) => r.id);
    const candidates: Candidate[] = await db('automations')
      .where((q) =>
        q.where({ active: true }).orWhereIn('id', db('automation_runs').where({ status: 'running' }).whereIn('event_id', eventIds).select('automation_id')),
      )
      .whereIn('workspace_id', workspaces)
      .whereIn('trigger_type', types)
      .select('id', 'workspace_id', 'trigger_type', 'trigger');
    if (candidates.length === 0) return;
    // Each workspace's standing and run rate, read once for the batch.
    const plans = new Map(
      ((await db('workspaces').whereIn('id', workspaces).select('id', 'automation_runs_per_minute', 'active', 'api_access')) as (WorkspacePlan & { id: string })[]).map((p) => [p.id, p]),
    );

    for (const row of rows) {
      const variables = row.payload as Record<string, unknown>;
      for (const automation of candidates.filter((a) => a.workspace_id === row.workspace_id && a.trigger_type === row.name)) {
        if (!matches(automation, variables)) continue;
        const chain = row.chain_id ?? row.id;
        const refused = await refusal(row, automation, chain, plans.get(row.workspace_id));
        const inserted = await db.raw(
          `INSERT INTO automation_runs (workspace_id, automation_id, status, trigger, event_id, depth, chain_id, error, finished_at)
           VALUES (?, ?, ?, ?, ?, ?, ?, ?, ${refused ? 'now()' : 'NULL'})
           ON CONFLICT (automation_id, event_id) WHERE event_id IS NOT NULL DO UPDATE SET depth = EXCLUDED.depth
           RETURNING id, status`,
          [
            row.workspace_id,
            automation.id,
            refused ? 'failed' : 'running',
            JSON.stringify({ type: row.name, ...variables }),
            row.id,
            row.depth,
            chain,
            refused,
          ],
        );
        const run = inserted.rows[0];
        if (run.status !== 'running') continue;
        // The trigger's variables are on the run's row (`trigger`), where startRun reads them.
        starts.push({ workspaceId: row.workspace_id, automationId: automation.id, runId: run.id, depth: row.depth, chain, waitScale: options.waitScale });
        keys.push(runWorkflowId(row.workspace_id, automation.id, { eventId: row.id }));
      }
    }
  }

  return async function onTriggers(all: OutboxRow[]): Promise<void> {
    // Runs the inbound receiver accepted already exist: they only need their workflow.
    const starts: RunInput[] = [];
    const keys: string[] = [];
    for (const row of all.filter((r) => r.name === 'webhook_received')) {
      const run = row.payload as { runId: string; automationId: string; externalId?: string; webhookBody?: unknown };
      // A row written before the run kept its body (the outbox carried it): the body moves to the run.
      if (run.webhookBody !== undefined) {
        await db('automation_runs').where({ workspace_id: row.workspace_id, id: run.runId }).whereNull('webhook_body').update({ webhook_body: JSON.stringify(run.webhookBody) });
      }
      // The inbound call is the chain's root: what its actions cause shares its run budget.
      starts.push({ workspaceId: row.workspace_id, automationId: run.automationId, runId: run.runId, depth: 0, chain: run.runId, waitScale: options.waitScale });
      keys.push(runWorkflowId(row.workspace_id, run.automationId, run.externalId ? { externalId: run.externalId } : { runId: run.runId }));
    }
    const rows = all.filter((r) => r.name !== 'webhook_received');
    if (rows.length > 0) await matchTriggers(rows, starts, keys);
    if (starts.length === 0) return;
    const client = await options.temporal();
    const results = await Promise.allSettled(
      starts.map((input, i) =>
        withDeadline(client, START_DEADLINE_MS, () =>
          client.workflow.start(automationRunWorkflow, {
            workflowId: keys[i],
            taskQueue: options.taskQueue,
            args: [input],
            workflowIdReusePolicy: WorkflowIdReusePolicy.REJECT_DUPLICATE,
            searchAttributes: { WorkspaceId: [input.workspaceId], AutomationId: [input.automationId] },
          }),
        ),
      ),
    );
    const failed = results.find((r) => r.status === 'rejected' && !(r.reason instanceof WorkflowExecutionAlreadyStartedError));
    if (failed) throw (failed as PromiseRejectedResult).reason;
  };
}
