import {
  answeredWithoutId,
  assertConfigured,
  OutboundMessage,
  ProviderAdapter,
  ProviderConnection,
  ProviderError,
  ProviderFailure,
  SendOptions,
  clip,
  excerpt,
  postJson,
  redactSecrets,
} from './types';
import type { SentMessage } from '../../types/messaging';

/**
 * WhatsApp Cloud API (Graph API) adapter.
 *
 * `POST {baseUrl}/{apiVersion}/{phoneNumberId}/messages`, `Authorization: Bearer <accessToken>`,
 * body `{ messaging_product: 'whatsapp', recipient_type: 'individual', to, type, <type>: {...},
 * biz_opaque_callback_data }` (a template: `{ name, language: { code }, components: [{ type:
 * 'header' | 'body', parameters }, { type: 'button', sub_type: 'url', index: '0', parameters }] }`); success `{ messaging_product, contacts: [{ input, wa_id }],
 * messages: [{ id }] }`; failure `{ error: { message, type, code, error_data: { details },
 * error_subcode?, fbtrace_id } }`.
 *
 * The adapter only classifies failures (ProviderError.failure / retryable); it never retries:
 * Temporal's activity retry policy does, and a non-retryable error stops it.
 */
export const DEFAULT_API_VERSION = 'v21.0';
const SERVICE = 'WhatsApp Cloud API';

/** Cloud API error codes we act on. Anything else is REJECTED (or UNAVAILABLE when HTTP 5xx). */
const CODE_FAILURES: Record<number, ProviderFailure> = {
  131047: 'WINDOW_CLOSED', // Re-engagement message: more than 24 h since the customer last wrote
  132000: 'TEMPLATE_INVALID', // Number of parameters does not match the template
  132001: 'TEMPLATE_INVALID', // Template does not exist (in this language)
  132012: 'TEMPLATE_INVALID', // Parameter format does not match the template
  131053: 'MEDIA_TOO_LARGE', // Media upload error (too large, unsupported, unreachable)
  131026: 'UNDELIVERABLE', // Message undeliverable (not on WhatsApp, old app, blocked...)
  130429: 'THROTTLED', // Cloud API throughput reached
  131056: 'THROTTLED', // Pair rate limit: too many messages to this recipient
  131048: 'THROTTLED', // Spam rate limit
  4: 'THROTTLED', // Graph API: application request limit reached
  80007: 'THROTTLED', // WhatsApp Business Account rate limit
  2: 'UNAVAILABLE', // Graph API: service temporarily unavailable
  131016: 'UNAVAILABLE', // Service overloaded / unavailable
};

/** What each outcome means, in words an operator reads in the Temporal UI. */
const EXPLANATION: Record<ProviderFailure, string> = {
  WINDOW_CLOSED: 'the recipient has not written in the last 24 hours, so WhatsApp only accepts an approved template',
  TEMPLATE_INVALID: 'WhatsApp refused the template (unknown or unapproved name or language, or variables that do not match it)',
  MEDIA_TOO_LARGE: 'WhatsApp could not accept the media file (too large for its type, unsupported, or unreachable)',
  UNDELIVERABLE: 'WhatsApp cannot deliver to this number (not on WhatsApp, or unable to receive)',
  THROTTLED: 'WhatsApp is rate limiting this sender (temporary; trying again later can help)',
  UNAVAILABLE: 'the WhatsApp Cloud API is unavailable (temporary; trying again can help)',
  REJECTED: 'WhatsApp refused the request',
};

/** A Graph API error body's `error` (the Cloud API's and Instagram's alike). */
export type GraphError = {
  message?: unknown;
  type?: unknown;
  code?: unknown;
  error_subcode?: unknown;
  error_data?: { details?: unknown };
  fbtrace_id?: unknown;
};

/** A Graph API error code (a number, or digits as text), else undefined. */
export function asCode(value: unknown): number | undefined {
  const n = typeof value === 'string' && /^\d+$/.test(value) ? Number(value) : value;
  return typeof n === 'number' && Number.isInteger(n) ? n : undefined;
}

/** Classifies a non-2xx answer. Exported for tests and for whoever needs the same mapping. */
export function classifyCloudError(status: number, code: number | undefined): ProviderFailure {
  if (code !== undefined && CODE_FAILURES[code]) return CODE_FAILURES[code];
  if (status >= 500) return 'UNAVAILABLE';
  if (status === 429) return 'THROTTLED';
  return 'REJECTED';
}

