import {
  ActivityFailure,
  ApplicationFailure,
  TimeoutFailure,
  patched,
  proxyActivities,
  proxyLocalActivities,
  sleep,
  upsertSearchAttributes,
  workflowInfo,
} from '@temporalio/workflow';
import type { MessagingActivities } from '../activities/messaging';
import type { MediaActivities } from '../activities/media';
import {
  COMPENSATION,
  DATABASE,
  LOCAL_DATABASE,
  LOCAL_PROVIDER_FIRST_CALL,
  LOCAL_RECORD,
  LOCAL_SEND_AT_ONCE,
  MEDIA_CHECK,
  PROVIDER_FIRST_RETRY_WAIT,
  PROVIDER_SEND,
  PROVIDER_SEND_MEDIA,
  PROVIDER_SEND_RETRY,
  RECONCILE,
  RECORD,
} from './profiles';
import {
  DEFAULT_RECONCILE_WINDOW_MS,
  OUTCOME_UNKNOWN_HINT,
  outcomeUnknownMessage,
  PROVIDER_RETRYABLE,
  SEND_OUTCOME_UNKNOWN,
  type PreparedSend,
  type ReconcileResult,
  type SendAtOnce,
  type SendInput,
  type SendRefusal,
  type SendResult,
  type SentMessage,
} from '../types/messaging';

const provider = proxyActivities<MessagingActivities>(PROVIDER_SEND);
/** A media message's provider call may download the file first (a web gateway is given bytes, not the URL). */
const mediaProvider = proxyActivities<MessagingActivities>(PROVIDER_SEND_MEDIA);
const localProvider = proxyLocalActivities<MessagingActivities>(LOCAL_PROVIDER_FIRST_CALL);
const providerRetry = proxyActivities<MessagingActivities>(PROVIDER_SEND_RETRY);

/**
 * The database steps run as local activities (see LOCAL_DATABASE). A send started by an older
 * worker ran them as ordinary activities, and its history must replay the same way: the patch
 * marker says which one a run uses. Deprecate it once no send older than the change can be running.
 */
const LOCAL_DB_STEPS = 'send-db-steps-as-local-activities';
function databaseSteps(): typeof localSteps {
  return patched(LOCAL_DB_STEPS)
    ? {
        prepare: proxyLocalActivities<MessagingActivities>(LOCAL_DATABASE),
        record: proxyLocalActivities<MessagingActivities>(LOCAL_RECORD),
      }
    : { prepare: proxyActivities<MessagingActivities>(DATABASE), record: proxyActivities<MessagingActivities>(RECORD) };
}
const atOnce = proxyLocalActivities<MessagingActivities>(LOCAL_SEND_AT_ONCE);
const compensate = proxyActivities<MessagingActivities>(COMPENSATION);
const media = proxyActivities<MediaActivities>(MEDIA_CHECK);

/** Interrupted provider calls that found no confirmation before the send gives up (each sent at most one accepted message). */
const MAX_SEND_ROUNDS = 3;
/** Bounds of the reconciliation window, whatever the input says. */
const MIN_WINDOW_MS = 1000;
const MAX_WINDOW_MS = 24 * 60 * 60 * 1000;
/** How long past the window the wait may last when the database itself does not answer. */
const RECONCILE_MARGIN_MS = 60_000;

/**
 * A send as a saga: check the media, prepare (instance, contact, conversation, window, template,
 * daily slot and quota: one transaction), call the provider, record. A failure after prepare runs
 * the compensations in reverse order; once the provider accepted, nothing is undone and recording
 * retries until it succeeds. The workflow id is the idempotency key (see api/send.ts).
 */
