import { ApplicationFailure } from '@temporalio/common';
import { suspension } from '../access';
import { ApiError } from '../kernel';
import { addNote, addTag, removeTag, requireContact, resolveTagSets, updateContact, upsertLead } from '../leads';
import { messageContent, missingFields, replyConversationOf, requiredFields, saveSendRequest, sendInputFor, toFailure } from '../messaging';
import { type Db, withoutPhoneNumbers } from '../platform';
import { createDeal, createTask, findDeal, resolveStage, updateDeal } from '../sales';
import {
  type ActionResult,
  RUN_NOT_BEGUN,
  runFailureReason,
  type RunContext,
  type RunInput,
  type RunPlan,
  type RunResult,
  type StoredAction,
} from '../../types/automations';
import {
  applyActionOnce,
  finishRun,
  getRunState,
  getRunToPlan,
  runVariables,
  saveRunContext,
  saveRunPlan,
  withoutRunContactData,
} from './automation-runs';
import { Action, ActionSchema, applyMapping, getAutomationStanding, render, TriggerConfig, webhookVariables } from './automations';

/**
 * A run's rules, one function per activity of workflows/automation-run.ts: its start (the plan),
 * each action applied once, its end. The workflow orders them; activities/automations.ts calls
 * them. The actions call the same functions of leads and sales as the REST API (origin
 * `automation`, depth + 1).
 */

/**
 * An action of a run carried out at once (runAtOnce), never in a workflow's history: the action and
 * the context so far in hand, the automation's and workspace's standing as read with the plan, and
 * what the run's row keeps after the action, written in the action's transaction.
 */
interface RunInHand {
  action: StoredAction;
  context: RunContext;
  automationName: string;
  standing: Standing;
  record: (trx: Db, context: RunContext) => Promise<void>;
}

/** runAction's input: the run, the action's index, and what older runs carry (RunPlan). */
export interface RunActionInput {
  workspaceId: string;
  automationId: string;
  runId: string;
  depth: number;
  chain?: string;
  index: number;
  /** The action's type, which names it in a failure before the row is read. */
  actionType?: string;
  /** The message id of the run's latest send (`message.id` from now on). */
  sentMessageId?: string;
  /** A run started before its row kept the actions and context carries them (RunPlan). */
  automationName?: string;
  action?: StoredAction;
  context?: RunContext;
}

/** A run's trigger as its row records it (`{ type, ...variables }`): variables as text, the contact and deal it names. */
function triggerOf(recorded: Record<string, unknown>): NonNullable<RunInput['trigger']> {
  const { type, trigger: _name, ...variables } = recorded;
  return {
    type: String(type),
    variables: Object.fromEntries(Object.entries(variables).map(([k, v]) => [k, v === null || v === undefined ? '' : String(v)])),
    contactId: typeof variables.contactId === 'string' ? variables.contactId : undefined,
    dealId: typeof variables.dealId === 'string' ? variables.dealId : undefined,
  };
}

/** String params are rendered from the run's variables (in arrays and objects too: a template's buttons); other values pass as they are. */
function renderParams<T extends Record<string, unknown>>(params: T, vars: Record<string, string>): T {
  const one = (value: unknown): unknown => {
    if (typeof value === 'string') return render(value, vars);
    if (Array.isArray(value)) return value.map(one);
    if (value && typeof value === 'object') return renderParams(value as Record<string, unknown>, vars);
    return value;
  };
  const out: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(params)) out[key] = one(value);
  return out as T;
}

/**
 * A refusal retrying cannot fix, named by its action ("Action 2 (move_deal): Stage "X" not
 * found"), its message shown in the Temporal UI as in the run's error: without the contact's data,
 * nor any other number.
 */
async function actionFailure(db: Db, input: { workspaceId: string; runId: string }, what: string, err: ApiError) {
  return toFailure(err, {
    message: withoutPhoneNumbers(await withoutRunContactData(db, input.workspaceId, input.runId, `${what}: ${err.message}`)),
  });
}

