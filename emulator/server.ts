import { createHash, createHmac, randomBytes } from 'node:crypto';
import type { Server } from 'node:http';
import { Readable } from 'node:stream';
import { StringDecoder } from 'node:string_decoder';
import Koa from 'koa';
import { koaBody } from 'koa-body';
import { createTemplateEmulator } from './templates';
import { createMediaEmulator } from './media';
import { createInstagramEmulator } from './instagram';
import { createLlmEmulator } from './llm';

/**
 * A local stand-in for the WhatsApp providers and Instagram messaging, speaking their wire formats: the only thing the
 * project emulates, because the real providers cannot be reached from here. The sending path
 * does not know it talks to an emulator; it only has an instance `baseUrl`.
 *
 * Provider routes
 * - Cloud API: `POST /{version}/{phoneNumberId}/messages` (Bearer token), validated like Graph
 *   API enough to catch adapter bugs (error code 100 otherwise).
 * - "web" gateway (Evolution-API-like): `POST /message/sendText/{instance}` and
 *   `POST /message/sendMedia/{instance}` (header `apikey`); `media` is a URL or the file in
 *   base64 (raw or a `data:` URI), up to a 100 MB document's, read as the body streams in: a
 *   long base64 `media` is decoded, counted and hashed as it arrives, never held (readMediaBody).
 *
 * Control routes (state lives in this process; tests run files in parallel, so scripts are keyed
 * by recipient number and every test uses its own numbers)
 * - `POST /__emulator/script` `{ to | phoneNumberId, behaviour: 'ok'|'error'|'redirect', code?,
 *   httpStatus?, delayMs?, times?, down? }`: how the next sends to that number (or through that
 *   phone-number id / web instance name) are answered. `times` = how many calls it applies to
 *   before reverting to ok (absent: until reset or replaced). `down: true` answers 503 (not JSON).
 *   `delayMs` answers that much later (slowness / timeouts). A recipient script wins over a
 *   phone-number-id script. Answers `{ script }`.
 * - `POST /__emulator/reset` `{ to? | phoneNumberId? }`: forgets scripts and calls of that number
 *   or id (for an id also its webhook and deliveries); with an empty body, everything.
 * - `GET /__emulator/calls?to=&phoneNumberId=&outcome=`: received send calls, oldest first,
 *   `{ calls: [{ seq, at, api, version?, phoneNumberId, to, type, body, auth, status, outcome, messageId?,
 *   waId?, media? }] }`, never a token. A web `sendMedia` call has `media`: what the gateway was
 *   given, `{ kind: 'base64', bytes, sha256, mimetype? }` (the body then shows `media` as
 *   `[base64, <bytes> bytes]`, not the file) or `{ kind: 'url', url }`. A call is recorded once its request was fully received (before
 *   any scripted delay: a provider that got the request may have delivered it even if the client
 *   gave up waiting).
 * - `POST /__emulator/webhook` `{ phoneNumberId, url, appSecret, displayPhoneNumber?, wabaId? }`:
 *   like a Meta app's webhook configuration (callback URL + app secret), where the status
 *   callbacks of that phone-number id go; `url: null` removes it. Answers `{ webhook }` (never the
 *   secret). After every accepted Cloud API send through that id, the emulator POSTs, shortly
 *   after answering (also when the client stopped waiting: the message was accepted), the real
 *   `statuses[]` notification `{ object: 'whatsapp_business_account', entry: [{ id, changes:
 *   [{ field: 'messages', value: { messaging_product, metadata: { display_phone_number,
 *   phone_number_id }, statuses: [{ id: <wamid>, status: 'sent', timestamp, recipient_id: <wa_id>,
 *   biz_opaque_callback_data? }] } }] }] }`, signed `X-Hub-Signature-256: sha256=<hex
 *   HMAC-SHA256(appSecret, raw body)>`, retrying a non-2xx answer or a network error a few times.
 * - `POST /__emulator/status` `{ messageId, status: sent|delivered|read|failed, errorCode?, timestamp? (ms) }`:
 *   a later status of a message it accepted, reported as the provider does: a Cloud API
 *   `statuses[]` notification (signed; a failed one with `errors: [{ code }]`, default 131026) to
 *   the phone-number id's webhook, or a web gateway `messages.update` ack (`{ keyId, remoteJid,
 *   fromMe: true, status: SERVER_ACK|DELIVERY_ACK|READ|ERROR }`) to the instance's webhook.
 *   Answers `{ delivered: <status>, answer }`; 409 without a webhook.
 * - `GET /__emulator/webhook?phoneNumberId=`: `{ webhook, deliveries: [{ seq, at, phoneNumberId,
 *   messageId, status, attempt, httpStatus?, error? }] }`, one entry per delivery attempt.
 * - `HEAD|GET /__emulator/media/{bytes}/{name}`: a media file of that many bytes (zeros), its
 *   content type from the extension, for media size checks.
 *
 * - `POST /__emulator/web/webhook` `{ instanceName, url, apikey }`: a web gateway instance's webhook
 *   (`url: null` removes it). `POST /__emulator/web/inbound` `{ instanceName, from, text?, name?, id?,
 *   fromMe?, media? }`: a contact writes to that instance; the gateway posts `messages.upsert` (the
 *   instance's `apikey` in the body) to the webhook and answers `{ delivered: <status>, id, answer }`.
 *   With `media` (`{ type, bytes, ... }`, emulator/media.ts) a media message whose file the
 *   gateway's base64 endpoint serves (the answer then carries its `sha256`).
 * - Inbound media of both providers, `POST /__emulator/inbound` (a Cloud API inbound message,
 *   text or media) and `POST|GET /__emulator/media`: see emulator/media.ts.
 * - Instagram messaging (sends, profiles, DMs, seen events, CDN files): see emulator/instagram.ts.
 * - A language model at OpenAI's Chat Completions format (sales insights, scripted failures): see emulator/llm.ts.
 *
 * A webhook receiver, to try the service's outbound webhooks on one machine (the README tour):
 * - `POST /__emulator/inbox/{name}` (name: letters, digits, `.`, `_`, `-`): answers 200
 *   `{ received: true }` and keeps the request as received, the raw body (up to 1 MB) and the
 *   headers, so a signature can be checked against the exact bytes. The last 100 per name.
 * - `GET /__emulator/inbox/{name}`: `{ requests: [{ seq, at, headers, body }] }`, oldest first.
 *
 * Numbers: `to` matches both forms of a Brazilian mobile (with and without the ninth digit).
 */

export type EmulatorOutcome = 'ok' | 'error' | 'down' | 'redirect' | 'invalid' | 'unauthorized';

export interface EmulatorCall {
  seq: number;
  at: string;
  api: 'cloud' | 'web' | 'instagram';
  /** Cloud and Instagram: the path's API version (e.g. v21.0). */
  version?: string;
  /** Cloud: the path's phone-number id; web: the instance name; Instagram: the business's IG user id. */
  phoneNumberId: string;
  /** Recipient digits as sent (Instagram: the IGSID). */
  to: string;
  type: string | undefined;
  body: unknown;
  /** Which credential was present (never its value). */
  auth: 'bearer' | 'apikey' | 'none';
  status: number;
  outcome: EmulatorOutcome;
  messageId?: string;
  waId?: string;
  /** Web sendMedia: the file it was given, or the URL it would have fetched from its own network. */
  media?: EmulatorMedia;
}

export type EmulatorMedia = { kind: 'base64'; bytes: number; sha256: string; mimetype?: string } | { kind: 'url'; url: string };

export interface EmulatorScript {
  to?: string;
  phoneNumberId?: string;
  behaviour: 'ok' | 'error' | 'redirect';
  code?: number;
  httpStatus?: number;
  delayMs?: number;
  times?: number;
  down?: boolean;
}

