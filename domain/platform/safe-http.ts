import http from 'node:http';
import https from 'node:https';
import { promises as dns, type LookupAddress } from 'node:dns';
import { assertPublicUrl, isNeverAllowedAddress, LookupFn, UrlPolicy } from './url-safety';

/**
 * An HTTP request to a URL a customer gave us (a media URL, a webhook subscriber URL), safe against
 * SSRF: the URL passes assertPublicUrl, and the connection goes to the addresses that check
 * approved, never to a second DNS answer (a rebinding name cannot swap in 127.0.0.1 between the
 * check and the connect). Redirects are never followed: a 3xx is returned like any other status.
 * The whole exchange has one deadline; at most `maxBodyBytes` of the answer are kept (safeStream:
 * the body read as it arrives, for a file too large to hold).
 *
 * Throws ApiError INVALID_URL (retrying cannot help) or DNS_UNAVAILABLE (it can) from the check,
 * and SafeHttpError for a request that got no complete answer.
 */
export interface SafeRequest {
  method: 'GET' | 'HEAD' | 'POST';
  headers?: Record<string, string>;
  body?: string | Buffer;
  timeoutMs: number;
  policy: UrlPolicy;
  /** The field named in INVALID_URL errors (e.g. `mediaUrl`, `url`). */
  field: string;
  maxBodyBytes?: number;
  /** Injected resolver (tests); the system resolver otherwise. */
  lookup?: LookupFn;
}

export interface SafeResponse {
  status: number;
  headers: http.IncomingHttpHeaders;
  /** The first maxBodyBytes of the answer. */
  bytes: Buffer;
  /** The same, as text (decoded when read: a file's bytes are not copied into a string). */
  readonly body: string;
}

export class SafeHttpError extends Error {
  /** Whether the request may have reached the server (it was written before the failure). */
  readonly mayHaveArrived: boolean;
  readonly code?: string;
  constructor(message: string, options: { mayHaveArrived: boolean; code?: string }) {
    super(message);
    this.name = 'SafeHttpError';
    this.mayHaveArrived = options.mayHaveArrived;
    this.code = options.code;
  }
}

// Keep-alive pools: a webhook burst to one receiver reuses its connections. A pooled socket was
// opened to an address that passed the check, so reusing it for the same host is just as safe.
const agents = {
  // Idle sockets are dropped after 4 s, under the 5 s idle timeout of Node and most servers, so a
  // reused socket is rarely one the receiver has just closed.
  'http:': new http.Agent({ keepAlive: true, maxSockets: 256, maxFreeSockets: 64, timeout: 4_000 }),
  'https:': new https.Agent({ keepAlive: true, maxSockets: 256, maxFreeSockets: 64, timeout: 4_000 }),
};

/** Plain words for network error codes (node http and undici/fetch), shared with the provider adapters. */
export const NETWORK_WORDS: Record<string, string> = {
  ECONNREFUSED: 'connection refused',
  ECONNRESET: 'connection reset by the server',
  ETIMEDOUT: 'connection timed out',
  EHOSTUNREACH: 'host unreachable',
  ENETUNREACH: 'network unreachable',
  EPIPE: 'connection closed while sending',
  ENOTFOUND: 'host name not found',
  EAI_AGAIN: 'host name lookup failed (temporary DNS failure)',
  UND_ERR_CONNECT_TIMEOUT: 'connection timed out',
  UND_ERR_SOCKET: 'connection closed unexpectedly',
  UND_ERR_HEADERS_TIMEOUT: 'no answer headers in time',
  UND_ERR_BODY_TIMEOUT: 'the answer stopped arriving',
  CERT_HAS_EXPIRED: 'the TLS certificate has expired',
  DEPTH_ZERO_SELF_SIGNED_CERT: 'the TLS certificate is self-signed',
  ERR_TLS_CERT_ALTNAME_INVALID: 'the TLS certificate does not match the host',
  UNABLE_TO_VERIFY_LEAF_SIGNATURE: 'the TLS certificate chain cannot be verified',
};

/** A lookup (the same contract as dns.lookup) that answers with the addresses `resolve` gives. */
function lookupFrom(resolve: (host: string) => Promise<string[]>) {
  return (host: string, options: { all?: boolean; family?: number | string }, callback: (...args: unknown[]) => void): void => {
    resolve(host).then(
      (addresses) => {
        const records: LookupAddress[] = addresses.map((address) => ({ address, family: address.includes(':') ? 6 : 4 }));
        const family =
          options?.family === 6 || options?.family === 'IPv6' ? 6 : options?.family === 4 || options?.family === 'IPv4' ? 4 : 0;
        const usable = family ? records.filter((r) => r.family === family) : records;
        if (usable.length === 0) {
          callback(Object.assign(new Error('no approved address for this host'), { code: 'ENOTFOUND' }));
          return;
        }
        if (options?.all) callback(null, usable);
        else callback(null, usable[0].address, usable[0].family);
      },
      (err) => callback(err),
    );
  };
}

/** Only the addresses the check approved. */
const pinnedLookup = (addresses: string[]) => lookupFrom(async () => addresses);

