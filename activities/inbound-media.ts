import { createHash } from 'node:crypto';
import { StringDecoder } from 'node:string_decoder';
import { ApplicationFailure, Context } from '@temporalio/activity';
import type { Config } from '../domain/platform/config';
import { ApiError } from '../domain/kernel/errors';
import type { Db } from '../domain/platform/db';
import { safeRequest, safeStream, SafeHttpError, type SafeStreamResponse } from '../domain/platform/safe-http';
import type { InstanceConfig } from '../domain/messaging/instances';
import {
  clearChunks,
  INBOUND_MEDIA_LIMITS,
  instanceOfMedia,
  limitText,
  markStored,
  markUnavailable,
  mediaStorageRoom,
  storageFullReason,
  MEDIA_CHUNK_BYTES,
  mediaToFetch,
  writeChunk,
  type MediaRow,
  type MediaStatus,
} from '../domain/messaging/media';
import { DEFAULT_API_VERSION } from './providers/cloud';
import { MAX_ANSWER_BYTES, redactSecrets } from './providers/types';

/**
 * The fetch of an inbound media file (docs/messaging.md, "Media"), run by inboundMediaWorkflow:
 *
 * - Cloud API: `GET {baseUrl}/{version}/{media-id}` (Bearer token) answers `{ url, mime_type,
 *   sha256, file_size }`; `GET url` with the same token answers the bytes. The URL comes from the
 *   provider's answer, so it passes the anti-SSRF check (safe-http) like any URL we are given.
 * - Web gateway (Evolution API): `POST {baseUrl}/chat/getBase64FromMediaMessage/{instance}` with
 *   `{ message: { key: { id } }, convertToMp4: false }` (header `apikey`) answers `{ mediaType,
 *   fileName, size: { fileLength }, mimetype, base64 }`; the base64 is decoded as it arrives.
 *
 * Either way the bytes are counted, hashed and written in chunks of MEDIA_CHUNK_BYTES as they
 * arrive: at most one chunk (and the socket's buffers) is in memory. A final answer (the provider
 * no longer has the file, a file over its type's limit) marks the media `unavailable` and returns;
 * anything else that trying again can fix (no answer, 5xx, 429, a token being fixed) throws a
 * retryable failure, and the workflow's retry policy (MEDIA_FETCH) tries again with backoff.
 */

const SERVICE_TIMEOUT_MS = 15_000;
/** The whole download of the bytes (a 100 MB document at a few MB/s). */
const DOWNLOAD_TIMEOUT_MS = 240_000;

export interface MediaFetchInput {
  workspaceId: string;
  messageId: string;
}

export interface MediaFetchResult {
  status: MediaStatus;
  reason?: string;
}

/** Final: marks the media unavailable (the activity returns). */
class Final extends Error {}

/** The bytes sink: counts (limit), hashes, writes a chunk each MEDIA_CHUNK_BYTES. */
class ChunkWriter {
  private seq = 0;
  private parts: Buffer[] = [];
  private held = 0;
  size = 0;
  private readonly hash = createHash('sha256');
  constructor(
    private readonly db: Db,
    private readonly row: MediaRow,
    /** The workspace's room for stored media when the fetch began: a file past it is not kept. */
    readonly room: { limitMb: number; bytes: number },
  ) {}

  async write(data: Buffer): Promise<void> {
    if (data.length === 0) return;
    this.size += data.length;
    const limit = INBOUND_MEDIA_LIMITS[this.row.type];
    if (this.size > limit)
      throw new Final(`the ${this.row.type} is more than ${limitText(this.row.type)}, the provider's limit for its type`);
    if (this.size > this.room.bytes) throw new Final(storageFullReason(this.room.limitMb));
    this.hash.update(data);
    this.parts.push(data);
    this.held += data.length;
    while (this.held >= MEDIA_CHUNK_BYTES) {
      const all = Buffer.concat(this.parts, this.held);
      await this.flush(all.subarray(0, MEDIA_CHUNK_BYTES));
      const rest = all.subarray(MEDIA_CHUNK_BYTES);
      this.parts = rest.length > 0 ? [Buffer.from(rest)] : [];
      this.held = rest.length;
    }
  }

  private async flush(data: Buffer): Promise<void> {
    await writeChunk(this.db, this.row.workspace_id, this.row.message_id, this.seq, data);
    this.seq += 1;
    heartbeat();
  }

  async end(): Promise<{ size: number; sha256: string }> {
    if (this.held > 0) await this.flush(Buffer.concat(this.parts, this.held));
    this.parts = [];
    this.held = 0;
    return { size: this.size, sha256: this.hash.digest('hex') };
  }
}

