import {
  fetchAndStoreMedia,
  markUnavailable,
  type MediaChunkWriter,
  type MediaFetchInput,
  type MediaFetchResult,
  type MediaSource,
} from '../domain/messaging';
import type { Config, Db } from '../domain/platform';
import { heartbeat } from './providers/heartbeat';
import { fetchMediaFile, retryable } from './providers/inbound-media';

/**
 * The fetch of an inbound media file, run by inboundMediaWorkflow: the provider's adapter
 * (activities/providers/inbound-media.ts) fetches it into the chunked store
 * (domain/messaging/media.ts fetchAndStoreMedia), beating at each chunk written.
 */
export function createInboundMediaActivities({ db, config }: { db: Db; config: Pick<Config, 'allowPrivateUrls' | 'encryptionKeys'> }) {
  return {
    /** Fetches and stores one inbound media file: `stored` or `unavailable`; a try that can be fixed fails retryably. */
    async fetchInboundMedia(input: MediaFetchInput): Promise<MediaFetchResult> {
      const fetchFile = (source: MediaSource, sink: MediaChunkWriter) => fetchMediaFile(source, sink, config.allowPrivateUrls);
      const result = await fetchAndStoreMedia(db, config.encryptionKeys!, input, fetchFile, heartbeat);
      // Another try of the same file overlapped this one (a worker presumed dead): write it again.
      if ('retry' in result) throw retryable(result.retry);
      return result;
    },

    /** The workflow's last word when every try failed: `unavailable` with the reason (a pending row only). */
    async markInboundMediaUnavailable(input: MediaFetchInput & { reason: string }): Promise<void> {
      await markUnavailable(db, input.workspaceId, input.messageId, input.reason);
    },
  };
}

export type InboundMediaActivities = ReturnType<typeof createInboundMediaActivities>;
