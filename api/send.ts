import { randomUUID } from 'node:crypto';
import type { Context } from 'koa';
import { z } from 'zod';
import {
  WorkflowExecutionAlreadyStartedError,
  WorkflowFailedError,
  WorkflowIdReusePolicy,
  WorkflowNotFoundError,
} from '@temporalio/client';
import { ApiError, clock } from '../domain/kernel';
import { fromFailure, fromRefusal, isReplacedAlready, releaseReplaced, saveSendRequest, sendInputFor } from '../domain/messaging';
import { fingerprint, isTemporalUnreachable, searchHash, workspacePriority } from '../domain/platform';
import { isRefusal, type SendOutcome, type SendRequest, type SendResult } from '../types/messaging';
import { sendMessageWorkflow } from '../workflows/send-message';
import { temporalClient, withTemporal } from './context';

/** How long a repeat of an Idempotency-Key gets the memoised answer (docs/api-conventions.md). */
export const IDEMPOTENCY_MEMO_MS = 10 * 60 * 1000;
/** How long the API waits for a send before answering 409 IN_PROGRESS (the send carries on). */
const WAIT_MS = 30_000;

/**
 * The `Idempotency-Key` request header of the sends and batches: 1 to 255 printable ASCII
 * characters, spaces included (an order number like "order 42" is a key; HTTP itself drops the
 * spaces around a header's value). The router validates it for every `idempotent` route (400
 * VALIDATION naming the header) and the OpenAPI document declares it from the same schema.
 */
export const IdempotencyHeaders = z.object({
  'Idempotency-Key': z
    .string()
    .regex(/^[\x20-\x7e]{1,255}$/, '1 to 255 printable ASCII characters (spaces included)')
    .optional()
    .meta({
      description: 'Names this request in the workspace: a repeat replays (or joins) it instead of doing it twice (see the operation).',
    }),
});

/** The request's Idempotency-Key (already validated by the router), or undefined when none was sent. */
export function idempotencyKey(ctx: Context): string | undefined {
  return ctx.get('idempotency-key') || undefined;
}

/**
 * Runs a send as a workflow and answers with its result. The Idempotency-Key names the workflow
 * (per workspace), so Temporal's own id rules do the reservation: a running send with the key is
 * 409 IN_PROGRESS, a completed one within 10 minutes is replayed (200, `Idempotent-Replayed`), a
 * send whose outcome is unknown keeps answering 409 SEND_OUTCOME_UNKNOWN, and only a failed one
 * (or a success older than 10 minutes) lets the key start a new send. The start itself refuses a
 * completed run (ALLOW_DUPLICATE_FAILED_ONLY), so a request that found nothing cannot send again
 * after a concurrent one with the same key completed: it replays that one instead.
 */