function heartbeat(): void {
  try {
    Context.current().heartbeat();
  } catch {
    // outside an activity (a unit test)
  }
}

const retryable = (message: string): ApplicationFailure => ApplicationFailure.retryable(message, 'MEDIA_FETCH_FAILED');

/** An HTTP status as final or retryable, in words. */
function refusal(who: string, status: number, said: string): Error {
  const words = `${who} answered HTTP ${status}${said ? `: ${said}` : ''}`;
  if (status === 404 || status === 410 || status === 400) return new Final(`the provider no longer has the file (${words})`);
  return retryable(words);
}

const excerpt = (text: string): string => text.replace(/\s+/g, ' ').trim().slice(0, 300);

/** A request to the instance's own base URL (operator configuration: trusted like the send's). */
const TRUSTED = { allowPrivate: true } as const;

async function open(url: string, init: Parameters<typeof safeStream>[1]): Promise<SafeStreamResponse> {
  try {
    return await safeStream(url, init);
  } catch (err) {
    if (err instanceof SafeHttpError) throw retryable(`${hostOf(url)}: ${err.message}`);
    // The URL check: a temporary DNS failure is worth another try, a refused URL is not.
    if (err instanceof ApiError) {
      if (err.code === 'DNS_UNAVAILABLE') throw retryable(err.message);
      throw new Final(`the provider's media URL was refused (${err.message})`);
    }
    throw err;
  }
}

function hostOf(url: string): string {
  try {
    return new URL(url).host;
  } catch {
    return 'the provider';
  }
}

async function readAll(res: SafeStreamResponse, max: number): Promise<string> {
  const parts: Buffer[] = [];
  let kept = 0;
  for await (const chunk of res.body) {
    parts.push(chunk.subarray(0, max - kept));
    kept += Math.min(chunk.length, max - kept);
    if (kept >= max) break;
  }
  res.cancel();
  return Buffer.concat(parts).toString('utf8');
}

async function fetchCloud(
  row: MediaRow,
  config: InstanceConfig,
  sink: ChunkWriter,
  allowPrivateUrls: boolean,
): Promise<{ mimeType?: string; fileName?: string }> {
  const { baseUrl, accessToken } = config;
  if (!baseUrl || !accessToken) throw retryable('the Cloud API instance has no base URL or access token configured');
  const scrub = (text: string): string => redactSecrets(text, [accessToken]);
  const version = config.apiVersion || DEFAULT_API_VERSION;
  const auth = { authorization: `Bearer ${accessToken}` };
  const metaUrl = `${baseUrl.replace(/\/+$/, '')}/${encodeURIComponent(version)}/${encodeURIComponent(row.media_ref)}`;
  let meta: { url?: unknown; mime_type?: unknown; file_size?: unknown; sha256?: unknown };
  try {
    const res = await safeRequest(metaUrl, {
      method: 'GET',
      headers: auth,
      policy: TRUSTED,
      field: 'baseUrl',
      timeoutMs: SERVICE_TIMEOUT_MS,
      maxBodyBytes: MAX_ANSWER_BYTES,
    });
    if (res.status < 200 || res.status >= 300) throw refusal('the WhatsApp Cloud API', res.status, excerpt(scrub(res.body)));
    meta = JSON.parse(res.body) as typeof meta;
  } catch (err) {
    if (err instanceof SafeHttpError) throw retryable(`the WhatsApp Cloud API: ${err.message}`);
    if (err instanceof SyntaxError) throw retryable('the WhatsApp Cloud API answered the media id with something that is not JSON');
    throw err;
  }
  const mimeType = typeof meta.mime_type === 'string' ? meta.mime_type : undefined;
  const declared = Number(meta.file_size);
  if (Number.isFinite(declared) && declared > INBOUND_MEDIA_LIMITS[row.type]) {
    throw new Final(
      `the ${row.type} is ${(declared / 1048576).toFixed(1)} MB; the provider's limit for its type is ${limitText(row.type)}`,
    );
  }
  if (Number.isFinite(declared) && declared > sink.room.bytes) throw new Final(storageFullReason(sink.room.limitMb));
  if (typeof meta.url !== 'string') throw retryable('the WhatsApp Cloud API answered the media id without a url');
  const res = await open(meta.url, {
    method: 'GET',
    headers: auth,
    policy: { allowPrivate: allowPrivateUrls },
    field: 'url',
    timeoutMs: DOWNLOAD_TIMEOUT_MS,
  });
  if (res.status < 200 || res.status >= 300) throw refusal('the media URL', res.status, excerpt(scrub(await readAll(res, 1024))));
  try {
    for await (const chunk of res.body) await sink.write(chunk);
  } catch (err) {
    if (err instanceof SafeHttpError) throw retryable(`the media download: ${err.message}`);
    throw err;
  } finally {
    res.cancel();
  }
  const header = /^[\w.+-]+\/[\w.+-]+/.exec(String(res.headers['content-type'] ?? ''))?.[0];
  return { mimeType: mimeType ?? header };
}

