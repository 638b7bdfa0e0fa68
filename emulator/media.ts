import { createHash, createHmac, randomBytes } from 'node:crypto';
import { Readable } from 'node:stream';
import type Koa from 'koa';
import type { EmulatorWebhook } from './server';

/**
 * Inbound media at both providers' wire formats (emulator/server.ts mounts it). A file's bytes are
 * deterministic (derived from its id), so a test can compare the sha256 the emulator reports with
 * what the service stored and serves; they are generated as they are sent, never held.
 *
 * - `POST /__emulator/media` `{ id?, bytes, mimeType?, fileName?, failTimes?, failStatus?, gone? }`:
 *   a file the provider holds under that media id (Cloud) or message id (web gateway). `failTimes`:
 *   the next that many fetches (the Cloud API's media id lookup, or the gateway's base64 call)
 *   answer `failStatus` (default 500); `gone: true` answers as for an expired media id. Answers
 *   `{ id, bytes, sha256, mimeType }`. `GET /__emulator/media?id=`: `{ media, fetches }`, the
 *   fetches made (`{ at, api: 'meta'|'bytes'|'base64', status }`).
 * - `POST /__emulator/inbound` `{ phoneNumberId, from, name?, id?, text?, media?: { type:
 *   image|audio|video|document|sticker, bytes, mimeType?, fileName?, caption?, failTimes?, mediaId? } }`:
 *   a contact writes to a Cloud API number: the signed `messages[]` notification is posted to the
 *   number's webhook (`POST /__emulator/webhook`); with `media`, the message is that type with
 *   `{ id: <media id>, mime_type, sha256, caption?, filename? }` and the file is registered.
 *   Answers `{ delivered, id, mediaId?, sha256?, answer }`.
 * - Cloud API: `GET /{version}/{media-id}` (Bearer) answers `{ messaging_product, url, mime_type,
 *   sha256, file_size, id }`; `GET url` (Bearer) answers the bytes. An unknown or expired id is
 *   Graph's 400 (code 100, subcode 33).
 * - Web gateway (Evolution API): `POST /chat/getBase64FromMediaMessage/{instance}` (header
 *   `apikey`) `{ message: { key: { id } }, convertToMp4? }` answers `{ mediaType, fileName, size: {
 *   fileLength }, mimetype, base64 }`; an unknown message is 400 `Message not found`.
 *   `POST /__emulator/web/inbound` with `media: { type, bytes, mimeType?, fileName?, caption?,
 *   failTimes? }` sends that media message (server.ts asks `webInbound` for it).
 */

export interface EmulatedFile {
  id: string;
  bytes: number;
  mimeType: string;
  fileName?: string;
  sha256: string;
  failTimes: number;
  failStatus: number;
  gone: boolean;
}

const BLOCK = 64 * 1024;
const MAX_BYTES = 200 * 1024 * 1024;
const isText = (v: unknown): v is string => typeof v === 'string' && v.length > 0;
const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

const DEFAULT_MIME: Record<string, string> = {
  image: 'image/jpeg',
  audio: 'audio/ogg',
  video: 'video/mp4',
  document: 'application/pdf',
  sticker: 'image/webp',
};

/** The file's bytes, one 64 KiB block at a time: a block derived from the id, numbered. */
function* blocksOf(id: string, total: number): Generator<Buffer> {
  const base = Buffer.alloc(BLOCK);
  for (let i = 0; i < BLOCK / 32; i += 1)
    createHash('sha256')
      .update(`${id}:${i}`)
      .digest()
      .copy(base, i * 32);
  for (let offset = 0, n = 0; offset < total; offset += BLOCK, n += 1) {
    const block = Buffer.from(base.subarray(0, Math.min(BLOCK, total - offset)));
    if (block.length >= 4) block.writeUInt32BE(n, 0);
    yield block;
  }
}

function sha256Of(id: string, total: number): string {
  const hash = createHash('sha256');
  for (const block of blocksOf(id, total)) hash.update(block);
  return hash.digest('hex');
}

/** The base64 of the file, in pieces (each a whole number of 3-byte groups but the last). */
function* base64Of(id: string, total: number): Generator<string> {
  let carry = Buffer.alloc(0);
  for (const block of blocksOf(id, total)) {
    const all = carry.length ? Buffer.concat([carry, block]) : block;
    const whole = all.length - (all.length % 3);
    yield all.subarray(0, whole).toString('base64');
    carry = Buffer.from(all.subarray(whole));
  }
  if (carry.length) yield carry.toString('base64');
}

function graphError(code: number, message: string, subcode?: number): Record<string, unknown> {
  return {
    error: {
      message,
      type: 'OAuthException',
      code,
      ...(subcode ? { error_subcode: subcode } : {}),
      fbtrace_id: randomBytes(9).toString('base64url'),
    },
  };
}

