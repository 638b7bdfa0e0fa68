import http from 'node:http';
import https from 'node:https';
import { NETWORK_WORDS } from '../../domain/platform';
import type { MessageContent, SentMessage, TemplateWireComponent } from '../../types/messaging';
/**
 * What the sending path asks of a messaging provider, whichever wire format it speaks.
 * Adapters: `cloud.ts` (WhatsApp Cloud API) and `web.ts` (the unofficial "web" gateway style).
 */

export interface OutboundMessage extends MessageContent {
  /** Recipient: digits in international form (e.g. 5511987654321). */
  to: string;
  /**
   * Our reference for this send (stable across retries of one request). The Cloud adapter puts it
   * in `biz_opaque_callback_data`, which the provider echoes in status callbacks.
   */
  reference: string;
  /**
   * The file behind `mediaUrl`, downloaded by the worker through the pinned, size-capped client,
   * for an adapter that is given bytes instead of the URL (`ProviderAdapter.wantsMediaBytes`).
   */
  mediaFile?: MediaFile;
  /**
   * A template's `components` as the Cloud API takes them (header, body, URL buttons), built from
   * the message and the template by domain/messaging/sending.ts templateComponents. Absent: the
   * body's variables only.
   */
  templateComponents?: TemplateWireComponent[];
  /** Instagram: a person's reply from the panel past 24 hours, sent with the HUMAN_AGENT tag (up to 7 days). */
  humanAgent?: boolean;
}

export interface MediaFile {
  /**
   * The file: whole, or its chunks as they are downloaded (activities/media.ts), which the
   * adapter passes on as they arrive and can read only once (a retried send downloads again).
   */
  data: Buffer | AsyncIterable<Uint8Array>;
  /** From the answer's Content-Type (`type/subtype` only), else application/octet-stream. */
  mimetype: string;
}

export interface ProviderConnection {
  instanceId: string;
  provider: 'cloud' | 'web' | 'instagram';
  /** Operator configuration of the instance (secrets: never logged). */
  config: {
    baseUrl?: string;
    phoneNumberId?: string;
    accessToken?: string;
    apiVersion?: string;
    instanceName?: string;
    igUserId?: string;
  };
}

/**
 * Why a send failed, in our words. `retryable` says whether trying again can help (throttling,
 * 5xx, network); the rest are final and map to the API's error codes.
 */
export type ProviderFailure =
  | 'WINDOW_CLOSED' // Cloud 131047: outside the 24-hour window
  | 'TEMPLATE_INVALID' // Cloud 132000 / 132001: parameter count, template missing
  | 'MEDIA_TOO_LARGE' // Cloud 131053: media upload error / too large
  | 'UNDELIVERABLE' // Cloud 131026: recipient cannot receive
  | 'THROTTLED' // Cloud 130429 / 131056: rate limits (retryable)
  | 'UNAVAILABLE' // 5xx, timeouts, connection refused (retryable)
  | 'REJECTED'; // anything else the provider refused (auth, bad request)

export class ProviderError extends Error {
  readonly failure: ProviderFailure;
  readonly retryable: boolean;
  readonly providerCode?: number;
  readonly httpStatus?: number;
  /**
   * The request left this process and may have been accepted although no answer says so (a
   * timeout, a connection lost mid-exchange). False for answers, refused connections and
   * failures before any HTTP (configuration, bugs): those are definitely not sent.
   */
  readonly mayHaveReached: boolean;

  constructor(
    failure: ProviderFailure,
    message: string,
    options: { retryable?: boolean; providerCode?: number; httpStatus?: number; mayHaveReached?: boolean; cause?: unknown } = {},
  ) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = 'ProviderError';
    this.failure = failure;
    this.retryable = options.retryable ?? (failure === 'THROTTLED' || failure === 'UNAVAILABLE');
    this.providerCode = options.providerCode;
    this.httpStatus = options.httpStatus;
    this.mayHaveReached = options.mayHaveReached ?? false;
  }
}

/**
 * The code a final provider refusal is reported under (a send's error, a broadcast recipient's
 * `code`): these three under their own, anything else SEND_FAILED.
 */
export function failureCode(failure: ProviderFailure): 'WINDOW_CLOSED' | 'TEMPLATE_INVALID' | 'MEDIA_TOO_LARGE' | 'SEND_FAILED' {
  return failure === 'WINDOW_CLOSED' || failure === 'TEMPLATE_INVALID' || failure === 'MEDIA_TOO_LARGE' ? failure : 'SEND_FAILED';
}

/**
 * Whether a failed provider call may nevertheless have been accepted: no HTTP answer (timeout,
 * connection lost mid-exchange) or a success answer we could not read. A refusal the provider
 * answered, or a connection that never opened, is definitely not a sent message.
 */
