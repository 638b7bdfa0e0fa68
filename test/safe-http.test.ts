import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { safeRequest, safeStream, SafeHttpError } from '../domain/platform/safe-http';
import type { LookupFn } from '../domain/platform/url-safety';

/** A real local server; every request it sees is recorded. */
let server: http.Server;
let port: number;
const seen: Array<{ method?: string; url?: string; host?: string; body: string }> = [];

beforeAll(async () => {
  server = http.createServer((req, res) => {
    let body = '';
    req.on('data', (c) => (body += c));
    req.on('end', () => {
      seen.push({ method: req.method, url: req.url, host: req.headers.host, body });
      if (req.url === '/redirect') {
        res.writeHead(302, { location: 'http://127.0.0.1:1/elsewhere' }).end();
      } else if (req.url === '/big') {
        res.writeHead(200, { 'content-type': 'text/plain' }).end('x'.repeat(100_000));
      } else if (req.url === '/endless') {
        // Headers and a first chunk at once, then more for as long as anyone reads.
        res.writeHead(200, { 'content-type': 'application/octet-stream' });
        const chunk = Buffer.alloc(64 * 1024);
        const pump = (): void => {
          while (res.write(chunk));
          res.once('drain', pump);
        };
        res.on('close', () => seen.push({ method: 'closed', url: req.url, body: '' }));
        pump();
      } else if (req.url === '/stalls') {
        res.writeHead(200, { 'content-type': 'application/octet-stream' }).write('first part');
      } else if (req.url === '/slow') {
        const timer = setTimeout(() => res.writeHead(200).end('late'), 2000);
        res.on('close', () => clearTimeout(timer));
      } else {
        res.writeHead(200, { 'content-length': '11' }).end(req.method === 'HEAD' ? undefined : 'hello world');
      }
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  port = (server.address() as AddressInfo).port;
});
afterAll(async () => {
  server.closeAllConnections();
  await new Promise((resolve) => server.close(resolve));
});
beforeEach(() => (seen.length = 0));

const DEV = { allowPrivate: true };
const STRICT = { allowPrivate: false };

describe('safeRequest', () => {
  it('connects to the address the check approved, never to a second DNS answer', async () => {
    // `rebind.invalid` does not exist for the system resolver: the request can only reach the
    // local server through the address the check resolved (and approved) itself.
    let lookups = 0;
    const lookup: LookupFn = async () => {
      lookups += 1;
      return [{ address: '127.0.0.1', family: 4 }];
    };
    const res = await safeRequest(`http://rebind.invalid:${port}/pinned`, {
      method: 'POST',
      body: '{"a":1}',
      timeoutMs: 5000,
      policy: DEV,
      field: 'url',
      lookup,
    });
    expect(res.status).toBe(200);
    expect(lookups).toBe(1);
    expect(seen).toEqual([expect.objectContaining({ method: 'POST', url: '/pinned', host: `rebind.invalid:${port}`, body: '{"a":1}' })]);
  });

  it('refuses a name that resolves to a private address before connecting (strict policy)', async () => {
    const lookup: LookupFn = async () => [{ address: '127.0.0.1', family: 4 }];
    await expect(
      safeRequest(`https://looks-public.example.com:${port}/x`, { method: 'GET', timeoutMs: 5000, policy: STRICT, field: 'url', lookup }),
    ).rejects.toMatchObject({
      code: 'INVALID_URL',
    });
    expect(seen).toHaveLength(0);
  });

  it('returns a redirect as it is, without following it', async () => {
    const res = await safeRequest(`http://127.0.0.1:${port}/redirect`, {
      method: 'POST',
      body: '{}',
      timeoutMs: 5000,
      policy: DEV,
      field: 'url',
    });
    expect(res.status).toBe(302);
    expect(seen.map((s) => s.url)).toEqual(['/redirect']);
  });

  it('keeps only the first maxBodyBytes of a large answer', async () => {
    const res = await safeRequest(`http://127.0.0.1:${port}/big`, {
      method: 'GET',
      timeoutMs: 5000,
      policy: DEV,
      field: 'url',
      maxBodyBytes: 100,
    });
    expect(res.status).toBe(200);
    expect(res.body).toBe('x'.repeat(100));
  });

  it('gives up at the deadline and says the request may have arrived', async () => {
    const err = await safeRequest(`http://127.0.0.1:${port}/slow`, {
      method: 'POST',
      body: '{}',
      timeoutMs: 300,
      policy: DEV,
      field: 'url',
    }).catch((e) => e);
    expect(err).toBeInstanceOf(SafeHttpError);
    expect(err).toMatchObject({ code: 'TIMEOUT', mayHaveArrived: true });
  });

  it('reports a refused connection as one that never arrived', async () => {
    const closed = http.createServer();
    await new Promise<void>((resolve) => closed.listen(0, '127.0.0.1', resolve));
    const freePort = (closed.address() as AddressInfo).port;
    await new Promise((resolve) => closed.close(resolve));
    const err = await safeRequest(`http://127.0.0.1:${freePort}/`, {
      method: 'POST',
      body: '{}',
      timeoutMs: 2000,
      policy: DEV,
      field: 'url',
    }).catch((e) => e);
    expect(err).toBeInstanceOf(SafeHttpError);
    expect(err).toMatchObject({ code: 'ECONNREFUSED', mayHaveArrived: false });
  });
});

describe('safeStream', () => {
  it('the same checks: a name that resolves to a private address is refused before connecting (strict policy)', async () => {
    const lookup: LookupFn = async () => [{ address: '127.0.0.1', family: 4 }];
    await expect(
      safeStream(`https://looks-public.example.com:${port}/endless`, {
        method: 'GET',
        timeoutMs: 5000,
        policy: STRICT,
        field: 'mediaUrl',
        lookup,
      }),
    ).rejects.toMatchObject({
      code: 'INVALID_URL',
    });
    expect(seen).toHaveLength(0);
  });

  it('answers at the headers; the body is read as it is taken, and cancel closes the connection', async () => {
    const res = await safeStream(`http://127.0.0.1:${port}/endless`, { method: 'GET', timeoutMs: 5000, policy: DEV, field: 'mediaUrl' });
    expect(res.status).toBe(200);
    let read = 0;
    for await (const chunk of res.body) {
      read += chunk.length;
      if (read >= 256 * 1024) break;
    }
    res.cancel();
    for (const deadline = Date.now() + 5000; !seen.some((s) => s.method === 'closed') && Date.now() < deadline;)
      await new Promise((resolve) => setTimeout(resolve, 20));
    expect(seen.map((s) => s.method)).toEqual(['GET', 'closed']);
  });

  it('one deadline for the whole exchange: a body that stops arriving fails the read with TIMEOUT', async () => {
    const res = await safeStream(`http://127.0.0.1:${port}/stalls`, { method: 'GET', timeoutMs: 500, policy: DEV, field: 'mediaUrl' });
    const parts: string[] = [];
    const err = await (async () => {
      for await (const chunk of res.body) parts.push(chunk.toString());
    })().catch((e) => e);
    expect(parts).toEqual(['first part']);
    expect(err).toBeInstanceOf(SafeHttpError);
    expect(err).toMatchObject({ code: 'TIMEOUT', message: 'the answer did not finish within 0.5 s' });
  });
});
