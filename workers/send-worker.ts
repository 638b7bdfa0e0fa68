import { Client } from '@temporalio/client';
import { NativeConnection, Worker } from '@temporalio/worker';
import type { Logger } from 'pino';
import { createMessagingActivities } from '../activities/messaging';
import { type Config, type Db, dataConverterFor, type TemporalClients } from '../domain/platform';
import { bundleWorkflowsApart } from './workflow-bundle';

/** A hosted worker that stopped is hosted again after this long (the sends meanwhile start on the dedicated workers). */
const REHOST_AFTER_MS = 5_000;

/**
 * The Temporal client of an API process that hosts a send worker (API_SEND_WORKER, off by
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
export function sendWorkerHost(config: Config, deps: { db: Db; logger: Logger }): ReturnType<typeof workerHost> {
  return workerHost(
    config,
    { taskQueue: config.sendTaskQueue, activities: createMessagingActivities({ db: deps.db, config }) },
    deps.logger,
  );
}

/** What a process hosts beside its client: the send worker, or the bench's Temporal floor (scripts/bench.ts). */
export interface HostedWorker {
  taskQueue: string;
  activities: object;
  /** The workflows module to bundle (default: the service's, prebuilt when compiled). */
  workflowsPath?: string;
  /** Whether it also polls the queue's ordinary activities (the bench's one-activity floor); a send worker does not. */
  nonLocalActivities?: boolean;
}

/** A client whose connection a worker of the same process shares: its starts with `requestEagerStart` run there. */
export function workerHost(
  config: Pick<Config, 'temporalAddress' | 'temporalNamespace' | 'encryptionKeys' | 'worker'>,
  hosted: HostedWorker,
  logger: { info(fields: object, message: string): void; error(fields: object, message: string): void },
): TemporalClients & { hostedWorker: () => Promise<void> } {
  const { temporalAddress: address, temporalNamespace: namespace } = config;
  const dataConverter = dataConverterFor(config);
  let bundle: Promise<{ code: string }> | undefined;
  let pending: Promise<Client> | undefined;
  let connection: NativeConnection | undefined;
  let worker: Worker | undefined;
  let running: Promise<void> | undefined;
  let closing = false;
  let isReady: () => void;
  const ready = new Promise<void>((resolve) => (isReady = resolve));

  const host = async (conn: NativeConnection): Promise<void> => {
    // A bundle that failed (a prebuilt file missing) is tried again with the next hosting, not kept.
    bundle ??= bundleWorkflowsApart(hosted.workflowsPath).catch((err: unknown) => {
      bundle = undefined;
      throw err;
    });
    const created = await Worker.create({
      connection: conn,
      namespace,
      taskQueue: hosted.taskQueue,
      workflowBundle: await bundle,
      activities: hosted.activities,
      dataConverter,
      enableNonLocalActivities: hosted.nonLocalActivities ?? false,
      maxConcurrentWorkflowTaskExecutions: config.worker.maxWorkflowTasks,
      maxConcurrentLocalActivityExecutions: config.worker.maxLocalActivities,
      maxCachedWorkflows: config.worker.maxCachedWorkflows,
    });
    if (closing) return;
    worker = created;
    running = created.run().then(
      () => undefined,
      (err: unknown) => {
        worker = undefined;
        if (closing) return;
        logger.error(
          { err, taskQueue: hosted.taskQueue },
          'hosted worker stopped: its starts go to the dedicated workers until it is back',
        );
        setTimeout(() => void rehost(conn), REHOST_AFTER_MS).unref();
      },
    );
    isReady();
    logger.info({ taskQueue: hosted.taskQueue }, 'hosted worker ready: starts on its task queue run here eagerly');
  };
  const rehost = (conn: NativeConnection) =>
    host(conn).catch((err: unknown) => {
      if (closing) return;
      logger.error(
        { err, taskQueue: hosted.taskQueue },
        'hosted worker: not started (tried again shortly; its starts go to the dedicated workers)',
      );
      setTimeout(() => void rehost(conn), REHOST_AFTER_MS).unref();
    });

  return {
    /** Resolves once the worker runs (the client connects first: call get). */
    hostedWorker: () => ready,
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
