import { ZodError } from 'zod';

/**
 * The stable error codes of the API with their HTTP status (the table in docs/api-conventions.md).
 * Clients check `code`; `error` is human text and may change.
 */
export const ERROR_CODES = {
  VALIDATION: 400,
  ASSIGNEE_NOT_FOUND: 400,
  INVALID_PRICE: 400,
  INVALID_PHONE: 400,
  PHONE_REQUIRED: 400,
  INVALID_URL: 400,
  UNAUTHORIZED: 401,
  API_ACCESS_DISABLED: 402,
  SUBSCRIPTION_INACTIVE: 402,
  DEAL_LIMIT_REACHED: 402,
  WEBHOOK_LIMIT_REACHED: 402,
  INBOUND_WEBHOOK_LIMIT_REACHED: 402,
  AUTOMATION_LIMIT_REACHED: 402,
  BROADCAST_LIMIT_REACHED: 402,
  ACTIVE_BROADCAST_LIMIT_REACHED: 402,
  INSUFFICIENT_SCOPE: 403,
  OPTED_OUT: 403,
  NOT_FOUND: 404,
  CONTACT_NOT_FOUND: 404,
  PIPELINE_NOT_FOUND: 404,
  STAGE_NOT_FOUND: 404,
  INSTANCE_NOT_FOUND: 404,
  METHOD_NOT_ALLOWED: 405,
  CONFLICT: 409,
  TAG_IN_USE: 409,
  IN_PROGRESS: 409,
  SEND_OUTCOME_UNKNOWN: 409,
  WEBHOOK_DISABLED: 409,
  INVALID_STATE: 409,
  MEDIA_NOT_STORED: 409,
  MEDIA_UNAVAILABLE: 409,
  PAYLOAD_TOO_LARGE: 413,
  UNSUPPORTED_MEDIA_TYPE: 415,
  PIPELINE_EMPTY: 422,
  INSTANCE_REQUIRED: 422,
  NO_INSTANCE: 422,
  INSTANCE_DISCONNECTED: 422,
  WINDOW_CLOSED: 422,
  TEMPLATE_INVALID: 422,
  MEDIA_TOO_LARGE: 422,
  TEMPLATE_UNSUPPORTED: 422,
  CHANNEL_UNSUPPORTED: 422,
  IDEMPOTENCY_KEY_REUSED: 422,
  RATE_LIMITED: 429,
  IP_RATE_LIMITED: 429,
  SEND_RATE_LIMITED: 429,
  COLD_SEND_RATE_LIMITED: 429,
  TOKEN_RATE_LIMITED: 429,
  COLD_LIMIT_REACHED: 429,
  MESSAGE_LIMIT_REACHED: 429,
  INTERNAL: 500,
  NOT_IMPLEMENTED: 501,
  SEND_FAILED: 502,
  UNAVAILABLE: 503,
  DNS_UNAVAILABLE: 503,
} as const;

export type ErrorCode = keyof typeof ERROR_CODES;

/** One error type for the whole API: the flat body `{ error, code, hint? }`. */
export class ApiError extends Error {
  readonly status: number;
  readonly code: ErrorCode;
  readonly hint?: string;
  readonly headers?: Record<string, string>;

  constructor(code: ErrorCode, message: string, options: { hint?: string; headers?: Record<string, string> } = {}) {
    super(message);
    this.name = 'ApiError';
    this.code = code;
    this.status = ERROR_CODES[code];
    this.hint = options.hint;
    this.headers = options.headers;
  }

  toBody(): { error: string; code: ErrorCode; hint?: string } {
    return this.hint === undefined ? { error: this.message, code: this.code } : { error: this.message, code: this.code, hint: this.hint };
  }
}

/**
 * A zod failure becomes a VALIDATION error naming the first offending path (`prefix`: where the
 * validated value sits, e.g. a batch item's `leads.3`).
 */
export function validationError(err: ZodError, where: 'body' | 'query' | 'params' | 'headers', prefix: (string | number)[] = []): ApiError {
  const pathOf = (path: PropertyKey[]) => [where, ...prefix, ...path].map(String).join('.');
  const issue = err.issues[0];
  const details = err.issues
    .slice(0, 5)
    .map((i) => `${pathOf(i.path)}: ${i.message}`)
    .join('; ');
  return new ApiError('VALIDATION', `Invalid ${pathOf(issue?.path ?? [])}: ${issue?.message ?? 'invalid value'}`, { hint: details });
}

export function isPgError(err: unknown, code: string): err is { code: string; constraint?: string } {
  return typeof err === 'object' && err !== null && (err as { code?: unknown }).code === code && 'severity' in err;
}

/** A unique or foreign-key violation is the client's 409 CONFLICT (the API's answer and a batch item's). */
export function constraintConflict(err: unknown): ApiError | undefined {
  if (isPgError(err, '23505')) {
    return new ApiError('CONFLICT', 'A record with the same unique value already exists', {
      hint: `Constraint ${err.constraint ?? 'unique'}.`,
    });
  }
  // A referenced record vanished between our check and the write (e.g. deleted concurrently).
  if (isPgError(err, '23503'))
    return new ApiError('CONFLICT', 'A referenced record no longer exists', { hint: 'Re-read the records and retry.' });
  return undefined;
}

export const notFound = (what = 'Record'): ApiError => new ApiError('NOT_FOUND', `${what} not found`);
