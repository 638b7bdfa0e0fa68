import type { Db } from '../platform';
import { CHAIN_RUN_BUDGET, CONTACT_FIELDS, loopRefusal, takeRunBudget, TriggerConfig } from './automations';
import type { OutboxRow } from '../webhooks';
import { suspension, workspacePlans } from '../access';

/**
 * Automation triggers: which automations a business event starts, and which of those runs loop
 * protection and the plan refuse (workers/automation-triggers.ts starts the runs recorded here).
 *
 * One run per (business event, matching active automation), exactly once: the run row is unique
 * per (automation, event). Loop protection and the plan's rate refuse runs: one root event (an API
 * call, an inbound webhook) may cause at most CHAIN_RUN_BUDGET runs through its whole chain, and no
 * deeper than MAX_CHAIN_DEPTH; an automation never runs again on the record (deal, else contact)
 * it already ran on in the same chain; a workspace starts at most its plan's
 * `automationRunsPerMinute` runs a minute. Without them, N automations that fire each other make
 * about N^5 runs. Each rule is checked once per event, for all its matching automations together,
 * so an event's cost does not grow with the automations it matches: a few statements, at most
 * CHAIN_RUN_BUDGET runs started and REFUSALS_LISTED_PER_EVENT refusals recorded.
 */

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

/** A run recorded `running` for an event: its workflow is to be started. */
export interface TriggeredRun {
  workspaceId: string;
  automationId: string;
  runId: string;
  depth: number;
  chain: string;
  eventId: string;
}

/**
 * Refused runs of one event recorded one by one (each in its automation's run list, with why);
 * past this, the rest are only counted. However many automations a workspace has, an event then
 * costs a bounded number of rows and a fixed number of statements.
 */
export const REFUSALS_LISTED_PER_EVENT = 25;

