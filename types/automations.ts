/** What the automation run workflow and its activities exchange (imports nothing of ours: safe in the workflow bundle). */
import { ActivityFailure, ApplicationFailure, ChildWorkflowFailure } from '@temporalio/common';
import type { SendInput } from './messaging';

export interface RunInput {
  workspaceId: string;
  automationId: string;
  runId: string;
  /** Chain depth of the event that started the run; the run's own changes record depth + 1. */
  depth: number;
  /** The chain the run belongs to: the id of the root event every run of the chain descends from. */
  chain?: string;
  /**
   * Runs started before the run's row kept them carry the trigger and the inbound body here (their
   * histories replay with them). A run started now has neither: startRun reads them from its row,
   * so the workflow's history holds no webhook body and no trigger variables.
   */
  trigger?: {
    type: string;
    /** Trigger variables (`changedFields`, `pipelineId`, ...), as text. */
    variables: Record<string, string>;
    contactId?: string;
    dealId?: string;
  };
  /** webhook_received: the received JSON body (mapping and `webhook.<field>` variables come from it). */
  webhookBody?: unknown;
  /** AUTOMATION_WAIT_SCALE at start: a factor on `wait` actions (development and tests only). */
  waitScale?: number;
}

export interface RunContext {
  contactId?: string;
  dealId?: string;
  vars: Record<string, string>;
}

/** An action as stored (validated by domain/automations/automations.ts ActionSchema). */
export type StoredAction = { type: string; [param: string]: unknown };

/**
 * What the workflow needs to order a run: each action's type (and a wait's seconds). The actions'
 * parameters and the context (variables, contact, deal) stay on the run's row, where runAction
 * reads and updates them. A run started before that (RunInput.trigger set) got both here, and
 * passes them along as it did.
 */
export interface RunPlan {
  /** False when the automation was deleted or deactivated before the run began (or the run has finished: `finished`). */
  proceed: boolean;
  /** The run is no longer running (a step found it finished): nothing to do, nothing to record. */
  finished?: boolean;
  automationName: string;
  actions: StoredAction[];
  context?: RunContext;
}

export interface ActionResult {
  /** Only for a run that carries its context (see RunPlan). */
  context?: RunContext;
  /** send_message: the send to run as a child workflow (same rules as the send API). */
  send?: SendInput;
}

export interface RunResult {
  status: 'completed' | 'failed';
  error: string | null;
}

/** The error of a run whose automation was deleted or deactivated before it began. */
export const RUN_NOT_BEGUN = 'The automation was deleted or deactivated before the run began';

/**
 * The plain-words reason a run failed, as its row records it: the business message of the failed
 * step (an activity's, a child send's, or a step run by the dispatcher), with its code unless the
 * message names its action already.
 */
export function runFailureReason(err: unknown): string {
  let cause: unknown = err;
  while (cause instanceof ActivityFailure || cause instanceof ChildWorkflowFailure) cause = cause.cause;
  if (cause instanceof ApplicationFailure)
    return cause.type && /^[A-Z_]+$/.test(cause.type) && !cause.message.startsWith('Action')
      ? `${cause.type}: ${cause.message}`
      : cause.message;
  return cause instanceof Error ? cause.message : String(cause);
}
