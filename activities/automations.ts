import { applyRunAction, endRun, planRun, runAtOnce, type RunActionInput } from '../domain/automations';
import type { Db } from '../domain/platform';
import type { ActionResult, RunInput, RunPlan, RunResult } from '../types/automations';

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
 * the run is recorded as ended, `false` when it is its workflow's to carry out.
 */
export function createRunHere({ db }: { db: Db }) {
  return (input: RunInput): Promise<boolean> =>
    runAtOnce(db, input).then(
      (outcome) => outcome === 'done',
      () => false,
    );
}
