import type { Config } from '../domain/config';
import type { Db } from '../domain/db';
import { sendRequestOf } from '../domain/send-requests';
import { ApiError } from '../domain/errors';
import { refusalsAsFailures } from '../domain/failures';
import { safeRequest, SafeHttpError, type SafeResponse } from '../domain/safe-http';
import { checkMediaSize, MEDIA_LIMITS } from '../domain/sending';
import type { UrlPolicy } from '../domain/url-safety';
import type { MediaFile } from './providers/types';

/**
 * A media URL's requests go through safeRequest: every address the host resolves to must be
 * public, the connection goes to exactly those addresses (a DNS-rebinding name cannot swap in a
 * private one), and no redirect is followed. The URL must serve the file itself: a 3xx is 400
 * INVALID_URL, whatever it points at (a metadata address, another host), for every provider.
 */

/** How long the download of a media file for a web gateway may take (documents reach 100 MB). */
export const MEDIA_DOWNLOAD_TIMEOUT_MS = 60_000;

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
 * The file behind a media URL, for a provider that is given the bytes instead of the URL (a web
 * gateway fetches URLs from its own network, where our checks do not reach). At most one byte
 * past the type's size limit (MEDIA_LIMITS) is read: a larger file is 422 MEDIA_TOO_LARGE however
 * its Content-Length lied. A file that cannot be downloaded is 422 MEDIA_TOO_LARGE too, the code
 * the Cloud API's "media could not be fetched" (131053) already has; no answer, a 5xx or a 429
 * (and a temporary DNS failure, DNS_UNAVAILABLE) are retried by the caller's retry policy first.
 * Throws the activity failure (domain/failures.ts).
 */
export async function downloadMedia(url: string, type: string, policy: UrlPolicy): Promise<MediaFile> {
  const limit = MEDIA_LIMITS[type];
  if (limit === undefined) throw new Error(`No size limit for media type "${type}"`);
  let transient = false;
  const failed = (reason: string, retryable: boolean): ApiError => {
    transient = retryable;
    return new ApiError('MEDIA_TOO_LARGE', `The media file could not be downloaded from mediaUrl (${reason}); a web gateway instance is sent the file itself, so the URL must serve it`, {
      hint: 'Check that mediaUrl answers a GET with the file (2xx, no redirect) from the public internet.',
    });
  };
  return refusalsAsFailures(
    async () => {
      let res: SafeResponse;
      try {
        res = await requestMedia(url, 'GET', policy, { timeoutMs: MEDIA_DOWNLOAD_TIMEOUT_MS, maxBodyBytes: limit + 1 });
      } catch (err) {
        if (err instanceof SafeHttpError) throw failed(err.message, true);
        throw err;
      }
      if (res.status < 200 || res.status >= 300) throw failed(`it answered HTTP ${res.status}`, res.status >= 500 || res.status === 429);
      checkMediaSize(type, res.bytes.length, { atLeast: res.bytes.length > limit });
      const declared = /^[\w.+-]+\/[\w.+-]+/.exec(String(res.headers['content-type'] ?? ''))?.[0].toLowerCase();
      return { data: res.bytes, mimetype: declared ?? 'application/octet-stream' };
    },
    { retryable: (err) => err.code === 'DNS_UNAVAILABLE' || transient },
  );
}

/**
 * The media URL's anti-SSRF check with DNS and a size check with a HEAD request (no redirects
 * followed: a 3xx is INVALID_URL). A temporary DNS failure is retried (MEDIA_CHECK), then answered
 * 503 DNS_UNAVAILABLE. A size we cannot learn (no answer, no Content-Length, a HEAD refused) is
 * left to the provider, or to the download for a web gateway (downloadMedia).
 */
export function createMediaActivities({ db, config }: { db: Db; config: Pick<Config, 'allowPrivateUrls'> }) {
  return {
    /** The media of a stored send request (or, for a send started before send_requests, the URL and type given). */
    async checkMedia(input: { workspaceId: string; requestId: string } | { url: string; type: string }): Promise<{ bytes: number | null }> {
      // A temporary DNS failure is worth the retry policy's few tries; any other refusal is final.
      return refusalsAsFailures(
        async () => {
          const { url, type } = 'url' in input ? input : await mediaOf(db, input);
          let bytes: number | null = null;
          try {
            // The check and the HEAD in one: the request connects only to the addresses the check approved.
            const res = await requestMedia(url, 'HEAD', { allowPrivate: config.allowPrivateUrls }, { timeoutMs: 5000, maxBodyBytes: 0 });
            const length = Number(res.headers['content-length']);
            if (res.status >= 200 && res.status < 300 && Number.isFinite(length) && length > 0) bytes = length;
          } catch (err) {
            if (!(err instanceof SafeHttpError)) throw err;
            bytes = null; // unreachable from here: the provider (or the download) will say
          }
          checkMediaSize(type, bytes);
          return { bytes };
        },
        { retryable: (err) => err.code === 'DNS_UNAVAILABLE' },
      );
    },
  };
}

async function mediaOf(db: Db, input: { workspaceId: string; requestId: string }): Promise<{ url: string; type: string }> {
  const { message } = await sendRequestOf(db, input);
  if (!message.mediaUrl) throw new ApiError('VALIDATION', 'This send carries no mediaUrl');
  return { url: message.mediaUrl, type: message.type };
}

export type MediaActivities = ReturnType<typeof createMediaActivities>;
