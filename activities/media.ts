import type { Config } from '../domain/config';
import { refusalsAsFailures } from '../domain/failures';
import { safeRequest, SafeHttpError } from '../domain/safe-http';
import { checkMediaSize } from '../domain/sending';

/**
 * The media URL's anti-SSRF check with DNS (every address the host resolves to must be public)
 * and a size check with a HEAD request pinned to those addresses (no redirects followed). A
 * temporary DNS failure is retried (MEDIA_CHECK), then answered 503 DNS_UNAVAILABLE. A size we cannot learn is left
 * to the provider, which reports it as MEDIA_TOO_LARGE (131053).
 */
export function createMediaActivities({ config }: { config: Pick<Config, 'allowPrivateUrls'> }) {
  return {
    async checkMedia(input: { url: string; type: string }): Promise<{ bytes: number | null }> {
      // A temporary DNS failure is worth the retry policy's few tries; any other refusal is final.
      return refusalsAsFailures(
        async () => {
          let bytes: number | null = null;
          try {
            // The check and the HEAD in one: the request connects only to the addresses the check approved.
            const res = await safeRequest(input.url, { method: 'HEAD', timeoutMs: 5000, policy: { allowPrivate: config.allowPrivateUrls }, field: 'mediaUrl', maxBodyBytes: 0 });
            const length = Number(res.headers['content-length']);
            if (res.status >= 200 && res.status < 300 && Number.isFinite(length) && length > 0) bytes = length;
          } catch (err) {
            if (!(err instanceof SafeHttpError)) throw err;
            bytes = null; // unreachable from here: the provider will say
          }
          checkMediaSize(input.type, bytes);
          return { bytes };
        },
        { retryable: (err) => err.code === 'DNS_UNAVAILABLE' },
      );
    },
  };
}

export type MediaActivities = ReturnType<typeof createMediaActivities>;