export async function sendMessageWorkflow(input: SendInput): Promise<SendResult> {
  const { workflowId, runId } = workflowInfo();
  const compensations: (() => Promise<void>)[] = [];
  // Decided first, where the steps' patch was always asked: an older run replays its commands in their order.
  const oneStep = Boolean(input.requestId) && !hasMedia(input) && patched(SEND_AT_ONCE);
  const { prepare, record } = oneStep ? localSteps : databaseSteps();
  try {
    if (hasMedia(input))
      await media.checkMedia(
        input.requestId
          ? { workspaceId: input.workspaceId, requestId: input.requestId }
          : { url: input.message!.mediaUrl!, type: input.message!.type },
      );
    // A send the API began comes with its first step's outcome (when it has one), under the API's reference.
    const first = input.first ?? (oneStep ? await sendAtOnce(input) : undefined);
    const prepared = first?.prepared ?? (await prepare.prepareSend(input));
    compensations.push(() => compensate.undoPrepare(prepared));
    searchAttributesOf(prepared, oneStep);
    if (first && 'recorded' in first) return first.recorded;

    const sent =
      first && 'sent' in first
        ? first.sent
        : await sendOnce(input, prepared, input.reference ?? `${workflowId}/${runId}`, first).catch((err) => {
            if (!outcomeUnknown(err)) throw err;
            // The provider may have the message: the contact and conversation stay (undoing them could
            // orphan a delivered message), and the send fails as SEND_OUTCOME_UNKNOWN.
            compensations.length = 0;
            const cause = failureCause(err);
            throw cause instanceof TimeoutFailure
              ? unknownOutcome(`The provider call did not finish in time (${cause.message}), so it may have been accepted`)
              : err;
          });
    compensations.length = 0;
    return await record.recordSent({ workspaceId: input.workspaceId, prepared, sent, ...content(input), mode: kind(input) });
  } catch (err) {
    for (const undo of compensations.reverse()) await undo();
    const failure = asSendFailure(err);
    // A refusal completes (a run that refused before this change failed, and replays so).
    const refused = refusalOf(failure);
    if (refused && patched(REFUSAL_COMPLETES)) return refused;
    throw failure;
  }
}

/**
 * Prepare, the first provider call and record as one local activity: a send the provider accepts
 * at once is one workflow task with one activity round (it was three). Sends started before this
 * change replay their steps one by one. A refusal of prepare stands; the activity's own timeout or
 * a passing error goes on step by step (undefined), where prepare answers the preparation it made.
 */
const SEND_AT_ONCE = 'send-at-once';
/** The steps of a send that began at once, when it must go on one by one. */
const localSteps = {
  prepare: proxyLocalActivities<MessagingActivities>(LOCAL_DATABASE),
  record: proxyLocalActivities<MessagingActivities>(LOCAL_RECORD),
};

async function sendAtOnce(input: SendInput): Promise<SendAtOnce | undefined> {
  try {
    return await atOnce.sendAtOnce({
      workspaceId: input.workspaceId,
      requestId: input.requestId!,
      mode: kind(input),
      ...(input.reference ? { reference: input.reference } : {}),
    });
  } catch (err) {
    const cause = failureCause(err);
    if (cause instanceof ApplicationFailure && cause.nonRetryable) throw err;
    return undefined;
  }
}

/**
 * The send's search attributes: the API sets what it knows at start (workspace, key, the number's
 * hash, a named instance); what only prepare learns (the default instance, a conversation's
 * recipient) is upserted. A send started before this change upserted both, and replays so.
 */
function searchAttributesOf(prepared: PreparedSend & { phoneHash?: string }, setAtStart: boolean): void {
  const given = setAtStart ? (workflowInfo().searchAttributes ?? {}) : {};
  const missing: Record<string, string[]> = {};
  if (given.InstanceId?.[0] !== prepared.instanceId) missing.InstanceId = [prepared.instanceId];
  // Search attributes are shown in clear: the number's keyed hash, never the number (domain/platform/temporal.ts).
  // A preparation made before the hash sets no phone attribute.
  if (prepared.phoneHash && given.PhoneHash?.[0] !== prepared.phoneHash) missing.PhoneHash = [prepared.phoneHash];
  if (Object.keys(missing).length > 0) upsertSearchAttributes(missing);
}