/**
 * Under ALLOW_PRIVATE_URLS, a name that did not resolve at check time is resolved when connecting,
 * and still never to a link-local or cloud metadata address.
 */
const guardedLookup = lookupFrom(async (host) => {
  const addresses = (await dns.lookup(host, { all: true, verbatim: true })).map((r) => r.address);
  if (addresses.some((a) => isNeverAllowedAddress(a))) {
    throw Object.assign(new Error(`${host} resolves to a link-local or cloud metadata address`), { code: 'EFORBIDDENADDRESS' });
  }
  return addresses;
});

export async function safeRequest(raw: string, request: SafeRequest): Promise<SafeResponse> {
  const maxBodyBytes = request.maxBodyBytes ?? 4096;
  const res = await safeStream(raw, request);
  const chunks: Buffer[] = [];
  let kept = 0;
  try {
    for await (const chunk of res.body) {
      const part = chunk.subarray(0, maxBodyBytes - kept);
      chunks.push(part);
      kept += part.length;
      // Enough to report: the rest is not read (a huge answer must not hold the worker).
      if (kept >= maxBodyBytes && chunk.length > 0) break;
    }
  } finally {
    res.cancel();
  }
  const bytes = Buffer.concat(chunks);
  return {
    status: res.status,
    headers: res.headers,
    bytes,
    get body() {
      return bytes.toString('utf8');
    },
  };
}

/** An answer whose body is read as it arrives (safeStream). */
export interface SafeStreamResponse {
  status: number;
  headers: http.IncomingHttpHeaders;
  /**
   * The body's chunks as they arrive, to read once: the server is read only as fast as they are
   * taken. Throws SafeHttpError when the answer is cut off or the request's deadline passes.
   */
  body: AsyncIterable<Buffer>;
  /** Stops reading (the rest is not downloaded; the connection closes). Harmless after the end. */
  cancel(): void;
}

/**
 * safeRequest for an answer too large to hold (a media file): the same check, pinned addresses,
 * no redirects and one deadline for the whole exchange, the body included; it resolves at the
 * answer's headers and the caller reads the body (`body`) or drops it (`cancel`).
 */
export async function safeStream(raw: string, request: Omit<SafeRequest, 'maxBodyBytes'>): Promise<SafeStreamResponse> {
  const { url, addresses } = await assertPublicUrl(raw, request.policy, { field: request.field, lookup: request.lookup });
  const protocol = url.protocol as 'http:' | 'https:';
  const transport = protocol === 'https:' ? https : http;
  const literal = url.hostname.startsWith('[') || /^\d+\.\d+\.\d+\.\d+$/.test(url.hostname);
  const seconds = request.timeoutMs / 1000;

  return new Promise<SafeStreamResponse>((resolve, reject) => {
    let written = false;
    let answer: http.IncomingMessage | undefined;
    let settled = false;
    const fail = (err: SafeHttpError) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      reject(err);
    };
    const req = transport.request(url, {
      method: request.method,
      headers: request.headers,
      agent: agents[protocol],
      // An IP literal needs no lookup; a name connects only to what the check approved. Under
      // ALLOW_PRIVATE_URLS a name that did not resolve at check time is resolved now, guarded.
      ...(literal
        ? {}
        : { lookup: (addresses.length ? pinnedLookup(addresses) : guardedLookup) as unknown as typeof import('node:dns').lookup }),
    });
    // One deadline for the whole exchange: before the answer it fails the request, after it the body.
    const timer = setTimeout(() => {
      if (answer) {
        answer.destroy(new SafeHttpError(`the answer did not finish within ${seconds} s`, { mayHaveArrived: true, code: 'TIMEOUT' }));
        return;
      }
      fail(new SafeHttpError(`no answer within ${seconds} s`, { mayHaveArrived: written, code: 'TIMEOUT' }));
      req.destroy();
    }, request.timeoutMs);
    req.on('error', (err: NodeJS.ErrnoException) => {
      // After the answer began, a broken connection surfaces in the body instead.
      const code = err.code;
      const words = (code && NETWORK_WORDS[code]) ?? err.message;
      fail(new SafeHttpError(code ? `${words} (${code})` : words, { mayHaveArrived: written && code !== 'ECONNREFUSED', code }));
    });
    req.on('response', (res) => {
      if (settled) {
        res.destroy();
        return;
      }
      settled = true;
      answer = res;
      // Errors are kept for whoever reads the body; unread, they must not be unhandled.
      res.on('error', () => undefined);
      res.on('close', () => clearTimeout(timer));
      const cancel = (): void => {
        clearTimeout(timer);
        if (!res.complete) res.destroy();
      };
      async function* body(): AsyncGenerator<Buffer> {
        try {
          for await (const chunk of res as AsyncIterable<Buffer>) yield chunk;
        } catch (err) {
          if (err instanceof SafeHttpError) throw err;
          const code = (err as NodeJS.ErrnoException).code;
          throw new SafeHttpError(`the answer was cut off (${code ?? (err as Error).message})`, { mayHaveArrived: true, code });
        } finally {
          cancel();
        }
      }
      resolve({ status: res.statusCode ?? 0, headers: res.headers, body: body(), cancel });
    });
    req.on('finish', () => {
      written = true;
    });
    req.end(request.body);
  });
}
