import type { Server } from 'node:http';
import type { Middleware } from 'koa';
import { createApp } from './app';
import type { AppDeps } from './context';
import { assertAdminToken, createLogger, createServiceDb, loadConfig, temporalClientFactory } from '../domain/platform';
import { pruneCounters } from '../domain/access';

/** What an API process serves beyond the service's own app (scripts/bench/api.ts adds the bench's yardsticks). */
export interface ApiAdditions {
  /** Middleware put before the app's first, so it pays for none of the app's layers. */
  front?: (deps: AppDeps) => Middleware;
}

/** API process entry point: `node --import tsx api/server.ts` from the sources, `node dist/api/server.js` compiled. */
export async function runApi(additions: ApiAdditions = {}): Promise<void> {
  const config = loadConfig();
  assertAdminToken(config.adminToken);
  const logger = createLogger('api', config.logLevel);
  const db = createServiceDb(config);
  // The send worker's client (eager starts), or a plain client when the API hosts none. The
  // worker SDK (its native core and the workflow bundler: about 20 MB of RSS) is loaded only then.
  const temporal = config.apiSendWorker
    ? // eslint-disable-next-line @typescript-eslint/no-require-imports
      (require('../workers/send-worker') as typeof import('../workers/send-worker')).sendWorkerHost(config, { db, logger })
    : temporalClientFactory(config);
  // Connected at start, so the hosted worker is ready before the first send.
  if (config.apiSendWorker) temporal.get().catch((err) => logger.warn({ err }, 'Temporal: not reachable yet (connected at first use)'));
  const deps: AppDeps = { config, db, logger, temporal: temporal.get, eagerSends: config.apiSendWorker };
  const app = createApp(deps);
  if (additions.front) app.middleware.unshift(additions.front(deps));

  const server: Server = app.listen(config.port, () => logger.info({ port: config.port }, 'API listening'));
  server.keepAliveTimeout = 65_000;

  const pruner = setInterval(() => {
    pruneCounters(db).catch((err) => logger.warn({ err }, 'rate-limit counter pruning failed'));
  }, 60_000);
  pruner.unref();

  const shutdown = async (signal: string): Promise<void> => {
    logger.info({ signal }, 'API shutting down');
    clearInterval(pruner);
    server.close();
    // Temporal first: a hosted send worker finishes the send tasks it holds, which need the database.
    await temporal.close().catch(() => undefined);
    await db.destroy().catch(() => undefined);
    process.exit(0);
  };
  process.once('SIGINT', () => void shutdown('SIGINT'));
  process.once('SIGTERM', () => void shutdown('SIGTERM'));
}

if (require.main === module) {
  runApi().catch((err) => {
    console.error('API failed to start:', err);
    process.exit(1);
  });
}
