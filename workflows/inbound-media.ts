import { ActivityFailure, proxyActivities } from '@temporalio/workflow';
import type * as activities from '../activities';
import { MEDIA_FETCH, MEDIA_FETCH_WINDOW, RECORD } from './profiles';

type Activities = ReturnType<typeof activities.createActivities>;

const fetcher = proxyActivities<Activities>(MEDIA_FETCH);
const recorder = proxyActivities<Activities>(RECORD);

export interface InboundMediaInput {
  workspaceId: string;
  messageId: string;
}

/**
 * One inbound media message's file (docs/messaging.md, "Media"): fetched from the provider and
 * stored (`stored`), or, when the provider refuses for good or every try within MEDIA_FETCH's
 * window fails, `unavailable` with a reason. Started by the worker's media dispatcher from the
 * message's `pending` row (workers/media-dispatcher.ts), id `media/<workspaceId>/<messageId>`.
 * The message itself never waits for it.
 */
export async function inboundMediaWorkflow(input: InboundMediaInput): Promise<{ status: string; reason?: string }> {
  try {
    return await fetcher.fetchInboundMedia(input);
  } catch (err) {
    const cause = err instanceof ActivityFailure && err.cause ? err.cause.message : String(err);
    const reason = `the file could not be fetched from the provider within ${MEDIA_FETCH_WINDOW} of tries; last failure: ${cause}`;
    await recorder.markInboundMediaUnavailable({ ...input, reason });
    return { status: 'unavailable', reason };
  }
}
