import { ApplicationFailure } from '@temporalio/common';
import { applyRunAction, endRun, planRun, runAtOnce, type RunActionInput } from '../domain/automations';
import type { Db } from '../domain/platform';
import { type ActionResult, runFailureReason, type RunInput, type RunPlan, type RunResult } from '../types/automations';

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

/**
 * Runs carried out where they are dispatched (the worker's outbox dispatcher: runAtOnce, in
 * domain/automations/automation-actions.ts) when every action only writes to the database: as a
 * Temporal workflow such a run cost Temporal and the worker about 45 ms of CPU where its statements
 * cost a few, and an inbound burst's runs took the cores the receiver needed. Resolves `true` when
 * the run is recorded as ended (completed, or failed by a refusal retrying cannot fix, in the
 * workflow's words); `false` when the run is its workflow's to carry out (it waits or sends, or a
 * step failed in a way a retry may fix).
 */
export function createRunHere({ db }: { db: Db }) {
  const final = (err: unknown) => err instanceof ApplicationFailure && err.nonRetryable;
  return async function runHere(input: RunInput): Promise<boolean> {
    try {
      return (await runAtOnce(db, input)) === 'done';
    } catch (err) {
      if (!final(err)) return false;
      // A refusal: recorded as the workflow records it (or left to the workflow if that fails too).
      return endRun(db, { workspaceId: input.workspaceId, runId: input.runId, status: 'failed', error: runFailureReason(err) }).then(
        () => true,
        () => false,
      );
    }
  };
}