export function createMediaEmulator(webhooks: Map<string, EmulatorWebhook>, webWebhooks: Map<string, { url: string; apikey: string }>) {
  const files = new Map<string, EmulatedFile>();
  const fetches = new Map<string, { at: string; api: 'meta' | 'bytes' | 'base64'; status: number }[]>();

  function register(input: Record<string, unknown>, fallbackId?: string): EmulatedFile | string {
    const bytes = Number(input.bytes);
    if (!Number.isInteger(bytes) || bytes < 1 || bytes > MAX_BYTES) return `bytes must be an integer from 1 to ${MAX_BYTES}`;
    const id = isText(input.id) ? input.id : (fallbackId ?? String(BigInt(`0x${randomBytes(7).toString('hex')}`)));
    const type = isText(input.type) ? input.type : 'image';
    const file: EmulatedFile = {
      id,
      bytes,
      mimeType: isText(input.mimeType) ? input.mimeType : (DEFAULT_MIME[type] ?? 'application/octet-stream'),
      ...(isText(input.fileName) ? { fileName: input.fileName } : {}),
      sha256: sha256Of(id, bytes),
      failTimes: Number.isInteger(input.failTimes) ? Number(input.failTimes) : 0,
      failStatus: Number.isInteger(input.failStatus) ? Number(input.failStatus) : 500,
      gone: input.gone === true,
    };
    files.set(id, file);
    return file;
  }

  function logFetch(id: string, api: 'meta' | 'bytes' | 'base64', status: number): void {
    const list = fetches.get(id) ?? [];
    list.push({ at: new Date().toISOString(), api, status });
    fetches.set(id, list);
  }

  /** Whether this fetch is one of the scripted failures (counted down). */
  function failing(file: EmulatedFile): boolean {
    if (file.failTimes <= 0) return false;
    file.failTimes -= 1;
    return true;
  }

  /** The web gateway message of an inbound media (`/__emulator/web/inbound` with `media`), its file registered under the message id. */
  function webInbound(
    media: unknown,
    messageId: string,
  ): { messageType: string; message: Record<string, unknown>; sha256: string } | string | undefined {
    if (media === undefined) return undefined;
    if (!isObject(media) || !isText(media.type) || !DEFAULT_MIME[media.type])
      return 'media.type must be image, audio, video, document or sticker';
    const file = register({ ...media, id: messageId });
    if (typeof file === 'string') return `media: ${file}`;
    const messageType = `${media.type}Message`;
    return {
      messageType,
      sha256: file.sha256,
      message: {
        [messageType]: {
          url: `https://mmg.whatsapp.net/emulated/${messageId}`,
          mimetype: file.mimeType,
          fileLength: String(file.bytes),
          fileSha256: Buffer.from(file.sha256, 'hex').toString('base64'),
          ...(isText(media.caption) ? { caption: media.caption } : {}),
          ...(file.fileName ? { fileName: file.fileName } : {}),
        },
      },
    };
  }

  const middleware: Koa.Middleware = async (ctx, next) => {
    const body = ((ctx.request as { body?: unknown }).body ?? {}) as Record<string, unknown>;
    if (ctx.path === '/__emulator/media') {
      if (ctx.method === 'POST') {
        const file = register(body);
        if (typeof file === 'string') {
          ctx.status = 400;
          ctx.body = { error: file };
          return;
        }
        ctx.body = { id: file.id, bytes: file.bytes, sha256: file.sha256, mimeType: file.mimeType };
        return;
      }
      const id = String(ctx.query.id ?? '');
      ctx.body = { media: files.get(id) ?? null, fetches: fetches.get(id) ?? [] };
      return;
    }

    if (ctx.method === 'POST' && ctx.path === '/__emulator/inbound') {
      const hook = isText(body.phoneNumberId) ? webhooks.get(body.phoneNumberId) : undefined;
      if (!hook || !isText(body.from)) {
        ctx.status = 400;
        ctx.body = { error: 'phoneNumberId (with a webhook set) and from are required' };
        return;
      }
      const id = isText(body.id) ? body.id : `wamid.${randomBytes(12).toString('base64url')}`;
      const message: Record<string, unknown> = { from: body.from, id, timestamp: String(Math.floor(Date.now() / 1000)) };
      let file: EmulatedFile | undefined;
      if (body.media !== undefined) {
        const media = body.media;
        if (!isObject(media) || !isText(media.type) || !DEFAULT_MIME[media.type]) {
          ctx.status = 400;
          ctx.body = { error: 'media.type must be image, audio, video, document or sticker' };
          return;
        }
        const made = register({ ...media, id: media.mediaId });
        if (typeof made === 'string') {
          ctx.status = 400;
          ctx.body = { error: `media: ${made}` };
          return;
        }
        file = made;
        message.type = media.type;
        message[media.type] = {
          id: file.id,
          mime_type: file.mimeType,
          sha256: Buffer.from(file.sha256, 'hex').toString('base64'),
          ...(isText(media.caption) ? { caption: media.caption } : {}),
          ...(media.type === 'document' && file.fileName ? { filename: file.fileName } : {}),
        };
      } else {
        message.type = 'text';
        message.text = { body: isText(body.text) ? body.text : 'Oi' };
      }
      const notification = {
        object: 'whatsapp_business_account',
        entry: [
          {
            id: hook.wabaId,
            changes: [
              {
                field: 'messages',
                value: {
                  messaging_product: 'whatsapp',
                  metadata: { display_phone_number: hook.displayPhoneNumber, phone_number_id: hook.phoneNumberId },
                  contacts: [{ profile: { name: isText(body.name) ? body.name : 'Cliente' }, wa_id: body.from }],
                  messages: [message],
                },
              },
            ],
          },
        ],
      };
      const raw = JSON.stringify(notification);
      const signature = `sha256=${createHmac('sha256', hook.appSecret).update(raw, 'utf8').digest('hex')}`;
      const res = await fetch(hook.url, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'x-hub-signature-256': signature },
        body: raw,
      });
      ctx.body = {
        delivered: res.status,
        id,
        ...(file ? { mediaId: file.id, sha256: file.sha256 } : {}),
        answer: await res.json().catch(() => null),
      };
      return;
    }

    // Cloud API: the media id's URL, then the bytes.
    const meta = ctx.method === 'GET' ? /^\/(v\d+\.\d+)\/([^/]+)$/.exec(ctx.path) : null;
    const bytes = ctx.method === 'GET' ? /^\/__emulator\/media-file\/([^/]+)$/.exec(ctx.path) : null;
    if (meta || bytes) {
      const id = decodeURIComponent(meta ? meta[2] : bytes![1]);
      if (!/^Bearer \S+/.test(ctx.get('authorization'))) {
        ctx.status = 401;
        ctx.body = graphError(190, 'Invalid OAuth access token - Cannot parse access token');
        return;
      }
      const file = files.get(id);
      if (!file || file.gone) {
        logFetch(id, meta ? 'meta' : 'bytes', meta ? 400 : 404);
        ctx.status = meta ? 400 : 404;
        ctx.body = meta
          ? graphError(
              100,
              `Unsupported get request. Object with ID '${id}' does not exist, cannot be loaded due to missing permissions, or does not support this operation.`,
              33,
            )
          : 'Not Found';
        return;
      }
      if (meta) {
        if (failing(file)) {
          logFetch(id, 'meta', file.failStatus);
          ctx.status = file.failStatus;
          ctx.body = graphError(2, 'Service temporarily unavailable');
          return;
        }
        logFetch(id, 'meta', 200);
        ctx.body = {
          messaging_product: 'whatsapp',
          url: `${ctx.protocol}://${ctx.get('host')}/__emulator/media-file/${encodeURIComponent(id)}`,
          mime_type: file.mimeType,
          sha256: file.sha256,
          file_size: file.bytes,
          id: file.id,
        };
        return;
      }
      logFetch(id, 'bytes', 200);
      ctx.type = file.mimeType;
      ctx.length = file.bytes;
      ctx.body = Readable.from(blocksOf(file.id, file.bytes));
      return;
    }

    // Web gateway: the media message's base64.
    const web = ctx.method === 'POST' ? /^\/chat\/getBase64FromMediaMessage\/([^/]+)$/.exec(ctx.path) : null;
    if (web) {
      const instance = decodeURIComponent(web[1]);
      const hook = webWebhooks.get(instance);
      const given = ctx.get('apikey');
      if (!given || (hook && hook.apikey !== given)) {
        ctx.status = 401;
        ctx.body = { status: 401, error: 'Unauthorized', response: { message: 'Unauthorized' } };
        return;
      }
      const key = isObject(body.message) && isObject(body.message.key) ? body.message.key : undefined;
      const id = isText(key?.id) ? key.id : '';
      const file = files.get(id);
      if (!file || file.gone) {
        logFetch(id, 'base64', 400);
        ctx.status = 400;
        ctx.body = { status: 400, error: 'Bad Request', response: { message: ['Message not found'] } };
        return;
      }
      if (failing(file)) {
        logFetch(id, 'base64', file.failStatus);
        ctx.status = file.failStatus;
        ctx.body = { status: file.failStatus, error: 'Internal Server Error', response: { message: ['Failed to download media'] } };
        return;
      }
      logFetch(id, 'base64', 200);
      const kind = file.mimeType.startsWith('image/') ? 'imageMessage' : 'documentMessage';
      const head = JSON.stringify({
        mediaType: kind,
        fileName: file.fileName ?? `${file.id}.bin`,
        size: { fileLength: String(file.bytes) },
        mimetype: file.mimeType,
      });
      const parts = function* (): Generator<string> {
        yield `${head.slice(0, -1)},"base64":"`;
        yield* base64Of(file.id, file.bytes);
        yield '"}';
      };
      ctx.status = 201;
      ctx.type = 'application/json';
      ctx.body = Readable.from(parts());
      return;
    }
    await next();
  };

  return {
    middleware,
    webInbound,
    register,
    /** A registered file's bytes, as a stream (Instagram's CDN URLs serve them: emulator/instagram.ts). */
    fileBytes(id: string): { file: EmulatedFile; stream: () => Readable } | undefined {
      const file = files.get(id);
      return file && !file.gone ? { file, stream: () => Readable.from(blocksOf(file.id, file.bytes)) } : undefined;
    },
    reset(): void {
      files.clear();
      fetches.clear();
    },
  };
}
