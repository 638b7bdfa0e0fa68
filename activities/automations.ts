import { ApplicationFailure } from '@temporalio/common';
import { applyRunAction, endRun, planRun, type RunActionInput } from '../domain/automations';
import type { Db } from '../domain/platform';
import { type ActionResult, RUN_NOT_BEGUN, runFailureReason, type RunInput, type RunPlan, type RunResult } from '../types/automations';

/** The activities of workflows/automation-run.ts; the run's rules are domain/automations/automation-actions.ts. */
export function createAutomationActivities({ db }: { db: Db }) {
  return {
    /** The run's plan: the automation's actions as they are now, and its starting context (an inbound run's lead intake). */
    async startRun(input: RunInput): Promise<RunPlan> {
      return planRun(db, input);
    },

    /** One action, applied at most once per run (the automation and its workspace checked again first). */
    async runAction(input: RunActionInput): Promise<ActionResult> {
      return applyRunAction(db, input);
    },

    /** Records how the run ended (only a running run changes: a repeat of this activity is harmless). */
    async finishRun(input: { workspaceId: string; runId: string } & RunResult): Promise<void> {
      await endRun(db, input);
    },
  };
}

export type AutomationActivities = ReturnType<typeof createAutomationActivities>;

/** Actions only a workflow carries out: a durable timer, and a send (a child send workflow). */
const WORKFLOW_ACTIONS = new Set(['wait', 'send_message']);

/**
 * A run carried out where it is dispatched (the worker's outbox dispatcher), with the workflow's
 * own steps in the workflow's order, when every action only writes to the database: a Temporal
 * workflow cost such a run about 45 ms of CPU (Temporal and the worker) where its statements cost
 * 8, and an inbound burst's runs took the cores the receiver needed. Resolves `true` when the run is
 * recorded as ended (completed, or failed by a refusal retrying cannot fix, as the workflow
 * records it); `false` when the run is the workflow's to carry out: it waits or sends, or a step
 * failed in a way a retry may fix. The workflow then goes on from the plan the run's row kept,
 * each action applied once per run and index. A dispatcher that dies mid-run leaves its outbox row
 * leased; the next one takes it again and this goes on the same way.
 */
export function createRunHere({ db }: { db: Db }) {
  const steps = createAutomationActivities({ db });
  const final = (err: unknown) => err instanceof ApplicationFailure && err.nonRetryable;
  return async function runHere(input: RunInput): Promise<boolean> {
    const end = (result: RunResult) => steps.finishRun({ workspaceId: input.workspaceId, runId: input.runId, ...result });
    try {
      const plan = await steps.startRun(input);
      if (plan.finished) return true;
      if (!plan.proceed) {
        await end({ status: 'failed', error: RUN_NOT_BEGUN });
        return true;
      }
      // Only runs started before the run's row kept the plan carry a context: those stay workflows.
      if (plan.context || plan.actions.some((a) => WORKFLOW_ACTIONS.has(a.type))) return false;
      for (const [index, action] of plan.actions.entries()) {
        await steps.runAction({
          workspaceId: input.workspaceId,
          automationId: input.automationId,
          runId: input.runId,
          depth: input.depth,
          chain: input.chain,
          index,
          actionType: action.type,
        });
      }
      await end({ status: 'completed', error: null });
      return true;
    } catch (err) {
      if (!final(err)) return false;
      // A refusal: recorded as the workflow records it (or left to the workflow if that fails too).
      return end({ status: 'failed', error: runFailureReason(err) }).then(
        () => true,
        () => false,
      );
    }
  };
}
