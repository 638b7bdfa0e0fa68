import { DEFAULT_BROADCAST_BATCH_SIZE, type Config, type Db } from '../domain/platform';
import { broadcastForRun, completeBroadcast, freezeAudience, releaseCancelled, sendBatch, type BatchResult } from '../domain/broadcasts';
import { DEFAULT_RECONCILE_WINDOW_MS } from '../types/messaging';
import { heartbeat, heartbeating } from './providers/heartbeat';
import { providerPort } from './providers/port';

export type { BatchResult } from '../domain/broadcasts';

export interface BroadcastRef {
  workspaceId: string;
  broadcastId: string;
}

/** The broadcast workflow's steps (workflows/broadcast.ts), each an adapter over domain/broadcasts. */
export function createBroadcastActivities({
  db,
  config,
}: {
  db: Db;
  config: Pick<Config, 'encryptionKeys'> &
    Partial<Pick<Config, 'allowPrivateUrls' | 'sendReconcileWindowMs' | 'broadcastBatchSize' | 'rateLimitScale'>>;
}) {
  const deps = {
    db,
    port: providerPort({ allowPrivateUrls: config.allowPrivateUrls ?? false }),
    keys: config.encryptionKeys!,
    windowMs: config.sendReconcileWindowMs ?? DEFAULT_RECONCILE_WINDOW_MS,
    batchSize: config.broadcastBatchSize ?? DEFAULT_BROADCAST_BATCH_SIZE,
    rateScale: config.rateLimitScale ?? 1,
    heartbeat,
  };
  return {
    /** Freezes the audience and starts the broadcast; its status after. */
    async startBroadcast(input: BroadcastRef): Promise<{ status: string }> {
      return freezeAudience(db, input.workspaceId, input.broadcastId);
    },

    /** The broadcast's status now (the workflow checks it when woken while scheduled). */
    async broadcastStatus(input: BroadcastRef): Promise<{ status: string }> {
      const row = await broadcastForRun(db, input.workspaceId, input.broadcastId);
      return { status: row?.status ?? 'cancelled' };
    },

    /** `completed` with `broadcast.completed` once nothing is pending; the status it leaves. */
    async completeBroadcast(input: BroadcastRef): Promise<{ status: string }> {
      return { status: await completeBroadcast(db, input.workspaceId, input.broadcastId) };
    },

    /** A cancelled broadcast's prepared, never-called recipients give their daily units back (releaseCancelled). */
    async releaseCancelledBroadcast(input: BroadcastRef): Promise<{ released: number }> {
      return releaseCancelled(db, input.workspaceId, input.broadcastId, heartbeat);
    },

    /** One batch of recipients (sendBatch), heartbeating every second whatever it is doing (a provider call may take 10 s). */
    async sendBroadcastBatch(input: BroadcastRef): Promise<BatchResult> {
      return heartbeating(() => sendBatch(deps, input));
    },
  };
}

export type BroadcastActivities = ReturnType<typeof createBroadcastActivities>;
