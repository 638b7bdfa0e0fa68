import { StringDecoder } from 'node:string_decoder';
import { ApplicationFailure } from '@temporalio/activity';
import { ApiError } from '../../domain/kernel';
import { MediaUnavailable, type FetchedMedia, type MediaChunkWriter, type MediaSource } from '../../domain/messaging';
import { safeRequest, safeStream, SafeHttpError, type SafeStreamResponse } from '../../domain/platform';
import { DEFAULT_API_VERSION } from './cloud';
import { MAX_ANSWER_BYTES, readCapped, redactSecrets } from './types';

/**
 * The fetch of an inbound media file from its provider (docs/messaging.md, "Media"), for
 * activities/inbound-media.ts; what is kept and when is domain/messaging/media.ts's (fetchAndStoreMedia):
 *
 * - Cloud API: `GET {baseUrl}/{version}/{media-id}` (Bearer token) answers `{ url, mime_type,
 *   sha256, file_size }`; `GET url` with the same token answers the bytes. The URL comes from the
 *   provider's answer, so it passes the anti-SSRF check (safe-http) like any URL we are given.
 * - Web gateway (Evolution API): `POST {baseUrl}/chat/getBase64FromMediaMessage/{instance}` with
 *   `{ message: { key: { id } }, convertToMp4: false }` (header `apikey`) answers `{ mediaType,
 *   fileName, size: { fileLength }, mimetype, base64 }`; the base64 is decoded as it arrives.
 *
 * Either way the bytes go to the sink (MediaChunkWriter) as they arrive: at most one chunk (and the
 * socket's buffers) is in memory. A final answer (the provider no longer has the file, a file over
 * its type's limit) throws MediaUnavailable; anything else that trying again can fix (no answer,
 * 5xx, 429, a token being fixed) throws a retryable failure, and the workflow's retry policy
 * (MEDIA_FETCH) tries again with backoff.
 */

const SERVICE_TIMEOUT_MS = 15_000;
/** The whole download of the bytes (a 100 MB document at a few MB/s). */
const DOWNLOAD_TIMEOUT_MS = 240_000;

/** The file of an inbound media message, from the instance's provider, written to `sink`. */
export function fetchMediaFile(source: MediaSource, sink: MediaChunkWriter, allowPrivateUrls: boolean): Promise<FetchedMedia> {
  if (source.provider === 'instagram') return fetchInstagram(source, sink, allowPrivateUrls);
  return source.provider === 'cloud' ? fetchCloud(source, sink, allowPrivateUrls) : fetchWeb(source, sink);
}

/** A failure the workflow's retry policy tries again. */
export const retryable = (message: string): ApplicationFailure => ApplicationFailure.retryable(message, 'MEDIA_FETCH_FAILED');

/** An HTTP status as final or retryable, in words. */
function refusal(who: string, status: number, said: string): Error {
  const words = `${who} answered HTTP ${status}${said ? `: ${said}` : ''}`;
  if (status === 404 || status === 410 || status === 400) return new MediaUnavailable(`the provider no longer has the file (${words})`);
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
      throw new MediaUnavailable(`the provider's media URL was refused (${err.message})`);
    }
    throw err;
  }
}

function hostOf(url: string): string {
  return URL.canParse(url) ? new URL(url).host : 'the provider';
}

/** A refusal's first KiB, as text (leaving the body's loop cancels the rest). */
async function readStart(res: SafeStreamResponse): Promise<string> {
  return (await readCapped(res.body, 1024)).bytes.toString('utf8');
}

/** A file's bytes into the sink as they arrive (the answer closed after); its MIME type (`type/subtype`) from the answer. */
async function streamInto(res: SafeStreamResponse, sink: MediaChunkWriter): Promise<string | undefined> {
  try {
    for await (const chunk of res.body) await sink.write(chunk);
  } catch (err) {
    if (err instanceof SafeHttpError) throw retryable(`the media download: ${err.message}`);
    throw err;
  } finally {
    res.cancel();
  }
  return /^[\w.+-]+\/[\w.+-]+/.exec(String(res.headers['content-type'] ?? ''))?.[0];
}

async function fetchCloud({ row, config }: MediaSource, sink: MediaChunkWriter, allowPrivateUrls: boolean): Promise<FetchedMedia> {
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
  sink.declare(declared);
  if (typeof meta.url !== 'string') throw retryable('the WhatsApp Cloud API answered the media id without a url');
  const res = await open(meta.url, {
    method: 'GET',
    headers: auth,
    policy: { allowPrivate: allowPrivateUrls },
    field: 'url',
    timeoutMs: DOWNLOAD_TIMEOUT_MS,
  });
  if (res.status < 200 || res.status >= 300) throw refusal('the media URL', res.status, excerpt(scrub(await readStart(res))));
  // The bytes first, always: the provider's own type wins over the answer's.
  const header = await streamInto(res, sink);
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

/**
 * Instagram: the attachment's CDN URL (the webhook's `payload.url`, signed by Meta and valid for a
 * while) answers the bytes without a token. It came in a payload, so it passes the anti-SSRF check.
 */
async function fetchInstagram({ row }: MediaSource, sink: MediaChunkWriter, allowPrivateUrls: boolean): Promise<FetchedMedia> {
  const res = await open(row.media_ref, {
    method: 'GET',
    policy: { allowPrivate: allowPrivateUrls },
    field: 'url',
    timeoutMs: DOWNLOAD_TIMEOUT_MS,
  });
  if (res.status < 200 || res.status >= 300) throw refusal("Instagram's media URL", res.status, excerpt(await readStart(res)));
  const declared = Number(res.headers['content-length']);
  if (Number.isFinite(declared) && declared > 0) sink.declare(declared);
  return { mimeType: await streamInto(res, sink) };
}

async function fetchWeb({ row, config }: MediaSource, sink: MediaChunkWriter): Promise<FetchedMedia> {
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
  if (res.status < 200 || res.status >= 300) throw refusal('the web gateway', res.status, excerpt(scrub(await readStart(res))));
  const reader = new Base64AnswerReader((bytes) => sink.write(bytes));
  const decoder = new StringDecoder('utf8');
  try {
    for await (const chunk of res.body) await reader.feed(decoder.write(chunk));
    await reader.feed(decoder.end());
  } catch (err) {
    if (err instanceof SafeHttpError) throw retryable(`the web gateway's answer: ${err.message}`);
    if (err instanceof MediaUnavailable || err instanceof ApplicationFailure) throw err;
    throw retryable(`the web gateway's answer could not be read: ${(err as Error).message}`);
  } finally {
    res.cancel();
  }
  if (!reader.sawBase64) throw retryable('the web gateway answered without base64');
  return { mimeType: reader.fields.mimetype, fileName: reader.fields.fileName };
}
