import { NativeConnection, Worker } from '@temporalio/worker';
import { createActivities } from '../activities';
import { createWebhookActivities } from '../activities/webhooks';
import { loadConfig } from '../domain/config';
import { createDb } from '../domain/db';
import { createLogger } from '../domain/logger';
import { temporalClientFactory } from '../domain/temporal';
import { createTriggerHandler } from './automation-triggers';
import { createOutboxDispatcher } from './outbox-dispatcher';

/** Worker process entry point: `tsx workers/main.ts`. Runs every workflow and activity of the service. */
async function main(): Promise<void> {
  const config = loadConfig();
  const logger = createLogger('worker', config.logLevel);
  const db = createDb(config.databaseUrl, { max: Number(process.env.DB_POOL_MAX ?? 20) });
  const connection = await NativeConnection.connect({ address: config.temporalAddress });
  const worker = await Worker.create({
    connection,
    namespace: config.temporalNamespace,
    taskQueue: config.taskQueue,
    workflowsPath: require.resolve('../workflows'),
    activities: createActivities({ db, config }),
    maxConcurrentActivityTaskExecutions: Number(process.env.WORKER_MAX_ACTIVITIES ?? 200),
    maxConcurrentWorkflowTaskExecutions: Number(process.env.WORKER_MAX_WORKFLOW_TASKS ?? 100),
    // Webhook attempts are local activities waiting on receivers (up to 10 s each): I/O, not CPU.
    maxConcurrentLocalActivityExecutions: Number(process.env.WORKER_MAX_LOCAL_ACTIVITIES ?? 500),
    // The SDK sizes its workflow cache from the machine's memory (thousands here); each cached run
    // holds a V8 context, so a bounded cache keeps the worker under its memory budget (issue 7).
    maxCachedWorkflows: Number(process.env.WORKER_MAX_CACHED_WORKFLOWS ?? 250),
  });
  const temporal = temporalClientFactory(config.temporalAddress, config.temporalNamespace);
  const dispatcher = createOutboxDispatcher({
    db,
    temporal: temporal.get,
    taskQueue: config.taskQueue,
    retryScale: config.webhookRetryScale,
    pollMs: config.outboxPollMs,
    logger,
    onTriggers: createTriggerHandler({ db, temporal: temporal.get, taskQueue: config.taskQueue, waitScale: config.automationWaitScale }),
    attempt: createWebhookActivities({ db, config }).attemptWebhookDelivery,
    sweepMs: config.deliverySweepMs,
  });
  dispatcher.start();
  logger.info({ taskQueue: config.taskQueue }, 'worker ready');
  // The Temporal runtime turns SIGINT/SIGTERM into a graceful worker shutdown.
  await worker.run();
  await dispatcher.stop();
  await Promise.allSettled([connection.close(), temporal.close(), db.destroy()]);
  logger.info('worker stopped');
}

main().catch((err) => {
  console.error('worker failed:', err);
  process.exit(1);
});
