import type { Config } from '../domain/platform/config';
import type { Db } from '../domain/platform/db';
import { sendRequestOf } from '../domain/messaging/send-requests';
import { ApiError } from '../domain/kernel/errors';
import { refusalsAsFailures, toFailure } from '../domain/messaging/failures';
import { safeRequest, safeStream, SafeHttpError, type SafeResponse, type SafeStreamResponse } from '../domain/platform/safe-http';
import { checkMediaSize, MEDIA_LIMITS } from '../domain/messaging/sending';
import type { UrlPolicy } from '../domain/platform/url-safety';
import type { MediaFile } from './providers/types';

/**
 * A media URL's requests go through safeRequest: every address the host resolves to must be
 * public, the connection goes to exactly those addresses (a DNS-rebinding name cannot swap in a
 * private one), and no redirect is followed. The URL must serve the file itself: a 3xx is 400
 * INVALID_URL, whatever it points at (a metadata address, another host), for every provider.
 */

/** How long the download of a media file for a web gateway may take (documents reach 100 MB). */
export const MEDIA_DOWNLOAD_TIMEOUT_MS = 60_000;

/** A redirect is 400 INVALID_URL: the URL must serve the file itself. */
function refuseRedirect(status: number): void {
  if (status >= 300 && status < 400) {
    throw new ApiError('INVALID_URL', `Invalid mediaUrl: it answered with a redirect (HTTP ${status}), and redirects are never followed`, {
      hint: 'Give the URL that serves the file itself (a 2xx answer), not one that redirects to it.',
    });
  }
}

async function requestMedia(
  url: string,
  method: 'HEAD' | 'GET',
  policy: UrlPolicy,
  limits: { timeoutMs: number; maxBodyBytes: number },
): Promise<SafeResponse> {
  const res = await safeRequest(url, { method, policy, field: 'mediaUrl', ...limits });
  refuseRedirect(res.status);
  return res;
}

/** A media file being downloaded: its chunks as they arrive (read once), and how to stop early. */
export interface MediaDownload extends MediaFile {
  data: AsyncIterable<Buffer>;
  /** Stops the download (harmless once it ended): the sender calls it whatever happened. */
  close(): void;
  /** The activity failure `data` threw, if it did: the send's failure, whatever the upload made of it. */
  readonly failure?: unknown;
}

/**
 * The file behind a media URL, for a provider that is given the bytes instead of the URL (a web
 * gateway fetches URLs from its own network, where our checks do not reach), streamed: this
 * resolves at the answer's headers, and `data` yields the file as it arrives, so the caller passes
 * it on without holding it (at most one chunk at a time). Past the type's size limit
 * (MEDIA_LIMITS) the file is 422 MEDIA_TOO_LARGE, from a Content-Length above it at once, else as
 * soon as the bytes counted go past it, whatever Content-Length said: `data` throws and reads no
 * further. A file that cannot be downloaded is 422 MEDIA_TOO_LARGE too, the code the Cloud API's
 * "media could not be fetched" (131053) already has; no answer, a 5xx or a 429, an answer cut off
 * or not finished within MEDIA_DOWNLOAD_TIMEOUT_MS (and a temporary DNS failure, DNS_UNAVAILABLE)
 * are retried by the caller's retry policy first, which downloads again. Throws (and `data`
 * throws) the activity failure (domain/messaging/failures.ts).
 */
export async function downloadMedia(url: string, type: string, policy: UrlPolicy): Promise<MediaDownload> {
  const limit = MEDIA_LIMITS[type];
  if (limit === undefined) throw new Error(`No size limit for media type "${type}"`);
  let transient = false;
  const failed = (reason: string, retryable: boolean): ApiError => {
    transient = retryable;
    return new ApiError(
      'MEDIA_TOO_LARGE',
      `The media file could not be downloaded from mediaUrl (${reason}); a web gateway instance is sent the file itself, so the URL must serve it`,
      {
        hint: 'Check that mediaUrl answers a GET with the file (2xx, no redirect) from the public internet.',
      },
    );
  };
  const retryable = (err: ApiError): boolean => err.code === 'DNS_UNAVAILABLE' || transient;
  const res = await refusalsAsFailures(
    async () => {
      let res: SafeStreamResponse;
      try {
        res = await safeStream(url, { method: 'GET', policy, field: 'mediaUrl', timeoutMs: MEDIA_DOWNLOAD_TIMEOUT_MS });
      } catch (err) {
        if (err instanceof SafeHttpError) throw failed(err.message, true);
        throw err;
      }
      try {
        refuseRedirect(res.status);
        if (res.status < 200 || res.status >= 300) throw failed(`it answered HTTP ${res.status}`, res.status >= 500 || res.status === 429);
        const length = Number(res.headers['content-length']);
        if (Number.isFinite(length)) checkMediaSize(type, length);
      } catch (err) {
        res.cancel(); // the body of a refused answer is never read
        throw err;
      }
      return res;
    },
    { retryable },
  );

  let failure: unknown;
  async function* data(): AsyncGenerator<Buffer> {
    let bytes = 0;
    try {
      for await (const chunk of res.body) {
        bytes += chunk.length;
        // Counted, not declared: a Content-Length that lied is caught here, before the chunk goes on.
        checkMediaSize(type, bytes, { atLeast: true });
        yield chunk;
      }
    } catch (err) {
      failure = err instanceof SafeHttpError ? failed(err.message, true) : err;
      if (failure instanceof ApiError) failure = toFailure(failure, { retryable: retryable(failure) });
      throw failure;
    } finally {
      res.cancel();
    }
  }
  const declared = /^[\w.+-]+\/[\w.+-]+/.exec(String(res.headers['content-type'] ?? ''))?.[0].toLowerCase();
  return {
    data: data(),
    mimetype: declared ?? 'application/octet-stream',
    close: res.cancel,
    get failure() {
      return failure;
    },
  };
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