/** A run's plan in full as its start reads it (the lead intake done), before anything is saved. */
interface FullPlan {
  proceed: boolean;
  /** The run is no longer running: nothing to do, nothing to record. */
  finished?: boolean;
  automationName: string;
  /** The actions with their parameters, and the starting context (or, for a run that kept its plan, the context so far). */
  actions: StoredAction[];
  context: RunContext;
  /** The automation and its workspace as read with the plan (each action checks them again unless it runs right after). */
  standing: Standing;
  /** The run's row holds this plan already (it began before, and kept it). */
  kept: boolean;
}

type Standing = { active: boolean; name: string; workspace_active: boolean; api_access: boolean };

/**
 * The run's plan: the automation's actions as they are now (the run keeps this snapshot), and its
 * starting context. For webhook_received, the lead intake: the mapped phone upserts the contact
 * (same canonicalisation as messaging; origin `automation`). A run that began already (by the
 * worker's dispatcher, which hands a run to its workflow when a step fails in a way a retry may
 * fix) has the plan it kept, so the actions it applied keep their indexes and the lead intake is
 * not done twice; one that finished already (a dispatcher that died before marking its outbox row
 * took it again) has nothing left to do.
 */
async function readPlan(db: Db, input: RunInput): Promise<FullPlan> {
  const found = await getRunToPlan(db, input.workspaceId, input.automationId, input.runId);
  const automation = found?.automation;
  const standing: Standing = automation ?? { active: false, name: '', workspace_active: false, api_access: false };
  const none = { actions: [], context: { vars: {} }, standing, kept: false };
  if (!automation || !automation.active) return { proceed: false, automationName: automation?.name ?? '', ...none };
  // A run started now finds its trigger and inbound body on its row; an older one carries them.
  const run = input.trigger ? undefined : found!.run;
  if (!input.trigger && !run) throw toFailure(new ApiError('NOT_FOUND', 'The run was removed before it began'));
  if (run && run.status !== 'running') return { proceed: false, finished: true, automationName: automation.name, ...none };
  if (run?.actions)
    return { proceed: true, automationName: automation.name, actions: run.actions, context: run.context!, standing, kept: true };
  const trigger = input.trigger ?? triggerOf(run!.trigger);
  const webhookBody = input.trigger ? input.webhookBody : run!.webhook_body;
  const context: RunContext = { contactId: trigger.contactId, dealId: trigger.dealId, vars: { ...trigger.variables } };
  if (trigger.type === 'webhook_received') {
    Object.assign(context.vars, webhookVariables(webhookBody));
    const mapped = applyMapping((automation.trigger as TriggerConfig).mapping, webhookBody);
    for (const [field, value] of Object.entries(mapped.deal)) context.vars[`deal.${field}`] = value;
    if (mapped.externalId) context.vars.externalId = mapped.externalId;
    if (mapped.contact.phone) {
      try {
        const { lead } = await upsertLead(
          db,
          input.workspaceId,
          { phone: mapped.contact.phone, name: mapped.contact.name, email: mapped.contact.email },
          { origin: 'automation', cause: { depth: input.depth + 1, chain: input.chain ?? null } },
        );
        context.contactId = lead.id;
      } catch (err) {
        if (err instanceof ApiError) throw await actionFailure(db, input, 'Lead intake', err);
        throw err;
      }
    }
  }
  return { proceed: true, automationName: automation.name, actions: automation.actions as StoredAction[], context, standing, kept: false };
}

/** The run's plan for its workflow (startRun): read, kept on the run's row, and what the workflow orders the run by. */
export async function planRun(db: Db, input: RunInput): Promise<RunPlan> {
  const plan = await readPlan(db, input);
  const { automationName } = plan;
  if (plan.finished) return { proceed: false, finished: true, automationName, actions: [] };
  if (!plan.proceed) return { proceed: false, automationName, actions: [], context: { vars: {} } };
  if (input.trigger) return { proceed: true, automationName, actions: plan.actions, context: plan.context };
  if (!plan.kept) await saveRunPlan(db, input.workspaceId, input.runId, plan.actions, plan.context);
  // The workflow orders the steps; what they say stays on the row.
  return { proceed: true, automationName, actions: planned(plan.actions) };
}

