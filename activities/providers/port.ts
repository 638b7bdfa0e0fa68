import type { ProviderPort } from '../../domain/messaging';
import { downloadMedia, MEDIA_DOWNLOAD_TIMEOUT_MS, type MediaDownload } from './media-download';
import { adapterFor, sendThroughProvider } from './index';
import { failureCode, mayHaveReachedProvider, MEDIA_SEND_TIMEOUT_MS, ProviderError, type OutboundMessage } from './types';

/**
 * The send engine's provider port (domain/messaging/send/attempt.ts) over the adapters: one call,
 * classified. For a provider given media as bytes (a web gateway), the file is downloaded while
 * it is uploaded, chunk by chunk: never whole in memory nor in a workflow's history, and a failed
 * download (before or during the upload, which it then aborts) is the call's failure.
 */
export function providerPort(options: { allowPrivateUrls: boolean }): ProviderPort {
  return {
    async call(connection, message) {
      const outbound: OutboundMessage = { ...message };
      let download: MediaDownload | undefined;
      try {
        if (outbound.mediaUrl && adapterFor(connection.provider).wantsMediaBytes) {
          download = await downloadMedia(outbound.mediaUrl, outbound.type, { allowPrivate: options.allowPrivateUrls });
          outbound.mediaFile = download;
        }
        // A streamed file is downloaded while it is uploaded: the upload's deadline spans both.
        const timeouts = download ? { timeoutMs: MEDIA_DOWNLOAD_TIMEOUT_MS + MEDIA_SEND_TIMEOUT_MS } : {};
        return { outcome: 'sent', sent: await sendThroughProvider(connection, outbound, timeouts) };
      } catch (thrown) {
        // A download that failed mid-upload aborted it: the download's failure is the call's.
        const err = download?.failure ?? thrown;
        if (mayHaveReachedProvider(err)) return { outcome: 'unanswered', error: (err as Error).message };
        if (!(err instanceof ProviderError)) throw err;
        // Throttling (Cloud API 130429/131056) or an outage: nothing was sent, and later may work.
        if (err.retryable) return { outcome: 'throttled', error: err.message };
        return { outcome: 'refused', code: failureCode(err.failure), error: err.message };
      } finally {
        download?.close();
      }
    },
  };
}
