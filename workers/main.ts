import { NativeConnection, Worker } from '@temporalio/worker';
import { createActivities } from '../activities';
import { createWebhookActivities } from '../activities/webhooks';
import { loadConfig } from '../domain/config';
import { createServiceDb } from '../domain/db';
import { createLogger } from '../domain/logger';
import { pruneRetention, PRUNE_EVERY_MS } from '../domain/retention';
import { sealStoredSecrets } from '../domain/secrets-at-rest';
import { dataConverterFor, temporalClientFactory } from '../domain/temporal';
import { createTriggerHandler } from './automation-triggers';
import { createOutboxDispatcher } from './outbox-dispatcher';
import { bundleWorkflowsApart } from './workflow-bundle';

/** Worker process entry point: `tsx workers/main.ts`. Runs every workflow and activity of the service. */
async function main(): Promise<void> {
  const config = loadConfig();
  const logger = createLogger('worker', config.logLevel);
  const db = createServiceDb(config);
  const connection = await NativeConnection.connect({ address: config.temporalAddress });
  const worker = await Worker.create({
    connection,
    namespace: config.temporalNamespace,
    taskQueue: config.taskQueue,
    workflowBundle: await bundleWorkflowsApart(),
    dataConverter: dataConverterFor(config),
    activities: createActivities({ db, config }),
    maxConcurrentActivityTaskExecutions: config.worker.maxActivities,
    maxConcurrentWorkflowTaskExecutions: config.worker.maxWorkflowTasks,
    maxConcurrentLocalActivityExecutions: config.worker.maxLocalActivities,
    maxCachedWorkflows: config.worker.maxCachedWorkflows,
  });
  const temporal = temporalClientFactory(config);
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
  // Plain-text or old-key secrets (written before encryption, or before a key rotation) are sealed anew.
  const sealed = await sealStoredSecrets(db, config.encryptionKeys!);
  if (sealed.instances + sealed.webhookSubscriptions + sealed.automationTokens > 0) logger.info({ sealed }, 'secrets at rest: sealed with the current key');
  // A worker dedicated to its task queue (OUTBOX_DISPATCHER=false) leaves the outbox to the others:
  // a dispatcher starts automation runs on its own task queue and leases the rows it claims.
  if (config.outboxDispatcher) dispatcher.start();
  else logger.info('outbox dispatcher off (OUTBOX_DISPATCHER=false)');
  const prune = () =>
    pruneRetention(db, config.retentionDays)
      .then((removed) => logger.info({ removed, retentionDays: config.retentionDays }, 'retention: pruned'))
      .catch((err) => logger.warn({ err }, 'retention: pruning failed (retried at the next run)'));
  void prune();
  const pruner = setInterval(prune, PRUNE_EVERY_MS);
  pruner.unref();
  logger.info({ taskQueue: config.taskQueue }, 'worker ready');
  // The Temporal runtime turns SIGINT/SIGTERM into a graceful worker shutdown.
  await worker.run();
  clearInterval(pruner);
  await dispatcher.stop();
  await Promise.allSettled([connection.close(), temporal.close(), db.destroy()]);
  logger.info('worker stopped');
}

main().catch((err) => {
  console.error('worker failed:', err);
  process.exit(1);
});
