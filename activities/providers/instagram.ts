import type { SentMessage } from '../../types/messaging';
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
import { asCode, type GraphError } from './cloud';

/**
 * Instagram messaging (Graph API) adapter.
 *
 * `POST {baseUrl}/{apiVersion}/{igUserId}/messages`, `Authorization: Bearer <accessToken>`, body
 * `{ recipient: { id: <IGSID> }, messaging_type: 'RESPONSE' | 'MESSAGE_TAG', tag?: 'HUMAN_AGENT',
 * message: { text } | { attachment: { type: image | video | audio | file, payload: { url } } } }`;
 * success `{ recipient_id, message_id }`; failure the Graph API's `{ error: { message, type, code,
 * error_subcode?, fbtrace_id } }`. Instagram takes no templates and no captions: the send rules
 * refuse those before a call (domain/messaging/sending.ts).
 */
export const DEFAULT_INSTAGRAM_API_VERSION = 'v21.0';
const SERVICE = 'Instagram Graph API';

/** `code` or `code/subcode` → our failure. Anything else is REJECTED (or UNAVAILABLE when HTTP 5xx). */
const FAILURES: Record<string, ProviderFailure> = {
  '10/2534022': 'WINDOW_CLOSED', // sent outside of the allowed window (24 h; 7 days with HUMAN_AGENT)
  '100/2018001': 'UNDELIVERABLE', // no matching user: the IGSID is not (or no longer) this account's
  '551': 'UNDELIVERABLE', // this person isn't available right now
  '100/2018047': 'MEDIA_TOO_LARGE', // upload attachment failure: Instagram could not take the file
  '4': 'THROTTLED', // application request limit
  '17': 'THROTTLED', // user request limit
  '32': 'THROTTLED', // page request limit
  '613': 'THROTTLED', // calls exceeded the rate limit
  '1': 'UNAVAILABLE', // unknown error (retry)
  '2': 'UNAVAILABLE', // service temporarily unavailable
};

const EXPLANATION: Record<ProviderFailure, string> = {
  WINDOW_CLOSED:
    'the person has not written in the last 24 hours (7 days for a human agent reply), so Instagram takes no message from the business',
  TEMPLATE_INVALID: 'Instagram has no message templates',
  MEDIA_TOO_LARGE: 'Instagram could not take the attachment (too large, unsupported, or unreachable)',
  UNDELIVERABLE: 'Instagram cannot deliver to this person (unknown to this account, or unavailable)',
  THROTTLED: 'Instagram is rate limiting this account (temporary; trying again later can help)',
  UNAVAILABLE: 'the Instagram Graph API is unavailable (temporary; trying again can help)',
  REJECTED: 'Instagram refused the request',
};

const ATTACHMENT_TYPE: Record<string, string> = { image: 'image', video: 'video', audio: 'audio', document: 'file' };

export function classifyInstagramError(status: number, code: number | undefined, subcode: number | undefined): ProviderFailure {
  const known = (code !== undefined && FAILURES[`${code}/${subcode}`]) || (code !== undefined && FAILURES[String(code)]);
  if (known) return known;
  if (status >= 500) return 'UNAVAILABLE';
  if (status === 429) return 'THROTTLED';
  return 'REJECTED';
}

function buildBody(message: OutboundMessage): Record<string, unknown> {
  let content: Record<string, unknown>;
  if (message.type === 'text' && message.text) content = { text: message.text };
  else if (ATTACHMENT_TYPE[message.type] && message.mediaUrl && !message.caption)
    content = { attachment: { type: ATTACHMENT_TYPE[message.type], payload: { url: message.mediaUrl } } };
  else throw new ProviderError('REJECTED', `Instagram cannot carry this ${message.type} message (nothing was sent)`);
  return {
    recipient: { id: message.to },
    ...(message.humanAgent ? { messaging_type: 'MESSAGE_TAG', tag: 'HUMAN_AGENT' } : { messaging_type: 'RESPONSE' }),
    message: content,
  };
}

export const instagramAdapter: ProviderAdapter = {
  // Meta fetches the link from its own network: the link stays a link.
  wantsMediaBytes: false,
  async send(connection: ProviderConnection, message: OutboundMessage, options: SendOptions = {}): Promise<SentMessage> {
    const { baseUrl, igUserId, accessToken } = connection.config;
    const apiVersion = connection.config.apiVersion || DEFAULT_INSTAGRAM_API_VERSION;
    assertConfigured(connection, 'Instagram', { 'base URL': baseUrl, 'Instagram user id': igUserId, 'access token': accessToken });
    const secrets = [accessToken];
    const scrub = (text: string): string => redactSecrets(text, secrets);
    const url = `${baseUrl!.replace(/\/+$/, '')}/${encodeURIComponent(apiVersion)}/${encodeURIComponent(igUserId!)}/messages`;
    const answer = await postJson(url, {
      headers: { authorization: `Bearer ${accessToken}` },
      body: buildBody(message),
      timeoutMs: options.timeoutMs,
      service: SERVICE,
      secrets,
    });
    if (answer.status >= 200 && answer.status < 300) {
      const id = (answer.json as { message_id?: unknown } | undefined)?.message_id;
      if (typeof id === 'string' && id) return { providerMessageId: id };
      throw answeredWithoutId('The Instagram Graph API', answer, secrets);
    }
    const error = (answer.json as { error?: GraphError } | undefined)?.error;
    const code = asCode(error?.code);
    const subcode = asCode(error?.error_subcode);
    const failure = classifyInstagramError(answer.status, code, subcode);
    const explanation =
      failure === 'REJECTED' && (answer.status === 401 || code === 190)
        ? "Instagram refused the instance's access token (expired, revoked or wrong); update the instance's access token"
        : EXPLANATION[failure];
    const said = typeof error?.message === 'string' ? clip(scrub(error.message)) : excerpt(scrub(answer.text));
    const trace = typeof error?.fbtrace_id === 'string' ? ` [fbtrace_id ${clip(scrub(error.fbtrace_id), 100)}]` : '';
    const where = [code !== undefined ? `code ${code}${subcode !== undefined ? `/${subcode}` : ''}` : '', `HTTP ${answer.status}`].filter(
      Boolean,
    );
    throw new ProviderError(
      failure,
      scrub(`Send failed: ${explanation}. Instagram said (${where.join(', ')})${said ? `: ${said}` : ''}${trace}`),
      {
        providerCode: code,
        httpStatus: answer.status,
      },
    );
  },
};