/**
 * Reads the web gateway's JSON answer as it arrives: the top-level `base64` string decoded into
 * the sink a few KB at a time, the other top-level strings (`mimetype`, `fileName`) kept (first
 * 1,000 characters), anything nested skipped.
 */
export class Base64AnswerReader {
  private state: 'start' | 'key' | 'colon' | 'value' | 'string' | 'skip' | 'primitive' | 'after' | 'done' = 'start';
  private key = '';
  private text = '';
  private escape = false;
  private depth = 0;
  private inSkipString = false;
  private pending = '';
  readonly fields: Record<string, string> = {};
  sawBase64 = false;
  constructor(private readonly out: (bytes: Buffer) => Promise<void>) {}

  /** The start of the base64 string until we know whether it is a data URL (`data:<type>;base64,`); null once known. */
  private head: string | null = '';

  private async emit(raw: string, end = false): Promise<void> {
    if (this.head !== null) {
      this.head += raw;
      const undecided = this.head.length < 5 && 'data:'.startsWith(this.head);
      const comma = this.head.indexOf(',');
      if (!end && (undecided || (this.head.startsWith('data:') && comma < 0 && this.head.length <= 256))) return;
      raw = this.head.startsWith('data:') && comma >= 0 ? this.head.slice(comma + 1) : this.head;
      this.head = null;
    }
    const text = this.pending + raw.replace(/[^A-Za-z0-9+/=_-]/g, '');
    const whole = end ? text.length : text.length - (text.length % 4);
    this.pending = text.slice(whole);
    if (whole > 0) await this.out(Buffer.from(text.slice(0, whole), 'base64'));
  }

  async feed(chunk: string): Promise<void> {
    let i = 0;
    while (i < chunk.length) {
      const c = chunk[i];
      switch (this.state) {
        case 'start':
          if (c === '{') this.state = 'after';
          else if (!/\s/.test(c)) throw new Error('the answer is not a JSON object');
          i += 1;
          break;
        case 'after':
          if (c === '"') {
            this.state = 'key';
            this.key = '';
          } else if (c === '}') this.state = 'done';
          i += 1;
          break;
        case 'key':
          if (this.escape) {
            this.key += c;
            this.escape = false;
          } else if (c === '\\') this.escape = true;
          else if (c === '"') this.state = 'colon';
          else if (this.key.length < 100) this.key += c;
          i += 1;
          break;
        case 'colon':
          if (c === ':') this.state = 'value';
          i += 1;
          break;
        case 'value':
          if (c === '"') {
            this.state = 'string';
            this.text = '';
            if (this.key === 'base64') this.sawBase64 = true;
          } else if (c === '{' || c === '[') {
            this.state = 'skip';
            this.depth = 1;
            this.inSkipString = false;
          } else if (!/\s/.test(c)) this.state = 'primitive';
          i += 1;
          break;
        case 'string': {
          if (this.escape) {
            this.escape = false;
            const decoded = c === 'n' || c === 'r' || c === 't' ? '' : c;
            if (this.key === 'base64') await this.emit(decoded);
            else if (this.text.length < 1000) this.text += decoded;
            i += 1;
            break;
          }
          // The bulk of the answer: take everything up to the next quote or backslash at once.
          let j = i;
          while (j < chunk.length && chunk[j] !== '"' && chunk[j] !== '\\') j += 1;
          const run = chunk.slice(i, j);
          if (this.key === 'base64') await this.emit(run);
          else if (this.text.length < 1000) this.text += run.slice(0, 1000 - this.text.length);
          i = j;
          if (i < chunk.length) {
            if (chunk[i] === '\\') this.escape = true;
            else {
              if (this.key === 'base64') await this.emit('', true);
              else this.fields[this.key] = this.text;
              this.state = 'after';
            }
            i += 1;
          }
          break;
        }
        case 'skip':
          if (this.inSkipString) {
            if (this.escape) this.escape = false;
            else if (c === '\\') this.escape = true;
            else if (c === '"') this.inSkipString = false;
          } else if (c === '"') this.inSkipString = true;
          else if (c === '{' || c === '[') this.depth += 1;
          else if (c === '}' || c === ']') {
            this.depth -= 1;
            if (this.depth === 0) this.state = 'after';
          }
          i += 1;
          break;
        case 'primitive':
          if (c === ',') this.state = 'after';
          else if (c === '}') this.state = 'done';
          i += 1;
          break;
        case 'done':
          return;
      }
    }
  }
}

