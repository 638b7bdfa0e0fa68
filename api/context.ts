import type { Client } from '@temporalio/client';
import type { Context } from 'koa';
import { ApiError } from '../domain/errors';
import type { Logger } from 'pino';
import type { Config } from '../domain/config';
import type { Db } from '../domain/db';
import type { BucketState } from '../domain/rate-limit';

/** What every request handler can reach: built once per process in `createApp`. */
export interface AppDeps {
  config: Config;
  db: Db;
  logger: Logger;
  /** Lazily connected Temporal client (the API starts even while Temporal is down). */
  temporal: () => Promise<Client>;
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
  }
  interface DefaultContext {
    deps: AppDeps;
  }
}

/** The Temporal client, or 503 UNAVAILABLE naming the service while Temporal cannot be reached. */
export async function temporalClient(ctx: Context, service: string): Promise<Client> {
  try {
    return await ctx.deps.temporal();
  } catch {
    throw new ApiError('UNAVAILABLE', `${service} is unavailable`, { hint: 'Retry in a few seconds.' });
  }
}