export function mayHaveReachedProvider(err: unknown): boolean {
  if (!(err instanceof ProviderError)) return false;
  if (err.httpStatus !== undefined) return err.httpStatus >= 200 && err.httpStatus < 300;
  return err.mayHaveReached;
}

/** How long one send may take, connection and answer included, before it counts as UNAVAILABLE. */
export const DEFAULT_SEND_TIMEOUT_MS = 10_000;
/** The same for a send that carries the file itself (base64: a 100 MB document is a 134 MB body). */
export const MEDIA_SEND_TIMEOUT_MS = 60_000;

/**
 * How much of a provider's answer is read. Real answers are far smaller (a Cloud API error or a
 * gateway's answer to sendMedia is under 2 KiB), and 64 KiB still holds any HTML error page's
 * first words; a hostile or broken provider's megabytes stop here, the connection closed, so an
 * answer costs the worker at most 64 KiB and well under a millisecond to parse.
 */
export const MAX_ANSWER_BYTES = 64 * 1024;

export interface SendOptions {
  /** Abort the HTTP call after this many milliseconds (default DEFAULT_SEND_TIMEOUT_MS). */
  timeoutMs?: number;
}

export interface ProviderAdapter {
  /**
   * The provider would fetch a media URL from its own network, where our SSRF checks do not reach
   * (a self-hosted gateway next to internal services): it is sent the file's bytes (`mediaFile`),
   * never the URL. False when the provider fetches from its own, outside network (Meta).
   */
  readonly wantsMediaBytes: boolean;
  send(connection: ProviderConnection, message: OutboundMessage, options?: SendOptions): Promise<SentMessage>;
}

/** Refuses a send, nothing sent, when the instance lacks a setting it needs (`needed`: each by the name an operator knows). */
export function assertConfigured(connection: ProviderConnection, kind: string, needed: Record<string, string | undefined>): void {
  const missing = Object.keys(needed).filter((name) => !needed[name]);
  if (missing.length > 0) {
    throw new ProviderError(
      'REJECTED',
      `The ${kind} instance ${connection.instanceId} has no ${missing.join(', ')} configured (nothing was sent)`,
    );
  }
}

/** A 2xx without a message id: the message may have gone out, so the failure is not retryable (it cannot be sent twice). */
export function answeredWithoutId(who: string, answer: HttpAnswer, secrets: Array<string | undefined>): ProviderError {
  const said = excerpt(redactSecrets(answer.text, secrets));
  return new ProviderError(
    'REJECTED',
    redactSecrets(
      `${who} answered HTTP ${answer.status} without a message id; the message may or may not have been sent: ${said}`,
      secrets,
    ),
    { retryable: false, httpStatus: answer.status },
  );
}

/* ------------------------------------------------------------------------------------------------
 * Shared by the adapters: one HTTP POST with a hard timeout, no redirects, secrets scrubbed from
 * every message an operator may read (Temporal UI, logs).
 * ---------------------------------------------------------------------------------------------- */

/** The value a JSON text holds, or undefined when it is not JSON. */
export function jsonOf(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}

/** Replaces every occurrence of each secret with `[redacted]`. */
export function redactSecrets(text: string, secrets: Array<string | undefined>): string {
  return secrets.reduce<string>((out, secret) => (secret ? out.replaceAll(secret, '[redacted]') : out), text);
}

export interface HttpAnswer {
  status: number;
  /** The answer's first MAX_ANSWER_BYTES, as text. */
  text: string;
  /** The parsed body when it is JSON (and whole), else undefined. */
  json: unknown;
  /** The answer was longer than MAX_ANSWER_BYTES: the rest was not read. */
  truncated: boolean;
  /** The `Retry-After` header, as given (a 429's wait). */
  retryAfter: string | null;
}

/**
 * A JSON body sent as it is produced, for one too large to hold (a file in base64): its encoded
 * parts in order. A part that throws aborts the request: postJson throws a final ProviderError
 * (the provider got an incomplete body, so nothing was sent) whose `cause` is that error.
 */
export interface JsonStream {
  parts: AsyncIterable<Uint8Array>;
}

/**
 * Reads at most `max` bytes of a body, then stops (leaving the loop cancels a web stream and
 * destroys a Node one, so the rest is never downloaded).
 */
export async function readCapped(body: AsyncIterable<Uint8Array> | null, max: number): Promise<{ bytes: Buffer; truncated: boolean }> {
  const chunks: Uint8Array[] = [];
  let kept = 0;
  let truncated = false;
  for await (const chunk of body ?? []) {
    if (chunk.length > max - kept) {
      chunks.push(chunk.subarray(0, max - kept));
      kept = max;
      truncated = true;
      break;
    }
    chunks.push(chunk);
    kept += chunk.length;
  }
  return { bytes: Buffer.concat(chunks, kept), truncated };
}

