import {
  answeredWithoutId,
  assertConfigured,
  JsonStream,
  OutboundMessage,
  ProviderAdapter,
  ProviderConnection,
  ProviderError,
  SendOptions,
  clip,
  excerpt,
  postJson,
  redactSecrets,
} from './types';
import type { SentMessage } from '../../types/messaging';
import { digitsOfPersonJid } from '../../domain/leads';

/**
 * The unofficial "web" gateway style (Evolution-API-like: a WhatsApp Web session behind an HTTP
 * API, one named connection per instance).
 *
 * - `POST {baseUrl}/message/sendText/{instanceName}` `{ number, text }`
 * - `POST {baseUrl}/message/sendMedia/{instanceName}` `{ number, mediatype, mimetype, media, caption?, fileName? }`,
 *   `media` being the file in base64: the gateway accepts a URL too, but it would fetch that URL
 *   from its own network (internal addresses, no rebinding defence), so it is only ever given the
 *   bytes the worker downloads through the pinned client (`mediaFile`), streamed into the body
 *   as they arrive (mediaBody).
 * - header `apikey: <accessToken>`; answer `{ key: { id, remoteJid } }`.
 *
 * No 24-hour window and no templates (a web session cannot send WhatsApp Business templates).
 * Group chats (`...@g.us`) are refused: the CRM talks to people, not groups.
 */
const SERVICE = 'WhatsApp web gateway';

type GatewayError = { status?: unknown; error?: unknown; message?: unknown; response?: { message?: unknown } };

/**
 * Flattens the gateway's `response.message` (a string, or an array of strings/objects), cut short
 * after `scrub` redacted the secrets (a cut secret would escape redaction).
 */
function gatewaySaid(json: unknown, text: string, scrub: (text: string) => string): { said: string; notOnWhatsApp: boolean } {
  const body = json as GatewayError | undefined;
  const raw = body?.response?.message ?? body?.message ?? body?.error;
  const items = Array.isArray(raw) ? raw : raw === undefined ? [] : [raw];
  let notOnWhatsApp = false;
  const words = items.map((item) => {
    if (typeof item === 'string') return item;
    if (item && typeof item === 'object') {
      const entry = item as { exists?: unknown; number?: unknown; jid?: unknown };
      if (entry.exists === false) {
        notOnWhatsApp = true;
        return `${String(entry.number ?? entry.jid ?? 'number')} is not on WhatsApp`;
      }
      return JSON.stringify(item);
    }
    return String(item);
  });
  const said = clip(scrub(words.join('; '))) || (json === undefined ? excerpt(scrub(text)) : '');
  return { said, notOnWhatsApp };
}

/**
 * The sendMedia body as a stream: the JSON of `fields` with `media` last, the file's base64
 * written as its chunks arrive (3 bytes make 4 characters, so a chunk's last 1 or 2 bytes wait
 * for the next), so a 100 MB document never sits whole in memory, raw or encoded.
 */
function mediaBody(fields: Record<string, unknown>, data: Buffer | AsyncIterable<Uint8Array>): JsonStream {
  const json = JSON.stringify({ ...fields, media: '' }); // ends with "media":""}
  async function* parts(): AsyncGenerator<Uint8Array> {
    yield Buffer.from(json.slice(0, -2));
    let carry = Buffer.alloc(0);
    for await (const chunk of Buffer.isBuffer(data) ? [data] : data) {
      const bytes = carry.length > 0 ? Buffer.concat([carry, chunk]) : Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength);
      const whole = bytes.length - (bytes.length % 3);
      if (whole > 0) yield Buffer.from(bytes.subarray(0, whole).toString('base64'), 'latin1');
      carry = Buffer.from(bytes.subarray(whole)); // a copy: the chunk itself is not kept
    }
    if (carry.length > 0) yield Buffer.from(carry.toString('base64'), 'latin1');
    yield Buffer.from('"}');
  }
  return { parts: parts() };
}

/** A document's name when none was given: the URL path's last segment (what the gateway took from a URL). */
function fileNameOf(url: string | undefined): string | undefined {
  try {
    const last = decodeURIComponent(new URL(url ?? '').pathname.split('/').pop() ?? '');
    return last || undefined;
  } catch {
    return undefined;
  }
}

