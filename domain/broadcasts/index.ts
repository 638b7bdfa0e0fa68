export { BATCH_BUDGET_MS, BLOCKED_RETRY_MS, releaseCancelled, sendBatch } from './batch';
export { type BatchResult } from './pacing';
export { BROADCAST_STATUSES, createBroadcast, refuseTagInUse } from './broadcasts';
export {
  broadcastForRun,
  broadcastWorkflowId,
  completeBroadcast,
  createPublicBroadcast,
  DEFAULT_RATE_PER_SECOND,
  discardBroadcast,
  freezeAudience,
  getPublicBroadcast,
  listPublicBroadcasts,
  listRecipients,
  MAX_ACTIVE_BROADCASTS,
  MAX_AUDIENCE_LEADS,
  MAX_AUDIENCE_TAGS,
  MAX_RATE_PER_SECOND,
  MIN_RATE_PER_SECOND,
  moveBroadcast,
  PUBLIC_BROADCAST_STATUSES,
  RECIPIENT_STATUSES,
} from './resource';
