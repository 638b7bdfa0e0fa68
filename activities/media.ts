import { ApplicationFailure } from '@temporalio/activity';
import type { Config } from '../domain/config';
import { ApiError } from '../domain/errors';
import { assertPublicUrl } from '../domain/url-safety';
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
 * and a size check with a HEAD request (no redirects followed). A size we cannot learn is left
 * to the provider, which reports it as MEDIA_TOO_LARGE (131053).
 */
export function createMediaActivities({ config }: { config: Pick<Config, 'allowPrivateUrls'> }) {
  return {
    async checkMedia(input: { url: string; type: string }): Promise<{ bytes: number | null }> {
      try {
        await assertPublicUrl(input.url, { allowPrivate: config.allowPrivateUrls }, { field: 'mediaUrl' });
      } catch (err) {
        if (err instanceof ApiError) throw businessFailure(err);
        throw err;
      }
      const limit = MEDIA_LIMITS[input.type];
      let bytes: number | null = null;
      try {
        const res = await fetch(input.url, { method: 'HEAD', redirect: 'manual', signal: AbortSignal.timeout(5000) });
        const length = Number(res.headers.get('content-length'));
        if (res.ok && Number.isFinite(length) && length > 0) bytes = length;
      } catch {
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