export const webAdapter: ProviderAdapter = {
  wantsMediaBytes: true,
  async send(connection: ProviderConnection, message: OutboundMessage, options: SendOptions = {}): Promise<SentMessage> {
    const { baseUrl, instanceName, accessToken } = connection.config;
    assertConfigured(connection, 'web gateway', {
      'base URL': baseUrl,
      'instance name': instanceName,
      'API key (access token)': accessToken,
    });
    if (/@g\.us$/i.test(message.to.trim())) {
      throw new ProviderError(
        'REJECTED',
        'Group chats (ids ending in @g.us) are not supported: messages go to one person at a time (nothing was sent)',
      );
    }
    if (message.type === 'template') {
      throw new ProviderError(
        'REJECTED',
        'Templates cannot be sent through a web gateway instance (only the WhatsApp Cloud API supports them); send text or media instead (nothing was sent)',
      );
    }
    // A person's JID (`<digits>@s.whatsapp.net`) or a phone number: the gateway wants the digits.
    const number = message.to.replace(/@.*$/, '').replace(/\D/g, '');
    if (!number) throw new ProviderError('REJECTED', `"${message.to}" is not a phone number (nothing was sent)`);

    let path: string;
    let body: Record<string, unknown> | undefined;
    let stream: JsonStream | undefined;
    if (message.type === 'text') {
      if (!message.text) throw new ProviderError('REJECTED', 'Cannot send a text message without its text (nothing was sent)');
      path = 'sendText';
      body = { number, text: message.text };
    } else {
      if (!message.mediaUrl)
        throw new ProviderError('REJECTED', `Cannot send a ${message.type} message without a media URL (nothing was sent)`);
      if (!message.mediaFile) {
        throw new ProviderError(
          'REJECTED',
          'A web gateway is sent the media file itself, never its URL, and the file was not downloaded first (nothing was sent)',
        );
      }
      const fileName = message.type === 'document' ? (message.fileName ?? fileNameOf(message.mediaUrl)) : undefined;
      path = 'sendMedia';
      stream = mediaBody(
        {
          number,
          mediatype: message.type,
          mimetype: message.mediaFile.mimetype,
          ...(message.caption && message.type !== 'audio' ? { caption: message.caption } : {}),
          ...(fileName ? { fileName } : {}),
        },
        message.mediaFile.data,
      );
    }

    const secrets = [accessToken];
    const scrub = (text: string): string => redactSecrets(text, secrets);
    const url = `${baseUrl!.replace(/\/+$/, '')}/message/${path}/${encodeURIComponent(instanceName!)}`;
    const answer = await postJson(url, {
      headers: { apikey: accessToken! },
      body,
      stream,
      timeoutMs: options.timeoutMs,
      service: SERVICE,
      secrets,
    });

    if (answer.status >= 200 && answer.status < 300) {
      const key = (answer.json as { key?: { id?: unknown; remoteJid?: unknown } } | undefined)?.key;
      if (typeof key?.id !== 'string' || !key.id) throw answeredWithoutId('The web gateway', answer, secrets);
      const waId = digitsOfPersonJid(key.remoteJid);
      return { providerMessageId: key.id, ...(waId ? { waId } : {}) };
    }

    const { said, notOnWhatsApp } = gatewaySaid(answer.json, answer.text, scrub);
    const suffix = `The gateway said (HTTP ${answer.status})${said ? `: ${said}` : ''}`;
    let failure: ProviderError['failure'];
    let explanation: string;
    if (answer.status >= 500) {
      failure = 'UNAVAILABLE';
      explanation = 'the web gateway is unavailable (temporary; trying again can help)';
    } else if (answer.status === 429) {
      failure = 'THROTTLED';
      explanation = 'the web gateway is rate limiting this sender (temporary; trying again later can help)';
    } else if (notOnWhatsApp) {
      failure = 'UNDELIVERABLE';
      explanation = 'this number is not on WhatsApp';
    } else if (answer.status === 401 || answer.status === 403) {
      failure = 'REJECTED';
      explanation = "the web gateway refused the instance's API key; update the instance's access token";
    } else if (answer.status === 404) {
      failure = 'REJECTED';
      explanation = `the web gateway does not know the connection "${instanceName}"; check the instance name`;
    } else {
      failure = 'REJECTED';
      explanation = 'the web gateway refused the message';
    }
    throw new ProviderError(failure, redactSecrets(`Send failed: ${explanation}. ${suffix}`, secrets), { httpStatus: answer.status });
  },
};