/** Actions only a workflow carries out: a durable timer, and a send (a child send workflow). */
const WORKFLOW_ACTIONS = new Set(['wait', 'send_message']);

/**
 * A run carried out at once, where it is dispatched (the worker's outbox dispatcher), in the
 * workflow's order and with its steps' rules, when every action only writes to the database.
 * Fewer statements than the workflow's steps, as nothing waits between them: the plan is read
 * once (the automation's and workspace's standing with it), each action gets its action and
 * context in hand, the first action's transaction keeps the plan on the run's row, and the last
 * one's records the run completed. A dispatcher that dies mid-run leaves the row as a workflow's
 * step would (nothing, or the plan and the actions applied so far), and the next one goes on.
 *
 * Resolves `done` when the run ended (completed, or failed by a refusal retrying cannot fix, with
 * the workflow's words), `workflow` when the run is its workflow's to carry out: it waits or
 * sends, or a step failed in a way a retry may fix (recording a refusal included); the workflow
 * then goes on from the plan the row kept (or plans afresh when no action was applied).
 */
export async function runAtOnce(db: Db, input: RunInput): Promise<'done' | 'workflow'> {
  try {
    return await carryOut(db, input);
  } catch (err) {
    if (!(err instanceof ApplicationFailure && err.nonRetryable)) return 'workflow';
    return endRun(db, { workspaceId: input.workspaceId, runId: input.runId, status: 'failed', error: runFailureReason(err) }).then(
      () => 'done' as const,
      () => 'workflow' as const,
    );
  }
}

/** runAtOnce's steps; a step's failure is thrown as it came. */
async function carryOut(db: Db, input: RunInput): Promise<'done' | 'workflow'> {
  const ids = { workspaceId: input.workspaceId, runId: input.runId };
  const plan = await readPlan(db, input);
  if (plan.finished) return 'done';
  if (!plan.proceed) {
    await endRun(db, { ...ids, status: 'failed', error: RUN_NOT_BEGUN });
    return 'done';
  }
  // A run that carries its context (started before the row kept it) stays its workflow's.
  if (input.trigger || plan.actions.some((a) => WORKFLOW_ACTIONS.has(a.type))) return 'workflow';
  let context = plan.context;
  let ended = false;
  for (const [index, action] of plan.actions.entries()) {
    const last = index === plan.actions.length - 1;
    const record = async (trx: Db, after: RunContext) => {
      if (last) {
        await finishRun(trx, input.workspaceId, input.runId, 'completed', null);
        ended = true;
      } else if (index === 0 && !plan.kept) await saveRunPlan(trx, input.workspaceId, input.runId, plan.actions, after);
      else await saveRunContext(trx, input.workspaceId, input.runId, after);
    };
    const step = await applyRunAction(
      db,
      { ...ids, automationId: input.automationId, depth: input.depth, chain: input.chain, index, actionType: action.type },
      { action, context, automationName: plan.automationName, standing: plan.standing, record },
    );
    context = step.context!;
  }
  // The last action was applied before (a run taken again after it): its transaction did not end the run.
  if (!ended) await endRun(db, { ...ids, status: 'completed', error: null });
  return 'done';
}

/** What the workflow orders a run by: each action's type (and a wait's seconds); the rest stays on the row. */
function planned(actions: StoredAction[]): StoredAction[] {
  return actions.map((a) => (a.type === 'wait' ? { type: 'wait', seconds: a.seconds } : { type: a.type }));
}

/**
 * One action, applied at most once per run: its writes and an effect row (run, index) commit
 * together, so a retry after a commit returns the recorded context and writes nothing again.
 * The automation is read again first: one deleted or deactivated during a wait stops here.
 */
