/**
 * The "Low" findings of the security review, each proven against the running stack: what an
 * unauthenticated or ordinary caller can learn or reach that it should not.
 */
import { once } from 'node:events';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { freePort, nodeTs, startChild, waitForHttp } from '../../scripts/stack';
import { z } from 'zod';
import { ROUTES } from '../../api/app';
import { loadConfig } from '../../domain/platform/config';
import { IP_PROFILES } from '../../domain/access/rate-limit';
import { resetClock } from '../../domain/kernel/clock';
import { createWorkspace, expectError, pinRateClock, startApi, TestApi, uniqueIp } from '../helpers';
import { firstLeadDelivery } from './workspace-fixture';

jest.setTimeout(60_000);
afterEach(() => resetClock());

describe('GET /ready', () => {
  let api: TestApi;
  const user = 'ready_probe_user';
  const database = 'ready_probe_missing_db';

  beforeAll(async () => {
    // The suite's PostgreSQL, asked for a database that does not exist (its error names it and the
    // user), and a Temporal address where nothing listens.
    const url = new URL(loadConfig().databaseUrl);
    url.username = user;
    url.password = 'ready-probe-password';
    url.pathname = `/${database}`;
    api = await startApi({ config: { databaseUrl: url.toString(), temporalAddress: '127.0.0.1:1' } });
  });
  afterAll(async () => {
    await api?.close();
  });

  it('names each failing dependency with a fixed word, never the error text, and logs the detail', async () => {
    const res = await api.request('GET', '/ready');
    expect(res.status).toBe(503);
    expect(res.body).toEqual({ status: 'unavailable', checks: { database: 'unavailable', temporal: 'unavailable' } });
    for (const leak of [user, database, '127.0.0.1', 'ECONNREFUSED', 'password']) expect(res.text).not.toContain(leak);
    const logged = api.logs.filter((line) => line.includes('readiness check failed')).join('\n');
    expect(logged).toContain('"check":"database"');
    expect(logged).toContain('"check":"temporal"');
    expect(logged).toMatch(new RegExp(`${user}|${database}`));
  });
});

const root = path.join(__dirname, '..', '..');

/** The files under these folders of the checkout (relative paths) whose names match. */
function sourcesUnder(dirs: string[], name: RegExp): string[] {
  const walk = (dir: string): string[] =>
    fs.readdirSync(path.join(root, dir), { withFileTypes: true }).flatMap((entry) => {
      const relative = path.join(dir, entry.name);
      if (entry.isDirectory()) return walk(relative);
      return name.test(entry.name) ? [relative] : [];
    });
  return dirs.flatMap(walk);
}

describe('the bench stays out of the production tree (unauthenticated /__bench routes)', () => {
  let api: TestApi;
  beforeAll(async () => {
    // Built from an environment that still sets BENCH_BASELINE=1, which once mounted them: nothing reads it now.
    api = await startApi({ config: { ...loadConfig({ ...process.env, BENCH_BASELINE: '1' }), trustProxy: 1 } });
  });
  afterAll(async () => {
    await api?.close();
  });

  it('the production app answers /__bench/... like any unknown path: 404 NOT_FOUND, no record read', async () => {
    const id = '00000000-0000-0000-0000-000000000000';
    for (const p of [
      `/__bench/baseline/${id}`,
      `/__bench/floor/pipelines/${id}`,
      `/__bench/floor/leads/${id}`,
      `/__bench/floor/activities/${id}/${id}`,
    ]) {
      expectError(await api.request('GET', p), 404, 'NOT_FOUND');
    }
    expect(ROUTES.filter((r) => r.path.includes('bench'))).toEqual([]);
  });

  it('no production source names the bench routes, reads a BENCH_ variable or imports scripts/', () => {
    const files = sourcesUnder(['api', 'workflows', 'activities', 'workers', 'domain'], /\.(ts|js|mjs|cjs|json)$/);
    expect(files.length).toBeGreaterThan(50);
    const offending = files.filter((file) =>
      /__bench|BENCH_|from '(\.\.\/)+scripts\//.test(fs.readFileSync(path.join(root, file), 'utf8')),
    );
    expect(offending).toEqual([]);
  });
});

