import { ApplicationFailure } from '@temporalio/activity';
import type { Config } from '../domain/config';
import { ApiError } from '../domain/errors';
import { safeRequest, SafeHttpError } from '../domain/safe-http';
import { businessFailure } from './messaging';

/** Largest media the provider accepts per type (WhatsApp Cloud API limits). */
export const MEDIA_LIMITS: Record<string, number> = {
  image: 5 * 1024 * 1024,
  video: 16 * 1024 * 1024,
  audio: 16 * 1024 * 1024,
  document: 100 * 1024 * 1024,
};

/**
 * The media URL's anti-SSRF check with DNS (every address the host resolves to must be public)
 * and a size check with a HEAD request pinned to those addresses (no redirects followed). A
 * temporary DNS failure is retried (MEDIA_CHECK), then answered 503 DNS_UNAVAILABLE. A size we cannot learn is left
 * to the provider, which reports it as MEDIA_TOO_LARGE (131053).
 */
export function createMediaActivities({ config }: { config: Pick<Config, 'allowPrivateUrls'> }) {
  return {
    async checkMedia(input: { url: string; type: string }): Promise<{ bytes: number | null }> {
      const limit = MEDIA_LIMITS[input.type];
      let bytes: number | null = null;
      try {
        // The check and the HEAD in one: the request connects only to the addresses the check approved.
        const res = await safeRequest(input.url, { method: 'HEAD', timeoutMs: 5000, policy: { allowPrivate: config.allowPrivateUrls }, field: 'mediaUrl', maxBodyBytes: 0 });
        const length = Number(res.headers['content-length']);
        if (res.status >= 200 && res.status < 300 && Number.isFinite(length) && length > 0) bytes = length;
      } catch (err) {
        if (err instanceof ApiError && err.code === 'DNS_UNAVAILABLE') {
          throw ApplicationFailure.create({ type: err.code, message: err.message, nonRetryable: false, details: [{ hint: err.hint }] });
        }
        if (err instanceof ApiError) throw businessFailure(err);
        if (!(err instanceof SafeHttpError)) throw err;
        bytes = null; // unreachable from here: the provider will say
      }
      if (limit !== undefined && bytes !== null && bytes > limit) {
        throw ApplicationFailure.create({
          type: 'MEDIA_TOO_LARGE',
          nonRetryable: true,
          message: `The ${input.type} is ${(bytes / 1048576).toFixed(1)} MB; the limit is ${limit / 1048576} MB`,
        });
      }
      return { bytes };
    },
  };
}

export type MediaActivities = ReturnType<typeof createMediaActivities>;
