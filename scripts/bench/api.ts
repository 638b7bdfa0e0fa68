import type { Server } from 'node:http';
import { createApp } from '../../api/app';
import { assertAdminToken, loadConfig } from '../../domain/config';
import { createServiceDb } from '../../domain/db';
import { createLogger } from '../../domain/logger';
import { pruneCounters } from '../../domain/rate-limit';
import { temporalClientFactory } from '../../domain/temporal';
import { benchRoutes } from './routes';

/**
 * The bench's API process (`tsx scripts/bench/api.ts`, started by scripts/bench.ts): what
 * api/server.ts starts, from the same configuration, with the bench's yardsticks in front.
 */
async function main(): Promise<void> {
  const config = loadConfig();
  assertAdminToken(config.adminToken);
  const logger = createLogger('api', config.logLevel);
  const db = createServiceDb(config);
  const temporal = temporalClientFactory(config);
  const deps = { config, db, logger, temporal: temporal.get };
  const app = createApp(deps);
  // Before the app's first middleware, as its own routes would be if the app served them: a
  // yardstick pays for none of the app's layers.
  app.middleware.unshift(benchRoutes(deps));

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
    await Promise.allSettled([db.destroy(), temporal.close()]);
    process.exit(0);
  };
  process.once('SIGINT', () => void shutdown('SIGINT'));
  process.once('SIGTERM', () => void shutdown('SIGTERM'));
}

main().catch((err) => {
  console.error('API failed to start:', err);
  process.exit(1);
});
