import { type Db, prepared } from '../platform';
import { applyMapping, PersonalData, TriggerConfig, withoutPersonalData } from './automations';
import { isUuid } from '../kernel';
import { joinWorkspace } from '../access';
import { contactsPersonalData } from '../leads';
import { dealSummary } from '../sales';
import type { RunContext, StoredAction } from '../../types/automations';

/**
 * A run's row (automation_runs) and its action effects (automation_action_effects), as the run's
 * activities read and record them. The run's rules live in automations.ts; these are its storage.
 */

/** A run's row as its start reads it: trigger and inbound body (none for a run started before the row kept them), status, and the plan it kept once it began. */
export interface RunRowToPlan {
  trigger: Record<string, unknown>;
  webhook_body: unknown;
  status: string;
  actions: StoredAction[] | null;
  context: RunContext | null;
}

/** The automation as a run reads it, with its workspace's standing. */
export interface AutomationToRun {
  name: string;
  active: boolean;
  trigger: unknown;
  actions: unknown;
  workspace_active: boolean;
  api_access: boolean;
}

/**
 * What a run's start reads, in one statement: the automation, its workspace's standing, and the
 * run's row (null when it was removed). Undefined when the automation is gone.
 */
export async function getRunToPlan(
  db: Db,
  workspaceId: string,
  automationId: string,
  runId: string,
): Promise<{ automation: AutomationToRun; run: RunRowToPlan | null } | undefined> {
  const row = await prepared(
    joinWorkspace(db('automations as a'), 'w', 'a.workspace_id')
      .leftJoin('automation_runs as r', function () {
        this.on('r.workspace_id', 'a.workspace_id').andOn('r.id', db.raw('CAST(? AS uuid)', [runId]));
      })
      .where({ 'a.workspace_id': workspaceId, 'a.id': automationId })
      .first(
        'a.name',
        'a.active',
        'a.trigger',
        'a.actions',
        'w.active as workspace_active',
        'w.api_access',
        'r.id as run_id',
        'r.trigger as run_trigger',
        'r.webhook_body',
        'r.status',
        'r.actions as run_actions',
        'r.context as run_context',
      ),
  );
  if (!row) return undefined;
  const { run_id, run_trigger, webhook_body, status, run_actions, run_context, ...automation } = row;
  return {
    automation,
    run: run_id ? { trigger: run_trigger, webhook_body, status, actions: run_actions, context: run_context } : null,
  };
}

/** The run keeps its plan: the actions as snapshotted when it began and its starting context. */
export async function saveRunPlan(db: Db, workspaceId: string, runId: string, actions: StoredAction[], context: RunContext): Promise<void> {
  await prepared(
    db('automation_runs')
      .where({ workspace_id: workspaceId, id: runId })
      .update({ actions: JSON.stringify(actions), context: JSON.stringify(context) }),
  );
}

/** The run's snapshotted actions and context so far (none once it has finished or was removed). */
export async function getRunState(
  db: Db,
  workspaceId: string,
  runId: string,
): Promise<{ actions: StoredAction[] | null; context: RunContext } | undefined> {
  return prepared(db('automation_runs').where({ workspace_id: workspaceId, id: runId }).first('actions', 'context'));
}

/** The run's context after an action (on the action's transaction when it has one). */
export async function saveRunContext(db: Db, workspaceId: string, runId: string, context: RunContext): Promise<void> {
  await prepared(
    db('automation_runs')
      .where({ workspace_id: workspaceId, id: runId })
      .update({ context: JSON.stringify(context) }),
  );
}

/**
 * One action applied at most once per run: `perform`'s writes and the effect row (run, index)
 * commit together, so a retry after the commit gets the recorded context and writes nothing again.
 * `record` writes what the run's row keeps after the action, in the same transaction (its context,
 * or more: see RunInHand); a run that carries its context in its input keeps nothing there.
 */
export async function applyActionOnce<T extends { context: RunContext }>(
  db: Db,
  runId: string,
  index: number,
  record: ((trx: Db, context: RunContext) => Promise<void>) | undefined,
  perform: (trx: Db) => Promise<T>,
): Promise<T | { context: RunContext }> {
  return db.transaction(async (trx) => {
    const effect = { run_id: runId, action_index: index };
    const claimed = await prepared(
      trx('automation_action_effects').insert(effect).onConflict(['run_id', 'action_index']).ignore().returning('run_id'),
    );
    if (claimed.length === 0) {
      const done = await trx('automation_action_effects').where(effect).first('context');
      return { context: done.context as RunContext };
    }
    const result = await perform(trx);
    await prepared(
      trx('automation_action_effects')
        .where(effect)
        .update({ context: JSON.stringify(result.context) }),
    );
    if (record) await record(trx, result.context);
    return result;
  });
}

/** Records how the run ended (only a running run changes) and clears its private state, only needed while it runs. */
export async function finishRun(db: Db, workspaceId: string, runId: string, status: string, error: string | null): Promise<void> {
  await prepared(
    db('automation_runs')
      .where({ workspace_id: workspaceId, id: runId, status: 'running' })
      .update({ status, error, finished_at: db.fn.now(), webhook_body: null, actions: null, context: null }),
  );
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
