import { ActivityFailure, ApplicationFailure, proxyActivities, upsertSearchAttributes, workflowInfo } from '@temporalio/workflow';
import type { MessagingActivities } from '../activities/messaging';
import type { MediaActivities } from '../activities/media';
import { COMPENSATION, DATABASE, MEDIA_CHECK, PROVIDER_SEND, RECORD } from './profiles';
import type { SendInput, SendOutcome } from './send-types';

const prepare = proxyActivities<MessagingActivities>(DATABASE);
const provider = proxyActivities<MessagingActivities>(PROVIDER_SEND);
const record = proxyActivities<MessagingActivities>(RECORD);
const compensate = proxyActivities<MessagingActivities>(COMPENSATION);
const media = proxyActivities<MediaActivities>(MEDIA_CHECK);

/** Retryable provider failures (throttled, down) that outlived the retry policy. */
const PROVIDER_RETRYABLE = 'PROVIDER_UNAVAILABLE';

/**
 * A send as a saga: check the media, prepare (instance, contact, conversation, window, template,
 * daily slot and quota: one transaction), call the provider, record. A failure after prepare runs
 * the compensations in reverse order; once the provider accepted, nothing is undone and recording
 * retries until it succeeds. The workflow id is the idempotency key (see api/routes/messages.ts).
 */
export async function sendMessageWorkflow(input: SendInput): Promise<SendOutcome> {
  const { workflowId, runId } = workflowInfo();
  const compensations: (() => Promise<void>)[] = [];
  try {
    if (input.message.mediaUrl) await media.checkMedia({ url: input.message.mediaUrl, type: input.message.type });
    const prepared = await prepare.prepareSend(input);
    compensations.push(() => compensate.undoPrepare(prepared));
    upsertSearchAttributes({ InstanceId: [prepared.instanceId], Phone: [prepared.phone] });

    const sent = await provider
      .sendToProvider({ workspaceId: input.workspaceId, instanceId: prepared.instanceId, to: prepared.to, reference: `${workflowId}/${runId}`, message: input.message })
      .catch((err) => {
        // An earlier attempt may have reached the provider: the message may exist, so the contact
        // and conversation stay (undoing them could orphan a delivered message).
        if (outcomeUnknown(err)) compensations.length = 0;
        throw err;
      });
    compensations.length = 0;
    return await record.recordSent({ workspaceId: input.workspaceId, prepared, sent, message: input.message, mode: input.conversationId ? 'conversation' : 'cold' });
  } catch (err) {
    for (const undo of compensations.reverse()) await undo();
    throw businessFailure(err);
  }
}

function outcomeUnknown(err: unknown): boolean {
  const cause = err instanceof ActivityFailure ? err.cause : err;
  return cause instanceof ApplicationFailure && (cause.details?.[0] as { outcomeUnknown?: boolean } | undefined)?.outcomeUnknown === true;
}

/** The failure the API maps to its answer: the activity's business code, or SEND_FAILED. */
function businessFailure(err: unknown): unknown {
  const cause = err instanceof ActivityFailure ? err.cause : err;
  if (cause instanceof ApplicationFailure) {
    if (cause.type === PROVIDER_RETRYABLE) {
      return ApplicationFailure.create({ type: 'SEND_FAILED', nonRetryable: true, message: `The provider did not accept the message after several attempts: ${cause.message}` });
    }
    return ApplicationFailure.create({ type: cause.type ?? 'SEND_FAILED', nonRetryable: true, message: cause.message, details: cause.details as unknown[] });
  }
  return err;
}
