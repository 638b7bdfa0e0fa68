import type { Client } from '@temporalio/client';
import type { Context } from 'koa';
import { ApiError } from '../domain/kernel';
import { type Config, type Db, isTemporalUnreachable, withDeadline } from '../domain/platform';
import type { Logger } from 'pino';
import type { Bucket, BucketState, KeyCache, KeyRow, LocalCounts } from '../domain/access';

/** What every request handler can reach: built once per process in `createApp`. */
export interface AppDeps {
  config: Config;
  db: Db;
  logger: Logger;
  /** Lazily connected Temporal client (the API starts even while Temporal is down). */
  temporal: () => Promise<Client>;
  /** The client's connection is shared with a send worker of this process: sends start eagerly (workers/send-worker.ts). */
  eagerSends?: boolean;
}

export interface ApiKeyAuth {
  keyId: string;
  /** Shown as the actor of what the key does (history, notes): actors are exposed by name. */
  keyName: string;
  workspaceId: string;
  scopes: string[];
  rateLimitPerMinute: number;
}

declare module 'koa' {
  interface DefaultState {
    requestId: string;
    log: Logger;
    auth?: ApiKeyAuth;
    rateLimit?: BucketState[];
    /** The per-IP bucket a route with `ipCountedByHandler` has yet to count (its handler's first statement does). */
    ipToCount?: Bucket;
  }
  interface DefaultContext {
    deps: AppDeps;
    /** This process's authentication state: keys read in the last second, in-memory counts of large limits. */
    limits: { keys: KeyCache<KeyRow>; counts: LocalCounts };
    /** The request line's logger: deps.logger without redaction, which the line's own fields never need (requestContext). */
    requestLog: Logger;
  }
}

/** The Temporal client, or 503 UNAVAILABLE naming the service while Temporal cannot be reached. */
export async function temporalClient(ctx: Context, service: string): Promise<Client> {
  try {
    return await ctx.deps.temporal();
  } catch {
    throw unavailable(service);
  }
}

/** How long one Temporal call of a request may take before the client gets 503 instead of a hang. */
export const TEMPORAL_CALL_MS = 5_000;

/**
 * One short Temporal call (describe, start) made for a request: within TEMPORAL_CALL_MS, and a
 * server that went away (UNAVAILABLE, or the deadline ran out while the SDK retried) is 503
 * UNAVAILABLE naming the service; Temporal's answers (not found, already started) pass through.
 */
export async function withTemporal<T>(ctx: Context, service: string, call: (client: Client) => Promise<T>): Promise<T> {
  const client = await temporalClient(ctx, service);
  try {
    return await withDeadline(client, TEMPORAL_CALL_MS, () => call(client));
  } catch (err) {
    if (isTemporalUnreachable(err)) throw unavailable(service);
    throw err;
  }
}

function unavailable(service: string): ApiError {
  return new ApiError('UNAVAILABLE', `${service} is unavailable`, { hint: 'Retry in a few seconds.', headers: { 'Retry-After': '5' } });
}
