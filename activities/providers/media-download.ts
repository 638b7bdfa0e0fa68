import { ApiError } from '../../domain/kernel';
import { checkMediaSize, MEDIA_LIMITS, refusalsAsFailures, toFailure } from '../../domain/messaging';
import { safeRequest, safeStream, SafeHttpError, type SafeStreamResponse, type UrlPolicy } from '../../domain/platform';
import type { MediaFile } from './types';

/**
 * A send's media URL over HTTP (its size before the send, its bytes for a web gateway). Requests go
 * through safe-http: every address the host resolves to must be public, the connection goes to
 * exactly those addresses (a DNS-rebinding name cannot swap in a private one), and no redirect is
 * followed. The URL must serve the file itself: a 3xx is 400 INVALID_URL, whatever it points at (a
 * metadata address, another host), for every provider.
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

/**
 * The size of the file behind a media URL, from a HEAD (the URL check and the request in one: it
 * connects only to the addresses the check approved). Null when it cannot be learnt: no answer, no
 * Content-Length, a HEAD refused. A redirect is INVALID_URL, a refused URL its ApiError.
 */
export async function mediaSizeAt(url: string, policy: UrlPolicy): Promise<number | null> {
  try {
    const res = await safeRequest(url, { method: 'HEAD', policy, field: 'mediaUrl', timeoutMs: 5000, maxBodyBytes: 0 });
    refuseRedirect(res.status);
    const length = Number(res.headers['content-length']);
    return res.status >= 200 && res.status < 300 && Number.isFinite(length) && length > 0 ? length : null;
  } catch (err) {
    if (!(err instanceof SafeHttpError)) throw err;
    return null; // unreachable from here: the provider (or the download) will say
  }
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