export async function runSend(
  ctx: Context,
  input: SendRequest & { workspaceId: string },
  options: { kind: 'cold' | 'conversation'; phone?: string },
): Promise<SendOutcome> {
  const given = idempotencyKey(ctx);
  // Without a key the send gets one, returned in the response header: a client whose request
  // outlived the API's wait (409 IN_PROGRESS) can repeat with it and join the same send.
  const key = given ?? randomUUID();
  ctx.set('Idempotency-Key', key);
  const service = 'The messaging service';
  const client = await temporalClient(ctx, service);
  const workflowId = `send/${input.workspaceId}/key/${key}`;
  const handle = client.workflow.getHandle<typeof sendMessageWorkflow>(workflowId);
  // The number in its canonical form: the same number written differently is the same request.
  const request = fingerprint(options.kind, { ...input, phone: options.phone ?? input.phone });

  /** What an earlier run with this key decides: an answer (replay or refusal), or how a new run may start. */
  const previousRun = async (): Promise<
    { answer: () => Promise<SendOutcome> } | { reusePolicy: WorkflowIdReusePolicy; replaces?: string }
  > => {
    const previous = await withTemporal(ctx, service, () => handle.describe()).catch((err) => {
      if (err instanceof WorkflowNotFoundError) return undefined;
      throw err;
    });
    if (!previous) return { reusePolicy: WorkflowIdReusePolicy.ALLOW_DUPLICATE_FAILED_ONLY };
    // A key that holds an answer (running, a recent success, an unknown outcome) holds it for its own request only.
    const bound = () => {
      if (previous.memo?.request !== undefined && previous.memo.request !== request) throw keyReused(key);
    };
    const status = previous.status.name;
    if (status === 'RUNNING') {
      bound();
      throw inProgress(workflowId, key);
    }
    const closed = previous.closeTime?.getTime() ?? 0;
    if (status === 'COMPLETED') {
      // The clock tests can set (domain/kernel/clock.ts), so the window's end is tested without waiting 10 minutes.
      if (clock.now() - closed < IDEMPOTENCY_MEMO_MS) {
        const result = await withTemporal(ctx, service, () => handle.result());
        // A refusal frees the key like a failure; the retry names the refused run (see below).
        if (isRefusal(result)) return { reusePolicy: WorkflowIdReusePolicy.ALLOW_DUPLICATE, replaces: previous.runId };
        bound();
        return {
          answer: async () => {
            ctx.status = 200;
            ctx.set('Idempotent-Replayed', 'true');
            return result;
          },
        };
      }
      return { reusePolicy: WorkflowIdReusePolicy.ALLOW_DUPLICATE };
    }
    if (status === 'FAILED') {
      const failure = await withTemporal(ctx, service, () => handle.result()).then(
        () => undefined,
        (err: unknown) => {
          if (err instanceof WorkflowFailedError) return sendFailure(err);
          throw err;
        },
      );
      // The provider may have it: the key keeps that answer, so a repeat never sends twice.
      if (failure?.code === 'SEND_OUTCOME_UNKNOWN') {
        bound();
        return { answer: () => Promise.reject(failure) };
      }
    }
    return { reusePolicy: WorkflowIdReusePolicy.ALLOW_DUPLICATE_FAILED_ONLY };
  };

  const decision = given ? await previousRun() : { reusePolicy: WorkflowIdReusePolicy.ALLOW_DUPLICATE_FAILED_ONLY };
  if ('answer' in decision) return decision.answer();
  const { reusePolicy } = decision;
  const replaces = 'replaces' in decision ? decision.replaces : undefined;

  // The recipient and content stay in the database; the workflow gets the row's id (domain/messaging/send-requests.ts).
  const { workspaceId, ...content } = input;
  const requestId = randomUUID();
  try {
    // A retry after a refusal claims the refused run: of two racing retries, one starts a send.
    await saveSendRequest(ctx.deps.db, workspaceId, requestId, content, replaces);
  } catch (err) {
    if (!isReplacedAlready(err)) throw err;
    const now = await previousRun();
    if ('answer' in now) return now.answer();
    throw inProgress(workflowId, key);
  }
  try {
    await withTemporal(ctx, service, () =>
      client.workflow.start(sendMessageWorkflow, {
        workflowId,
        taskQueue: ctx.deps.config.sendTaskQueue,
        // The API process's own send worker runs the first workflow task when it has a free slot
        // (workers/send-worker.ts); without one this is an ordinary start.
        requestEagerStart: ctx.deps.eagerSends === true,
        // The reconciliation window travels in the input: the workflow's waits depend only on its history.
        args: [{ ...sendInputFor(workspaceId, requestId, content), reconcileWindowMs: ctx.deps.config.sendReconcileWindowMs }],
        workflowIdReusePolicy: reusePolicy,
        priority: workspacePriority(workspaceId),
        memo: { request },
        searchAttributes: {
          WorkspaceId: [input.workspaceId],
          IdempotencyKey: [key],
          // Shown in clear by Temporal: the number's keyed hash (the workflow sets it again once prepared).
          ...(options.phone ? { PhoneHash: [searchHash(ctx.deps.config.encryptionKeys!, 'phone', input.workspaceId, options.phone)] } : {}),
          ...(input.instanceId ? { InstanceId: [input.instanceId] } : {}),
        },
      }),
    );
  } catch (err) {
    if (!(err instanceof WorkflowExecutionAlreadyStartedError)) {
      // Not started (or not known to be): the refused run may be retried again.
      if (replaces) await releaseReplaced(ctx.deps.db, workspaceId, requestId).catch(() => undefined);
      throw err;
    }
    // Another request with this key started (or finished) in between: its run answers this one.
    const now = await previousRun();
    if ('answer' in now) return now.answer();
    throw inProgress(workflowId, key);
  }

  let timer: NodeJS.Timeout | undefined;
  try {
    return outcomeOf(
      await Promise.race([
        handle.result(),
        new Promise<never>((_, reject) => {
          timer = setTimeout(() => reject(inProgress(workflowId, key)), WAIT_MS);
        }),
      ]),
    );
  } catch (err) {
    if (err instanceof WorkflowFailedError) throw sendFailure(err);
    // The send started and is durable; Temporal went away while we waited for its result.
    if (isTemporalUnreachable(err)) throw inProgress(workflowId, key);
    throw err;
  } finally {
    clearTimeout(timer);
  }
}

/** A completed send's answer: the outcome, or the refusal's code (the send's 4xx). */
function outcomeOf(result: SendResult): SendOutcome {
  if (isRefusal(result)) throw fromRefusal(result.refused);
  return result;
}

/** The API's answer to a failed send workflow: the code its failure carries, else SEND_FAILED. */
function sendFailure(err: WorkflowFailedError): ApiError {
  return fromFailure(err.cause, () => new ApiError('SEND_FAILED', 'The send failed', { hint: err.message }));
}

function keyReused(key: string): ApiError {
  return new ApiError('IDEMPOTENCY_KEY_REUSED', 'This Idempotency-Key was already used for a different request', {
    hint: `A key names one request (same endpoint, same body). Send a new key for a different message; "${key}" keeps its first request's answer.`,
  });
}

function inProgress(workflowId: string, key: string): ApiError {
  return new ApiError('IN_PROGRESS', 'A send with this Idempotency-Key is still running', {
    hint: `Repeat the request with the header Idempotency-Key: ${key} in a moment. Temporal workflow id: ${workflowId}`,
  });
}