const REFUSAL_COMPLETES = 'send-refusal-completes';

/** A business refusal (an activity's 4xx code), as the workflow's result; undefined for a failure. */
function refusalOf(failure: unknown): SendRefusal | undefined {
  if (!(failure instanceof ApplicationFailure) || !failure.type || failure.type === SEND_OUTCOME_UNKNOWN) return undefined;
  const detail = (failure.details?.[0] ?? {}) as { status?: number; hint?: string };
  if (typeof detail.status !== 'number' || detail.status < 400 || detail.status >= 500) return undefined;
  return { refused: { code: failure.type, message: failure.message, ...(detail.hint ? { hint: detail.hint } : {}) } };
}

/**
 * The provider call, exactly once. sendToProvider claims the attempt (`reference`) before it
 * calls; when it finds an earlier attempt's claim (that attempt's worker died mid-call) or its
 * call got no answer, it does not call and answers `unconfirmed`. Then this waits, durably, for
 * the provider's own word: the Cloud API posts a status callback carrying our reference
 * (`biz_opaque_callback_data`) for every message it accepted, and the inbound webhook records its
 * message id on the attempt. Recorded before the deadline: that is the sent message (no second
 * call). No callback by the deadline: the provider did not accept it, the attempt is marked
 * `failed` and the next round sends (still one accepted message). The deadline comes from the
 * workflow clock, and the decision is an activity result in the history: replay-safe.
 */
async function sendOnce(input: SendInput, prepared: PreparedSend, reference: string, first?: SendAtOnce): Promise<SentMessage> {
  const windowMs = Math.min(Math.max(input.reconcileWindowMs ?? DEFAULT_RECONCILE_WINDOW_MS, MIN_WINDOW_MS), MAX_WINDOW_MS);
  const reconcile = proxyActivities<MessagingActivities>({ ...RECONCILE, scheduleToCloseTimeout: windowMs + RECONCILE_MARGIN_MS });
  for (let round = 1; ; round++) {
    const call = { workspaceId: input.workspaceId, instanceId: prepared.instanceId, to: prepared.to, reference, ...content(input) };
    const result = round === 1 && first ? await afterFirstCall(first, call) : await callProvider(input, round, call);
    if (result.outcome === 'sent') return result.sent;

    // Date.now() inside a workflow is Temporal's workflow clock (the time of this workflow task,
    // replayed identically), not the machine's.
    const deadline = new Date(Date.now() + windowMs).toISOString();
    let settled: ReconcileResult;
    try {
      settled = await reconcile.reconcileSend({ workspaceId: input.workspaceId, reference, deadline });
    } catch (err) {
      // Last resort: the attempt's row could not be read within the window (database down).
      const cause = err instanceof ActivityFailure && err.cause ? err.cause.message : String(err);
      throw unknownOutcome(`${result.reason}, and whether the provider accepted it could not be checked (${cause})`);
    }
    if (settled.outcome === 'sent') return settled.sent;
    if (round >= MAX_SEND_ROUNDS) {
      throw ApplicationFailure.create({
        type: 'SEND_FAILED',
        nonRetryable: true,
        message: `The provider call was interrupted ${round} times and the provider confirmed none of them: ${settled.reason}`,
      });
    }
  }
}

const LOCAL_FIRST_CALL = 'send-first-provider-call-local';

/**
 * One round's provider call. The first call of a text or template send is a local activity (see
 * LOCAL_PROVIDER_FIRST_CALL): accepted at once, the whole send is one workflow task. A refusal
 * stands; anything retrying may fix (throttling, an outage, a timeout) goes on as an ordinary
 * activity after PROVIDER_SEND's first wait, where the claim on the attempt keeps it to one
 * accepted message. Media sends (a download may take minutes and must heartbeat), later rounds,
 * and sends started before this change call as an ordinary activity.
 */