/** An answer's status and headers, its body still to read (at most MAX_ANSWER_BYTES) or drop. */
interface Exchange {
  status: number;
  location: string | null;
  retryAfter: string | null;
  body: AsyncIterable<Uint8Array> | null;
  cancel(): void;
}

/**
 * Who calls (fetch used to send `node`): a gateway behind a firewall that refuses requests without
 * a user agent still takes ours.
 */
export const PROVIDER_USER_AGENT = 'Service-Messaging/1.0';

/** How a POST's body is written: whole, or as `parts` yields it (see httpPost). */
type PostBody = { whole: string } | { parts: AsyncIterator<Uint8Array>; on: { failed: (err: unknown) => void; ended: () => void } };

/**
 * A POST through Node's http, never fetch. A body held whole is written at once; one given as
 * `parts` is written one part at a time as the connection takes it (so a slow provider slows the
 * source too), `on.failed` getting a part's error (the request is then destroyed) and `on.ended`
 * saying the whole body was handed to the connection. Not fetch: fetch (undici 6) kept every part
 * of a streamed request body until the request was collected, a 100 MB file's worth, and for a
 * small JSON body its web streams, abort signals and request objects cost a broadcast's worker
 * about 30 KB of old-generation garbage per provider call (docs/performance.md). Never follows a
 * redirect (http.request does not).
 */
function httpPost(url: URL, headers: Record<string, string>, body: PostBody, signal: AbortSignal): Promise<Exchange> {
  return new Promise<Exchange>((resolve, reject) => {
    const transport = url.protocol === 'https:' ? https : http;
    const req = transport.request(url, { method: 'POST', headers, signal });
    req.on('error', reject); // once answered, a broken connection surfaces in the body instead
    req.on('response', (res) => {
      res.on('error', () => undefined); // kept for whoever reads the body
      resolve({
        status: res.statusCode ?? 0,
        location: res.headers.location ?? null,
        retryAfter: [res.headers['retry-after']].flat()[0] ?? null,
        body: res,
        cancel: () => res.destroy(),
      });
    });
    if ('whole' in body) {
      req.end(body.whole);
      return;
    }
    const { parts, on } = body;
    const writable = (): Promise<void> =>
      new Promise((done) => {
        const go = (): void => {
          req.off('drain', go);
          req.off('close', go);
          done();
        };
        req.on('drain', go);
        req.on('close', go);
      });
    void (async () => {
      try {
        for (;;) {
          if (req.destroyed) return;
          const next = await parts.next();
          if (next.done) break;
          if (!req.write(next.value)) await writable();
        }
        on.ended();
        req.end();
      } catch (err) {
        on.failed(err);
        req.destroy();
      }
    })();
  });
}

function networkErrorCode(err: unknown): string | undefined {
  return (err as { cause?: { code?: string } })?.cause?.code ?? (err as { code?: string })?.code;
}

/** Network failures that happen before a request is written: nothing reached the provider. */
const NEVER_CONNECTED = new Set(['ECONNREFUSED', 'ENOTFOUND', 'EAI_AGAIN', 'EHOSTUNREACH', 'ENETUNREACH']);

function describeNetworkError(err: unknown): string {
  const cause = (err as { cause?: { code?: string; message?: string } })?.cause;
  const code = networkErrorCode(err);
  if (code && NETWORK_WORDS[code]) return `${NETWORK_WORDS[code]} (${code})`;
  if (code) return `${cause?.message ?? (err as Error)?.message ?? 'network error'} (${code})`;
  return cause?.message ?? (err as Error)?.message ?? String(err);
}

/**
 * POSTs a JSON body (`body`, or `stream` for one sent as it is produced). Never follows a redirect
 * (it would carry the credentials elsewhere and hides a misconfigured base URL): a 3xx is
 * REJECTED. Timeouts (the whole exchange, body included) and network errors are UNAVAILABLE.
 * Reads at most MAX_ANSWER_BYTES of the answer. Any other status is returned for the adapter to
 * classify.
 */
