import fs from 'node:fs';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { Client } from '@temporalio/client';
import { NativeConnection, Worker } from '@temporalio/worker';
import { createActivities } from '../activities';
import { createRunHere } from '../activities/automations';
import { createWebhookActivities } from '../activities/webhooks';
import { assertAdminToken, createLogger, createServiceDb, dataConverterFor, loadConfig } from '../domain/platform';
import { PRUNE_EVERY_MS, pruneRetention, sealStoredSecrets } from '../domain/maintenance';
import { createTriggerHandler } from './automation-triggers';
import { createMediaDispatcher } from './media-dispatcher';
import { createOutboxDispatcher } from './outbox-dispatcher';
import { createSendSweep } from './send-starts';
import { ensureTemplateSyncSchedule } from './template-schedule';
import { bundleWorkflowsApart } from './workflow-bundle';

/**
 * A readout for tests (test/reliability/provider-bounds.test.ts), on only when
 * WORKER_LOOP_STATS_FILE names a file: every 100 ms one JSON line `{ t, lagMaxMs, rssBytes }`, the
 * event loop's worst delay since the line before and the resident memory, so a test can see from
 * outside a worker that stalls (a gap between lines says the same while it lasts).
 */
function writeLoopStats(file: string): void {
  const delay = monitorEventLoopDelay({ resolution: 10 });
  delay.enable();
  const timer = setInterval(() => {
    fs.appendFileSync(
      file,
      `${JSON.stringify({ t: Date.now(), lagMaxMs: Math.round(delay.max / 1e5) / 10, rssBytes: process.memoryUsage.rss() })}\n`,
    );
    delay.reset();
  }, 100);
  timer.unref();
}

/** Activities of the webhook worker run outside a delivery's workflow task only to mark one failed: few. */
const WEBHOOK_WORKER_ACTIVITIES = 20;

/** What a worker runs beyond the service's own workflows and activities (scripts/bench/worker.ts adds the bench's floors). */
export interface WorkerAdditions {
  /** The workflows module to bundle, which must export the service's (workflows/index.ts, the default). */
  workflowsPath?: string;
  /** Activities registered beside the service's on the main task queue. */
  activities?: Record<string, (...args: never[]) => Promise<unknown>>;
}

/**
 * Worker process entry point: `node --import tsx workers/main.ts` from the sources, `node dist/workers/main.js`
 * compiled. Runs every workflow and activity of the service.
 */