describe('activities and workers are thin adapters', () => {
  it('no file in activities/ or workers/ calls a table: every query is in domain/, in the area that owns it', () => {
    const files = sourcesUnder(['activities', 'workers'], /\.ts$/);
    expect(files.length).toBeGreaterThan(5);
    // A table named to the query builder (db('contacts'), trx('...')) or SQL text of its own (.raw).
    // `.raw<T>(` too: a type argument does not make it any less SQL.
    const tableCall = /\b(db|trx)\(['"`]|\.raw\s*[<(]/;
    const offending = files.flatMap((file) =>
      fs
        .readFileSync(path.join(root, file), 'utf8')
        .split('\n')
        .flatMap((line, i) => (tableCall.test(line) ? [`${file}:${i + 1}: ${line.trim()}`] : [])),
    );
    expect(offending).toEqual([]);
  });
});

describe("webhook attempts report the receiver's status, never what it said", () => {
  const SECRET = 'receiver-private-7f3a9c';
  let receiver: http.Server;
  let receiverUrl: string;
  let api: TestApi;

  beforeAll(async () => {
    // What an internal service might answer: its data in the body, its layout in a redirect.
    receiver = http.createServer((req, res) => {
      req.resume();
      req.on('end', () => {
        const status = Number(req.url?.split('/')[1]);
        if (status >= 300 && status < 400) res.writeHead(status, { location: `http://10.0.0.7/${SECRET}` }).end(SECRET);
        else res.writeHead(status, { 'content-type': 'text/plain' }).end(`${SECRET} ${'x'.repeat(50)}`);
      });
    });
    await new Promise<void>((resolve) => receiver.listen(0, '127.0.0.1', resolve));
    receiverUrl = `http://127.0.0.1:${(receiver.address() as AddressInfo).port}`;
    // The receiver is on this machine: an API (and the suite's worker) allowing private addresses.
    api = await startApi({ config: { allowPrivateUrls: true } });
  });
  afterAll(async () => {
    receiver.closeAllConnections();
    await new Promise((resolve) => receiver.close(resolve));
    await api?.close();
  });

  it('ping answers status code and latency only', async () => {
    const ws = await createWorkspace(api, { scopes: ['webhooks:write', 'webhooks:read'], name: 'ping-echo' });
    for (const [status, error] of [
      [200, null],
      [302, 'The receiver answered a redirect (HTTP 302); redirects are not followed'],
      [410, 'The receiver answered 410 Gone'],
      [500, 'The receiver answered HTTP 500'],
    ] as const) {
      const sub = await api.request('POST', '/api/v1/webhooks', {
        key: ws.key,
        body: { url: `${receiverUrl}/${status}/ping`, events: ['lead.created'], active: false },
      });
      expect(sub.status).toBe(201);
      const ping = await api.request('POST', `/api/v1/webhooks/${sub.body.data.id}/ping`, { key: ws.key });
      expect(ping.status).toBe(200);
      expect(ping.text).not.toContain(SECRET);
      expect(ping.text).not.toContain('10.0.0.7');
      expect(ping.body.data).toMatchObject({ delivered: status === 200, statusCode: status, error });
      expect(ping.body.data.durationMs).toEqual(expect.any(Number));
    }
  });

  it("the delivery log (the worker's attempts) shows the status only", async () => {
    const { ws, subscriptionId, log } = await firstLeadDelivery(api, `${receiverUrl}/500/event`, 'delivery-echo');
    expect(log.text).not.toContain(SECRET);
    expect(log.body.data[0]).toMatchObject({ lastStatusCode: 500, lastError: 'The receiver answered HTTP 500' });
    // Stop the retry schedule.
    expect((await api.request('DELETE', `/api/v1/webhooks/${subscriptionId}`, { key: ws.key })).status).toBe(200);
  });
});

describe('answers that carry a secret are never cached', () => {
  const SECRET_FIELDS = /"(secret|webhookUrl)":/;
  /**
   * Routes whose answer carries a secret: those whose response schema has a webhook secret or an
   * inbound token URL, and the admin key creation (admin routes declare no response schema).
   */
  const secretRoutes = ROUTES.filter(
    (r) =>
      (r.response && SECRET_FIELDS.test(JSON.stringify(z.toJSONSchema(r.response, { unrepresentable: 'any' })))) ||
      (r.method === 'post' && r.path === '/admin/v1/workspaces/{id}/api-keys') ||
      r.path.startsWith('/admin/v1/temporal-codec/'),
  ).map((r) => `${r.method} ${r.path}`);

  it('declares Cache-Control: no-store on exactly those routes, in the route table and the OpenAPI document', async () => {
    expect(secretRoutes).toEqual(
      expect.arrayContaining([
        'post /api/v1/webhooks',
        'post /admin/v1/workspaces/{id}/api-keys',
        'post /api/v1/automations',
        'post /api/v1/automations/{id}/token',
      ]),
    );
    expect(
      ROUTES.filter((r) => r.noStore)
        .map((r) => `${r.method} ${r.path}`)
        .sort(),
    ).toEqual([...secretRoutes].sort());
    const api = await startApi();
    try {
      const doc = (await api.request('GET', '/api/v1/openapi.json')).body;
      const documented = Object.entries(
        doc.paths as Record<string, Record<string, { responses: Record<string, { headers?: Record<string, { schema: unknown }> }> }>>,
      ).flatMap(([path, ops]) =>
        Object.entries(ops)
          .filter(([, op]) =>
            Object.values(op.responses).some((res) =>
              (res.headers?.['Cache-Control']?.schema as { enum?: string[] })?.enum?.includes('no-store'),
            ),
          )
          .map(([method]) => `${method} ${path}`),
      );
      expect(documented.sort()).toEqual([...secretRoutes].sort());
    } finally {
      await api.close();
    }
  });

  it('sends it with the API key, the webhook secret and the automation token URL', async () => {
    const api = await startApi();
    try {
      const ws = await createWorkspace(api, {
        scopes: ['webhooks:write', 'webhooks:read', 'automations:write', 'automations:read', 'tags:write', 'leads:write'],
        name: 'no-store',
      });
      const seen: Record<string, string | null> = {};
      const note = (call: string, res: { status: number; headers: Headers }) => {
        expect({ call, ok: res.status < 300 }).toEqual({ call, ok: true });
        seen[call] = res.headers.get('cache-control');
      };
      note('create api key', await api.admin('POST', `/admin/v1/workspaces/${ws.id}/api-keys`, { name: 'k', scopes: ['deals:read'] }));
      note(
        'create webhook',
        await api.request('POST', '/api/v1/webhooks', {
          key: ws.key,
          body: { url: 'https://hooks.example.com/in', events: ['*'], active: false },
        }),
      );
      const created = await api.request('POST', '/api/v1/automations', {
        key: ws.key,
        body: {
          name: 'inbound',
          trigger: { type: 'webhook_received', mapping: { phone: 'phone' } },
          actions: [{ type: 'add_tag', tag: 't' }],
        },
      });
      note('create automation', created);
      const id = created.body.data.id;
      expect(created.body.data.webhookUrl).toContain('/api/automations/webhook-in/');
      note('get automation', await api.request('GET', `/api/v1/automations/${id}`, { key: ws.key }));
      note('list automations', await api.request('GET', '/api/v1/automations', { key: ws.key }));
      note('patch automation', await api.request('PATCH', `/api/v1/automations/${id}`, { key: ws.key, body: { name: 'renamed' } }));
      note('regenerate token', await api.request('POST', `/api/v1/automations/${id}/token`, { key: ws.key }));
      expect(Object.entries(seen).filter(([, value]) => value !== 'no-store')).toEqual([]);
      // Answers without a secret keep the default.
      expect((await api.request('GET', '/api/v1/webhooks', { key: ws.key })).headers.get('cache-control')).toBeNull();
    } finally {
      await api.close();
    }
  });
});

describe('api_keys.last_used_at', () => {
  let api: TestApi;
  beforeAll(async () => {
    api = await startApi();
  });
  afterAll(async () => {
    await api?.close();
  });

  const lastUsed = async (ws: { id: string; keyId: string }, limit: number): Promise<string | null> => {
    // The admin view of the key (PATCH answers it; its limit is set to what it was).
    const res = await api.admin('PATCH', `/admin/v1/workspaces/${ws.id}/api-keys/${ws.keyId}`, { rateLimitPerMinute: limit });
    expect(res.status).toBe(200);
    return res.body.data.lastUsedAt;
  };
  const stored = async (keyId: string): Promise<Date | null> =>
    (await api.db('api_keys').where({ id: keyId }).first('last_used_at')).last_used_at;

  it('is set by a request and shown in the admin view, written at most once a minute', async () => {
    // A small limit: every request takes the statement that reads the key.
    const ws = await createWorkspace(api, { scopes: ['tags:read'], rateLimitPerMinute: 100, name: 'last-used' });
    expect(await lastUsed(ws, 100)).toBeNull();
    const before = Date.now();
    expect((await api.request('GET', '/api/v1/tags', { key: ws.key })).status).toBe(200);
    const shown = await lastUsed(ws, 100);
    expect(shown).toEqual(expect.any(String));
    expect(Math.abs(new Date(shown!).getTime() - before)).toBeLessThan(5_000);

    // More requests within the minute write nothing.
    const first = await stored(ws.keyId);
    for (let i = 0; i < 5; i += 1) expect((await api.request('GET', '/api/v1/tags', { key: ws.key })).status).toBe(200);
    expect(await stored(ws.keyId)).toEqual(first);

    // Once it is over a minute old, the next request moves it.
    await api
      .db('api_keys')
      .where({ id: ws.keyId })
      .update({ last_used_at: api.db.raw(`now() - interval '2 minutes'`) });
    expect((await api.request('GET', '/api/v1/tags', { key: ws.key })).status).toBe(200);
    expect(Date.now() - (await stored(ws.keyId))!.getTime()).toBeLessThan(5_000);
  });

  it('is set for a high-rate key served from the process cache, and never by a revoked key', async () => {
    const ws = await createWorkspace(api, { scopes: ['tags:read'], rateLimitPerMinute: 1000, name: 'last-used-fast' });
    for (let i = 0; i < 3; i += 1) expect((await api.request('GET', '/api/v1/tags', { key: ws.key })).status).toBe(200);
    expect(await lastUsed(ws, 1000)).toEqual(expect.any(String));

    await api.db('api_keys').where({ id: ws.keyId }).update({ last_used_at: null });
    expect((await api.admin('DELETE', `/admin/v1/workspaces/${ws.id}/api-keys/${ws.keyId}`)).status).toBe(200);
    expect((await api.request('GET', '/api/v1/tags', { key: ws.key })).status).toBe(401);
    expect(await stored(ws.keyId)).toBeNull();
  });
});

describe('per-IP limits count an IPv6 client by its /64', () => {
  let api: TestApi;
  let workspaceId: string;
  beforeAll(async () => {
    api = await startApi();
    workspaceId = (await api.admin('POST', '/admin/v1/workspaces', { name: 'ipv6' })).body.data.id;
  });
  afterAll(async () => {
    await api?.close();
  });

  /** What is left of the `admin` per-IP profile after a request from `ip` (admin routes report the IP's bucket). */
  const remainingAfter = async (ip: string): Promise<number> => {
    const res = await api.request('GET', `/admin/v1/workspaces/${workspaceId}`, {
      headers: { authorization: `Bearer ${api.config.adminToken}`, 'x-forwarded-for': ip },
    });
    expect(res.status).toBe(200);
    return Number(res.headers.get('x-ratelimit-remaining'));
  };
  const hex = () => Math.floor(Math.random() * 0xffff).toString(16);

  it('shares one bucket across the /64, and keeps other /64s and IPv4 clients apart', async () => {
    pinRateClock(5);
    const net = `2001:db8:${hex()}:${hex()}`;
    const first = await remainingAfter(`${net}::1`);
    // Other addresses of the same /64, in any notation: the same client.
    expect(await remainingAfter(`${net}:ffff:ffff:ffff:fffe`)).toBe(first - 1);
    expect(await remainingAfter(`${net}:0:${hex()}:${hex()}:1`)).toBe(first - 2);
    expect(await remainingAfter(`${net.toUpperCase()}:0:0:0:1`)).toBe(first - 3);
    // The neighbouring /64 is another client.
    const [a, b, c, d] = net.split(':');
    const neighbour = `${a}:${b}:${c}:${(parseInt(d, 16) ^ 1).toString(16)}`;
    expect(await remainingAfter(`${neighbour}::1`)).toBe(first);
    const [{ bucket }] = await api.db('rate_limit_counters').where('bucket', 'like', `ip:admin:${net}%`).distinct('bucket');
    expect(bucket).toBe(`ip:admin:${net}::/64`);

    // An IPv4 client is its own address, however a dual-stack socket writes it.
    const v4 = uniqueIp();
    const v4First = await remainingAfter(v4);
    expect(await remainingAfter(`::ffff:${v4}`)).toBe(v4First - 1);
    expect(await remainingAfter(uniqueIp())).toBe(v4First);
  });
});

describe('GET /ready is limited per IP', () => {
  let api: TestApi;
  beforeAll(async () => {
    api = await startApi();
  });
  afterAll(async () => {
    await api?.close();
  });

  it(`answers 429 IP_RATE_LIMITED past ${IP_PROFILES.ready} calls a minute from one client, with the headers, and other clients are not affected`, async () => {
    pinRateClock(5);
    const ip = uniqueIp();
    const statuses: number[] = [];
    for (let i = 0; i < IP_PROFILES.ready; i++)
      statuses.push((await api.request('GET', '/ready', { headers: { 'x-forwarded-for': ip } })).status);
    expect(statuses.filter((s) => s !== 200)).toEqual([]);
    const over = await api.request<{ code: string }>('GET', '/ready', { headers: { 'x-forwarded-for': ip } });
    expect(over.status).toBe(429);
    expect(over.body.code).toBe('IP_RATE_LIMITED');
    expect(over.headers.get('retry-after')).toBe('55');
    expect(over.headers.get('x-ratelimit-limit')).toBe(String(IP_PROFILES.ready));
    expect((await api.request('GET', '/ready', { headers: { 'x-forwarded-for': uniqueIp() } })).status).toBe(200);
  }, 60_000);
});

describe('request paths in logs', () => {
  it('mask the inbound webhook token in any letter case', async () => {
    const api = await startApi();
    try {
      for (const path of [
        '/API/AUTOMATIONS/WEBHOOK-IN/tok_UPPER_secret_1',
        '/api/automations/Webhook-In/tok_mixed_secret_2',
        '/api/automations/webhook-in/tok_lower_secret_3',
      ]) {
        await api.request('POST', path, { body: {} });
      }
      const all = api.logs.join('\n');
      for (const token of ['tok_UPPER_secret_1', 'tok_mixed_secret_2', 'tok_lower_secret_3']) expect(all).not.toContain(token);
      expect(all.match(/\/webhook-in\/\[redacted\]/gi)).toHaveLength(3);
    } finally {
      await api.close();
    }
  });
});

describe('ADMIN_TOKEN shorter than 32 characters', () => {
  const short = 'a-token-of-thirty-one-character';
  const exitOf = async (entry: string, env: Record<string, string>) => {
    const child = startChild({
      name: `short-token-${path.basename(entry)}`,
      ...nodeTs(entry),
      env,
      logFile: path.join(os.tmpdir(), `short-token-${process.pid}.log`),
    });
    try {
      const exit = once(child.process, 'exit').then(([code]) => code as number);
      const code = await Promise.race([
        exit,
        new Promise((resolve) => setTimeout(() => resolve('still running after 30 s'), 30_000).unref()),
      ]);
      return { code, output: child.output() };
    } finally {
      await child.stop();
    }
  };

  it('stops the API, the worker and npm start with a message naming it; 32 characters start', async () => {
    expect(short).toHaveLength(31);
    const port = await freePort();
    const env = { ADMIN_TOKEN: short, PORT: String(port), LOG_LEVEL: 'warn' };
    for (const entry of ['api/server.ts', 'workers/main.ts']) {
      const { code, output } = await exitOf(entry, env);
      expect(code).toBe(1);
      expect(output).toMatch(/ADMIN_TOKEN is 31 characters; it must be at least 32/);
    }
    const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'short-token-start-'));
    try {
      const { code, output } = await exitOf('scripts/start.ts', {
        ...env,
        STACK_DATA_DIR: dataDir,
        // Were it to start anything, nothing of the suite's: its own ports, its own database.
        DATABASE_URL: '',
        TEMPORAL_ADDRESS: '',
        EMULATOR_PORT: String(await freePort()),
        EMBEDDED_PG_PORT: String(await freePort()),
        TEMPORAL_PORT: String(await freePort()),
        TEMPORAL_UI_PORT: String(await freePort()),
      });
      expect(code).toBe(1);
      expect(output).toMatch(/ADMIN_TOKEN is 31 characters; it must be at least 32/);
      // Nothing was started: no database directory was made.
      expect(fs.existsSync(path.join(dataDir, 'postgres'))).toBe(false);
    } finally {
      fs.rmSync(dataDir, { recursive: true, force: true });
    }
    // Control: the refusal is the length's.
    const started = startChild({ name: 'long-token-api', ...nodeTs('api/server.ts'), env: { ...env, ADMIN_TOKEN: `${short}x` } });
    try {
      await waitForHttp(`http://127.0.0.1:${port}/health`, started, 30_000);
    } finally {
      await started.stop();
    }
  }, 120_000);
});