function buildBody(message: OutboundMessage): Record<string, unknown> {
  const body: Record<string, unknown> = {
    messaging_product: 'whatsapp',
    recipient_type: 'individual',
    to: message.to,
    type: message.type,
  };
  const need = (value: string | undefined, field: string): string => {
    if (!value) throw new ProviderError('REJECTED', `Cannot send a ${message.type} message without ${field} (nothing was sent)`);
    return value;
  };
  switch (message.type) {
    case 'text': {
      const text = need(message.text, 'its text');
      // Link previews only when the text carries a link (the API's default is no preview).
      body.text = /https?:\/\/\S/i.test(text) ? { body: text, preview_url: true } : { body: text };
      break;
    }
    case 'image':
    case 'video':
      body[message.type] = { link: need(message.mediaUrl, 'a media URL'), ...(message.caption ? { caption: message.caption } : {}) };
      break;
    case 'audio':
      // Audio takes no caption on the Cloud API.
      body.audio = { link: need(message.mediaUrl, 'a media URL') };
      break;
    case 'document':
      body.document = {
        link: need(message.mediaUrl, 'a media URL'),
        ...(message.caption ? { caption: message.caption } : {}),
        ...(message.fileName ? { filename: message.fileName } : {}),
      };
      break;
    case 'template': {
      // Header, body and URL buttons as the send rules built them; without them (a broadcast
      // prepared before templates had headers), the body's variables.
      const variables = message.templateVariables ?? [];
      const components =
        message.templateComponents ??
        (variables.length > 0 ? [{ type: 'body', parameters: variables.map((text) => ({ type: 'text', text })) }] : []);
      body.template = {
        name: need(message.templateName, 'a template name'),
        language: { code: need(message.templateLanguage, 'a template language') },
        ...(components.length > 0 ? { components } : {}),
      };
      break;
    }
    default:
      throw new ProviderError('REJECTED', `Unknown message type "${String((message as { type: unknown }).type)}" (nothing was sent)`);
  }
  if (message.reference) body.biz_opaque_callback_data = message.reference;
  return body;
}

/** `scrub` redacts the secrets from the provider's words before they are cut short (a cut secret would escape redaction). */
function failureMessage(
  failure: ProviderFailure,
  status: number,
  error: GraphError | undefined,
  rawText: string,
  scrub: (text: string) => string,
): string {
  const code = asCode(error?.code);
  const subcode = asCode(error?.error_subcode);
  let explanation = EXPLANATION[failure];
  if (failure === 'REJECTED' && (status === 401 || code === 190)) {
    explanation = "WhatsApp refused the instance's access token (expired, revoked or wrong); update the instance's access token";
  } else if (failure === 'REJECTED' && (status === 403 || code === 10 || code === 200)) {
    explanation = 'WhatsApp says the access token lacks permission for this phone number id; check the instance configuration';
  } else if (failure === 'REJECTED' && code === 100) {
    explanation = 'WhatsApp says the request has an invalid parameter';
  } else if (failure === 'UNAVAILABLE') {
    explanation = `the WhatsApp Cloud API is unavailable (HTTP ${status}; temporary, trying again can help)`;
  }
  const parts: string[] = [];
  if (code !== undefined) parts.push(`code ${code}${subcode !== undefined ? `/${subcode}` : ''}`);
  parts.push(`HTTP ${status}`);
  let said = '';
  if (error && typeof error.message === 'string') said = clip(scrub(error.message));
  else if (rawText) said = excerpt(scrub(rawText));
  const details = typeof error?.error_data?.details === 'string' ? clip(scrub(error.error_data.details)) : '';
  const trace = typeof error?.fbtrace_id === 'string' ? ` [fbtrace_id ${clip(scrub(error.fbtrace_id), 100)}]` : '';
  const provider = [said, details].filter(Boolean).join(' — ');
  return `Send failed: ${explanation}. WhatsApp said (${parts.join(', ')})${provider ? `: ${provider}` : ''}${trace}`;
}

export const cloudAdapter: ProviderAdapter = {
  // Meta fetches the link from its own network, outside ours: the link stays a link.
  wantsMediaBytes: false,
  async send(connection: ProviderConnection, message: OutboundMessage, options: SendOptions = {}): Promise<SentMessage> {
    const { baseUrl, phoneNumberId, accessToken } = connection.config;
    const apiVersion = connection.config.apiVersion || DEFAULT_API_VERSION;
    assertConfigured(connection, 'Cloud API', { 'base URL': baseUrl, 'phone number id': phoneNumberId, 'access token': accessToken });
    const secrets = [accessToken];
    const scrub = (text: string): string => redactSecrets(text, secrets);
    const url = `${baseUrl!.replace(/\/+$/, '')}/${encodeURIComponent(apiVersion)}/${encodeURIComponent(phoneNumberId!)}/messages`;
    const body = buildBody(message);
    const answer = await postJson(url, {
      headers: { authorization: `Bearer ${accessToken}` },
      body,
      timeoutMs: options.timeoutMs,
      service: SERVICE,
      secrets,
    });

    if (answer.status >= 200 && answer.status < 300) {
      const ok = answer.json as { contacts?: Array<{ wa_id?: unknown }>; messages?: Array<{ id?: unknown }> } | undefined;
      const id = ok?.messages?.[0]?.id;
      if (typeof id !== 'string' || !id) throw answeredWithoutId('The WhatsApp Cloud API', answer, secrets);
      const waId = ok?.contacts?.[0]?.wa_id;
      return { providerMessageId: id, ...(typeof waId === 'string' && waId ? { waId } : {}) };
    }

    const error = (answer.json as { error?: GraphError } | undefined)?.error;
    const code = asCode(error?.code);
    const failure = classifyCloudError(answer.status, code);
    throw new ProviderError(failure, redactSecrets(failureMessage(failure, answer.status, error, answer.text, scrub), secrets), {
      providerCode: code,
      httpStatus: answer.status,
    });
  },
};
