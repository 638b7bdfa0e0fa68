import { Client } from '@temporalio/client';
import { NativeConnection, Worker } from '@temporalio/worker';
import type { Logger } from 'pino';
import { createMessagingActivities } from '../activities/messaging';
import { type Config, type Db, dataConverterFor, type TemporalClients } from '../domain/platform';
import { bundleWorkflowsApart } from './workflow-bundle';

/** A hosted worker that stopped is hosted again after this long (the sends meanwhile start on the dedicated workers). */
const REHOST_AFTER_MS = 5_000;

/**
 * The Temporal client of an API process that hosts a send worker (API_SEND_WORKER, on by
 * default): the client and the worker share one NativeConnection, so a send started with
 * `requestEagerStart` gets its first workflow task in the start call's answer and runs it here
 * (prepare, provider call and record are local activities: the whole send is that one task),
 * without the task being matched to a poller. The worker runs only workflow tasks and local
 * activities of the send task queue (no activity polling): ordinary activities (media checks,
 * compensations, provider retries, reconciliation) go to the dedicated workers, which serve the
 * same queue. A send whose API process dies mid-task is not lost: its workflow task times out and
 * a dedicated worker replays it (every step is idempotent by the run's reference).
 *
 * Like temporalClientFactory, connected lazily and forgotten on failure, so the API starts and
 * serves reads while Temporal is down. The workflow bundle is built once, at the first connection.
 */
export function sendWorkerHost(config: Config, deps: { db: Db; logger: Logger }): TemporalClients {
  const { temporalAddress: address, temporalNamespace: namespace } = config;
  const dataConverter = dataConverterFor(config);
  const activities = createMessagingActivities({ db: deps.db, config });
  let bundle: Promise<{ code: string }> | undefined;
  let pending: Promise<Client> | undefined;
  let connection: NativeConnection | undefined;
  let worker: Worker | undefined;
  let running: Promise<void> | undefined;
  let closing = false;

  const host = async (conn: NativeConnection): Promise<void> => {
    bundle ??= bundleWorkflowsApart();
    const hosted = await Worker.create({
      connection: conn,
      namespace,
      taskQueue: config.sendTaskQueue,
      workflowBundle: await bundle,
      activities,
      dataConverter,
      enableNonLocalActivities: false,
      maxConcurrentWorkflowTaskExecutions: config.worker.maxWorkflowTasks,
      maxConcurrentLocalActivityExecutions: config.worker.maxLocalActivities,
      maxCachedWorkflows: config.worker.maxCachedWorkflows,
    });
    if (closing) return;
    worker = hosted;
    running = hosted.run().then(
      () => undefined,
      (err: unknown) => {
        worker = undefined;
        if (closing) return;
        deps.logger.error({ err }, 'hosted send worker stopped: sends start on the dedicated workers until it is back');
        setTimeout(() => void rehost(conn), REHOST_AFTER_MS).unref();
      },
    );
    deps.logger.info({ taskQueue: config.sendTaskQueue }, 'hosted send worker ready: sends start eagerly');
  };
  const rehost = (conn: NativeConnection) =>
    host(conn).catch((err: unknown) => {
      if (closing) return;
      deps.logger.error({ err }, 'hosted send worker: not started (tried again shortly; sends start on the dedicated workers)');
      setTimeout(() => void rehost(conn), REHOST_AFTER_MS).unref();
    });

  return {
    get() {
      if (!pending) {
        pending = NativeConnection.connect({ address })
          .then((conn) => {
            connection = conn;
            void rehost(conn);
            return new Client({ connection: conn, namespace, dataConverter });
          })
          .catch((err: unknown) => {
            pending = undefined;
            throw err;
          });
      }
      return pending;
    },
    async close() {
      closing = true;
      await pending?.catch(() => undefined);
      // Finishes the send tasks it holds (the runtime's graceful shutdown), then lets the connection go.
      if (worker?.getState() === 'RUNNING') worker.shutdown();
      await running;
      await connection?.close();
      pending = undefined;
      connection = undefined;
    },
  };
}
