import { type Client, WorkflowExecutionAlreadyStartedError, WorkflowIdReusePolicy, WorkflowNotFoundError } from '@temporalio/client';
import type { Logger } from 'pino';
import { sendInputFor, sendKeyToWorkflow, unsettledSends } from '../domain/messaging';
import { type Config, type Db, searchHash, workspacePriority } from '../domain/platform';
import type { SendAtOnce, SendInput, SendRequest } from '../types/messaging';
import { sendMessageWorkflow } from '../workflows/send-message';

/** The send workflow of an Idempotency-Key in a workspace: Temporal's id rules give the key one send at a time. */
export function sendWorkflowId(workspaceId: string, key: string): string {
  return `send/${workspaceId}/key/${key}`;
}

/**
 * The reference of a send the API makes itself (api/send.ts): it names the preparation and the
 * provider attempt, so the workflow that takes the send on (from the API, or from the sweep when
 * the API died) goes on under it and never prepares or sends it twice. A workflow's own sends use
 * `<workflowId>/<runId>`; this one ends with the send_requests id instead.
 */
export function apiSendReference(workspaceId: string, key: string, requestId: string): string {
  return `${sendWorkflowId(workspaceId, key)}/${requestId}`;
}

/**
 * Starts a send's workflow on the send task queue. The recipient and content stay in send_requests
 * (the input names the row); the search attributes are what the starter knows (workspace, key, a
 * named instance, the number's keyed hash when it has the canonical number), the workflow upserts
 * the rest once prepared. `request` (the fingerprint) goes in the memo: a key is bound to its request.
 */
export function startSendWorkflow(
  client: Client,
  config: Pick<Config, 'sendTaskQueue' | 'sendReconcileWindowMs' | 'encryptionKeys'>,
  start: {
    workspaceId: string;
    key: string;
    input: SendInput;
    request: string;
    /** A send the API began: its send_requests id, in the memo (handOverSend recognises the run it started). */
    requestId?: string;
    reusePolicy: WorkflowIdReusePolicy;
    /** The number in its canonical form (E.164), when the starter has it. */
    phone?: string;
    instanceId?: string;
    /** The process hosts a send worker on the client's connection (workers/send-worker.ts). */
    eager: boolean;
  },
) {
  const { workspaceId } = start;
  return client.workflow.start(sendMessageWorkflow, {
    workflowId: sendWorkflowId(workspaceId, start.key),
    taskQueue: config.sendTaskQueue,
    // The process's own send worker runs the first workflow task when it has a free slot; without one this is an ordinary start.
    requestEagerStart: start.eager,
    // The reconciliation window travels in the input: the workflow's waits depend only on its history.
    args: [{ ...start.input, reconcileWindowMs: config.sendReconcileWindowMs }],
    workflowIdReusePolicy: start.reusePolicy,
    priority: workspacePriority(workspaceId),
    memo: { request: start.request, ...(start.requestId ? { requestId: start.requestId } : {}) },
    searchAttributes: {
      WorkspaceId: [workspaceId],
      IdempotencyKey: [start.key],
      // Shown in clear by Temporal: the number's keyed hash (the workflow sets it again once prepared).
      ...(start.phone ? { PhoneHash: [searchHash(config.encryptionKeys!, 'phone', workspaceId, start.phone)] } : {}),
      ...(start.instanceId ? { InstanceId: [start.instanceId] } : {}),
    },
  });
}

/**
 * Hands a send the API began to its workflow, under the API's reference, once: by the API when its
 * attempt did not finish the send, or by the sweep when the API died. A run of this send already
 * started (the memo names its request) is left to go on; a run of an earlier send of the key (a
 * key used again after its row was pruned) is closed and replaced. So a run that finished (even
 * failed and compensated) is never started a second time for the same send.
 */
export async function handOverSend(
  client: Client,
  config: Pick<Config, 'sendTaskQueue' | 'sendReconcileWindowMs' | 'encryptionKeys'>,
  send: {
    workspaceId: string;
    key: string;
    requestId: string;
    request: SendRequest;
    fingerprint: string;
    first?: SendAtOnce;
    phone?: string;
    eager: boolean;
  },
): Promise<void> {
  const handle = client.workflow.getHandle(sendWorkflowId(send.workspaceId, send.key));
  const running = await handle.describe().catch((err: unknown) => {
    if (err instanceof WorkflowNotFoundError) return undefined;
    throw err;
  });
  if (running?.memo?.requestId === send.requestId) return;
  const reference = apiSendReference(send.workspaceId, send.key, send.requestId);
  try {
    await startSendWorkflow(client, config, {
      workspaceId: send.workspaceId,
      key: send.key,
      input: { ...sendInputFor(send.workspaceId, send.requestId, send.request), reference, ...(send.first ? { first: send.first } : {}) },
      request: send.fingerprint,
      requestId: send.requestId,
      reusePolicy: WorkflowIdReusePolicy.ALLOW_DUPLICATE,
      ...(send.phone ? { phone: send.phone } : {}),
      ...(send.request.instanceId ? { instanceId: send.request.instanceId } : {}),
      eager: send.eager,
    });
  } catch (err) {
    // Started by the other hand (the API or the sweep) between the look and the start.
    if (!(err instanceof WorkflowExecutionAlreadyStartedError)) throw err;
  }
}

/** Sends handed over per sweep. */
const SWEEP_BATCH = 100;

/**
 * The sweep of sends an API process began and never settled nor handed over (it died mid-send):
 * after SEND_SWEEP_AFTER_MS each gets its workflow, under the API's reference, so a preparation
 * made is reused (or undone), an attempt made is reconciled with the provider's callback, and
 * nothing is sent twice. A repeat of the request then joins that workflow (409 IN_PROGRESS, then
 * the answer). Run by the workers that dispatch the outbox.
 */
export function createSendSweep(deps: {
  db: Db;
  temporal: () => Promise<Client>;
  config: Pick<Config, 'sendTaskQueue' | 'sendReconcileWindowMs' | 'encryptionKeys' | 'sendSweepAfterMs'>;
  logger: Logger;
}) {
  const { db, config, logger } = deps;
  let timer: NodeJS.Timeout | undefined;
  let running: Promise<unknown> | undefined;
  const everyMs = Math.min(10_000, config.sendSweepAfterMs);

  async function sweep(): Promise<number> {
    const sends = await unsettledSends(db, config.sendSweepAfterMs, SWEEP_BATCH);
    if (sends.length === 0) return 0;
    const client = await deps.temporal();
    for (const send of sends) {
      await handOverSend(client, config, { ...send, eager: false });
      await sendKeyToWorkflow(db, send);
      logger.warn(
        { workflowId: sendWorkflowId(send.workspaceId, send.key) },
        'send sweep: a send left unsettled by an API process is carried on by its workflow',
      );
    }
    return sends.length;
  }

  const tick = () => {
    running = sweep()
      .catch((err) => logger.warn({ err }, 'send sweep failed (tried again at the next sweep)'))
      .finally(() => {
        if (timer) timer = setTimeout(tick, everyMs);
      });
  };
  return {
    sweep,
    start() {
      timer = setTimeout(tick, everyMs);
    },
    async stop() {
      clearTimeout(timer);
      timer = undefined;
      await running;
    },
  };
}