/** Whether an automation's trigger options take this event (card_created pipelineId; contact_updated fields). */
function matches(automation: Candidate, variables: Record<string, unknown>): boolean {
  if (automation.trigger_type === 'card_created' && automation.trigger.pipelineId)
    return variables.pipelineId === automation.trigger.pipelineId;
  if (automation.trigger_type === 'insight_updated' && automation.trigger.temperature)
    return variables.temperature === automation.trigger.temperature;
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

/** A run decided for one (event, automation): started, or refused with the reason its run list shows. */
interface Decision {
  automation: Candidate;
  refused: string | null;
}

/** Which of an event's matching automations may run, and why the others may not. */
async function decide(db: Db, row: OutboxRow, matching: Candidate[], chain: string, plan: WorkspacePlan | undefined): Promise<Decision[]> {
  const refuseAll = (reason: string): Decision[] => matching.map((automation) => ({ automation, refused: reason }));
  const tooDeep = loopRefusal(row.depth, 0);
  if (tooDeep) return refuseAll(tooDeep);
  const suspended = plan && suspension(plan, 'automationRun');
  if (suspended) return refuseAll(suspended.message);

  // The chain's earlier runs (a run already recorded for this event is this run, not an earlier
  // one: a dispatcher taking the row again after a crash): how many, and which automations ran
  // on this event's record.
  const record = String((row.payload as Record<string, unknown>).dealId ?? (row.payload as Record<string, unknown>).contactId ?? '');
  const [{ used, again }] = (
    await db.raw<{ rows: { used: number; again: string[] }[] }>(
      `SELECT count(*)::int AS used,
              coalesce(array_agg(DISTINCT automation_id) FILTER (WHERE coalesce(trigger->>'dealId', trigger->>'contactId') = ?), '{}') AS again
         FROM automation_runs
        WHERE workspace_id = ? AND chain_id = ? AND event_id IS DISTINCT FROM ?`,
      [record, row.workspace_id, chain, row.id],
    )
  ).rows;
  const ranAgain = new Set(again);
  const decisions: Decision[] = [];
  const eligible: Candidate[] = [];
  for (const automation of matching) {
    if (ranAgain.has(automation.id))
      decisions.push({
        automation,
        refused: 'Loop protection: this automation already ran on this record in the same chain of automations',
      });
    else eligible.push(automation);
  }
  const inBudget = eligible.slice(0, Math.max(0, CHAIN_RUN_BUDGET - used));
  // Past the budget: the chain has then caused used + inBudget.length >= CHAIN_RUN_BUDGET runs.
  for (const automation of eligible.slice(inBudget.length)) decisions.push({ automation, refused: loopRefusal(0, used + inBudget.length) });
  const limit = plan?.automation_runs_per_minute ?? null;
  const allowed =
    limit === null || inBudget.length === 0 ? inBudget.length : (await takeRunBudget(db, row.workspace_id, limit, inBudget.length)).allowed;
  for (const [i, automation] of inBudget.entries()) {
    decisions.push({
      automation,
      refused: i < allowed ? null : `Rate limit: the plan allows ${limit} automation runs a minute; this one was not started`,
    });
  }
  return decisions;
}

/** Records an event's runs (started ones `running`, refused ones `failed`) in one statement; returns those to start. */
async function record(
  db: Db,
  row: OutboxRow,
  chain: string,
  decisions: Decision[],
  unlisted: Map<string, number>,
): Promise<{ id: string; automation_id: string }[]> {
  const started = decisions.filter((d) => d.refused === null);
  const refused = decisions.filter((d) => d.refused !== null);
  const listed = refused.slice(0, REFUSALS_LISTED_PER_EVENT);
  for (const d of refused.slice(listed.length)) unlisted.set(d.refused!, (unlisted.get(d.refused!) ?? 0) + 1);
  const toRecord = [...started, ...listed];
  if (toRecord.length === 0) return [];
  const trigger = JSON.stringify({ type: row.name, ...(row.payload as Record<string, unknown>) });
  const { rows } = await db.raw<{ rows: { id: string; automation_id: string; status: string }[] }>(
    `INSERT INTO automation_runs (workspace_id, automation_id, status, trigger, event_id, depth, chain_id, error, finished_at)
     SELECT ?, r.automation_id, CASE WHEN r.error IS NULL THEN 'running' ELSE 'failed' END, ?::jsonb, ?, ?, ?, r.error,
            CASE WHEN r.error IS NULL THEN NULL ELSE now() END
       FROM unnest(?::uuid[], ?::text[]) AS r(automation_id, error)
     ON CONFLICT (automation_id, event_id) WHERE event_id IS NOT NULL DO UPDATE SET depth = EXCLUDED.depth
     RETURNING id, automation_id, status`,
    [row.workspace_id, trigger, row.id, row.depth, chain, toRecord.map((d) => d.automation.id), toRecord.map((d) => d.refused) as string[]],
  );
  // A run recorded by an earlier pass keeps the status it was given then.
  return rows.filter((r) => r.status === 'running');
}

/**
 * The runs a batch of trigger rows (one workspace's, or several) start: for each event, its
 * matching active automations decided and recorded in one statement. Returns the runs to start, and
 * the refusals past the listed ones by reason (the caller logs them).
 */
export async function runsForEvents(db: Db, rows: OutboxRow[]): Promise<{ runs: TriggeredRun[]; unlisted: Map<string, number> }> {
  const runs: TriggeredRun[] = [];
  const unlisted = new Map<string, number>();
  const workspaces = [...new Set(rows.map((r) => r.workspace_id))];
  const types = [...new Set(rows.map((r) => r.name))];
  // An automation deactivated after an earlier pass recorded its run (`running`) but failed to
  // start it is still taken for that event: its run then starts, sees the automation inactive
  // and closes as failed, instead of staying `running` for ever.
  const eventIds = rows.map((r) => r.id);
  const candidates: Candidate[] = await db('automations')
    .where((q) =>
      q
        .where({ active: true })
        .orWhereIn(
          'id',
          db('automation_runs')
            .where({ status: 'running' })
            .whereIn('workspace_id', workspaces)
            .whereIn('event_id', eventIds)
            .select('automation_id'),
        ),
    )
    .whereIn('workspace_id', workspaces)
    .whereIn('trigger_type', types)
    .orderBy('created_at')
    .orderBy('id')
    .select('id', 'workspace_id', 'trigger_type', 'trigger');
  if (candidates.length === 0) return { runs, unlisted };
  // Each workspace's standing and run rate, read once for the batch.
  const plans = new Map(
    (await workspacePlans(db, workspaces, ['automation_runs_per_minute', 'active', 'api_access'])).map((p) => [p.id, p]),
  );

  for (const row of rows) {
    const variables = row.payload as Record<string, unknown>;
    const matching = candidates.filter((a) => a.workspace_id === row.workspace_id && a.trigger_type === row.name && matches(a, variables));
    if (matching.length === 0) continue;
    const chain = row.chain_id ?? row.id;
    for (const run of await record(db, row, chain, await decide(db, row, matching, chain, plans.get(row.workspace_id)), unlisted)) {
      // The trigger's variables are on the run's row (`trigger`), where the run's first step reads them.
      runs.push({
        workspaceId: row.workspace_id,
        automationId: run.automation_id,
        runId: run.id,
        depth: row.depth,
        chain,
        eventId: row.id,
      });
    }
  }
  return { runs, unlisted };
}

/** A run the inbound receiver recorded before runs kept their body (its outbox row carried it): the body moves to the run. */
export async function keepWebhookBodyOnRun(db: Db, workspaceId: string, runId: string, body: unknown): Promise<void> {
  await db('automation_runs')
    .where({ workspace_id: workspaceId, id: runId })
    .whereNull('webhook_body')
    .update({ webhook_body: JSON.stringify(body) });
}
