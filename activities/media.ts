import type { Config } from '../domain/config';
import { ApiError } from '../domain/errors';
import { refusalsAsFailures } from '../domain/failures';
import { safeRequest, SafeHttpError, type SafeResponse } from '../domain/safe-http';
import { checkMediaSize } from '../domain/sending';
import type { UrlPolicy } from '../domain/url-safety';

/**
 * A media URL's requests go through safeRequest: every address the host resolves to must be
 * public, the connection goes to exactly those addresses (a DNS-rebinding name cannot swap in a
 * private one), and no redirect is followed. The URL must serve the file itself: a 3xx is 400
 * INVALID_URL, whatever it points at (a metadata address, another host), for every provider.
 */

async function requestMedia(url: string, method: 'HEAD' | 'GET', policy: UrlPolicy, limits: { timeoutMs: number; maxBodyBytes: number }): Promise<SafeResponse> {
  const res = await safeRequest(url, { method, policy, field: 'mediaUrl', ...limits });
  if (res.status >= 300 && res.status < 400) {
    throw new ApiError('INVALID_URL', `Invalid mediaUrl: it answered with a redirect (HTTP ${res.status}), and redirects are never followed`, {
      hint: 'Give the URL that serves the file itself (a 2xx answer), not one that redirects to it.',
    });
  }
  return res;
}

/**
 * The media URL's anti-SSRF check with DNS and a size check with a HEAD request (no redirects
 * followed: a 3xx is INVALID_URL). A temporary DNS failure is retried (MEDIA_CHECK), then answered
 * 503 DNS_UNAVAILABLE. A size we cannot learn (no answer, no Content-Length, a HEAD refused) is
 * left to the provider.
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
            const res = await requestMedia(input.url, 'HEAD', { allowPrivate: config.allowPrivateUrls }, { timeoutMs: 5000, maxBodyBytes: 0 });
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
