import { createHmac, randomBytes } from 'node:crypto';
import type Koa from 'koa';
import type { EmulatedFile } from './media';

/**
 * Instagram messaging at the Graph API's wire format (emulator/server.ts mounts it before the Cloud
 * API's routes, which share the path shape `/{version}/{id}/messages`).
 *
 * Provider routes (Bearer token)
 * - `POST /{version}/{igUserId}/messages` `{ recipient: { id: IGSID }, messaging_type?: RESPONSE |
 *   UPDATE | MESSAGE_TAG, tag?: HUMAN_AGENT, message: { text } | { attachment: { type: image | video
 *   | audio | file, payload: { url } } } }` answers `{ recipient_id, message_id }`. Like the real API
 *   it refuses a reply more than 24 hours after the person's last message (code 10, subcode
 *   2534022) unless tagged HUMAN_AGENT, which reaches 7 days; a recipient who never wrote is code 100,
 *   subcode 2018001. An accepted send is echoed to the webhook (`message.is_echo: true`), as Meta does.
 * - `GET /{version}/{IGSID}?fields=name,username`: the person's profile, as the inbound control route set it.
 *
 * Control routes
 * - `POST /__emulator/instagram/webhook` `{ igUserId, url, appSecret }` (`url: null` removes it).
 * - `POST /__emulator/instagram/inbound` `{ igUserId, from: IGSID, text?, mid?, username?, name?,
 *   timestamp? (ms), media?: { type: image|video|audio|file, bytes }, storyReply?: true,
 *   storyMention?: true, echo?: true, deleted?: true }`: the person writes (or, with `echo`, the
 *   business wrote from the Instagram app; with `deleted`, the person deleted message `mid`); the
 *   signed `messaging[]` notification is posted to the webhook. An attachment's `payload.url` is a
 *   CDN address this emulator serves (`GET /__emulator/instagram/cdn/{id}`). Answers `{ delivered,
 *   mid, sha256?, answer }`.
 * - `POST /__emulator/instagram/seen` `{ igUserId, from, mid }`: the person saw message `mid`
 *   (`messaging_seen`: `read: { mid }`).
 * Sends are recorded in the shared call list with `api: 'instagram'` (`to` = the IGSID).
 */

export interface InstagramCallRecorder {
  record(call: {
    api: 'instagram';
    version: string;
    phoneNumberId: string;
    to: string;
    type: string | undefined;
    body: unknown;
    auth: 'bearer' | 'none';
    status: number;
    outcome: 'ok' | 'error' | 'invalid' | 'unauthorized';
    messageId?: string;
  }): void;
  /** A scripted answer for sends to this recipient or through this account (`POST /__emulator/script`), consumed. */
  scripted(to: string, id: string): { behaviour: string; code?: number; httpStatus?: number; delayMs?: number } | undefined;
  registerFile(input: Record<string, unknown>): EmulatedFile | string;
  fileBytes(id: string): { file: EmulatedFile; stream: () => NodeJS.ReadableStream } | undefined;
}

const isText = (v: unknown): v is string => typeof v === 'string' && v.length > 0;
const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);
const isIgId = (v: unknown): v is string => typeof v === 'string' && /^\d{5,25}$/.test(v);
const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

const DAY_MS = 24 * 60 * 60 * 1000;
const ATTACHMENT_TYPES = ['image', 'video', 'audio', 'file'];
const DEFAULT_MIME: Record<string, string> = { image: 'image/jpeg', video: 'video/mp4', audio: 'audio/mp4', file: 'application/pdf' };

/** Instagram messaging errors as the Graph API words them. */
const ERRORS: Record<string, { status: number; code: number; subcode?: number; message: string }> = {
  '10:2534022': { status: 400, code: 10, subcode: 2534022, message: 'This message is sent outside of allowed window.' },
  '100:2018001': { status: 400, code: 100, subcode: 2018001, message: 'No matching user found' },
  '551:1545041': { status: 400, code: 551, subcode: 1545041, message: "This person isn't available right now." },
  '4': { status: 400, code: 4, message: '(#4) Application request limit reached' },
  '613': { status: 400, code: 613, message: 'Calls to this api have exceeded the rate limit.' },
  '2': { status: 503, code: 2, message: 'An unexpected error has occurred. Please retry your request later.' },
  '190': { status: 401, code: 190, message: 'Invalid OAuth access token - Cannot parse access token' },
  '100': { status: 400, code: 100, message: '(#100) Invalid parameter' },
};

