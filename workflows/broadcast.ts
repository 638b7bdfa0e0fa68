import { condition, continueAsNew, defineSignal, proxyActivities, setHandler, sleep } from '@temporalio/workflow';
import type { BroadcastActivities, BroadcastRef } from '../activities/broadcasts';
import { BROADCAST_BATCH, BROADCAST_STEP } from './profiles';

const steps = proxyActivities<BroadcastActivities>(BROADCAST_STEP);
const batches = proxyActivities<BroadcastActivities>(BROADCAST_BATCH);

/** Sent by the API after resume and cancel, so a waiting broadcast looks at its row at once (it also looks on its own). */
export const broadcastWake = defineSignal('wake');
export const BROADCAST_WAKE_SIGNAL = 'wake';

export interface BroadcastWorkflowInput extends BroadcastRef {
  /** When to start (ISO); absent or past: now. */
  scheduledAt?: string;
  /** Set by continue-as-new: the audience is frozen already. */
  started?: boolean;
}

/** Batches per run before continue-as-new: each is a few history events, so a run's history stays small at any audience size. */
export const BATCHES_PER_RUN = 100;
/** How often a paused broadcast looks at its row without a wake signal. */
const PAUSED_POLL_MS = 60_000;
/** How long a batch that found a recipient's provider call unsettled waits before the next look. */
const RECONCILE_PAUSE_MS = 1000;

/**
 * One broadcast, start to finish (domain/broadcasts README): waits durably until `scheduledAt`,
 * freezes the audience, then sends in batches (activities, never a workflow per recipient)
 * until no recipient is pending, and completes. Paused (before or after it started): it waits for
 * a wake signal (or polls every minute). At the daily quota or cold cap it sleeps until the São
 * Paulo reset; blocked by its instance, subscription or template, it looks again every minute.
 * Cancelled: it gives back the units of recipients prepared and never sent, and ends. Every
 * BATCHES_PER_RUN loop turns it continues as new.
 */
export async function broadcastWorkflow(input: BroadcastWorkflowInput): Promise<{ status: string }> {
  const ref: BroadcastRef = { workspaceId: input.workspaceId, broadcastId: input.broadcastId };
  let woken = false;
  setHandler(broadcastWake, () => {
    woken = true;
  });
  /**
   * Sleeps until `ms` passed or a wake signal came since the last rest; whether woken. A signal that
   * arrived while a batch was still answering `paused` is not lost: the rest after it ends at once.
   */
  const rest = async (ms: number): Promise<boolean> => {
    if (ms > 0) await condition(() => woken, ms);
    const wasWoken = woken;
    woken = false;
    return wasWoken;
  };

  /** The end of the broadcast: a cancelled one gives back what recipients prepared and never sent took. */
  const end = async (status: string) => {
    if (status === 'cancelled') await batches.releaseCancelledBroadcast(ref);
    return { status };
  };

  if (!input.started) {
    // Date.now() in a workflow is the workflow clock: replayed identically.
    const at = input.scheduledAt ? Date.parse(input.scheduledAt) : 0;
    for (let turn = 0; ; turn++) {
      // Paused for days before it started: its history stays bounded too.
      if (turn === BATCHES_PER_RUN) return continueAsNew<typeof broadcastWorkflow>(input);
      while (Date.now() < at) {
        if ((await rest(at - Date.now())) && (await steps.broadcastStatus(ref)).status === 'cancelled') return end('cancelled');
      }
      const { status } = await steps.startBroadcast(ref);
      if (status === 'in_progress') break;
      if (status !== 'paused' && status !== 'scheduled') return end(status);
      // Paused before it started: it starts once resumed (the resume signals).
      await rest(PAUSED_POLL_MS);
    }
  }

  for (let i = 0; i < BATCHES_PER_RUN; i++) {
    const result = await batches.sendBroadcastBatch(ref);
    switch (result.state) {
      case 'more':
        break;
      case 'done': {
        const { status } = await steps.completeBroadcast(ref);
        // Paused between the last batch and now: it completes after resume.
        if (status === 'paused') await rest(PAUSED_POLL_MS);
        else if (status !== 'in_progress') return end(status);
        break;
      }
      case 'cancelled':
      case 'completed':
        return end(result.state);
      case 'paused':
        await rest(PAUSED_POLL_MS);
        break;
      case 'waiting':
        await rest(Date.parse(result.until) - Date.now());
        break;
      case 'reconciling':
        await sleep(RECONCILE_PAUSE_MS);
        break;
    }
  }
  return continueAsNew<typeof broadcastWorkflow>({ ...ref, started: true });
}
