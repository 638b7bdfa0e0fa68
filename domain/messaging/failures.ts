import { ApplicationFailure } from '@temporalio/common';
import { ApiError, ERROR_CODES, type ErrorCode } from '../kernel';
import { dailyLimitRefusal, isDailyLimitCode } from './sending';
import { PROVIDER_RETRYABLE } from '../../types/messaging';

/**
 * The one boundary between domain errors and Temporal failures, both ways. An activity that
 * refuses (an ApiError) fails with an ApplicationFailure whose `type` is the API's error code, so
 * an operator reads the code in the Temporal UI and the API answers a failed workflow with the same
 * code, message and hint. A refusal is final (non-retryable) unless said otherwise.
 */

/** The ApplicationFailure an activity throws for `err`; `detail`: what it attaches beside the hint, read back by the workflow. */
export function toFailure(
  err: ApiError,
  options: { message?: string; retryable?: boolean; detail?: Record<string, unknown> } = {},
): ApplicationFailure {
  // The HTTP status tells a workflow a refusal (4xx: the request cannot be served as asked) from a failure.
  const detail = { ...(err.hint !== undefined ? { hint: err.hint } : {}), status: err.status, ...options.detail };
  return ApplicationFailure.create({
    type: err.code,
    message: options.message ?? err.message,
    nonRetryable: !options.retryable,
    details: Object.keys(detail).length > 0 ? [detail] : [],
  });
}

/**
 * Runs `work`, turning its refusals (ApiError) into failures: final, except those `retryable`
 * names; anything else is left to the retry policy.
 */
export async function refusalsAsFailures<T>(work: () => Promise<T>, options: { retryable?: (err: ApiError) => boolean } = {}): Promise<T> {
  try {
    return await work();
  } catch (err) {
    if (err instanceof ApiError) throw toFailure(err, { retryable: options.retryable?.(err) ?? false });
    throw err;
  }
}

/** The ApiError of a refusal a send workflow completed with (types/messaging.ts SendRefusal); an unknown code is SEND_FAILED. */
export function fromRefusal(refused: { code: string; message: string; hint?: string }): ApiError {
  // A daily cap's Retry-After counts from now, when the refusal is answered.
  if (isDailyLimitCode(refused.code)) return dailyLimitRefusal(refused.code, new Date(), refused.message, refused.hint);
  return new ApiError(refused.code in ERROR_CODES ? (refused.code as ErrorCode) : 'SEND_FAILED', refused.message, { hint: refused.hint });
}

/**
 * The ApiError a failed workflow carries: the first ApplicationFailure down the cause chain whose
 * type is one of the API's codes (the workflow failure wraps the activity failure that wraps it);
 * `fallback` when there is none.
 */
export function fromFailure(err: unknown, fallback: () => ApiError): ApiError {
  let cause: unknown = err;
  while (cause && !(cause instanceof ApplicationFailure && cause.type && cause.type in ERROR_CODES))
    cause = (cause as { cause?: unknown }).cause;
  if (!(cause instanceof ApplicationFailure)) return fallback();
  const details = (cause.details?.[0] ?? {}) as { hint?: string };
  if (cause.type && isDailyLimitCode(cause.type)) return dailyLimitRefusal(cause.type, new Date(), cause.message, details.hint);
  return new ApiError(cause.type as ErrorCode, cause.message, { hint: details.hint });
}

/**
 * The refusal a failure carries (an ApiError's 4xx turned into a failure by toFailure: the
 * request cannot be served as asked), as the API answers it; undefined for anything else.
 */
export function refusalOfFailure(err: unknown): ApiError | undefined {
  if (!(err instanceof ApplicationFailure) || !err.nonRetryable) return undefined;
  const status = (err.details?.[0] as { status?: number } | undefined)?.status;
  if (typeof status !== 'number' || status < 400 || status >= 500) return undefined;
  return fromFailure(err, () => new ApiError('SEND_FAILED', err.message));
}

/** A provider's throttling or outage: nothing was sent, and the activity's retry policy is the wait. */
export function providerThrottled(message: string): ApplicationFailure {
  return ApplicationFailure.retryable(message, PROVIDER_RETRYABLE);
}
