import { condition, continueAsNew, defineSignal, proxyActivities, setHandler, sleep } from '@temporalio/workflow';
import type * as activities from '../activities';
import { INSIGHT_DERIVATION } from './profiles';

type Activities = ReturnType<typeof activities.createActivities>;
const { deriveInsight } = proxyActivities<Activities>(INSIGHT_DERIVATION);

/** A message went in or out of the contact's conversations (the worker's dispatcher signals it, starting the workflow if need be). */
export const conversationActivity = defineSignal('conversationActivity');

export interface InsightInput {
  workspaceId: string;
  contactId: string;
  /** Quiet after the last message before deriving (INSIGHT_DEBOUNCE_SECONDS). */
  debounceMs: number;
}

/** A busy conversation is still analysed at least this often: its messages never push a derivation back further. */
export const MAX_WAIT_MS = 30 * 60 * 1000;
/** Derivations one run makes before it continues as new (bounded history). */
const ROUNDS_PER_RUN = 20;

/**
 * One contact's AI insight (docs/insights.md), id `insight/<workspaceId>/<contactId>`: one at a
 * time per contact. It waits until the conversation has been quiet for `debounceMs` (each message
 * pushes that back, at most MAX_WAIT_MS after the first one waiting), derives once, and ends unless
 * messages came meanwhile. A spent daily budget makes it sleep until the next day and derive then.
 * A derivation that fails every try fails the workflow (the previous insight stays); the next
 * message starts a new one.
 */
export async function insightWorkflow(input: InsightInput): Promise<unknown> {
  let last = Date.now();
  let seen = 0;
  setHandler(conversationActivity, () => {
    last = Date.now();
    seen += 1;
  });
  for (let round = 0; round < ROUNDS_PER_RUN; round += 1) {
    const waitingSince = Date.now();
    for (;;) {
      const until = Math.min(last + input.debounceMs, waitingSince + MAX_WAIT_MS);
      if (until <= Date.now()) break;
      const before = seen;
      await condition(() => seen !== before, until - Date.now());
    }
    const handled = seen;
    const outcome = await deriveInsight({ workspaceId: input.workspaceId, contactId: input.contactId });
    if (outcome.status === 'waiting') {
      await sleep(outcome.seconds * 1000);
      continue;
    }
    if (seen === handled) return outcome;
  }
  return continueAsNew<typeof insightWorkflow>(input);
}
