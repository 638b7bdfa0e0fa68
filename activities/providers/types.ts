import { NETWORK_WORDS } from '../../domain/safe-http';
import type { MessageContent } from '../../types/messaging';
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
}

export interface MediaFile {
  data: Buffer;
  /** From the answer's Content-Type (`type/subtype` only), else application/octet-stream. */
  mimetype: string;
}

export interface ProviderConnection {
  instanceId: string;
  provider: 'cloud' | 'web';
  /** Operator configuration of the instance (secrets: never logged). */
  config: {
    baseUrl?: string;
    phoneNumberId?: string;
    accessToken?: string;
    apiVersion?: string;
    instanceName?: string;
  };
}

export interface SendResult {
  providerMessageId: string;
  /** The provider's authoritative identity of the recipient (Cloud API `contacts[].wa_id`). */
  waId?: string;
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
    options: { retryable?: boolean; providerCode?: number; httpStatus?: number; mayHaveReached?: boolean } = {},
  ) {
    super(message);
    this.name = 'ProviderError';
    this.failure = failure;
    this.retryable = options.retryable ?? (failure === 'THROTTLED' || failure === 'UNAVAILABLE');
    this.providerCode = options.providerCode;
    this.httpStatus = options.httpStatus;
    this.mayHaveReached = options.mayHaveReached ?? false;
  }
}

/** How long one send may take, connection and answer included, before it counts as UNAVAILABLE. */
export const DEFAULT_SEND_TIMEOUT_MS = 10_000;
/** The same for a send that carries the file itself (base64: a 100 MB document is a 134 MB body). */
export const MEDIA_SEND_TIMEOUT_MS = 60_000;

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
  send(connection: ProviderConnection, message: OutboundMessage, options?: SendOptions): Promise<SendResult>;
}

export function isProviderError(err: unknown): err is ProviderError {
  return err instanceof ProviderError;
}

/* ------------------------------------------------------------------------------------------------
 * Shared by the adapters: one HTTP POST with a hard timeout, no redirects, secrets scrubbed from
 * every message an operator may read (Temporal UI, logs).
 * ---------------------------------------------------------------------------------------------- */

/** Replaces every occurrence of each secret with `[redacted]`. */
export function redactSecrets(text: string, secrets: Array<string | undefined>): string {
  let out = text;
  for (const secret of secrets) {
    if (secret) out = out.split(secret).join('[redacted]');
  }
  return out;
}

export interface HttpAnswer {
  status: number;
  text: string;
  /** The parsed body when it is JSON, else undefined. */
  json: unknown;
}


function networkErrorCode(err: unknown): string | undefined {
  return (err as { cause?: { code?: string } })?.cause?.code ?? (err as { code?: string })?.code;
}

/** Network failures that happen before a request is written: nothing reached the provider. */
const NEVER_CONNECTED = new Set(['ECONNREFUSED', 'ENOTFOUND', 'EAI_AGAIN', 'EHOSTUNREACH', 'ENETUNREACH', 'UND_ERR_CONNECT_TIMEOUT']);

function describeNetworkError(err: unknown): string {
  const cause = (err as { cause?: { code?: string; message?: string } })?.cause;
  const code = networkErrorCode(err);
  if (code && NETWORK_WORDS[code]) return `${NETWORK_WORDS[code]} (${code})`;
  if (code) return `${cause?.message ?? (err as Error)?.message ?? 'network error'} (${code})`;
  return cause?.message ?? (err as Error)?.message ?? String(err);
}

/**
 * POSTs a JSON body. Never follows a redirect (it would carry the credentials elsewhere and
 * hides a misconfigured base URL): a 3xx is REJECTED. Timeouts (the whole exchange, body
 * included) and network errors are UNAVAILABLE. Any other status is returned for the adapter
 * to classify.
 */
export async function postJson(
  url: string,
  init: { headers: Record<string, string>; body: unknown; timeoutMs?: number; service: string; secrets: Array<string | undefined> },
): Promise<HttpAnswer> {
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    throw new ProviderError('REJECTED', `The instance base URL is not a valid URL; fix the instance configuration (${init.service})`);
  }
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
  try {
    const res = await fetch(parsed, {
      method: 'POST',
      headers: { 'content-type': 'application/json', accept: 'application/json', ...init.headers },
      body: JSON.stringify(init.body),
      redirect: 'manual',
      signal: controller.signal,
    });
    if (res.status >= 300 && res.status < 400) {
      const location = res.headers.get('location');
      let target = '';
      if (location) {
        try {
          const to = new URL(location, parsed);
          target = ` to ${to.host}${to.pathname}`;
        } catch {
          target = '';
        }
      }
      await res.body?.cancel().catch(() => undefined);
      throw new ProviderError(
        'REJECTED',
        scrub(
          `${init.service} at ${where} answered with a redirect (HTTP ${res.status}${target}); redirects are not followed, so the credentials are never sent elsewhere. Check the instance base URL (https, exact host and path)`,
        ),
        { httpStatus: res.status },
      );
    }
    const text = await res.text();
    let json: unknown;
    try {
      json = text ? JSON.parse(text) : undefined;
    } catch {
      json = undefined;
    }
    return { status: res.status, text, json };
  } catch (err) {
    if (err instanceof ProviderError) throw err;
    if (timedOut) {
      throw new ProviderError(
        'UNAVAILABLE',
        `${init.service} at ${where} did not answer within ${(timeoutMs / 1000).toLocaleString('en-US')} s (temporary; trying again can help)`,
        { mayHaveReached: true },
      );
    }
    const code = networkErrorCode(err);
    throw new ProviderError('UNAVAILABLE', scrub(`Could not reach ${init.service} at ${where}: ${describeNetworkError(err)} (temporary; trying again can help)`), {
      mayHaveReached: !(code && NEVER_CONNECTED.has(code)),
    });
  } finally {
    clearTimeout(timer);
  }
}

/** A short, single-line excerpt of a non-JSON answer, for error messages. */
export function excerpt(text: string, max = 200): string {
  const flat = text
    .replace(/<[^>]*>/g, ' ') // an HTML error page: keep its words
    .replace(/\s+/g, ' ')
    .trim();
  return flat.length > max ? `${flat.slice(0, max)}…` : flat;
}