export async function applyRunAction(db: Db, input: RunActionInput, inHand?: RunInHand): Promise<ActionResult> {
  const { workspaceId, index } = input;
  let type = input.action?.type ?? input.actionType ?? 'action';
  try {
    const automation = inHand ? inHand.standing : await getAutomationStanding(db, workspaceId, input.automationId);
    if (!automation?.active) throw new ApiError('CONFLICT', 'The automation was deleted or deactivated during the run');
    // A workspace suspended while the run was under way (during a wait, say): no further action.
    const suspended = suspension({ active: automation.workspace_active, api_access: automation.api_access }, 'automationRun');
    if (suspended) throw suspended;
    // What the run carries (older runs), else its row: the action as snapshotted and the context so far.
    const carried = inHand ?? (input.action && input.context ? { action: input.action, context: input.context } : undefined);
    let stored: StoredAction;
    let context: RunContext;
    if (carried) {
      ({ action: stored, context } = carried);
    } else {
      const state = await getRunState(db, workspaceId, input.runId);
      if (!state?.actions) throw new ApiError('NOT_FOUND', 'The run lost its state (it was removed or had already finished)');
      stored = state.actions[index];
      context = input.sentMessageId
        ? { ...state.context, vars: { ...state.context.vars, 'message.id': input.sentMessageId } }
        : state.context;
    }
    type = stored.type;
    /** The result the workflow gets: the context only for a run that carries it; the row keeps it otherwise. */
    const answer = (result: ActionResult): ActionResult => (carried ? result : { ...(result.send ? { send: result.send } : {}) });

    const rendered = ActionSchema.safeParse(renderParams(stored, await runVariables(db, workspaceId, context)));
    if (!rendered.success) {
      const issue = rendered.error.issues[0];
      throw new ApiError(
        'VALIDATION',
        `After filling in the variables, ${issue.path.join('.') || 'the action'} is invalid: ${issue.message}`,
      );
    }
    const action = rendered.data;
    const run = {
      workspaceId,
      runId: input.runId,
      index,
      depth: input.depth,
      chain: input.chain,
      automationName: inHand?.automationName ?? input.automationName ?? automation.name,
      context,
    };
    if (action.type === 'send_message') {
      const result = await perform(db, action, run);
      if (!carried) await saveRunContext(db, workspaceId, input.runId, result.context);
      return answer(result);
    }
    // What the run's row keeps after the action: the context (the run in hand says what, a run that carries it keeps nothing).
    const record = inHand
      ? inHand.record
      : carried
        ? undefined
        : (trx: Db, after: RunContext) => saveRunContext(trx, workspaceId, input.runId, after);
    return answer(await applyActionOnce(db, input.runId, index, record, (trx) => perform(trx, action, run)));
  } catch (err) {
    const what = `Action ${index + 1} (${type})`;
    if (err instanceof ApiError) throw await actionFailure(db, input, what, err);
    // Bad data or a broken constraint: the same values would fail again.
    const code = (err as { code?: unknown })?.code;
    if (typeof code === 'string' && /^(22|23)/.test(code) && code !== '23505') {
      // The SQLSTATE only: the database's message can quote the value (a contact's data).
      throw await actionFailure(db, input, what, new ApiError('VALIDATION', `The database refused the values (SQLSTATE ${code})`));
    }
    throw err;
  }
}

/** Records how the run ended, its error without the contact's data (only a running run changes: a repeat is harmless). */
export async function endRun(db: Db, input: { workspaceId: string; runId: string } & RunResult): Promise<void> {
  const error = input.error ? (await withoutRunContactData(db, input.workspaceId, input.runId, input.error)).slice(0, 2000) : null;
  await finishRun(db, input.workspaceId, input.runId, input.status, error);
}