export async function postJson(
  url: string,
  init: {
    headers: Record<string, string>;
    body?: unknown;
    stream?: JsonStream;
    timeoutMs?: number;
    service: string;
    secrets: Array<string | undefined>;
  },
): Promise<HttpAnswer> {
  if (!URL.canParse(url)) {
    throw new ProviderError('REJECTED', `The instance base URL is not a valid URL; fix the instance configuration (${init.service})`);
  }
  const parsed = new URL(url);
  if (parsed.protocol !== 'http:' && parsed.protocol !== 'https:') {
    throw new ProviderError('REJECTED', `The instance base URL must be http or https, not ${parsed.protocol} (${init.service})`);
  }
  const where = parsed.host; // never the userinfo part
  const timeoutMs = init.timeoutMs ?? DEFAULT_SEND_TIMEOUT_MS;
  const controller = new AbortController();
  let timedOut = false;
  const timer = setTimeout(() => {
    timedOut = true;
    controller.abort();
  }, timeoutMs);
  const scrub = (text: string): string => redactSecrets(text, init.secrets);
  // A streamed body whose source failed: that failure is the send's (the provider got half a body).
  let sourceFailure: { error: unknown } | undefined;
  // Until the whole body is written, the provider cannot have accepted anything.
  let bodyWhole = !init.stream;
  const parts = init.stream?.parts[Symbol.asyncIterator]();
  const headers = { 'content-type': 'application/json', accept: 'application/json', 'user-agent': PROVIDER_USER_AGENT, ...init.headers };
  let exchange: Exchange | undefined;
  try {
    const body: PostBody = parts
      ? {
          parts,
          on: {
            failed: (error) => {
              sourceFailure = { error };
              controller.abort();
            },
            ended: () => {
              bodyWhole = true;
            },
          },
        }
      : { whole: JSON.stringify(init.body) };
    const res = (exchange = await httpPost(parsed, headers, body, controller.signal));
    if (res.status >= 300 && res.status < 400) {
      const to = res.location && URL.canParse(res.location, parsed.href) ? new URL(res.location, parsed) : undefined;
      const target = to ? ` to ${to.host}${to.pathname}` : '';
      res.cancel();
      throw new ProviderError(
        'REJECTED',
        scrub(
          `${init.service} at ${where} answered with a redirect (HTTP ${res.status}${target}); redirects are not followed, so the credentials are never sent elsewhere. Check the instance base URL (https, exact host and path)`,
        ),
        { httpStatus: res.status },
      );
    }
    const { bytes, truncated } = await readCapped(res.body, MAX_ANSWER_BYTES);
    const text = bytes.toString('utf8');
    return { status: res.status, text, json: text && !truncated ? jsonOf(text) : undefined, truncated, retryAfter: res.retryAfter };
  } catch (err) {
    if (sourceFailure) {
      const cause = sourceFailure.error;
      throw new ProviderError(
        'REJECTED',
        scrub(
          `The body for ${init.service} at ${where} could not be produced, so the request was aborted (nothing was sent): ${cause instanceof Error ? cause.message : String(cause)}`,
        ),
        {
          retryable: false,
          cause,
        },
      );
    }
    if (err instanceof ProviderError) throw err;
    if (timedOut) {
      throw new ProviderError(
        'UNAVAILABLE',
        `${init.service} at ${where} did not answer within ${(timeoutMs / 1000).toLocaleString('en-US')} s (temporary; trying again can help)`,
        { mayHaveReached: bodyWhole },
      );
    }
    const code = networkErrorCode(err);
    throw new ProviderError(
      'UNAVAILABLE',
      scrub(`Could not reach ${init.service} at ${where}: ${describeNetworkError(err)} (temporary; trying again can help)`),
      {
        mayHaveReached: bodyWhole && !(code && NEVER_CONNECTED.has(code)),
      },
    );
  } finally {
    clearTimeout(timer);
    // Whatever happened, a streamed body not written whole (an early answer, a failure) stops:
    // the connection closes and the source (a download) is told to stop, not awaited (a source
    // waiting for its network gives up on its own deadline).
    if (parts && !bodyWhole) {
      exchange?.cancel();
      void parts.return?.()?.catch(() => undefined);
    }
  }
}

/**
 * A short, single-line excerpt of a non-JSON answer, for error messages: an HTML error page's
 * words (its tags dropped), whitespace collapsed, at most `max` characters. One pass over the
 * text, stopping once `max` characters are out: linear whatever the text (a `<` never closed
 * stays as it is, as it did when this was a regex, which took quadratic time on such text).
 */
export function excerpt(text: string, max = 200): string {
  let out = '';
  let gap = false; // whitespace or a tag since the last character kept
  let close = -2; // the next `>` at or after the current `<` (-1: there is none left)
  for (let i = 0; i < text.length && out.length <= max; i++) {
    const c = text[i];
    if (c === '<' && close !== -1) {
      if (close < i) close = text.indexOf('>', i);
      if (close !== -1) {
        gap = true;
        i = close;
        continue;
      }
    }
    if (/\s/.test(c)) {
      gap = true;
      continue;
    }
    if (gap && out) out += ' ';
    gap = false;
    out += c;
  }
  return out.length > max ? `${out.slice(0, max)}…` : out;
}

/** A provider's own words (a JSON error's message), cut to `max` characters for an error message. */
export function clip(text: string, max = 500): string {
  return text.length > max ? `${text.slice(0, max)}…` : text;
}