async function fetchWeb(row: MediaRow, config: InstanceConfig, sink: ChunkWriter): Promise<{ mimeType?: string; fileName?: string }> {
  const { baseUrl, accessToken, instanceName } = config;
  if (!baseUrl || !accessToken || !instanceName)
    throw retryable('the web gateway instance has no base URL, instance name or API key configured');
  const scrub = (text: string): string => redactSecrets(text, [accessToken]);
  const url = `${baseUrl.replace(/\/+$/, '')}/chat/getBase64FromMediaMessage/${encodeURIComponent(instanceName)}`;
  const res = await open(url, {
    method: 'POST',
    headers: { apikey: accessToken, 'content-type': 'application/json' },
    body: JSON.stringify({ message: { key: { id: row.media_ref } }, convertToMp4: false }),
    policy: TRUSTED,
    field: 'baseUrl',
    timeoutMs: DOWNLOAD_TIMEOUT_MS,
  });
  if (res.status < 200 || res.status >= 300) throw refusal('the web gateway', res.status, excerpt(scrub(await readAll(res, 1024))));
  const reader = new Base64AnswerReader((bytes) => sink.write(bytes));
  const decoder = new StringDecoder('utf8');
  try {
    for await (const chunk of res.body) await reader.feed(decoder.write(chunk));
    await reader.feed(decoder.end());
  } catch (err) {
    if (err instanceof SafeHttpError) throw retryable(`the web gateway's answer: ${err.message}`);
    if (err instanceof Final || err instanceof ApplicationFailure) throw err;
    throw retryable(`the web gateway's answer could not be read: ${(err as Error).message}`);
  } finally {
    res.cancel();
  }
  if (!reader.sawBase64) throw retryable('the web gateway answered without base64');
  return { mimeType: reader.fields.mimetype, fileName: reader.fields.fileName };
}

export function createInboundMediaActivities({ db, config }: { db: Db; config: Pick<Config, 'allowPrivateUrls' | 'encryptionKeys'> }) {
  return {
    /** Fetches and stores one inbound media file; see the module's comment. */
    async fetchInboundMedia(input: MediaFetchInput): Promise<MediaFetchResult> {
      const row = await mediaToFetch(db, input.workspaceId, input.messageId);
      if (!row) return { status: 'unavailable', reason: 'the message was deleted' };
      if (row.status !== 'pending') return { status: row.status }; // fetched already: never twice
      const instance = await instanceOfMedia(db, config.encryptionKeys!, row);
      if (!instance) {
        await markUnavailable(db, row.workspace_id, row.message_id, 'the instance that received the message no longer exists');
        return { status: 'unavailable' };
      }
      const instanceConfig = instance.config;
      await clearChunks(db, row.workspace_id, row.message_id);
      const sink = new ChunkWriter(db, row, await mediaStorageRoom(db, row.workspace_id));
      try {
        const said =
          instance.provider === 'cloud'
            ? await fetchCloud(row, instanceConfig, sink, config.allowPrivateUrls)
            : await fetchWeb(row, instanceConfig, sink);
        const file = await sink.end();
        const stored = await markStored(db, row.workspace_id, row.message_id, {
          ...file,
          mimeType: row.mime_type ?? said.mimeType ?? 'application/octet-stream',
          fileName: said.fileName ?? null,
        });
        // Another try of the same file overlapped this one (a worker presumed dead): write it again.
        if (stored === 'mismatch') throw retryable('the stored chunks do not add up to the file; fetching it again');
        // Other files of the workspace were stored meanwhile and this one no longer fits: not kept.
        if (stored === 'full') return { status: 'unavailable' };
        return { status: 'stored' };
      } catch (err) {
        if (!(err instanceof Final)) throw err;
        await markUnavailable(db, row.workspace_id, row.message_id, err.message);
        return { status: 'unavailable', reason: err.message };
      }
    },

    /** The workflow's last word when every try failed: `unavailable` with the reason (a pending row only). */
    async markInboundMediaUnavailable(input: MediaFetchInput & { reason: string }): Promise<void> {
      await markUnavailable(db, input.workspaceId, input.messageId, input.reason);
    },
  };
}

export type InboundMediaActivities = ReturnType<typeof createInboundMediaActivities>;
