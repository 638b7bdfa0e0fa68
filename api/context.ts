import type { Client } from '@temporalio/client';
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
