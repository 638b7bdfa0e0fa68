/**
 * A raw HTTP/1.1 client over a TCP socket, for requests fetch() refuses to send: a Content-Length
 * that lies, chunked bodies of any size, both framing headers at once, a half-closed upload.
 */
import net from 'node:net';

export interface RawResult {
  /** The status of the first response, when one arrived. */
  status?: number;
  headers: Record<string, string>;
  body: string;
  json?: any;
  /** The server closed the connection (before or after answering). */
  closed: boolean;
  /** A socket error seen while sending (EPIPE/ECONNRESET after an early answer is expected). */
  error?: string;
}

export interface RawRequest {
  method: string;
  path: string;
  headers: Record<string, string>;
  /** The body, written as is (already framed: use `chunked()` for chunked transfer). */
  body?: Iterable<Buffer | string>;
  /** Half-close the socket after the body instead of waiting with it open. */
  halfClose?: boolean;
  timeoutMs?: number;
}

/** Frames parts as a chunked body (with the terminating zero-length chunk). */
export function* chunked(parts: Iterable<Buffer | string>): Generator<Buffer> {
  for (const part of parts) {
    const buf = Buffer.isBuffer(part) ? part : Buffer.from(part);
    if (buf.length === 0) continue;
    yield Buffer.concat([Buffer.from(`${buf.length.toString(16)}\r\n`), buf, Buffer.from('\r\n')]);
  }
  yield Buffer.from('0\r\n\r\n');
}

/** `total` bytes of a JSON object `{"pad":"aaaa..."}` in pieces of `piece` bytes. */
export function* paddedJson(total: number, piece = 64 * 1024): Generator<Buffer> {
  const head = '{"pad":"';
  const tail = '"}';
  let remaining = total - head.length - tail.length;
  yield Buffer.from(head);
  while (remaining > 0) {
    const n = Math.min(piece, remaining);
    yield Buffer.alloc(n, 'a');
    remaining -= n;
  }
  yield Buffer.from(tail);
}

export function rawRequest(baseUrl: string, req: RawRequest): Promise<RawResult> {
  const { hostname, port } = new URL(baseUrl);
  return new Promise((resolve) => {
    const socket = net.connect({ host: hostname, port: Number(port) });
    let received = Buffer.alloc(0);
    let result: RawResult | undefined;
    let error: string | undefined;
    let settled = false;
    const finish = (closed: boolean) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      const out = result ?? { headers: {}, body: '', closed };
      out.closed = closed;
      if (error) out.error = error;
      socket.destroy();
      resolve(out);
    };
    const timer = setTimeout(() => finish(false), req.timeoutMs ?? 30_000);

    const tryParse = () => {
      const end = received.indexOf('\r\n\r\n');
      if (end < 0) return;
      const [statusLine, ...lines] = received.subarray(0, end).toString('latin1').split('\r\n');
      const status = Number(/^HTTP\/1\.[01] (\d{3})/.exec(statusLine)?.[1]);
      const headers: Record<string, string> = {};
      for (const line of lines) {
        const i = line.indexOf(':');
        if (i > 0) headers[line.slice(0, i).trim().toLowerCase()] = line.slice(i + 1).trim();
      }
      const length = Number(headers['content-length'] ?? 0);
      const bodyBytes = received.subarray(end + 4);
      if (bodyBytes.length < length) return;
      const body = bodyBytes.subarray(0, length).toString('utf8');
      let json: unknown;
      try {
        json = JSON.parse(body);
      } catch {
        json = undefined;
      }
      result = { status, headers, body, json, closed: false };
      // One response is all we want: the server may still be reading (or discarding) our upload.
      finish(false);
    };
    socket.on('data', (chunk: Buffer) => {
      received = Buffer.concat([received, chunk]);
      tryParse();
    });
    socket.on('error', (err: NodeJS.ErrnoException) => {
      error = err.code ?? err.message;
    });
    socket.on('close', () => finish(true));

    socket.on('connect', async () => {
      const head =
        `${req.method} ${req.path} HTTP/1.1\r\nHost: ${hostname}:${port}\r\n` +
        Object.entries(req.headers)
          .map(([k, v]) => `${k}: ${v}\r\n`)
          .join('') +
        '\r\n';
      socket.write(head);
      for (const part of req.body ?? []) {
        if (settled || socket.destroyed) return;
        if (!socket.write(part)) {
          await new Promise<void>((resolve) => {
            const done = () => {
              socket.off('drain', done);
              socket.off('close', done);
              resolve();
            };
            socket.once('drain', done);
            socket.once('close', done);
          });
        }
      }
      if (req.halfClose && !socket.destroyed) socket.end();
    });
  });
}
