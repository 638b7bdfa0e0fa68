import { applyRunAction, endRun, planRun, type RunActionInput } from '../domain/automations';
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