export interface EmulatorWebhook {
  phoneNumberId: string;
  url: string;
  appSecret: string;
  displayPhoneNumber: string;
  wabaId: string;
}

export interface EmulatorDelivery {
  seq: number;
  at: string;
  phoneNumberId: string;
  messageId: string;
  status: string;
  attempt: number;
  httpStatus?: number;
  error?: string;
}

const MAX_CALLS = 10_000;
/** Status callbacks: first try this long after the send was answered, then retries with doubling pauses. */
const CALLBACK_DELAY_MS = 100;
const CALLBACK_ATTEMPTS = 5;
const CALLBACK_RETRY_MS = 250;
const CALLBACK_TIMEOUT_MS = 5000;
const MAX_DELAY_MS = 120_000;

/** Digits only. */
const digitsOf = (value: unknown): string => String(value ?? '').replace(/\D/g, '');

/**
 * One key for both forms of a Brazilian mobile: 55 + DDD + 9 + 8 digits and 55 + DDD + 8 digits
 * are the same person, so scripts and call filters match either.
 */
function personKey(value: unknown): string {
  const digits = digitsOf(value);
  // Only mobiles gained the ninth digit, and old-form mobiles start with 6-9: a landline (2-5)
  // is another number than the mobile ending in its 8 digits.
  const m = /^55(\d{2})9([6-9]\d{7})$/.exec(digits);
  return m ? `55${m[1]}${m[2]}` : digits;
}

/**
 * The `wa_id` the Cloud API answers for a recipient. Brazil added a ninth digit (a leading 9) to
 * mobile numbers region by region between 2012 and 2016; WhatsApp accounts created before that in
 * the regions that switched last keep their old 8-digit identity, so for many numbers the real API
 * returns `wa_id` WITHOUT the ninth digit even though `to` had it (e.g. to 5531991234567 →
 * wa_id 553191234567). The emulator reproduces this deterministically: `to` = 55 + DDD + 9 digits
 * starting with 9, with DDD >= 31 (the old 8-digit mobile regions) → wa_id without the ninth
 * digit; anything else (DDD 11-28, landlines, numbers already without it) → wa_id = to (digits).
 */
export function emulatedWaId(to: string): string {
  const digits = digitsOf(to);
  const m = /^55(\d{2})9(\d{8})$/.exec(digits);
  if (m && Number(m[1]) >= 31) return `55${m[1]}${m[2]}`;
  return digits;
}

/** Graph API errors the emulator can answer, as the real API words them. */
const CLOUD_ERRORS: Record<number, { status: number; message: string; type: string; details: string }> = {
  1: { status: 500, message: 'An unknown error occurred', type: 'OAuthException', details: 'Unknown error.' },
  2: {
    status: 503,
    message: 'Service temporarily unavailable',
    type: 'OAuthException',
    details: 'The service is temporarily unavailable.',
  },
  4: { status: 400, message: '(#4) Application request limit reached', type: 'OAuthException', details: 'Too many API calls.' },
  10: {
    status: 403,
    message: '(#10) Permission denied',
    type: 'OAuthException',
    details: 'Permission is not granted or has been removed.',
  },
  100: { status: 400, message: '(#100) Invalid parameter', type: 'OAuthException', details: 'Invalid parameter.' },
  190: {
    status: 401,
    message: 'Invalid OAuth access token - Cannot parse access token',
    type: 'OAuthException',
    details: 'The access token has expired or is invalid.',
  },
  130429: {
    status: 400,
    message: '(#130429) Rate limit hit',
    type: 'OAuthException',
    details: 'Cloud API message throughput has been reached.',
  },
  131000: {
    status: 500,
    message: '(#131000) Something went wrong',
    type: 'OAuthException',
    details: 'Message failed to send due to an unknown error.',
  },
  131016: {
    status: 503,
    message: '(#131016) Service unavailable',
    type: 'OAuthException',
    details: 'A service is temporarily unavailable.',
  },
  131026: {
    status: 400,
    message: '(#131026) Message Undeliverable',
    type: 'OAuthException',
    details: 'Unable to deliver message. The recipient may not be a WhatsApp user or cannot receive this message.',
  },
  131047: {
    status: 400,
    message: '(#131047) Re-engagement message',
    type: 'OAuthException',
    details: 'Message failed to send because more than 24 hours have passed since the customer last replied to this number.',
  },
  131048: {
    status: 400,
    message: '(#131048) Spam rate limit hit',
    type: 'OAuthException',
    details: 'Message failed to send because there are restrictions on how many messages can be sent from this phone number.',
  },
  131053: {
    status: 400,
    message: '(#131053) Media upload error',
    type: 'OAuthException',
    details: 'Unable to upload the media used in the message: the file is larger than the maximum size for its type.',
  },
  131056: {
    status: 400,
    message: '(#131056) (Business Account, Consumer Account) pair rate limit hit',
    type: 'OAuthException',
    details:
      'Message failed to send because there were too many messages sent from this phone number to the same phone number in a short period of time.',
  },
  132000: {
    status: 400,
    message: '(#132000) Number of parameters does not match the expected number of params',
    type: 'OAuthException',
    details: 'body: number of localizable_params does not match the expected number of params.',
  },
  132001: {
    status: 404,
    message: '(#132001) Template name does not exist in the translation',
    type: 'OAuthException',
    details: 'template name does not exist in the language.',
  },
  132012: {
    status: 400,
    message: '(#132012) Parameter format does not match format in the created template',
    type: 'OAuthException',
    details: 'body: Format mismatch, expected TEXT.',
  },
};

const MEDIA_TYPES: Record<string, string> = {
  jpg: 'image/jpeg',
  jpeg: 'image/jpeg',
  png: 'image/png',
  webp: 'image/webp',
  mp4: 'video/mp4',
  '3gp': 'video/3gpp',
  ogg: 'audio/ogg',
  mp3: 'audio/mpeg',
  m4a: 'audio/mp4',
  aac: 'audio/aac',
  amr: 'audio/amr',
  pdf: 'application/pdf',
  txt: 'text/plain',
  doc: 'application/msword',
  docx: 'application/vnd.openxmlformats-officedocument.wordprocessingml.document',
  xlsx: 'application/vnd.openxmlformats-officedocument.spreadsheetml.sheet',
};

const CLOUD_OBJECTS = [
  'text',
  'image',
  'video',
  'audio',
  'document',
  'template',
  'sticker',
  'location',
  'contacts',
  'interactive',
  'reaction',
];

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);
const isText = (v: unknown): v is string => typeof v === 'string' && v.length > 0;