/** The action itself, on `db` (the action's transaction, or the pool for send_message, which only prepares the child send). */
async function perform(
  db: Db,
  action: Action,
  input: Pick<RunActionInput, 'workspaceId' | 'runId' | 'index' | 'depth' | 'chain'> & { automationName: string; context: RunContext },
): Promise<ActionResult & { context: RunContext }> {
  const { workspaceId, context } = input;
  const options = { origin: 'automation' as const, cause: { depth: input.depth + 1, chain: input.chain ?? null } };
  const actor = { memberId: null, name: `Automation: ${input.automationName}`.slice(0, 200) };
  const needContact = (): string => {
    if (!context.contactId)
      throw new ApiError('CONTACT_NOT_FOUND', 'This run has no contact (the trigger carries none and no mapping produced one)');
    return context.contactId;
  };
  const needDeal = (): string => {
    if (!context.dealId) throw new ApiError('NOT_FOUND', 'This run has no deal (use a deal trigger, or create_deal first)');
    return context.dealId;
  };
  switch (action.type) {
    case 'add_tag':
      await addTag(db, workspaceId, needContact(), action.tag, options);
      return { context };
    case 'remove_tag': {
      const contactId = needContact();
      // The tag by id, or by name in any case; an unknown one is nothing to remove.
      const [found] = await resolveTagSets(db, workspaceId, [[action.tag]]);
      const tag = found instanceof ApiError ? undefined : found[0];
      if (tag) await removeTag(db, workspaceId, contactId, tag.id, options);
      return { context };
    }
    case 'update_contact':
      await updateContact(db, workspaceId, needContact(), action.fields, options);
      return { context };
    case 'create_deal': {
      let value: number | undefined;
      if (action.value !== undefined && action.value !== '') {
        value = Number(String(action.value).replace(',', '.'));
        if (!Number.isFinite(value) || value < 0) throw new ApiError('VALIDATION', 'Invalid value: expected a number >= 0');
      }
      const deal = await createDeal(
        db,
        workspaceId,
        { contactId: needContact(), pipeline: action.pipeline, stage: action.stage, name: action.name, value, source: 'automation' },
        { cause: options.cause },
      );
      return { context: { ...context, dealId: deal.id } };
    }
    case 'move_deal': {
      const dealId = needDeal();
      const deal = await findDeal(db, workspaceId, dealId);
      const stage = await resolveStage(db, deal.pipeline_id, action.stage);
      await updateDeal(db, workspaceId, dealId, { stageId: stage.id }, actor, { cause: options.cause });
      return { context };
    }
    case 'set_deal_status':
      await updateDeal(db, workspaceId, needDeal(), { status: action.status, lostReason: action.lostReason }, actor, {
        cause: options.cause,
      });
      return { context };
    case 'create_task':
      await createTask(
        db,
        workspaceId,
        {
          title: action.title,
          type: action.taskType,
          dueDate: new Date(Date.now() + action.dueInMinutes * 60_000),
          contactId: context.contactId ?? null,
          cardId: context.dealId ?? null,
          assignedTo: action.assignedTo ?? null,
        },
        { assigneeByName: true },
      );
      return { context };
    case 'add_note':
      await addNote(db, workspaceId, needContact(), { body: action.body, authorName: actor.name });
      return { context };
    case 'send_message': {
      // A canonical contact only: one deleted or merged during a wait is not messaged.
      const contact = await requireContact(db, workspaceId, needContact());
      const { type: _action, messageType, instanceId, ...content } = action;
      const message = messageContent({ ...content, type: messageType });
      if (missingFields(message).length > 0)
        throw new ApiError('VALIDATION', `A ${messageType} message needs ${requiredFields(messageType).join(' and ')}`);
      // A contact met on Instagram has no phone: the send replies in its conversation (the window's rules apply).
      let request: { phone?: string; instanceId?: string; conversationId?: string; message: typeof message } = {
        phone: contact.phone ?? undefined,
        instanceId,
        message,
      };
      if (contact.phone === null) {
        const conversationId = await replyConversationOf(db, workspaceId, contact.id, instanceId);
        if (!conversationId)
          throw new ApiError('PHONE_REQUIRED', 'The contact has no phone (met on Instagram) and no conversation to reply in');
        request = { conversationId, message };
      }
      // Stored under the run and action, so a retry of this action finds the same request.
      const requestId = `${input.runId}/${input.index + 1}`;
      await saveSendRequest(db, workspaceId, requestId, request);
      return { context, send: sendInputFor(workspaceId, requestId, request) };
    }
    default:
      throw new ApiError('VALIDATION', `Unknown action "${(action as { type: string }).type}"`);
  }
}