export async function runWorker(additions: WorkerAdditions = {}): Promise<void> {
  const config = loadConfig();
  assertAdminToken(config.adminToken);
  if (config.worker.loopStatsFile) writeLoopStats(config.worker.loopStatsFile);
  const logger = createLogger('worker', config.logLevel);
  const db = createServiceDb(config);
  const connection = await NativeConnection.connect({ address: config.temporalAddress });
  const workflowBundle = await bundleWorkflowsApart(additions.workflowsPath);
  // What both workers share: the connection, the bundle, the codec and the workflow slots.
  const common = {
    connection,
    namespace: config.temporalNamespace,
    workflowBundle,
    dataConverter: dataConverterFor(config),
    maxConcurrentWorkflowTaskExecutions: config.worker.maxWorkflowTasks,
    maxConcurrentLocalActivityExecutions: config.worker.maxLocalActivities,
    maxCachedWorkflows: config.worker.maxCachedWorkflows,
  };
  const activities = { ...createActivities({ db, config }), ...additions.activities };
  const worker = await Worker.create({
    ...common,
    taskQueue: config.taskQueue,
    activities,
    maxConcurrentActivityTaskExecutions: config.worker.maxActivities,
  });
  // The API's sends (api/send.ts): their first task usually runs in the API process that started
  // them (workers/send-worker.ts); this worker serves the rest of the queue (ordinary activities,
  // timers, retries, sends of an API that hosts no worker or went away).
  const sendWorker = await Worker.create({
    ...common,
    taskQueue: config.sendTaskQueue,
    activities,
    maxConcurrentActivityTaskExecutions: config.worker.maxActivities,
  });
  // Webhook deliveries have a worker of their own on the same connection: a subscriber that answers
  // only after seconds holds a delivery's attempt (a local activity, inside its workflow task) that
  // long, and with one shared worker enough of them would hold every workflow task slot that sends
  // and automation runs need. Here they hold only this worker's.
  const webhookActivities = createWebhookActivities({ db, config });
  const webhookWorker = await Worker.create({
    ...common,
    taskQueue: config.webhookTaskQueue,
    activities: webhookActivities,
    maxConcurrentActivityTaskExecutions: WEBHOOK_WORKER_ACTIVITIES,
  });
  // The dispatchers' client shares the workers' connection: an automation run it starts eagerly
  // (requestEagerStart) gets its first workflow task in the start's answer and runs here, with no
  // trip through the task queue's matching (see workers/automation-triggers.ts).
  const client = new Client({ connection, namespace: config.temporalNamespace, dataConverter: common.dataConverter });
  const temporal = { get: async () => client };
  const dispatcher = createOutboxDispatcher({
    db,
    temporal: temporal.get,
    taskQueue: config.webhookTaskQueue,
    retryScale: config.webhookRetryScale,
    pollMs: config.outboxPollMs,
    logger,
    onTriggers: createTriggerHandler({
      db,
      temporal: temporal.get,
      taskQueue: config.taskQueue,
      waitScale: config.automationWaitScale,
      insightDebounceSeconds: config.insightDebounceSeconds,
      logger,
      eagerStarts: true,
      ...(config.automationRunsInDispatcher ? { runHere: createRunHere({ db }) } : {}),
    }),
    attempt: webhookActivities.attemptWebhookDelivery,
    sweepMs: config.deliverySweepMs,
  });
  // Inbound media files: their fetch workflows, started from the messages' pending media rows.
  const mediaDispatcher = createMediaDispatcher({
    db,
    temporal: temporal.get,
    taskQueue: config.taskQueue,
    logger,
    pollMs: Math.max(config.outboxPollMs, 250),
  });
  // Sends an API process began and never settled (it died mid-send): each carried on by its workflow.
  const sendSweep = createSendSweep({ db, temporal: temporal.get, config, logger });
  // Plain-text or old-key secrets (written before encryption, or before a key rotation) are sealed anew.
  const sealed = await sealStoredSecrets(db, config.encryptionKeys!);
  if (sealed.instances + sealed.webhookSubscriptions + sealed.automationTokens + sealed.aiKeys > 0)
    logger.info({ sealed }, 'secrets at rest: sealed with the current key');
  // A value bound to another workspace than its row's was copied there: left as it is (it does not open).
  if (sealed.refused > 0)
    logger.warn(
      { refused: sealed.refused },
      'secrets at rest: values bound to another workspace than their row were left sealed as they are',
    );
  // A worker dedicated to its task queue (OUTBOX_DISPATCHER=false) leaves the outbox to the others:
  // a dispatcher starts automation runs on its own task queue and leases the rows it claims.
  if (config.outboxDispatcher) {
    dispatcher.start();
    mediaDispatcher.start();
    sendSweep.start();
    // The hourly template sync's schedule, created once (left to the same workers as the outbox: a
    // worker dedicated to a queue of its own must not make the schedule start runs on that queue).
    void temporal
      .get()
      .then((client) => ensureTemplateSyncSchedule(client, config.taskQueue))
      .then((created) => created && logger.info('template sync schedule created'))
      .catch((err) => logger.warn({ err }, 'template sync schedule: not created (tried again at the next start)'));
  } else logger.info('outbox dispatcher off (OUTBOX_DISPATCHER=false)');
  const prune = () =>
    pruneRetention(db, config.retentionDays)
      .then((removed) => logger.info({ removed, retentionDays: config.retentionDays }, 'retention: pruned'))
      .catch((err) => logger.warn({ err }, 'retention: pruning failed (retried at the next run)'));
  void prune();
  const pruner = setInterval(prune, PRUNE_EVERY_MS);
  pruner.unref();
  logger.info(
    { taskQueue: config.taskQueue, webhookTaskQueue: config.webhookTaskQueue, sendTaskQueue: config.sendTaskQueue },
    'worker ready',
  );
  // The Temporal runtime turns SIGINT/SIGTERM into a graceful shutdown of the three workers.
  await Promise.all([worker.run(), webhookWorker.run(), sendWorker.run()]);
  clearInterval(pruner);
  await dispatcher.stop();
  await mediaDispatcher.stop();
  await sendSweep.stop();
  await Promise.allSettled([connection.close(), db.destroy()]);
  logger.info('worker stopped');
}

if (require.main === module) {
  runWorker().catch((err) => {
    console.error('worker failed:', err);
    process.exit(1);
  });
}