/** What the real API would refuse with code 100, in its words; undefined when the body is fine. */
function validateCloudBody(body: unknown): string | undefined {
  if (!isObject(body)) return 'The request body must be a JSON object';
  if (body.messaging_product !== 'whatsapp') return "The parameter messaging_product is required and must be 'whatsapp'";
  if (body.recipient_type !== undefined && body.recipient_type !== 'individual' && body.recipient_type !== 'group') {
    return 'Param recipient_type must be one of {individual, group}';
  }
  if (!isText(body.to) || digitsOf(body.to).length < 8) return 'The parameter to is required and must be a phone number';
  const type = body.type ?? 'text';
  if (typeof type !== 'string' || !CLOUD_OBJECTS.includes(type)) return `Param type must be one of {${CLOUD_OBJECTS.join(', ')}}`;
  for (const other of CLOUD_OBJECTS) {
    if (other !== type && body[other] !== undefined) return `Param ${other} is not allowed when type is ${type}`;
  }
  const content = body[type];
  if (!isObject(content)) return `The parameter ${type} is required when type is ${type}`;
  if (
    body.biz_opaque_callback_data !== undefined &&
    (typeof body.biz_opaque_callback_data !== 'string' || body.biz_opaque_callback_data.length > 512)
  ) {
    return 'Param biz_opaque_callback_data must be a string of at most 512 characters';
  }
  switch (type) {
    case 'text':
      if (!isText(content.body)) return "The parameter text['body'] is required";
      if (content.body.length > 4096) return "Param text['body'] must be at most 4096 characters";
      if (content.preview_url !== undefined && typeof content.preview_url !== 'boolean')
        return "Param text['preview_url'] must be a boolean";
      for (const key of Object.keys(content))
        if (key !== 'body' && key !== 'preview_url') return `Param text['${key}'] is not a valid parameter`;
      return undefined;
    case 'image':
    case 'video':
    case 'audio':
    case 'document': {
      if (!isText(content.link) && !isText(content.id)) return `The parameter ${type}['link'] or ${type}['id'] is required`;
      if (content.link !== undefined && (!isText(content.link) || !/^https?:\/\//i.test(content.link)))
        return `Param ${type}['link'] must be a valid URL`;
      const allowed =
        type === 'audio' ? ['link', 'id'] : type === 'document' ? ['link', 'id', 'caption', 'filename'] : ['link', 'id', 'caption'];
      for (const key of Object.keys(content)) if (!allowed.includes(key)) return `Param ${type}['${key}'] is not a valid parameter`;
      if (content.caption !== undefined && (typeof content.caption !== 'string' || content.caption.length > 1024))
        return `Param ${type}['caption'] must be a string of at most 1024 characters`;
      if (content.filename !== undefined && !isText(content.filename)) return `Param ${type}['filename'] must be a string`;
      return undefined;
    }
    case 'template': {
      if (!isText(content.name)) return "The parameter template['name'] is required";
      if (!isObject(content.language) || !isText(content.language.code)) return "The parameter template['language']['code'] is required";
      if (content.components !== undefined) {
        if (!Array.isArray(content.components)) return "Param template['components'] must be an array";
        for (const [i, component] of content.components.entries()) {
          const problem = validateTemplateComponent(component, `template['components'][${i}]`);
          if (problem) return problem;
        }
      }
      return undefined;
    }
    default:
      return undefined;
  }
}

/** Parameter types each component takes (Graph API), and what a media parameter's object must hold. */
const COMPONENT_PARAMETERS: Record<string, string[]> = {
  header: ['text', 'image', 'video', 'document', 'location'],
  body: ['text', 'currency', 'date_time'],
};
const BUTTON_SUB_TYPES = ['url', 'quick_reply', 'copy_code', 'flow', 'catalog', 'mpm'];

/**
 * One `template.components[]` entry of a send, at the Graph API's wire format: lower-case `type`
 * (`header`, `body`, `button`); header parameters `text` (`{ type, text }`) or media (`{ type:
 * 'image', image: { link | id } }`, likewise video and document); a `button` with `sub_type`,
 * `index` a string `"0"`..`"9"`, and, for a URL button, one `{ type: 'text', text }` (the URL's
 * suffix), for a quick reply `{ type: 'payload', payload }`.
 */
function validateTemplateComponent(component: unknown, at: string): string | undefined {
  if (!isObject(component) || !['header', 'body', 'button', 'footer'].includes(String(component.type))) {
    return `Param ${at}['type'] must be one of {header, body, button}`;
  }
  const type = component.type as string;
  if (component.parameters !== undefined && !Array.isArray(component.parameters)) return `Param ${at}['parameters'] must be an array`;
  const parameters = (component.parameters ?? []) as unknown[];
  if (type === 'button') {
    if (!BUTTON_SUB_TYPES.includes(String(component.sub_type)))
      return `Param ${at}['sub_type'] must be one of {${BUTTON_SUB_TYPES.join(', ')}}`;
    if (typeof component.index !== 'string' || !/^[0-9]$/.test(component.index))
      return `Param ${at}['index'] must be a string from "0" to "9"`;
    if (parameters.length !== 1) return `Param ${at}['parameters'] must hold exactly one parameter`;
    const [p] = parameters;
    if (component.sub_type === 'url') {
      if (!isObject(p) || p.type !== 'text') return `Param ${at}['parameters'][0]['type'] must be text for a url button`;
      if (!isText(p.text)) return `Param ${at}['parameters'][0]['text'] is required`;
    } else if (component.sub_type === 'quick_reply') {
      if (!isObject(p) || p.type !== 'payload' || !isText(p.payload))
        return `Param ${at}['parameters'][0] must be { type: payload, payload }`;
    }
    return undefined;
  }
  if (type === 'header' && parameters.length > 1) return `Param ${at}['parameters'] must hold at most one parameter for a header`;
  for (const [j, p] of parameters.entries()) {
    const where = `${at}['parameters'][${j}]`;
    if (!isObject(p) || typeof p.type !== 'string') return `Param ${where}['type'] is required`;
    const allowed = COMPONENT_PARAMETERS[type] ?? [];
    if (!allowed.includes(p.type)) return `Param ${where}['type'] must be one of {${allowed.join(', ')}}`;
    if (p.type === 'text' && !isText(p.text)) return `Param ${where}['text'] is required`;
    if (['image', 'video', 'document'].includes(p.type)) {
      const media = p[p.type];
      if (!isObject(media) || (!isText(media.link) && !isText(media.id))) return `Param ${where}['${p.type}'] must have a link or an id`;
      if (media.link !== undefined && (!isText(media.link) || !/^https?:\/\//i.test(media.link)))
        return `Param ${where}['${p.type}']['link'] must be a valid URL`;
      for (const other of ['image', 'video', 'document'])
        if (other !== p.type && p[other] !== undefined) return `Param ${where}['${other}'] is not allowed when type is ${p.type}`;
    }
  }
  return undefined;
}

function validateWebBody(kind: 'sendText' | 'sendMedia', body: unknown, streamed?: StreamedMedia): string[] {
  if (!isObject(body)) return ['body must be a JSON object'];
  const problems: string[] = [];
  if (typeof body.number !== 'string' || !/^\d{8,20}$/.test(body.number)) problems.push('number must be the digits of a phone number');
  if (kind === 'sendText') {
    if (!isText(body.text)) problems.push('text is required');
  } else {
    if (!['image', 'video', 'audio', 'document'].includes(String(body.mediatype)))
      problems.push('mediatype must be one of image, video, audio, document');
    const mediaOk = streamed
      ? streamed.base64
      : isText(body.media) && (/^https?:\/\//i.test(body.media) || base64Of(body.media) !== undefined);
    if (!mediaOk) problems.push('Owned media must be a url or base64');
    if (body.mimetype !== undefined && typeof body.mimetype !== 'string') problems.push('mimetype must be a string');
    if (body.caption !== undefined && typeof body.caption !== 'string') problems.push('caption must be a string');
    if (body.fileName !== undefined && typeof body.fileName !== 'string') problems.push('fileName must be a string');
  }
  return problems;
}

/** The bytes of base64 media (raw, or a `data:<type>;base64,` URI); undefined when it is not base64. */
function base64Of(media: string): Buffer | undefined {
  const raw = media.replace(/^data:[^,;]*;base64,/, '');
  if (!/^[A-Za-z0-9+/]+={0,2}$/.test(raw) || raw.length % 4 !== 0) return undefined;
  return Buffer.from(raw, 'base64');
}

/** What a web sendMedia body carries as `media`, and the body as recorded (never the file itself). */
function receivedMedia(body: unknown, streamed?: StreamedMedia): { media?: EmulatorMedia; recorded: unknown } {
  if (streamed && isObject(body)) {
    if (!streamed.base64) return { recorded: { ...body, media: '[not base64]' } };
    const media: EmulatorMedia = {
      kind: 'base64',
      bytes: streamed.bytes,
      sha256: streamed.sha256,
      ...(typeof body.mimetype === 'string' ? { mimetype: body.mimetype } : {}),
    };
    return { media, recorded: { ...body, media: `[base64, ${streamed.bytes} bytes]` } };
  }
  if (!isObject(body) || !isText(body.media)) return { recorded: body };
  if (/^https?:\/\//i.test(body.media)) return { media: { kind: 'url', url: body.media }, recorded: body };
  const bytes = base64Of(body.media);
  if (!bytes) return { recorded: body };
  const media: EmulatorMedia = {
    kind: 'base64',
    bytes: bytes.length,
    sha256: createHash('sha256').update(bytes).digest('hex'),
    ...(typeof body.mimetype === 'string' ? { mimetype: body.mimetype } : {}),
  };
  return { media, recorded: { ...body, media: `[base64, ${bytes.length} bytes]` } };
}

/** A sendMedia `media` too long to hold, as it was read: not base64, or its decoded size and SHA-256. */
interface StreamedMedia {
  base64: boolean;
  bytes: number;
  sha256: string;
}

/** A `media` string up to this long is kept and parsed as it is; a longer one is streamed (StreamedMedia). */
const MEDIA_HELD_CHARS = 64 * 1024;
/** The rest of a sendMedia body (number, caption, ...) is small. */
const MAX_SKELETON_CHARS = 1024 * 1024;

/** Decodes base64 text as it arrives (any split), counting and hashing the bytes, never holding them. */
class Base64Digest {
  private readonly hash = createHash('sha256');
  private pending = '';
  private chars = 0;
  private padding = 0;
  bytes = 0;
  valid = true;

  feed(text: string): void {
    if (!this.valid || text.length === 0) return;
    let body = text;
    if (this.padding > 0) body = '';
    const eq = body.indexOf('=');
    if (eq !== -1) body = body.slice(0, eq);
    const pad = text.slice(body.length);
    if (/[^A-Za-z0-9+/]/.test(body) || /[^=]/.test(pad) || this.padding + pad.length > 2) {
      this.valid = false;
      return;
    }
    this.padding += pad.length;
    this.chars += body.length;
    const all = this.pending + body;
    const whole = all.length - (all.length % 4);
    if (whole > 0) this.take(Buffer.from(all.slice(0, whole), 'base64'));
    this.pending = all.slice(whole);
  }

  /** The result once the text ended: base64 only if its length (padding included) is a multiple of 4. */
  end(): StreamedMedia {
    if (this.valid && this.pending) this.take(Buffer.from(this.pending, 'base64'));
    const base64 = this.valid && this.chars > 0 && (this.chars + this.padding) % 4 === 0;
    return { base64, bytes: this.bytes, sha256: this.hash.digest('hex') };
  }

  private take(bytes: Buffer): void {
    this.hash.update(bytes);
    this.bytes += bytes.length;
  }
}

/**
 * Reads a sendMedia JSON body as it arrives, the way a gateway that stores uploads would: every
 * member as JSON.parse gives it, except a long top-level `media` string (a file in base64, 134 MB
 * for a 100 MB document), which is decoded, counted and hashed as it streams by and never held.
 * Its place in the body then says `[streamed]`. Throws a 400 for a body that is not JSON.
 */
async function readMediaBody(req: AsyncIterable<Buffer>): Promise<{ body: unknown; streamed?: StreamedMedia }> {
  const decoder = new StringDecoder('utf8');
  let skeleton = '';
  let depth = 0;
  let inString = false;
  let escaped = false;
  let keyExpected = false;
  let stringIsKey = false;
  let key = '';
  let lastKey = '';
  // The `media` value: held while short (raw, for JSON.parse), then digested.
  let inMedia = false;
  let mediaEscaped = false;
  let heldRaw = '';
  let heldText = '';
  let digest: Base64Digest | undefined;
  let streamed: StreamedMedia | undefined;

  const mediaText = (text: string, raw: string): void => {
    if (digest) {
      digest.feed(text);
      return;
    }
    heldRaw += raw;
    heldText += text;
    if (heldRaw.length > MEDIA_HELD_CHARS) {
      digest = new Base64Digest();
      digest.feed(heldText.replace(/^data:[^,;]*;base64,/, ''));
      heldRaw = heldText = '';
    }
  };
  const endMedia = (): void => {
    inMedia = false;
    if (digest) {
      streamed = digest.end();
      skeleton += '"[streamed]"';
    } else {
      skeleton += `"${heldRaw}"`;
    }
  };

  const scan = (text: string): void => {
    let i = 0;
    while (i < text.length) {
      if (inMedia) {
        if (mediaEscaped) {
          const c = text[i];
          mediaEscaped = false;
          // Only `\/` can occur in base64; any other escape makes it not base64 (held text parses it).
          mediaText(c === '/' ? '/' : '\u0000', `\\${c}`);
          i += 1;
          continue;
        }
        const quote = text.indexOf('"', i);
        const backslash = text.indexOf('\\', i);
        const stop = Math.min(quote === -1 ? text.length : quote, backslash === -1 ? text.length : backslash);
        const part = text.slice(i, stop);
        mediaText(part, part);
        if (stop === text.length) return;
        i = stop + 1;
        if (stop === backslash) mediaEscaped = true;
        else endMedia();
        continue;
      }
      const c = text[i];
      i += 1;
      if (inString) {
        skeleton += c;
        if (escaped) escaped = false;
        else if (c === '\\') escaped = true;
        else if (c === '"') {
          inString = false;
          if (stringIsKey) lastKey = key;
        } else if (stringIsKey && key.length < 64) key += c;
        continue;
      }
      if (c === '"' && depth === 1 && !keyExpected && lastKey === 'media') {
        inMedia = true;
        continue;
      }
      skeleton += c;
      if (skeleton.length > MAX_SKELETON_CHARS) throw Object.assign(new Error('request entity too large'), { status: 413 });
      if (c === '"') {
        inString = true;
        stringIsKey = depth === 1 && keyExpected;
        key = '';
      } else if (c === '{' || c === '[') {
        depth += 1;
        keyExpected = depth === 1 && c === '{';
      } else if (c === '}' || c === ']') {
        depth -= 1;
      } else if (depth === 1 && c === ':') {
        keyExpected = false;
      } else if (depth === 1 && c === ',') {
        keyExpected = true;
        lastKey = '';
      }
    }
  };

  for await (const chunk of req) scan(decoder.write(chunk));
  scan(decoder.end());
  try {
    const body = JSON.parse(skeleton) as unknown;
    return { body, ...(streamed ? { streamed } : {}) };
  } catch {
    throw Object.assign(new Error('invalid JSON, only supports object and array'), { status: 400 });
  }
}

function fbtraceId(): string {
  return randomBytes(9).toString('base64').replace(/[+/=]/g, 'A');
}

function graphError(code: number, details?: string): { status: number; body: unknown } {
  const known = CLOUD_ERRORS[code] ?? {
    status: 400,
    message: `(#${code}) Emulated error ${code}`,
    type: 'OAuthException',
    details: `Emulated error ${code}.`,
  };
  return {
    status: known.status,
    body: {
      error: {
        message: known.message,
        type: known.type,
        code,
        error_data: { messaging_product: 'whatsapp', details: details ?? known.details },
        fbtrace_id: fbtraceId(),
      },
    },
  };
}

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

function zeros(total: number): Readable {
  const chunk = Buffer.alloc(64 * 1024);
  let left = total;
  return new Readable({
    read() {
      if (left <= 0) {
        this.push(null);
        return;
      }
      const n = Math.min(left, chunk.length);
      left -= n;
      this.push(n === chunk.length ? chunk : chunk.subarray(0, n));
    },
  });
}

/** A WhatsApp Business Account id (15 digits) for a phone-number id, stable across runs. */
function wabaIdFor(phoneNumberId: string): string {
  const n = BigInt(`0x${createHash('sha256').update(phoneNumberId).digest('hex').slice(0, 13)}`);
  return String(100_000_000_000_000n + (n % 899_999_999_999_999n));
}

export interface Emulator {
  app: Koa;
  calls: EmulatorCall[];
  deliveries: EmulatorDelivery[];
  /** Forgets every script and call. */
  reset: () => void;
}

export function createEmulator(): Emulator {
  const app = new Koa();
  const calls: EmulatorCall[] = [];
  const byTo = new Map<string, EmulatorScript & { left?: number }>();
  const byId = new Map<string, EmulatorScript & { left?: number }>();
  const webhooks = new Map<string, EmulatorWebhook>();
  /** Business accounts' message templates and their notifications (emulator/templates.ts). */
  const templates = createTemplateEmulator(webhooks);
  /** Web gateway instances' webhooks (instance name → URL and the instance's apikey it sends along). */
  const webWebhooks = new Map<string, { url: string; apikey: string }>();
  /** Inbound media files and both providers' media endpoints (emulator/media.ts). */
  const mediaEmulator = createMediaEmulator(webhooks, webWebhooks);
  /** A language model at OpenAI's Chat Completions format (emulator/llm.ts). */
  const llm = createLlmEmulator();
  const deliveries: EmulatorDelivery[] = [];
  const inboxes = new Map<string, { seq: number; at: string; headers: Record<string, string>; body: string }[]>();
  let seq = 0;
  let deliverySeq = 0;
  let inboxSeq = 0;

  const reset = (): void => {
    inboxes.clear();
    calls.length = 0;
    byTo.clear();
    byId.clear();
    webhooks.clear();
    webWebhooks.clear();
    deliveries.length = 0;
    templates.reset();
    mediaEmulator.reset();
    instagram.reset();
    llm.reset();
  };

  /**
   * The `sent` status callback of an accepted Cloud API message, as Meta posts it to the app's
   * webhook: asynchronous, signed with the app secret, retried on failure.
   */
  /** A Cloud API status notification of `phoneNumberId`'s webhook, signed as Meta signs it: its body and headers. */
  const cloudStatusRequest = (webhook: EmulatorWebhook, phoneNumberId: string, status: Record<string, unknown>) => {
    const raw = JSON.stringify({
      object: 'whatsapp_business_account',
      entry: [
        {
          id: webhook.wabaId,
          changes: [
            {
              value: {
                messaging_product: 'whatsapp',
                metadata: { display_phone_number: webhook.displayPhoneNumber, phone_number_id: phoneNumberId },
                statuses: [status],
              },
              field: 'messages',
            },
          ],
        },
      ],
    });
    const headers = {
      'content-type': 'application/json',
      'user-agent': 'facebookexternalua',
      'x-hub-signature': `sha1=${createHmac('sha1', webhook.appSecret).update(raw, 'utf8').digest('hex')}`,
      'x-hub-signature-256': `sha256=${createHmac('sha256', webhook.appSecret).update(raw, 'utf8').digest('hex')}`,
    };
    return { raw, headers };
  };

  const scheduleStatusCallback = (phoneNumberId: string, sent: { messageId: string; waId: string; reference?: string }): void => {
    const timestamp = String(Math.floor(Date.now() / 1000));
    const deliver = async (attempt: number): Promise<void> => {
      const webhook = webhooks.get(phoneNumberId);
      if (!webhook) return;
      const status: Record<string, unknown> = { id: sent.messageId, status: 'sent', timestamp, recipient_id: sent.waId };
      if (sent.reference !== undefined) status.biz_opaque_callback_data = sent.reference;
      const { raw, headers } = cloudStatusRequest(webhook, phoneNumberId, status);
      const entry: EmulatorDelivery = {
        seq: ++deliverySeq,
        at: new Date().toISOString(),
        phoneNumberId,
        messageId: sent.messageId,
        status: 'sent',
        attempt,
      };
      try {
        const res = await fetch(webhook.url, {
          method: 'POST',
          headers,
          body: raw,
          redirect: 'manual',
          signal: AbortSignal.timeout(CALLBACK_TIMEOUT_MS),
        });
        await res.arrayBuffer().catch(() => undefined);
        entry.httpStatus = res.status;
      } catch (err) {
        entry.error = err instanceof Error ? err.message : String(err);
      }
      deliveries.push(entry);
      if (deliveries.length > MAX_CALLS) deliveries.splice(0, deliveries.length - MAX_CALLS);
      const ok = entry.httpStatus !== undefined && entry.httpStatus >= 200 && entry.httpStatus < 300;
      if (!ok && attempt < CALLBACK_ATTEMPTS) setTimeout(() => void deliver(attempt + 1), CALLBACK_RETRY_MS * 2 ** (attempt - 1));
    };
    if (webhooks.has(phoneNumberId)) setTimeout(() => void deliver(1), CALLBACK_DELAY_MS);
  };

  /** The script for this send, if any, without consuming it. */
  const peek = (
    to: string,
    id: string,
  ): { map: Map<string, EmulatorScript & { left?: number }>; key: string; script: EmulatorScript & { left?: number } } | undefined => {
    const toKey = personKey(to);
    if (toKey && byTo.has(toKey)) return { map: byTo, key: toKey, script: byTo.get(toKey)! };
    if (id && byId.has(id)) return { map: byId, key: id, script: byId.get(id)! };
    return undefined;
  };
  /** Applies a script to one call: counts it down and forgets it after `times` calls. */
  const consume = (found: NonNullable<ReturnType<typeof peek>>): EmulatorScript => {
    if (found.script.left !== undefined) {
      found.script.left -= 1;
      if (found.script.left <= 0 && found.map.get(found.key) === found.script) found.map.delete(found.key);
    }
    return found.script;
  };

  const record = (call: Omit<EmulatorCall, 'seq' | 'at'>): EmulatorCall => {
    const full: EmulatorCall = { seq: ++seq, at: new Date().toISOString(), ...call };
    calls.push(full);
    if (calls.length > MAX_CALLS) calls.splice(0, calls.length - MAX_CALLS);
    return full;
  };
  const instagram = createInstagramEmulator({
    record,
    scripted: (to, id) => {
      const found = peek(to, id);
      return found ? consume(found) : undefined;
    },
    registerFile: (input) => mediaEmulator.register(input),
    fileBytes: (id) => mediaEmulator.fileBytes(id),
  });

  /**
   * A scripted outage (503 with the front server's own page) or redirect (a misrouting proxy)
   * answers before the provider looks at the request; true when it did.
   */
  const answeredByOutage = async (
    ctx: Koa.Context,
    found: ReturnType<typeof peek>,
    base: Omit<EmulatorCall, 'seq' | 'at' | 'status' | 'outcome'>,
    downPage: { type: string; body: string },
  ): Promise<boolean> => {
    if (!found || !(found.script.down || found.script.behaviour === 'redirect')) return false;
    const script = consume(found);
    const status = script.down ? 503 : script.httpStatus && script.httpStatus >= 300 && script.httpStatus < 400 ? script.httpStatus : 307;
    record({ ...base, status, outcome: script.down ? 'down' : 'redirect' });
    if (script.delayMs) await sleep(script.delayMs);
    ctx.status = status;
    if (script.down) {
      ctx.type = downPage.type;
      ctx.body = downPage.body;
    } else {
      ctx.set('location', ctx.href);
      ctx.body = '';
    }
    return true;
  };

  app.use(async (ctx, next) => {
    try {
      await next();
    } catch (err) {
      const status = (err as { status?: number }).status ?? 500;
      ctx.status = status;
      const message = err instanceof Error ? err.message : String(err);
      if (/^\/v\d+\.\d+\//.test(ctx.path)) {
        ctx.body = {
          error: {
            message: `(#100) ${message}`,
            type: 'OAuthException',
            code: 100,
            error_data: { details: message },
            fbtrace_id: fbtraceId(),
          },
        };
      } else {
        ctx.body = { status, error: status >= 500 ? 'Internal Server Error' : 'Bad Request', response: { message: [message] } };
      }
    }
  });
  // The webhook receiver reads its body itself, before any parsing: a signature covers the raw bytes.
  app.use(async (ctx, next) => {
    const inbox = /^\/__emulator\/inbox\/([A-Za-z0-9._-]{1,64})$/.exec(ctx.path);
    if (!inbox) return next();
    const name = inbox[1];
    if (ctx.method === 'GET') {
      ctx.body = { requests: inboxes.get(name) ?? [] };
      return;
    }
    if (ctx.method !== 'POST') {
      ctx.status = 405;
      ctx.body = { error: 'GET or POST' };
      return;
    }
    const chunks: Buffer[] = [];
    let size = 0;
    for await (const chunk of ctx.req as AsyncIterable<Buffer>) {
      size += chunk.length;
      if (size > 1024 * 1024) {
        ctx.status = 413;
        ctx.body = { error: 'more than 1 MB' };
        return;
      }
      chunks.push(chunk);
    }
    const headers = Object.fromEntries(Object.entries(ctx.headers).map(([k, v]) => [k, Array.isArray(v) ? v.join(', ') : String(v)]));
    const list = inboxes.get(name) ?? [];
    list.push({ seq: ++inboxSeq, at: new Date().toISOString(), headers, body: Buffer.concat(chunks).toString('utf8') });
    if (list.length > 100) list.shift();
    inboxes.set(name, list);
    ctx.body = { received: true };
  });
  // A 100 MB document (WhatsApp's largest media) in base64 to sendMedia is about 134 MB of JSON:
  // read as a stream, its file counted and hashed, never held (readMediaBody).
  const jsonBody = koaBody({ json: true, multipart: false, urlencoded: false, text: false, jsonLimit: '1mb' });
  app.use(async (ctx, next) => {
    if (ctx.method === 'POST' && /^\/message\/sendMedia\/[^/]+$/.test(ctx.path) && ctx.is('json')) {
      const { body, streamed } = await readMediaBody(ctx.req);
      (ctx.request as { body?: unknown }).body = body;
      ctx.state.streamedMedia = streamed;
      return next();
    }
    return jsonBody(ctx, next);
  });

  // Instagram messaging (emulator/instagram.ts): before the Cloud API and media routes, whose paths its own share.
  app.use(instagram.middleware);
  // Message templates: the Graph API's list and the control routes that set and change them.
  app.use(templates.middleware);
  // Inbound media: the Cloud API's media ids and files, the web gateway's base64 endpoint, and their control routes.
  app.use(mediaEmulator.middleware);
  // A language model (OpenAI's Chat Completions) and its control routes.
  app.use(llm.middleware);

  // Control routes.
  app.use(async (ctx, next) => {
    if (ctx.method === 'GET' && ctx.path === '/health') {
      ctx.body = { status: 'ok' };
      return;
    }
    if (ctx.method === 'GET' && ctx.path === '/__emulator/calls') {
      const to = typeof ctx.query.to === 'string' ? personKey(ctx.query.to) : undefined;
      const id = typeof ctx.query.phoneNumberId === 'string' ? ctx.query.phoneNumberId : undefined;
      const outcome = typeof ctx.query.outcome === 'string' ? ctx.query.outcome : undefined;
      ctx.body = {
        calls: calls.filter(
          (c) => (!to || personKey(c.to) === to) && (!id || c.phoneNumberId === id) && (!outcome || c.outcome === outcome),
        ),
      };
      return;
    }
    if (ctx.method === 'POST' && ctx.path === '/__emulator/script') {
      const body = ((ctx.request as { body?: unknown }).body ?? {}) as Record<string, unknown>;
      const to = body.to !== undefined ? personKey(body.to) : '';
      const id = typeof body.phoneNumberId === 'string' ? body.phoneNumberId : '';
      const behaviour = body.behaviour ?? 'ok';
      const problems: string[] = [];
      if (!to && !id) problems.push('to (digits) or phoneNumberId is required');
      if (!['ok', 'error', 'redirect'].includes(String(behaviour))) problems.push("behaviour must be 'ok', 'error' or 'redirect'");
      for (const field of ['code', 'httpStatus', 'delayMs', 'times'] as const) {
        if (
          body[field] !== undefined &&
          (typeof body[field] !== 'number' || !Number.isInteger(body[field]) || (body[field] as number) < 0)
        ) {
          problems.push(`${field} must be a non-negative integer`);
        }
      }
      if (typeof body.httpStatus === 'number' && (body.httpStatus < 100 || body.httpStatus > 599))
        problems.push('httpStatus must be 100..599');
      if (typeof body.delayMs === 'number' && body.delayMs > MAX_DELAY_MS) problems.push(`delayMs must be at most ${MAX_DELAY_MS}`);
      if (body.down !== undefined && typeof body.down !== 'boolean') problems.push('down must be a boolean');
      if (problems.length > 0) {
        ctx.status = 400;
        ctx.body = { error: problems.join('; ') };
        return;
      }
      const script: EmulatorScript & { left?: number } = {
        ...(to ? { to } : { phoneNumberId: id }),
        behaviour: behaviour as EmulatorScript['behaviour'],
        ...(body.code !== undefined ? { code: body.code as number } : {}),
        ...(body.httpStatus !== undefined ? { httpStatus: body.httpStatus as number } : {}),
        ...(body.delayMs !== undefined ? { delayMs: body.delayMs as number } : {}),
        ...(body.times !== undefined ? { times: body.times as number, left: body.times as number } : {}),
        ...(body.down ? { down: true } : {}),
      };
      if (script.left === 0) (to ? byTo : byId).delete(to || id);
      else (to ? byTo : byId).set(to || id, script);
      const { left: _left, ...shown } = script;
      ctx.body = { script: shown };
      return;
    }
    if (ctx.method === 'POST' && ctx.path === '/__emulator/web/webhook') {
      // The web gateway's per-instance webhook setting (Evolution API: webhook URL, events
      // MESSAGES_UPSERT); its events carry the instance's apikey in the body.
      const body = ((ctx.request as { body?: unknown }).body ?? {}) as Record<string, unknown>;
      if (
        !isText(body.instanceName) ||
        (body.url !== null && (!isText(body.url) || !/^https?:\/\//.test(body.url))) ||
        (body.url !== null && !isText(body.apikey))
      ) {
        ctx.status = 400;
        ctx.body = { error: 'instanceName, url (http(s), or null to remove) and apikey are required' };
        return;
      }
      if (body.url === null) webWebhooks.delete(body.instanceName);
      else webWebhooks.set(body.instanceName, { url: body.url as string, apikey: body.apikey as string });
      ctx.body = { webhook: body.url === null ? null : { instanceName: body.instanceName, url: body.url } };
      return;
    }
    if (ctx.method === 'POST' && ctx.path === '/__emulator/status') {
      // A later status of a message the emulator accepted, as the provider reports it: a Cloud API
      // `statuses[]` notification to the phone-number id's webhook, or a web gateway `messages.update` ack.
      const body = ((ctx.request as { body?: unknown }).body ?? {}) as Record<string, unknown>;
      const call = isText(body.messageId) ? calls.find((c) => c.messageId === body.messageId) : undefined;
      const status = String(body.status);
      if (!call || !['sent', 'delivered', 'read', 'failed'].includes(status)) {
        ctx.status = 400;
        ctx.body = { error: 'messageId (of an accepted send) and status (sent, delivered, read, failed) are required' };
        return;
      }
      const timestamp = Math.floor((typeof body.timestamp === 'number' ? body.timestamp : Date.now()) / 1000);
      let target: { url: string; raw: string; headers: Record<string, string> } | undefined;
      if (call.api === 'cloud') {
        const webhook = webhooks.get(call.phoneNumberId);
        const notification: Record<string, unknown> = { id: call.messageId, status, timestamp: String(timestamp), recipient_id: call.waId };
        // Meta echoes the send's biz_opaque_callback_data in every status notification of the message.
        const reference = (call.body as { biz_opaque_callback_data?: unknown } | undefined)?.biz_opaque_callback_data;
        if (typeof reference === 'string') notification.biz_opaque_callback_data = reference;
        if (status === 'failed') {
          const code = typeof body.errorCode === 'number' ? body.errorCode : 131026;
          notification.errors = [
            { code, title: 'Message undeliverable', message: 'Message undeliverable', error_data: { details: 'Emulated' } },
          ];
        }
        if (webhook) target = { url: webhook.url, ...cloudStatusRequest(webhook, call.phoneNumberId, notification) };
      } else {
        const hook = webWebhooks.get(call.phoneNumberId);
        const ack = { sent: 'SERVER_ACK', delivered: 'DELIVERY_ACK', read: 'READ', failed: 'ERROR' }[status];
        const event = {
          event: 'messages.update',
          instance: call.phoneNumberId,
          data: {
            keyId: call.messageId,
            remoteJid: `${call.to}@s.whatsapp.net`,
            fromMe: true,
            status: ack,
            timestamp,
            instanceId: call.phoneNumberId,
          },
          date_time: new Date(timestamp * 1000).toISOString(),
          apikey: hook?.apikey,
        };
        if (hook) target = { url: hook.url, raw: JSON.stringify(event), headers: { 'content-type': 'application/json' } };
      }
      if (!target) {
        ctx.status = 409;
        ctx.body = { error: 'no webhook is set for that number or instance' };
        return;
      }
      const res = await fetch(target.url, { method: 'POST', headers: target.headers, body: target.raw, redirect: 'manual' });
      ctx.body = { delivered: res.status, answer: await res.json().catch(() => null) };
      return;
    }
    if (ctx.method === 'POST' && ctx.path === '/__emulator/web/inbound') {
      // A contact writes to a web gateway instance: the gateway posts `messages.upsert` to its webhook.
      const body = ((ctx.request as { body?: unknown }).body ?? {}) as Record<string, unknown>;
      const hook = isText(body.instanceName) ? webWebhooks.get(body.instanceName) : undefined;
      if (!hook || !isText(body.from)) {
        ctx.status = 400;
        ctx.body = { error: 'instanceName (with a webhook set) and from are required' };
        return;
      }
      const id = isText(body.id) ? body.id : randomBytes(10).toString('hex').toUpperCase();
      const text = isText(body.text) ? body.text : 'Oi';
      const inboundMedia = mediaEmulator.webInbound(body.media, id);
      if (typeof inboundMedia === 'string') {
        ctx.status = 400;
        ctx.body = { error: inboundMedia };
        return;
      }
      const event = {
        event: 'messages.upsert',
        instance: body.instanceName,
        data: {
          key: { remoteJid: `${digitsOf(body.from)}@s.whatsapp.net`, fromMe: body.fromMe === true, id },
          pushName: isText(body.name) ? body.name : '',
          message: inboundMedia ? inboundMedia.message : { conversation: text },
          messageType: inboundMedia ? inboundMedia.messageType : 'conversation',
          messageTimestamp: Math.floor(Date.now() / 1000),
          instanceId: body.instanceName,
          source: 'android',
        },
        destination: hook.url,
        date_time: new Date().toISOString(),
        sender: '5511930000000@s.whatsapp.net',
        apikey: hook.apikey,
      };
      const res = await fetch(hook.url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(event) });
      ctx.body = {
        delivered: res.status,
        id,
        ...(inboundMedia ? { sha256: inboundMedia.sha256 } : {}),
        answer: await res.json().catch(() => null),
      };
      return;
    }
    if (ctx.method === 'POST' && ctx.path === '/__emulator/webhook') {
      const body = ((ctx.request as { body?: unknown }).body ?? {}) as Record<string, unknown>;
      const problems: string[] = [];
      if (!isText(body.phoneNumberId)) problems.push('phoneNumberId is required');
      if (body.url !== null) {
        let url: URL | undefined;
        try {
          url = isText(body.url) ? new URL(body.url) : undefined;
        } catch {
          url = undefined;
        }
        if (!url || (url.protocol !== 'http:' && url.protocol !== 'https:'))
          problems.push('url must be an http(s) URL (or null to remove the webhook)');
        if (!isText(body.appSecret)) problems.push('appSecret is required');
        if (body.displayPhoneNumber !== undefined && !(isText(body.displayPhoneNumber) && /^\d{8,20}$/.test(body.displayPhoneNumber)))
          problems.push('displayPhoneNumber must be digits');
        if (body.wabaId !== undefined && !isText(body.wabaId)) problems.push('wabaId must be a string');
      }
      if (problems.length > 0) {
        ctx.status = 400;
        ctx.body = { error: problems.join('; ') };
        return;
      }
      const phoneNumberId = body.phoneNumberId as string;
      if (body.url === null) {
        webhooks.delete(phoneNumberId);
        ctx.body = { webhook: null };
        return;
      }
      const webhook: EmulatorWebhook = {
        phoneNumberId,
        url: body.url as string,
        appSecret: body.appSecret as string,
        displayPhoneNumber: (body.displayPhoneNumber as string | undefined) ?? '15550000000',
        wabaId: (body.wabaId as string | undefined) ?? wabaIdFor(phoneNumberId),
      };
      webhooks.set(phoneNumberId, webhook);
      const { appSecret: _secret, ...shown } = webhook;
      ctx.body = { webhook: shown };
      return;
    }
    if (ctx.method === 'GET' && ctx.path === '/__emulator/webhook') {
      const id = typeof ctx.query.phoneNumberId === 'string' ? ctx.query.phoneNumberId : undefined;
      const webhook = id ? webhooks.get(id) : undefined;
      const shown = webhook ? (({ appSecret: _secret, ...rest }) => rest)(webhook) : null;
      ctx.body = { webhook: shown, deliveries: deliveries.filter((d) => !id || d.phoneNumberId === id) };
      return;
    }
    if (ctx.method === 'POST' && ctx.path === '/__emulator/reset') {
      const body = ((ctx.request as { body?: unknown }).body ?? {}) as Record<string, unknown>;
      const to = body.to !== undefined ? personKey(body.to) : '';
      const id = typeof body.phoneNumberId === 'string' ? body.phoneNumberId : '';
      if (!to && !id) reset();
      else {
        if (to) byTo.delete(to);
        if (id) {
          byId.delete(id);
          webhooks.delete(id);
          const kept = deliveries.filter((d) => d.phoneNumberId !== id);
          deliveries.length = 0;
          deliveries.push(...kept);
        }
        const keep = calls.filter((c) => !((to && personKey(c.to) === to) || (id && c.phoneNumberId === id)));
        calls.length = 0;
        calls.push(...keep);
      }
      ctx.body = { reset: true };
      return;
    }
    const media = /^\/__emulator\/media\/(\d{1,12})\/([^/]+)$/.exec(ctx.path);
    if (media && (ctx.method === 'GET' || ctx.method === 'HEAD')) {
      const bytes = Number(media[1]);
      const ext = (/\.([A-Za-z0-9]+)$/.exec(media[2])?.[1] ?? '').toLowerCase();
      ctx.status = 200;
      ctx.type = MEDIA_TYPES[ext] ?? 'application/octet-stream';
      if (ctx.method === 'GET') ctx.body = zeros(bytes);
      ctx.length = bytes;
      return;
    }
    await next();
  });

  // WhatsApp Cloud API.
  app.use(async (ctx, next) => {
    const match = /^\/(v\d+\.\d+)\/([^/]+)\/messages$/.exec(ctx.path);
    if (!match) return next();
    if (ctx.method !== 'POST') {
      ctx.status = 400;
      ctx.body = graphError(100, `Unsupported ${ctx.method} request.`).body;
      return;
    }
    const phoneNumberId = decodeURIComponent(match[2]);
    const body = (ctx.request as { body?: unknown }).body;
    const to = isObject(body) ? digitsOf(body.to) : '';
    const type = isObject(body) && typeof body.type === 'string' ? body.type : undefined;
    const auth = /^Bearer \S+/.test(ctx.get('authorization')) ? 'bearer' : 'none';
    const base = { api: 'cloud' as const, version: match[1], phoneNumberId, to, type, body, auth } as const;

    const found = peek(to, phoneNumberId);
    // An outage or a misrouting proxy answers before anything else looks at the request.
    if (
      await answeredByOutage(ctx, found, base, {
        type: 'text/html',
        body: '<html><body><h1>503 Service Unavailable</h1>No server is available to handle this request.</body></html>',
      })
    )
      return;
    if (auth === 'none') {
      const answer = graphError(190);
      record({ ...base, status: answer.status, outcome: 'unauthorized' });
      ctx.status = answer.status;
      ctx.set('www-authenticate', 'OAuth "Facebook Platform" "invalid_token" "Invalid OAuth access token"');
      ctx.body = answer.body;
      return;
    }
    const invalid = validateCloudBody(body);
    if (invalid) {
      const answer = graphError(100, invalid);
      record({ ...base, status: answer.status, outcome: 'invalid' });
      ctx.status = answer.status;
      ctx.body = answer.body;
      return;
    }
    const script = found ? consume(found) : undefined;
    if (script?.behaviour === 'error') {
      const answer = graphError(script.code ?? 131000);
      const status = script.httpStatus ?? answer.status;
      record({ ...base, status, outcome: 'error' });
      if (script.delayMs) await sleep(script.delayMs);
      ctx.status = status;
      ctx.body = answer.body;
      return;
    }
    const messageId = `wamid.${randomBytes(24).toString('base64').replace(/[+/=]/g, 'A')}`;
    const waId = emulatedWaId(to);
    record({ ...base, status: 200, outcome: 'ok', messageId, waId });
    if (script?.delayMs) await sleep(script.delayMs);
    ctx.status = 200;
    ctx.body = {
      messaging_product: 'whatsapp',
      contacts: [{ input: (body as { to: string }).to, wa_id: waId }],
      messages: [{ id: messageId }],
    };
    // Accepted: the message exists whether or not the client is still there to read the answer.
    const reference = (body as { biz_opaque_callback_data?: string }).biz_opaque_callback_data;
    scheduleStatusCallback(phoneNumberId, { messageId, waId, ...(reference !== undefined ? { reference } : {}) });
  });

  // "web" gateway (Evolution-API-like).
  app.use(async (ctx) => {
    const match = /^\/message\/(sendText|sendMedia)\/([^/]+)$/.exec(ctx.path);
    if (ctx.method !== 'POST' || !match) {
      ctx.status = 404;
      ctx.body = {
        error: { message: `Unknown path components: ${ctx.path}`, type: 'OAuthException', code: 2500, fbtrace_id: fbtraceId() },
      };
      return;
    }
    const kind = match[1] as 'sendText' | 'sendMedia';
    const instance = decodeURIComponent(match[2]);
    const body = (ctx.request as { body?: unknown }).body;
    const to = isObject(body) ? digitsOf(body.number) : '';
    const type = kind === 'sendText' ? 'text' : isObject(body) && typeof body.mediatype === 'string' ? body.mediatype : undefined;
    const auth = ctx.get('apikey') ? 'apikey' : 'none';
    const streamed = ctx.state.streamedMedia as StreamedMedia | undefined;
    const { media, recorded } = kind === 'sendMedia' ? receivedMedia(body, streamed) : { media: undefined, recorded: body };
    const base = { api: 'web' as const, phoneNumberId: instance, to, type, body: recorded, auth, ...(media ? { media } : {}) } as const;
    const gatewayError = (status: number, message: unknown[]): void => {
      ctx.status = status;
      ctx.body = {
        status,
        error: status === 401 ? 'Unauthorized' : status >= 500 ? 'Internal Server Error' : 'Bad Request',
        response: { message },
      };
    };

    const found = peek(to, instance);
    if (await answeredByOutage(ctx, found, base, { type: 'text/plain', body: 'Service Unavailable' })) return;
    if (auth === 'none') {
      record({ ...base, status: 401, outcome: 'unauthorized' });
      gatewayError(401, ['Unauthorized']);
      return;
    }
    const problems = validateWebBody(kind, body, streamed);
    if (problems.length > 0) {
      record({ ...base, status: 400, outcome: 'invalid' });
      gatewayError(400, problems);
      return;
    }
    const script = found ? consume(found) : undefined;
    if (script?.behaviour === 'error') {
      // 131026 (undeliverable) is how the gateway says a number is not on WhatsApp.
      const status = script.httpStatus ?? (script.code === 131026 ? 400 : 500);
      record({ ...base, status, outcome: 'error' });
      if (script.delayMs) await sleep(script.delayMs);
      gatewayError(
        status,
        script.code === 131026
          ? [{ jid: `${to}@s.whatsapp.net`, exists: false, number: to }]
          : [`Emulated error${script.code ? ` ${script.code}` : ''}`],
      );
      return;
    }
    const messageId = randomBytes(10).toString('hex').toUpperCase();
    const waId = emulatedWaId(to);
    record({ ...base, status: 201, outcome: 'ok', messageId, waId });
    if (script?.delayMs) await sleep(script.delayMs);
    const b = body as Record<string, unknown>;
    ctx.status = 201;
    ctx.body = {
      key: { remoteJid: `${waId}@s.whatsapp.net`, fromMe: true, id: messageId },
      pushName: '',
      status: 'PENDING',
      message:
        kind === 'sendText'
          ? { conversation: b.text }
          : {
              [`${String(b.mediatype)}Message`]: {
                // Given bytes, the gateway uploads them to WhatsApp's media servers.
                url: media?.kind === 'url' ? media.url : `https://mmg.whatsapp.net/emulated/${messageId}`,
                ...(media?.kind === 'base64'
                  ? { fileLength: String(media.bytes), fileSha256: Buffer.from(media.sha256, 'hex').toString('base64') }
                  : {}),
                ...(b.mimetype ? { mimetype: b.mimetype } : {}),
                ...(b.caption ? { caption: b.caption } : {}),
                ...(b.fileName ? { fileName: b.fileName } : {}),
              },
            },
      messageType: kind === 'sendText' ? 'conversation' : `${String(b.mediatype)}Message`,
      messageTimestamp: Math.floor(Date.now() / 1000),
      instanceId: instance,
      source: 'unknown',
    };
  });

  return { app, calls, deliveries, reset };
}

if (require.main === module) {
  const port = Number(process.env.EMULATOR_PORT ?? 3100);
  const server: Server = createEmulator().app.listen(port, '127.0.0.1', () => {
    console.log(JSON.stringify({ msg: 'emulator listening', port }));
  });
  const stop = (): void => {
    server.close();
    process.exit(0);
  };
  process.once('SIGINT', stop);
  process.once('SIGTERM', stop);
}
