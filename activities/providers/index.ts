import { cloudAdapter } from './cloud';
import { webAdapter } from './web';
import { instagramAdapter } from './instagram';
import { OutboundMessage, ProviderAdapter, ProviderConnection, ProviderError, SendOptions, redactSecrets } from './types';
import type { SentMessage } from '../../types/messaging';

export * from './types';
export { cloudAdapter, classifyCloudError, DEFAULT_API_VERSION } from './cloud';
export { webAdapter } from './web';

/** The adapter that speaks an instance's provider. */
export function adapterFor(provider: ProviderConnection['provider']): ProviderAdapter {
  switch (provider) {
    case 'cloud':
      return cloudAdapter;
    case 'web':
      return webAdapter;
    case 'instagram':
      return instagramAdapter;
    default:
      throw new ProviderError('REJECTED', `Unknown provider "${String(provider)}" (nothing was sent)`);
  }
}

/**
 * Sends one message through the instance's provider. Every failure comes out as a ProviderError
 * (`failure`, `retryable`, plain-words message without secrets); the caller (a Temporal activity)
 * decides what to do with it, typically ApplicationFailure.nonRetryable when `retryable` is false.
 * No retries here.
 */
export async function sendThroughProvider(
  connection: ProviderConnection,
  message: OutboundMessage,
  options: SendOptions = {},
): Promise<SentMessage> {
  try {
    return await adapterFor(connection.provider).send(connection, message, options);
  } catch (err) {
    if (err instanceof ProviderError) throw err;
    // Not a provider answer but a failure before any HTTP left (a bug, a broken configuration):
    // nothing was sent, and the same input would fail the same way, so it is final.
    const text = err instanceof Error ? err.message : String(err);
    throw new ProviderError(
      'REJECTED',
      redactSecrets(`Unexpected error before calling the ${connection.provider} provider (nothing was sent): ${text}`, [
        connection.config?.accessToken,
      ]),
      { retryable: false, mayHaveReached: false },
    );
  }
}
