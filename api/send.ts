import { randomUUID } from 'node:crypto';
import type { Context } from 'koa';
import { z } from 'zod';
import {
  type Client,
  WorkflowExecutionAlreadyStartedError,
  WorkflowFailedError,
  WorkflowIdReusePolicy,
  WorkflowNotFoundError,
} from '@temporalio/client';
import { ApiError, clock } from '../domain/kernel';
import {
  claimReplaced,
  claimSendKey,
  fromFailure,
  fromRefusal,
  IDEMPOTENCY_MEMO_MS,
  isReplacedAlready,
  refusalOfFailure,
  releaseReplaced,
  sendInputFor,
  sendKeyToWorkflow,
  settleSendKey,
} from '../domain/messaging';
import { fingerprint, isTemporalUnreachable, withoutPhoneNumbers } from '../domain/platform';
import { isRefusal, type SendAtOnce, type SendOutcome, type SendRequest, type SendResult } from '../types/messaging';
import type { sendMessageWorkflow } from '../workflows/send-message';
import { createSendAtOnce } from '../activities/messaging';
import { apiSendReference, handOverSend, sendWorkflowId, startSendWorkflow } from '../workers/send-starts';
import { type AppDeps, temporalClient, withTemporal } from './context';
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

/** What names a send: its Idempotency-Key (given, or made for it), its workflow's id, and the request's fingerprint. */
interface KeyedSend {
  key: string;
  /** Whether the client sent the key (a made one cannot have been used before). */
  given: boolean;
  workflowId: string;
  request: string;
}

const SERVICE = 'The messaging service';

/**
 * Runs a send and answers with its outcome. By default (SEND_FIRST_ATTEMPT=api) the API makes a
 * text or template send's one step itself (prepare, the provider call, record: the workflow's own
 * sendAtOnce), and starts a send workflow only for what did not finish there: a provider that
 * throttled or failed (the retries), a call without an answer (the reconciliation), a record that
 * failed. A media send, and every send with SEND_FIRST_ATTEMPT=workflow, is a workflow from the
 * start (sendByWorkflow). Measured in docs/performance.md: a send accepted at once costs no
 * Temporal round trip, so the API sends 2-3 times as many.
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
  const send: KeyedSend = {
    key,
    given: given !== undefined,
    workflowId: sendWorkflowId(input.workspaceId, key),
    // The number in its canonical form: the same number written differently is the same request.
    request: fingerprint(options.kind, { ...input, phone: options.phone ?? input.phone }),
  };
  return sendHere(ctx, input, options, send);
}

/**
 * The key is claimed in PostgreSQL with the request (send_keys), whoever makes the send: a repeat
 * while the API attempts it is 409 IN_PROGRESS, a repeat of its answer within 10 minutes replays
 * it (200, `Idempotent-Replayed`), a refusal frees the key, and a key a workflow carries on is
 * left to Temporal's id rules (sendByWorkflow). So API processes of either SEND_FIRST_ATTEMPT
 * (a rolling change of it) never send one key twice. The attempt's reference names the send to
 * the workflow that may take it on, so nothing is prepared or sent twice; an API process that
 * dies mid-send leaves the key 'sending', and the worker's sweep hands it to that workflow
 * (workers/send-starts.ts).
 */
async function sendHere(
  ctx: Context,
  input: SendRequest & { workspaceId: string },
  options: { kind: 'cold' | 'conversation'; phone?: string },
  send: KeyedSend,
): Promise<SendOutcome> {
  const { db } = ctx.deps;
  const { workspaceId, ...content } = input;
  const requestId = randomUUID();
  // A media send's file is checked (downloaded) by a workflow activity first: only a workflow makes it.
  const here = ctx.deps.config.sendFirstAttempt === 'api' && !content.message.mediaUrl;
  const holder = await claimSendKey(db, {
    workspaceId,
    key: send.key,
    requestId,
    request: content,
    fingerprint: send.request,
    state: here ? 'sending' : 'workflow',
    now: clock.now(),
  });
  if (holder?.state === 'workflow' || (!here && !holder)) return sendByWorkflow(ctx, input, options, send, requestId);
  if (holder) {
    // A key that holds an answer (running, a recent success) holds it for its own request only.
    if (holder.fingerprint !== send.request) throw keyReused(send.key);
    if (holder.state === 'sending') throw inProgress(send.workflowId, send.key);
    ctx.status = 200;
    ctx.set('Idempotent-Replayed', 'true');
    return holder.answer!;
  }

  const held = { workspaceId, key: send.key, requestId };
  const reference = apiSendReference(workspaceId, send.key, requestId);
  let first: SendAtOnce | undefined;
  try {
    first = await sendStep(ctx.deps)(
      { workspaceId, requestId, mode: options.kind, reference },
      // The answer a repeat replays commits with the message: no moment where one exists without the other.
      { loaded: content, fresh: true, settle: (trx, outcome) => settleSendKey(trx, held, outcome, clock.now()) },
    );
  } catch (err) {
    const refused = refusalOfFailure(err);
    if (refused) {
      await settleSendKey(db, held, null, clock.now());
      throw refused;
    }
    // Not known to be prepared: the workflow runs the step again under the same reference. The
    // message only (a database error's detail can quote a row's values), numbers masked.
    const error = withoutPhoneNumbers(err instanceof Error ? err.message : String(err));
    ctx.state.log.warn({ error }, 'send: the first attempt did not finish; its workflow carries it on');
  }
  if (first && 'recorded' in first) return first.recorded;

  const client = await temporalClient(ctx, SERVICE).catch(() => {
    // The key stays 'sending': the worker's sweep starts the workflow once Temporal answers.
    throw inProgress(send.workflowId, send.key);
  });
  try {
    await withTemporal(ctx, SERVICE, () =>
      handOverSend(client, ctx.deps.config, {
        workspaceId,
        key: send.key,
        requestId,
        request: content,
        fingerprint: send.request,
        ...(first ? { first } : {}),
        ...(options.phone ? { phone: options.phone } : {}),
        eager: ctx.deps.eagerSends === true,
      }),
    );
  } catch (err) {
    if (err instanceof ApiError && err.code === 'UNAVAILABLE') throw inProgress(send.workflowId, send.key);
    throw err;
  }
  await sendKeyToWorkflow(db, held);
  return awaitSend(ctx, client, send);
}