async function callProvider(input: SendInput, round: number, call: Parameters<MessagingActivities['sendToProvider']>[0]) {
  if (hasMedia(input)) return mediaProvider.sendToProvider(call);
  if (round > 1 || !patched(LOCAL_FIRST_CALL)) return provider.sendToProvider(call);
  try {
    return await localProvider.sendToProvider(call);
  } catch (err) {
    const cause = failureCause(err);
    const retryable = cause instanceof TimeoutFailure || (cause instanceof ApplicationFailure && !cause.nonRetryable);
    if (!retryable) throw err;
    await sleep(PROVIDER_FIRST_RETRY_WAIT);
    return providerRetry.sendToProvider(call);
  }
}

/** Round one of a send whose first call was made at once: its unconfirmed outcome, or its failure as callProvider treats a local call's. */
async function afterFirstCall(first: SendAtOnce, call: Parameters<MessagingActivities['sendToProvider']>[0]) {
  if ('unconfirmed' in first) return { outcome: 'unconfirmed' as const, reason: first.unconfirmed };
  if (!('failure' in first)) throw new Error('afterFirstCall: the first call did not fail');
  const { type, message, nonRetryable, details } = first.failure;
  if (nonRetryable) throw ApplicationFailure.create({ type, message, nonRetryable, details });
  await sleep(PROVIDER_FIRST_RETRY_WAIT);
  return providerRetry.sendToProvider(call);
}

/*
 * A send's input names its send_requests row (the activities load the content); one started
 * before that carries the message inline, and replays with it. Which one is decided by the input
 * alone, so both replay deterministically.
 */
function hasMedia(input: SendInput): boolean {
  return input.requestId ? Boolean(input.hasMedia) : Boolean(input.message?.mediaUrl);
}
function kind(input: SendInput): 'cold' | 'conversation' {
  return input.requestId ? (input.kind ?? 'cold') : input.conversationId ? 'conversation' : 'cold';
}
function content(input: SendInput): { requestId: string } | { message: NonNullable<SendInput['message']> } {
  return input.requestId ? { requestId: input.requestId } : { message: input.message! };
}

/**
 * What failed: an ordinary activity's failure wraps it in an ActivityFailure, a local activity's
 * arrives as the cause itself.
 */
function failureCause(err: unknown): unknown {
  return err instanceof ActivityFailure ? err.cause : err;
}

/** The failure of a send the provider may have accepted (the activities raise the same through domain/messaging/sending.ts). */
function unknownOutcome(reason: string): ApplicationFailure {
  return ApplicationFailure.create({
    type: SEND_OUTCOME_UNKNOWN,
    nonRetryable: true,
    message: outcomeUnknownMessage(reason),
    details: [{ hint: OUTCOME_UNKNOWN_HINT }],
  });
}

function outcomeUnknown(err: unknown): boolean {
  const cause = failureCause(err);
  // The provider activity timed out on its last attempt (heartbeat or start-to-close): it may have reached the provider.
  if (cause instanceof TimeoutFailure) return true;
  return cause instanceof ApplicationFailure && cause.type === SEND_OUTCOME_UNKNOWN;
}

/** The workflow's failure, which the API maps to its answer: the activity's business code, or SEND_FAILED. */
function asSendFailure(err: unknown): unknown {
  const cause = failureCause(err);
  if (cause instanceof ApplicationFailure) {
    if (cause.type === PROVIDER_RETRYABLE) {
      return ApplicationFailure.create({
        type: 'SEND_FAILED',
        nonRetryable: true,
        message: `The provider did not accept the message after several attempts: ${cause.message}`,
      });
    }
    return ApplicationFailure.create({
      type: cause.type ?? 'SEND_FAILED',
      nonRetryable: true,
      message: cause.message,
      details: cause.details as unknown[],
    });
  }
  return err;
}
