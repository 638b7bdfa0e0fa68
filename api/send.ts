import { randomUUID } from 'node:crypto';
import type { Context } from 'koa';
import { WorkflowExecutionAlreadyStartedError, WorkflowFailedError, WorkflowIdReusePolicy, WorkflowNotFoundError } from '@temporalio/client';
import { ApiError } from '../domain/errors';
import { fromFailure } from '../domain/failures';
import { isTemporalUnreachable } from '../domain/temporal';
import type { SendInput, SendOutcome } from '../types/messaging';
import { sendMessageWorkflow } from '../workflows/send-message';
import { temporalClient, withTemporal } from './context';

/** How long a repeat of an Idempotency-Key gets the memoised answer (docs/api-conventions.md). */
export const IDEMPOTENCY_MEMO_MS = 10 * 60 * 1000;
/** How long the API waits for a send before answering 409 IN_PROGRESS (the send carries on). */
const WAIT_MS = 30_000;

export function idempotencyKey(ctx: Context): string | undefined {
  const key = ctx.get('idempotency-key');
  if (!key) return undefined;
  if (key.length > 255 || !/^[\x21-\x7e]+$/.test(key)) {
    throw new ApiError('VALIDATION', 'Invalid headers.Idempotency-Key: 1 to 255 visible ASCII characters');
  }
  return key;
}


/**
 * Runs a send as a workflow and answers with its result. The Idempotency-Key names the workflow
 * (per workspace), so Temporal's own id rules do the reservation: a running send with the key is
 * 409 IN_PROGRESS, a completed one within 10 minutes is replayed (200, `Idempotent-Replayed`),
 * a failed one (or an older success) lets the key start a new send.
 */
export async function runSend(ctx: Context, input: SendInput, options: { kind: 'cold' | 'conversation'; phone?: string }): Promise<SendOutcome> {
  const given = idempotencyKey(ctx);
  // Without a key the send gets one, returned in the response header: a client whose request
  // outlived the API's wait (409 IN_PROGRESS) can repeat with it and join the same send.
  const key = given ?? randomUUID();
  ctx.set('Idempotency-Key', key);
  const service = 'The messaging service';
  const client = await temporalClient(ctx, service);
  const workflowId = `send/${input.workspaceId}/key/${key}`;
  const handle = client.workflow.getHandle<typeof sendMessageWorkflow>(workflowId);

  if (given) {
    const previous = await withTemporal(ctx, service, () => handle.describe()).catch((err) => {
      if (err instanceof WorkflowNotFoundError) return undefined;
      throw err;
    });
    if (previous?.status.name === 'RUNNING') throw inProgress(workflowId, key);
    const closed = previous?.closeTime?.getTime();
    if (previous?.status.name === 'COMPLETED' && closed !== undefined && Date.now() - closed < IDEMPOTENCY_MEMO_MS) {
      ctx.status = 200;
      ctx.set('Idempotent-Replayed', 'true');
      return handle.result();
    }
  }

  try {
    await withTemporal(ctx, service, () => client.workflow.start(sendMessageWorkflow, {
      workflowId,
      taskQueue: ctx.deps.config.taskQueue,
      // The reconciliation window travels in the input: the workflow's waits depend only on its history.
      args: [{ ...input, reconcileWindowMs: ctx.deps.config.sendReconcileWindowMs }],
      workflowIdReusePolicy: WorkflowIdReusePolicy.ALLOW_DUPLICATE,
      searchAttributes: {
        WorkspaceId: [input.workspaceId],
        IdempotencyKey: [key],
        ...(options.phone ? { Phone: [options.phone] } : {}),
        ...(input.instanceId ? { InstanceId: [input.instanceId] } : {}),
      },
    }));
  } catch (err) {
    if (err instanceof WorkflowExecutionAlreadyStartedError) throw inProgress(workflowId, key);
    throw err;
  }

  let timer: NodeJS.Timeout | undefined;
  try {
    return await Promise.race([
      handle.result(),
      new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(inProgress(workflowId, key)), WAIT_MS);
      }),
    ]);
  } catch (err) {
    if (err instanceof WorkflowFailedError) throw fromFailure(err.cause, () => new ApiError('SEND_FAILED', 'The send failed', { hint: err.message }));
    // The send started and is durable; Temporal went away while we waited for its result.
    if (isTemporalUnreachable(err)) throw inProgress(workflowId, key);
    throw err;
  } finally {
    clearTimeout(timer);
  }
}

function inProgress(workflowId: string, key: string): ApiError {
  return new ApiError('IN_PROGRESS', 'A send with this Idempotency-Key is still running', {
    hint: `Repeat the request with the header Idempotency-Key: ${key} in a moment. Temporal workflow id: ${workflowId}`,
  });
}
