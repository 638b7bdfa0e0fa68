/**
 * What the webhook delivery workflow and its activity exchange, and the retry schedule. No imports:
 * this file is bundled into the workflow sandbox.
 */

/** The Standard Webhooks schedule: the waits before retries 1..9, in seconds. */
export const WEBHOOK_RETRY_SCHEDULE_SECONDS = [5, 300, 1800, 7200, 18000, 36000, 50400, 72000, 86400] as const;
/** The first attempt plus one per scheduled retry. */
export const WEBHOOK_MAX_ATTEMPTS = WEBHOOK_RETRY_SCHEDULE_SECONDS.length + 1;
/** Each wait is moved by up to ±20%, so receivers coming back from an outage are not hit in lockstep. */
export const WEBHOOK_JITTER = 0.2;

/**
 * The wait before retry `retry` (1-based) in ms: the schedule's, scaled, moved by up to ±20%.
 * `random` is in [0, 1): the workflow passes its deterministic Math.random, the dispatcher its own.
 */
export function retryWaitMs(retry: number, scale: number, random: number): number {
  const base = WEBHOOK_RETRY_SCHEDULE_SECONDS[retry - 1] * 1000 * scale;
  const jitter = 1 + (random * 2 - 1) * WEBHOOK_JITTER;
  return Math.max(1, Math.round(base * jitter));
}

export interface DeliveryInput {
  workspaceId: string;
  deliveryId: string;
  /** WEBHOOK_RETRY_SCALE at dispatch time: a factor on every wait (0.001 turns 5 minutes into 0.3 s). */
  retryScale: number;
  /** 1 for a manual retry (one attempt, reported to the caller); the whole schedule otherwise. */
  maxAttempts?: number;
  /** Attempts already made and recorded before the workflow (the dispatcher's first attempt). */
  attemptsDone?: number;
  /** With attemptsDone: the wait before the next attempt (the one recorded as next_attempt_at). */
  firstWaitMs?: number;
}

export interface AttemptInput {
  workspaceId: string;
  deliveryId: string;
  /** The last attempt: a failure makes the delivery `failed`. */
  final: boolean;
  /** When the next attempt will run if this one fails (recorded as next_attempt_at). */
  nextAttemptInMs: number | null;
}

export interface AttemptResult {
  /** `pending`: failed, another attempt follows; `stopped`: the delivery or its subscription is gone. */
  status: 'succeeded' | 'failed' | 'pending' | 'stopped';
  statusCode: number | null;
  error: string | null;
}

export interface DeliveryResult extends AttemptResult {
  /** Attempts made by this run of the workflow. */
  attempts: number;
}