/** The API's send step: the send workflow's own first step, made in the request (no Temporal context: the reference is given). */
const steps = new WeakMap<AppDeps, ReturnType<typeof createSendAtOnce>>();
function sendStep(deps: AppDeps): ReturnType<typeof createSendAtOnce> {
  let step = steps.get(deps);
  if (!step) steps.set(deps, (step = createSendAtOnce({ db: deps.db, config: deps.config })));
  return step;
}

/**
 * Runs a send as a workflow and answers with its result (its request stored by the key's claim, under `requestId`). The Idempotency-Key names the workflow
 * (per workspace), so Temporal's own id rules do the reservation: a running send with the key is
 * 409 IN_PROGRESS, a completed one within 10 minutes is replayed (200, `Idempotent-Replayed`), a
 * send whose outcome is unknown keeps answering 409 SEND_OUTCOME_UNKNOWN, and only a failed one
 * (or a success older than 10 minutes) lets the key start a new send. The start itself refuses a
 * completed run (ALLOW_DUPLICATE_FAILED_ONLY), so a request that found nothing cannot send again
 * after a concurrent one with the same key completed: it replays that one instead.
 */
async function sendByWorkflow(
  ctx: Context,
  input: SendRequest & { workspaceId: string },
  options: { kind: 'cold' | 'conversation'; phone?: string },
  send: KeyedSend,
  requestId: string,
): Promise<SendOutcome> {
  const { key, workflowId, request } = send;
  const client = await temporalClient(ctx, SERVICE);
  const handle = client.workflow.getHandle<typeof sendMessageWorkflow>(workflowId);

  /** What an earlier run with this key decides: an answer (replay or refusal), or how a new run may start. */
  const previousRun = async (): Promise<
    { answer: () => Promise<SendOutcome> } | { reusePolicy: WorkflowIdReusePolicy; replaces?: string }
  > => {
    const previous = await withTemporal(ctx, SERVICE, () => handle.describe()).catch((err) => {
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
        const result = await withTemporal(ctx, SERVICE, () => handle.result());
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
      const failure = await withTemporal(ctx, SERVICE, () => handle.result()).then(
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

  const decision = send.given ? await previousRun() : { reusePolicy: WorkflowIdReusePolicy.ALLOW_DUPLICATE_FAILED_ONLY };
  if ('answer' in decision) return decision.answer();
  const { reusePolicy } = decision;
  const replaces = 'replaces' in decision ? decision.replaces : undefined;

  // The recipient and content stay in the database; the workflow gets the row's id (domain/messaging/send-requests.ts).
  const { workspaceId, ...content } = input;
  try {
    // A retry after a refusal claims the refused run: of two racing retries, one starts a send.
    if (replaces) await claimReplaced(ctx.deps.db, workspaceId, requestId, replaces);
  } catch (err) {
    if (!isReplacedAlready(err)) throw err;
    const now = await previousRun();
    if ('answer' in now) return now.answer();
    throw inProgress(workflowId, key);
  }
  try {
    await withTemporal(ctx, SERVICE, () =>
      startSendWorkflow(client, ctx.deps.config, {
        workspaceId,
        key,
        input: sendInputFor(workspaceId, requestId, content),
        request,
        reusePolicy,
        ...(options.phone ? { phone: options.phone } : {}),
        ...(input.instanceId ? { instanceId: input.instanceId } : {}),
        eager: ctx.deps.eagerSends === true,
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
  return awaitSend(ctx, client, send);
}

/** The started send workflow's answer, within the API's wait (then 409 IN_PROGRESS: the send carries on). */
async function awaitSend(ctx: Context, client: Client, send: KeyedSend): Promise<SendOutcome> {
  const handle = client.workflow.getHandle<typeof sendMessageWorkflow>(send.workflowId);
  let timer: NodeJS.Timeout | undefined;
  try {
    return outcomeOf(
      await Promise.race([
        handle.result(),
        new Promise<never>((_, reject) => {
          timer = setTimeout(() => reject(inProgress(send.workflowId, send.key)), WAIT_MS);
        }),
      ]),
    );
  } catch (err) {
    if (err instanceof WorkflowFailedError) throw sendFailure(err);
    // The send started and is durable; Temporal went away while we waited for its result.
    if (isTemporalUnreachable(err)) throw inProgress(send.workflowId, send.key);
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