/** A script's `code` may name an error by its subcode (2534022: outside the window). */
const BY_SUBCODE: Record<number, string> = Object.fromEntries(
  Object.entries(ERRORS)
    .filter(([, e]) => e.subcode)
    .map(([key, e]) => [e.subcode!, key]),
);

function graphError(key: string, details?: string): { status: number; body: unknown } {
  const known = ERRORS[key] ?? { status: 400, code: Number(key.split(':')[0]) || 1, message: `(#${key}) Emulated error` };
  return {
    status: known.status,
    body: {
      error: {
        message: details ? `${known.message} ${details}` : known.message,
        type: 'IGApiException',
        code: known.code,
        ...(known.subcode ? { error_subcode: known.subcode } : {}),
        fbtrace_id: randomBytes(9).toString('base64url'),
      },
    },
  };
}

/** What the real API would refuse with code 100, in its words; undefined when the body is fine. */
function invalidSend(body: unknown): string | undefined {
  if (!isObject(body)) return 'The request body must be a JSON object';
  if (!isObject(body.recipient) || !isIgId(body.recipient.id))
    return 'The parameter recipient[id] is required and must be an Instagram-scoped ID';
  const type = body.messaging_type ?? 'RESPONSE';
  if (!['RESPONSE', 'UPDATE', 'MESSAGE_TAG'].includes(String(type)))
    return 'Param messaging_type must be one of {RESPONSE, UPDATE, MESSAGE_TAG}';
  if (type === 'MESSAGE_TAG' && body.tag !== 'HUMAN_AGENT') return 'Param tag must be HUMAN_AGENT for Instagram messaging';
  if (type !== 'MESSAGE_TAG' && body.tag !== undefined) return 'Param tag is only allowed with messaging_type MESSAGE_TAG';
  const message = body.message;
  if (!isObject(message)) return 'The parameter message is required';
  if ((message.text === undefined) === (message.attachment === undefined)) return 'message must have exactly one of text or attachment';
  if (message.text !== undefined) {
    if (!isText(message.text)) return "Param message['text'] must be a non-empty string";
    if ([...message.text].length > 1000) return "Param message['text'] must be at most 1000 characters";
    return undefined;
  }
  const attachment = message.attachment;
  if (!isObject(attachment) || !ATTACHMENT_TYPES.includes(String(attachment.type)))
    return `Param message['attachment']['type'] must be one of {${ATTACHMENT_TYPES.join(', ')}}`;
  if (!isObject(attachment.payload) || !isText(attachment.payload.url) || !/^https?:\/\//i.test(attachment.payload.url))
    return "Param message['attachment']['payload']['url'] must be a valid URL";
  return undefined;
}

export function createInstagramEmulator(recorder: InstagramCallRecorder) {
  const webhooks = new Map<string, { url: string; appSecret: string }>();
  /** When each person (IGSID) last wrote to each account: `${igUserId}:${igsid}` → ms. */
  const lastInbound = new Map<string, number>();
  const profiles = new Map<string, { name?: string; username?: string }>();

  /** Posts a signed `messaging[]` notification of `igUserId` to its webhook; the answer's status and body. */
  async function notify(igUserId: string, messaging: Record<string, unknown>): Promise<{ delivered: number; answer: unknown } | undefined> {
    const hook = webhooks.get(igUserId);
    if (!hook) return undefined;
    const raw = JSON.stringify({ object: 'instagram', entry: [{ time: Date.now(), id: igUserId, messaging: [messaging] }] });
    const res = await fetch(hook.url, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        'user-agent': 'facebookexternalua',
        'x-hub-signature-256': `sha256=${createHmac('sha256', hook.appSecret).update(raw, 'utf8').digest('hex')}`,
      },
      body: raw,
    });
    return { delivered: res.status, answer: await res.json().catch(() => null) };
  }

  const mid = (): string => `aWdfZAG1faXRlbToxOklHTWVzc2FnZAUlEOj${randomBytes(18).toString('base64url')}`;

  const middleware: Koa.Middleware = async (ctx, next) => {
    const body = ((ctx.request as { body?: unknown }).body ?? {}) as Record<string, unknown>;

    if (ctx.method === 'POST' && ctx.path === '/__emulator/instagram/webhook') {
      if (
        !isIgId(body.igUserId) ||
        (body.url !== null && (!isText(body.url) || !/^https?:\/\//.test(body.url) || !isText(body.appSecret)))
      ) {
        ctx.status = 400;
        ctx.body = { error: 'igUserId (digits), url (http(s), or null to remove) and appSecret are required' };
        return;
      }
      if (body.url === null) webhooks.delete(body.igUserId);
      else webhooks.set(body.igUserId, { url: body.url as string, appSecret: body.appSecret as string });
      ctx.body = { webhook: body.url === null ? null : { igUserId: body.igUserId, url: body.url } };
      return;
    }

    if (ctx.method === 'POST' && (ctx.path === '/__emulator/instagram/inbound' || ctx.path === '/__emulator/instagram/seen')) {
      if (!isIgId(body.igUserId) || !webhooks.has(body.igUserId) || !isIgId(body.from)) {
        ctx.status = 400;
        ctx.body = { error: 'igUserId (with a webhook set) and from (an IGSID: digits) are required' };
        return;
      }
      const timestamp = typeof body.timestamp === 'number' ? body.timestamp : Date.now();
      if (ctx.path.endsWith('/seen')) {
        if (!isText(body.mid)) {
          ctx.status = 400;
          ctx.body = { error: 'mid is required' };
          return;
        }
        const sent = await notify(body.igUserId, {
          sender: { id: body.from },
          recipient: { id: body.igUserId },
          timestamp,
          read: { mid: body.mid },
        });
        ctx.body = { ...sent, mid: body.mid };
        return;
      }
      const id = isText(body.mid) ? body.mid : mid();
      const message: Record<string, unknown> = { mid: id };
      let sha256: string | undefined;
      if (body.deleted === true) message.is_deleted = true;
      else {
        if (body.media !== undefined) {
          const media = body.media as Record<string, unknown>;
          if (!isObject(media) || !ATTACHMENT_TYPES.includes(String(media.type))) {
            ctx.status = 400;
            ctx.body = { error: `media.type must be one of ${ATTACHMENT_TYPES.join(', ')}` };
            return;
          }
          const file = recorder.registerFile({ ...media, mimeType: media.mimeType ?? DEFAULT_MIME[media.type as string] });
          if (typeof file === 'string') {
            ctx.status = 400;
            ctx.body = { error: `media: ${file}` };
            return;
          }
          sha256 = file.sha256;
          message.attachments = [
            {
              type: media.type,
              payload: {
                url: `${ctx.protocol}://${ctx.get('host')}/__emulator/instagram/cdn/${file.id}?_nc_sig=${randomBytes(6).toString('hex')}`,
              },
            },
          ];
        } else if (body.storyMention === true) {
          message.attachments = [
            { type: 'story_mention', payload: { url: `${ctx.protocol}://${ctx.get('host')}/__emulator/instagram/cdn/story-${id}` } },
          ];
        } else {
          message.text = isText(body.text) ? body.text : 'Oi';
        }
        if (body.storyReply === true)
          message.reply_to = {
            story: { url: `${ctx.protocol}://${ctx.get('host')}/__emulator/instagram/cdn/story`, id: '17900000000000001' },
          };
        if (body.echo === true) message.is_echo = true;
      }
      if (body.echo !== true) {
        lastInbound.set(`${body.igUserId}:${body.from}`, Math.max(lastInbound.get(`${body.igUserId}:${body.from}`) ?? 0, timestamp));
        if (isText(body.username) || isText(body.name))
          profiles.set(body.from, {
            ...(isText(body.username) ? { username: body.username } : {}),
            ...(isText(body.name) ? { name: body.name } : {}),
          });
      }
      const [sender, recipient] = body.echo === true ? [body.igUserId, body.from] : [body.from, body.igUserId];
      const sent = await notify(body.igUserId, { sender: { id: sender }, recipient: { id: recipient }, timestamp, message });
      ctx.body = { ...sent, mid: id, ...(sha256 ? { sha256 } : {}) };
      return;
    }

    const cdn = ctx.method === 'GET' ? /^\/__emulator\/instagram\/cdn\/(\d+)$/.exec(ctx.path) : null;
    if (cdn) {
      const found = recorder.fileBytes(cdn[1]);
      if (!found) {
        ctx.status = 404;
        ctx.body = 'URL signature expired';
        return;
      }
      ctx.type = found.file.mimeType;
      ctx.length = found.file.bytes;
      ctx.body = found.stream();
      return;
    }

    // The person's profile (Bearer): only ids the inbound route made known, so the Cloud API's media ids still reach media.ts.
    const profile = ctx.method === 'GET' ? /^\/(v\d+\.\d+)\/(\d+)$/.exec(ctx.path) : null;
    if (profile && profiles.has(profile[2])) {
      if (!/^Bearer \S+/.test(ctx.get('authorization'))) {
        const answer = graphError('190');
        ctx.status = answer.status;
        ctx.body = answer.body;
        return;
      }
      ctx.body = { ...profiles.get(profile[2]), id: profile[2] };
      return;
    }

    const send = ctx.method === 'POST' ? /^\/(v\d+\.\d+)\/(\d+)\/messages$/.exec(ctx.path) : null;
    // The Cloud API's sends share the path; Instagram's carry `recipient` and no `messaging_product`.
    if (!send || !isObject(body) || body.messaging_product !== undefined || !isObject(body.recipient)) return next();
    const igUserId = send[2];
    const to = String(body.recipient.id ?? '');
    const message = isObject(body.message) ? body.message : {};
    const type = message.text !== undefined ? 'text' : isObject(message.attachment) ? String(message.attachment.type) : undefined;
    const auth = /^Bearer \S+/.test(ctx.get('authorization')) ? 'bearer' : 'none';
    const base = { api: 'instagram' as const, version: send[1], phoneNumberId: igUserId, to, type, body, auth } as const;
    const answer = (status: number, payload: unknown): void => {
      ctx.status = status;
      ctx.body = payload;
    };
    if (auth === 'none') {
      const refused = graphError('190');
      recorder.record({ ...base, status: refused.status, outcome: 'unauthorized' });
      return answer(refused.status, refused.body);
    }
    const invalid = invalidSend(body);
    if (invalid) {
      const refused = graphError('100', invalid);
      recorder.record({ ...base, status: refused.status, outcome: 'invalid' });
      return answer(refused.status, refused.body);
    }
    const script = recorder.scripted(to, igUserId);
    if (script?.delayMs) await sleep(script.delayMs);
    const last = lastInbound.get(`${igUserId}:${to}`);
    const humanAgent = body.tag === 'HUMAN_AGENT';
    const refusal =
      script?.behaviour === 'error'
        ? (BY_SUBCODE[script.code ?? 2] ?? String(script.code ?? 2))
        : last === undefined
          ? '100:2018001'
          : Date.now() - last > (humanAgent ? 7 : 1) * DAY_MS
            ? '10:2534022'
            : undefined;
    if (refusal) {
      const refused = graphError(refusal);
      const status = script?.httpStatus ?? refused.status;
      recorder.record({ ...base, status, outcome: 'error' });
      return answer(status, refused.body);
    }
    const messageId = mid();
    recorder.record({ ...base, status: 200, outcome: 'ok', messageId });
    answer(200, { recipient_id: to, message_id: messageId });
    // Meta echoes what the business sent to the webhook, shortly after.
    const echoed = {
      mid: messageId,
      is_echo: true,
      ...(message.text !== undefined ? { text: message.text } : { attachments: [message.attachment] }),
    };
    setTimeout(() => {
      void notify(igUserId, { sender: { id: igUserId }, recipient: { id: to }, timestamp: Date.now(), message: echoed }).catch(
        () => undefined,
      );
    }, 100);
  };

  return {
    middleware,
    reset(): void {
      webhooks.clear();
      lastInbound.clear();
      profiles.clear();
    },
  };
}
