import { randomUUID } from 'node:crypto';
import type { Context, Next } from 'koa';
import type { Logger } from 'pino';
import { ZodError } from 'zod';
import { isDatabaseUnavailable } from '../../domain/platform';
import { ApiError, constraintConflict, isPgError, validationError } from '../../domain/kernel';
import { JSON_BODY_LIMIT_HINT } from './body';
import { countIpInMemory, isApiPath } from './rate-limit';

/**
 * The outermost layer of every request: its id, one structured log line, and the flat error body
 * `{ error, code, hint? }` for every failure, whatever threw it.
 */

const REQUEST_ID = /^[A-Za-z0-9._-]{1,128}$/;

/**
 * Paths that carry a secret in the URL are logged with the secret masked, in any letter case:
 * the router matches paths case-insensitively, so `/API/AUTOMATIONS/WEBHOOK-IN/<token>` reaches
 * the receiver too.
 */
export function loggablePath(path: string): string {
  return path.replace(/(\/webhook-in\/)[^/?]+/gi, '$1[redacted]');
}

/** Request id, one structured log line per request, and the flat error body for every failure. */
export async function requestContext(ctx: Context, next: Next): Promise<void> {
  const incoming = ctx.get('x-request-id');
  const requestId = REQUEST_ID.test(incoming) ? incoming : randomUUID();
  ctx.state.requestId = requestId;
  // The request's child logger is built when something logs beside the request line (few do).
  const logger = ctx.deps.logger;
  let log: Logger | undefined;
  Object.defineProperty(ctx.state, 'log', {
    get: () => (log ??= logger.child({ reqId: requestId })),
    enumerable: true,
    configurable: true,
  });
  ctx.set('X-Request-Id', requestId);
  const started = process.hrtime.bigint();
  try {
    await next();
  } catch (err) {
    renderError(ctx, err);
  } finally {
    // Every /api/v1 answer carries the rate-limit headers; one given before any counter ran (or
    // while PostgreSQL is unreachable) reports the IP's bucket, counted in memory.
    if (isApiPath(ctx.path) && !ctx.response.get('X-RateLimit-Limit') && ctx.limits) countIpInMemory(ctx);
    const ms = Number(process.hrtime.bigint() - started) / 1e6;
    // Fields the service chose (the path with its secrets masked): nothing here to redact.
    const line = {
      reqId: requestId,
      method: ctx.method,
      path: loggablePath(ctx.path),
      status: ctx.status,
      ms: Math.round(ms * 10) / 10,
      workspaceId: ctx.state.auth?.workspaceId,
    };
    if (ctx.status >= 500) ctx.requestLog.error(line, 'request failed');
    else ctx.requestLog.info(line, 'request');
  }
}

function renderError(ctx: Context, err: unknown): void {
  let apiError: ApiError;
  if (err instanceof ApiError) apiError = err;
  else if (err instanceof ZodError) apiError = validationError(err, 'body');
  else if (constraintConflict(err)) apiError = constraintConflict(err) as ApiError;
  else if (isPgError(err, '57014')) {
    // The pool's statement_timeout cancelled it (DB_STATEMENT_TIMEOUT_MS).
    ctx.state.log?.warn({ message: String((err as { message?: unknown }).message) }, 'statement timeout');
    apiError = new ApiError('UNAVAILABLE', 'The request took too long and was cancelled', {
      hint: 'Narrow it (filters, a smaller offset) or retry later.',
      headers: { 'Retry-After': '5' },
    });
  } else if (isDatabaseUnavailable(err)) {
    ctx.state.log?.warn({ code: (err as { code?: string }).code, message: (err as Error).message }, 'database unavailable');
    apiError = new ApiError('UNAVAILABLE', 'The database is unavailable', {
      hint: 'Retry in a few seconds.',
      headers: { 'Retry-After': '5' },
    });
  } else if (isHttpError(err) && err.status === 413) {
    apiError = new ApiError('PAYLOAD_TOO_LARGE', 'Request body too large', { hint: JSON_BODY_LIMIT_HINT });
  } else if (isHttpError(err) && err.status === 415) {
    apiError = new ApiError('UNSUPPORTED_MEDIA_TYPE', 'Unsupported content type', { hint: 'Send Content-Type: application/json.' });
  } else if (isHttpError(err) && err.status === 400) {
    apiError = new ApiError('VALIDATION', 'Malformed JSON body', { hint: err.message });
  } else {
    ctx.state.log?.error({ err }, 'unhandled error');
    apiError = new ApiError('INTERNAL', 'Internal error', { hint: `Quote request id ${ctx.state.requestId} when reporting this.` });
  }
  ctx.status = apiError.status;
  ctx.body = apiError.toBody();
  for (const [name, value] of Object.entries(apiError.headers ?? {})) ctx.set(name, value);
}

function isHttpError(err: unknown): err is { status: number; message: string; expose?: boolean } {
  return typeof err === 'object' && err !== null && typeof (err as { status?: unknown }).status === 'number';
}
