import type { Db } from '../platform';
import { applyMapping, PersonalData, TriggerConfig, withoutPersonalData } from './automations';
import { isUuid } from '../kernel';
import { contactsPersonalData } from '../leads';
import { dealSummary } from '../sales';
import type { RunContext, StoredAction } from '../../types/automations';

/**
 * A run's row (automation_runs) and its action effects (automation_action_effects), as the run's
 * activities read and record them. The run's rules live in automations.ts; these are its storage.
 */

/**
 * The trigger and inbound body recorded on a run's row (a run started before the row kept them has
 * none), with its status and the plan it kept once it began (`actions`: null before and after).
 */
export async function getRunTrigger(
  db: Db,
  workspaceId: string,
  runId: string,
): Promise<{ trigger: Record<string, unknown>; webhook_body: unknown; status: string; actions: StoredAction[] | null } | undefined> {
  return db('automation_runs').where({ workspace_id: workspaceId, id: runId }).first('trigger', 'webhook_body', 'status', 'actions');
}

/** The run keeps its plan: the actions as snapshotted when it began and its starting context. */
export async function saveRunPlan(db: Db, workspaceId: string, runId: string, actions: StoredAction[], context: RunContext): Promise<void> {
  await db('automation_runs')
    .where({ workspace_id: workspaceId, id: runId })
    .update({ actions: JSON.stringify(actions), context: JSON.stringify(context) });
}

/** The run's snapshotted actions and context so far (none once it has finished or was removed). */
export async function getRunState(
  db: Db,
  workspaceId: string,
  runId: string,
): Promise<{ actions: StoredAction[] | null; context: RunContext } | undefined> {
  return db('automation_runs').where({ workspace_id: workspaceId, id: runId }).first('actions', 'context');
}

/** The run's context after an action (on the action's transaction when it has one). */
export async function saveRunContext(db: Db, workspaceId: string, runId: string, context: RunContext): Promise<void> {
  await db('automation_runs')
    .where({ workspace_id: workspaceId, id: runId })
    .update({ context: JSON.stringify(context) });
}

/**
 * One action applied at most once per run: `perform`'s writes and the effect row (run, index)
 * commit together, so a retry after the commit gets the recorded context and writes nothing again.
 * `keepContext`: the run's row keeps the context (a run that carries it in its input does not).
 */
export async function applyActionOnce<T extends { context: RunContext }>(
  db: Db,
  workspaceId: string,
  runId: string,
  index: number,
  keepContext: boolean,
  perform: (trx: Db) => Promise<T>,
): Promise<T | { context: RunContext }> {
  return db.transaction(async (trx) => {
    const effect = { run_id: runId, action_index: index };
    const claimed = await trx('automation_action_effects')
      .insert(effect)
      .onConflict(['run_id', 'action_index'])
      .ignore()
      .returning('run_id');
    if (claimed.length === 0) {
      const done = await trx('automation_action_effects').where(effect).first('context');
      return { context: done.context as RunContext };
    }
    const result = await perform(trx);
    await trx('automation_action_effects')
      .where(effect)
      .update({ context: JSON.stringify(result.context) });
    if (keepContext) await saveRunContext(trx, workspaceId, runId, result.context);
    return result;
  });
}

/** Records how the run ended (only a running run changes) and clears its private state, only needed while it runs. */
export async function finishRun(db: Db, workspaceId: string, runId: string, status: string, error: string | null): Promise<void> {
  await db('automation_runs')
    .where({ workspace_id: workspaceId, id: runId, status: 'running' })
    .update({ status, error, finished_at: db.fn.now(), webhook_body: null, actions: null, context: null });
}

/** Variables of the run's contact and deal as they are now (rendered at the moment an action runs). */
export async function runVariables(db: Db, workspaceId: string, context: RunContext): Promise<Record<string, string>> {
  const vars = { ...context.vars };
  if (context.contactId) {
    const [contact] = await contactsPersonalData(db, workspaceId, [context.contactId]);
    if (contact)
      Object.assign(vars, {
        'contact.id': contact.id,
        'contact.name': contact.name ?? '',
        'contact.email': contact.email ?? '',
        'contact.phone': contact.phone ?? '',
      });
  }
  if (context.dealId) {
    const deal = await dealSummary(db, workspaceId, context.dealId);
    if (deal) {
      Object.assign(vars, {
        'deal.id': deal.id,
        'deal.name': deal.name,
        'deal.value': deal.value === null ? '' : String(Number(deal.value)),
        'deal.status': deal.status,
        'deal.stageId': deal.stage_id,
        'deal.pipelineId': deal.pipeline_id,
      });
    }
  }
  return vars;
}

/**
 * A run's error without the data of its contact (`automations:read` reads it): the contact the
 * run acted on or its trigger named, and what the inbound body mapped to one (an intake that failed
 * has no contact yet). Read before finishRun clears the run's state.
 */
export async function withoutRunContactData(db: Db, workspaceId: string, runId: string, error: string): Promise<string> {
  const run = await db('automation_runs as r')
    .leftJoin('automations as a', function () {
      this.on('a.workspace_id', 'r.workspace_id').andOn('a.id', 'r.automation_id');
    })
    .where({ 'r.workspace_id': workspaceId, 'r.id': runId })
    .first('r.context', 'r.trigger', 'r.webhook_body', 'a.trigger as automation_trigger');
  if (!run) return error;
  const people: PersonalData[] = [];
  if (run.webhook_body !== null && run.automation_trigger?.mapping)
    people.push(applyMapping((run.automation_trigger as TriggerConfig).mapping, run.webhook_body).contact);
  const ids = [run.context?.contactId, run.trigger?.contactId].filter((id): id is string => typeof id === 'string' && isUuid(id));
  if (ids.length > 0) people.push(...(await contactsPersonalData(db, workspaceId, ids)));
  return withoutPersonalData(error, people);
}
