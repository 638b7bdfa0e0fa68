import { checkSendMedia, refusalsAsFailures } from '../domain/messaging';
import type { Config, Db } from '../domain/platform';
import { mediaSizeAt } from './providers/media-download';

/**
 * A send's media URL checked before the send (domain/messaging/media.ts checkSendMedia): the
 * anti-SSRF check with DNS and the size from a HEAD (no redirects followed: a 3xx is INVALID_URL).
 * A temporary DNS failure is retried (MEDIA_CHECK), then answered 503 DNS_UNAVAILABLE; any other
 * refusal is final.
 */
export function createMediaActivities({ db, config }: { db: Db; config: Pick<Config, 'allowPrivateUrls'> }) {
  return {
    /** The media of a stored send request (or, for a send started before send_requests, the URL and type given). */
    async checkMedia(input: { workspaceId: string; requestId: string } | { url: string; type: string }): Promise<{ bytes: number | null }> {
      const sizeAt = (url: string) => mediaSizeAt(url, { allowPrivate: config.allowPrivateUrls });
      return refusalsAsFailures(() => checkSendMedia(db, input, sizeAt), { retryable: (err) => err.code === 'DNS_UNAVAILABLE' });
    },
  };
}

export type MediaActivities = ReturnType<typeof createMediaActivities>;
