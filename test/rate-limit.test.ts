import path from 'node:path';
import { route } from '../api/route';
import { FLUSH_MS, KEY_CACHE_MS, pruneCounters } from '../domain/access/rate-limit';
import { resetClock, setNow } from '../domain/kernel/clock';
import { freePort, nodeTs, ROOT, startChild, waitForHttp } from '../scripts/stack';
import {
  ApiResponse,
  createWorkspace,
  eventually,
  expectError,
  pinRateClock,
  realMinuteWithRoom,
  startApi,
  TestApi,
  uniqueIp,
} from './helpers';
import { uniqueMobile } from './phones';

const LOG_DIR = path.join(process.env.TEST_STACK_DIR ? path.resolve(process.env.TEST_STACK_DIR) : path.join(ROOT, '.data', 'test'), 'logs');

// Endpoints with the send and cold-send profiles, mounted through the real route machinery,
// so the profiles are proven before the messaging endpoints that use them exist.
const extraRoutes = [
  route({
    method: 'post',
    path: '/api/v1/__test/send',
    operationId: 'testSend',
    tag: 'Test',
    auth: 'apiKey',
    scopes: ['conversations:send'],
    ipProfile: 'send',
    keyProfile: 'send',
    summary: 'send profile',
    handler: async () => ({ data: { ok: true } }),
  }),
  route({
    method: 'post',
    path: '/api/v1/__test/cold-send',
    operationId: 'testColdSend',
    tag: 'Test',
    auth: 'apiKey',
    scopes: ['conversations:send'],
    ipProfile: 'coldSend',
    keyProfile: 'coldSend',
    summary: 'cold send profile',
    handler: async () => ({ data: { ok: true } }),
  }),
];

let api: TestApi;
/** A second API, a real process on the same database (as a second replica would be). */
let second: { get: (path: string, key: string, ip?: string) => Promise<ApiResponse>; stop: () => Promise<void> };

async function startSecondApi(): Promise<typeof second> {
  const port = await freePort();
  const env: Record<string, string> = {
    ...(process.env as Record<string, string>),
    PORT: String(port),
    PUBLIC_BASE_URL: `http://127.0.0.1:${port}`,
    TRUST_PROXY: 'true',
  };
  const child = startChild({
    name: 'second-api',
    ...nodeTs('api/server.ts'),
    env,
    logFile: path.join(LOG_DIR, `api-second-${process.pid}.log`),
  });
  await waitForHttp(`http://127.0.0.1:${port}/health`, child);
  return {
    get: async (pathname, key, ip = uniqueIp()) => {
      const res = await fetch(`http://127.0.0.1:${port}${pathname}`, {
        headers: { authorization: `Bearer ${key}`, 'x-forwarded-for': ip },
      });
      const text = await res.text();
      return { status: res.status, headers: res.headers, text, body: text ? JSON.parse(text) : undefined };
    },
    stop: () => child.stop(),
  };
}

beforeAll(async () => {
  [api, second] = await Promise.all([startApi({ extraRoutes }), startSecondApi()]);
});
afterAll(async () => {
  await Promise.all([api.close(), second.stop()]);
});
afterEach(() => resetClock());

function limitHeaders(res: { headers: Headers }) {
  return {
    limit: Number(res.headers.get('x-ratelimit-limit')),
    remaining: Number(res.headers.get('x-ratelimit-remaining')),
    reset: Number(res.headers.get('x-ratelimit-reset')),
  };
}

describe('rate limits', () => {
  it("enforces the key's own limit, set through the admin API, with headers and Retry-After", async () => {
    pinRateClock(5);
    const ws = await createWorkspace(api, { scopes: ['pipelines:read'], rateLimitPerMinute: 1000 });
    await api.admin('PATCH', `/admin/v1/workspaces/${ws.id}/api-keys/${ws.keyId}`, { rateLimitPerMinute: 3 });
    const seen = [];
    for (let i = 0; i < 3; i += 1) {
      const res = await api.request('GET', '/api/v1/pipelines', { key: ws.key });
      expect(res.status).toBe(200);
      seen.push(limitHeaders(res));
    }
    // 5 s into the minute: 55 s until it turns.
    expect(seen).toEqual([2, 1, 0].map((remaining) => ({ limit: 3, remaining, reset: 55 })));
    const blocked = await api.request('GET', '/api/v1/pipelines', { key: ws.key });
    expectError(blocked, 429, 'RATE_LIMITED');
    expect(blocked.headers.get('retry-after')).toBe('55');
    expect(limitHeaders(blocked)).toEqual({ limit: 3, remaining: 0, reset: 55 });
  });

  it('counts per key: another key of the same workspace is not affected', async () => {
    pinRateClock(5);
    const ws = await createWorkspace(api, { scopes: ['pipelines:read'], rateLimitPerMinute: 1 });
    expect((await api.request('GET', '/api/v1/pipelines', { key: ws.key })).status).toBe(200);
    expectError(await api.request('GET', '/api/v1/pipelines', { key: ws.key }), 429, 'RATE_LIMITED');
    const other = await api.admin('POST', `/admin/v1/workspaces/${ws.id}/api-keys`, {
      name: 'second',
      scopes: ['pipelines:read'],
      rateLimitPerMinute: 1,
    });
    expect((await api.request('GET', '/api/v1/pipelines', { key: other.body.data.key })).status).toBe(200);
  });

  it('shares counters between API replicas through PostgreSQL', async () => {
    // Both APIs run in this process: one clock for both, as NTP gives replicas.
    pinRateClock(5);
    const replica = await startApi();
    try {
      const ws = await createWorkspace(api, { scopes: ['pipelines:read'], rateLimitPerMinute: 4 });
      expect((await api.request('GET', '/api/v1/pipelines', { key: ws.key })).status).toBe(200);
      expect((await replica.request('GET', '/api/v1/pipelines', { key: ws.key })).status).toBe(200);
      expect((await api.request('GET', '/api/v1/pipelines', { key: ws.key })).status).toBe(200);
      const fourth = await replica.request('GET', '/api/v1/pipelines', { key: ws.key });
      expect(limitHeaders(fourth).remaining).toBe(0);
      expectError(await api.request('GET', '/api/v1/pipelines', { key: ws.key }), 429, 'RATE_LIMITED');
    } finally {
      await replica.close();
    }
  });

  it('limits GET /api/v1/pipelines to 120 requests a minute per IP, before authentication', async () => {
    pinRateClock(5);
    const ip = uniqueIp();
    const statuses: number[] = [];
    for (let i = 0; i < 120; i += 1) {
      const res = await api.request('GET', '/api/v1/pipelines', { headers: { 'x-forwarded-for': ip } });
      statuses.push(res.status);
    }
    expect(new Set(statuses)).toEqual(new Set([401]));
    const blocked = await api.request('GET', '/api/v1/pipelines', { headers: { 'x-forwarded-for': ip } });
    expectError(blocked, 429, 'IP_RATE_LIMITED');
    expect(limitHeaders(blocked)).toEqual({ limit: 120, remaining: 0, reset: 55 });
    expect(blocked.headers.get('retry-after')).toBe('55');
    // Even a valid key is refused from that IP; another IP is untouched.
    const ws = await createWorkspace(api, { scopes: ['pipelines:read'] });
    expectError(await api.request('GET', '/api/v1/pipelines', { key: ws.key, headers: { 'x-forwarded-for': ip } }), 429, 'IP_RATE_LIMITED');
    expect((await api.request('GET', '/api/v1/pipelines', { key: ws.key, headers: { 'x-forwarded-for': uniqueIp() } })).status).toBe(200);
  });

  it('holds the send profile at 15 a minute per key even when the key allows 1000', async () => {
    pinRateClock(5);
    const ws = await createWorkspace(api, { scopes: ['conversations:send'], rateLimitPerMinute: 1000 });
    for (let i = 0; i < 15; i += 1) expect((await api.request('POST', '/api/v1/__test/send', { key: ws.key })).status).toBe(200);
    const blocked = await api.request('POST', '/api/v1/__test/send', { key: ws.key });
    expectError(blocked, 429, 'SEND_RATE_LIMITED');
    expect(limitHeaders(blocked)).toEqual({ limit: 15, remaining: 0, reset: 55 });
  });

  it('holds the cold-send profile at 5 a minute per key even when the key allows 1000', async () => {
    pinRateClock(5);
    const ws = await createWorkspace(api, { scopes: ['conversations:send'], rateLimitPerMinute: 1000 });
    const remaining = [];
    for (let i = 0; i < 5; i += 1) {
      const res = await api.request('POST', '/api/v1/__test/cold-send', { key: ws.key });
      expect(res.status).toBe(200);
      remaining.push(limitHeaders(res));
    }
    expect(remaining.map((h) => h.remaining)).toEqual([4, 3, 2, 1, 0]);
    expect(remaining[0].limit).toBe(5);
    const blocked = await api.request('POST', '/api/v1/__test/cold-send', { key: ws.key });
    expectError(blocked, 429, 'COLD_SEND_RATE_LIMITED');
    expect(blocked.headers.get('retry-after')).toBe('55');
  });

  describe("counts in the clock's minute", () => {
    const MINUTE = 60_000;

    it('a request at hh:mm:59.9 counts in that minute, one at hh:(mm+1):00.0 starts the count again; Reset and Retry-After follow the clock (one exact statement a request)', async () => {
      const { start } = pinRateClock(5);
      const ws = await createWorkspace(api, { scopes: ['tags:read'], rateLimitPerMinute: 2 });
      const get = () => api.request('GET', '/api/v1/tags', { key: ws.key });
      setNow(start + 59_900);
      expect(limitHeaders(await get())).toEqual({ limit: 2, remaining: 1, reset: 1 });
      expect(limitHeaders(await get())).toEqual({ limit: 2, remaining: 0, reset: 1 });
      const blocked = await get();
      expectError(blocked, 429, 'RATE_LIMITED');
      expect(blocked.headers.get('retry-after')).toBe('1');
      setNow(start + MINUTE);
      const next = await get();
      expect(next.status).toBe(200);
      expect(limitHeaders(next)).toEqual({ limit: 2, remaining: 1, reset: 60 });
      setNow(start + MINUTE + 30_500);
      expect(limitHeaders(await get())).toEqual({ limit: 2, remaining: 0, reset: 30 });
      const again = await get();
      expectError(again, 429, 'RATE_LIMITED');
      expect(again.headers.get('retry-after')).toBe('30');
    });

    it('so does a per-IP count before authentication', async () => {
      const { start } = pinRateClock(5);
      const ip = uniqueIp();
      const anonymous = () => api.request('GET', '/api/v1/pipelines', { headers: { 'x-forwarded-for': ip } });
      setNow(start + 59_900);
      expect(limitHeaders(await anonymous())).toEqual({ limit: 120, remaining: 119, reset: 1 });
      expect(limitHeaders(await anonymous())).toEqual({ limit: 120, remaining: 118, reset: 1 });
      setNow(start + MINUTE);
      expect(limitHeaders(await anonymous())).toEqual({ limit: 120, remaining: 119, reset: 60 });
    });

    it("so does a batch's items (counted only if they fit)", async () => {
      const { start } = pinRateClock(5);
      const ws = await createWorkspace(api, { scopes: ['leads:write'], rateLimitPerMinute: 3 });
      const batch = (label: string) =>
        api.request('POST', '/api/v1/leads/batch', {
          key: ws.key,
          body: { leads: [1, 2, 3].map((i) => ({ phone: uniqueMobile(), name: `${label} ${i}` })) },
        });
      setNow(start + 59_900);
      const first = await batch('last second');
      expect(first.status).toBe(200);
      expect(limitHeaders(first)).toEqual({ limit: 3, remaining: 0, reset: 1 });
      setNow(start + MINUTE);
      const next = await batch('new minute');
      expect(next.status).toBe(200);
      expect(limitHeaders(next)).toEqual({ limit: 3, remaining: 0, reset: 60 });
    });

    it('so does a high-rate key counted in memory', async () => {
      const { start } = pinRateClock(5);
      const ws = await createWorkspace(api, { scopes: ['tags:read'], rateLimitPerMinute: 1000 });
      const get = () => api.request('GET', '/api/v1/tags', { key: ws.key });
      setNow(start + 59_900);
      // The first request reads the key with the exact statement; the next ones, within the second, need none.
      expect(limitHeaders(await get())).toEqual({ limit: 1000, remaining: 999, reset: 1 });
      expect(limitHeaders(await get())).toEqual({ limit: 1000, remaining: 998, reset: 1 });
      setNow(start + MINUTE);
      expect(limitHeaders(await get())).toEqual({ limit: 1000, remaining: 999, reset: 60 });
      expect(limitHeaders(await get())).toEqual({ limit: 1000, remaining: 998, reset: 60 });
    });
  });

  it("prunes only the counters that are over two minutes old by the clock and by PostgreSQL both: never a process's current window", async () => {
    const bucket = `prune:${process.pid}:${uniqueIp()}`;
    const [{ m }] = (await api.db.raw(`SELECT extract(epoch FROM date_trunc('minute', now()))::bigint * 1000 AS m`)).rows;
    const realMinute = Number(m); // PostgreSQL's current minute
    const MINUTE = 60_000;
    const insert = (...windows: number[]) =>
      api.db('rate_limit_counters').insert(windows.map((w) => ({ bucket, window_start: new Date(w), shard: 0, count: 1 })));
    const left = async (): Promise<number[]> =>
      (await api.db('rate_limit_counters').where({ bucket }).orderBy('window_start').select('window_start')).map(
        (r: { window_start: Date }) => r.window_start.getTime(),
      );

    // The clock ten minutes behind PostgreSQL: its current window and the one before stay; two minutes and 5 s
    // before it is gone. Rows old only by PostgreSQL's now() stay too.
    const past = realMinute - 10 * MINUTE;
    await insert(realMinute, realMinute - 3 * MINUTE, past, past - MINUTE, past - 2 * MINUTE);
    setNow(past + 5_000);
    await pruneCounters(api.db);
    expect(await left()).toEqual([past - MINUTE, past, realMinute - 3 * MINUTE, realMinute]);

    // The clock ten minutes ahead: PostgreSQL's current minute stays, and so does the clock's.
    const future = realMinute + 10 * MINUTE;
    await insert(future);
    setNow(future + 5_000);
    await pruneCounters(api.db);
    expect(await left()).toEqual([realMinute, future]);
  });

  it('puts the rate-limit headers on every /api/v1 response: success, 401, 403, 400 and unknown routes', async () => {
    const ws = await createWorkspace(api, { scopes: ['instances:read'] });
    const responses = [
      await api.request('GET', '/api/v1/instances', { key: ws.key }),
      await api.request('GET', '/api/v1/instances'),
      await api.request('GET', '/api/v1/pipelines', { key: ws.key }),
      await api.request('GET', '/api/v1/instances?limit=0', { key: ws.key }),
      await api.request('GET', '/api/v1/unknown-thing', { key: ws.key }),
    ];
    expect(responses.map((r) => r.status)).toEqual([200, 401, 403, 400, 404]);
    for (const res of responses) {
      const h = limitHeaders(res);
      expect(h.limit).toBeGreaterThan(0);
      expect(Number.isInteger(h.remaining)).toBe(true);
      expect(h.reset).toBeGreaterThanOrEqual(1);
    }
    // Authenticated responses report the key's state.
    expect(limitHeaders(responses[0]).limit).toBe(1000);
  });

  it('puts them on the OpenAPI document and on the answers given before any counter ran (413 from Content-Length, 503 of an unreachable database), from the IP bucket', async () => {
    const ip = uniqueIp();
    const doc = await api.request('GET', '/api/v1/openapi.json', { headers: { 'x-forwarded-for': ip } });
    expect(doc.status).toBe(200);
    expect(limitHeaders(doc)).toEqual({ limit: 600, remaining: expect.any(Number), reset: expect.any(Number) });
    expect(limitHeaders(doc).remaining).toBeLessThan(600);
    expect(limitHeaders(doc).reset).toBeGreaterThanOrEqual(1);

    const ws = await createWorkspace(api, { scopes: ['leads:write'] });
    const tooLarge = await api.request('POST', '/api/v1/leads', {
      key: ws.key,
      body: { phone: '5511999990000', pad: 'a'.repeat(1024 * 1024 + 10) },
    });
    expectError(tooLarge, 413, 'PAYLOAD_TOO_LARGE');
    expect(limitHeaders(tooLarge).limit).toBeGreaterThan(0);
    expect(limitHeaders(tooLarge).reset).toBeGreaterThanOrEqual(1);

    const down = await startApi({ config: { databaseUrl: 'postgres://postgres@127.0.0.1:1/none' } });
    try {
      const unavailable = await down.request('GET', '/api/v1/tags', { key: ws.key });
      expectError(unavailable, 503, 'UNAVAILABLE');
      expect(limitHeaders(unavailable)).toEqual({ limit: 600, remaining: 599, reset: expect.any(Number) });
    } finally {
      await down.close();
    }
  });

  it('holds a large limit across two API processes on one database, counted in memory and on several rows, within the documented overshoot', async () => {
    // The second API is a process of its own, on the real clock: so is this one here, and the 700
    // requests (a few seconds) must fall in one real minute.
    await realMinuteWithRoom(30_000);
    const ws = await createWorkspace(api, { scopes: ['tags:read'], rateLimitPerMinute: 1000 });
    const ip = uniqueIp();
    const TOTAL = 700;
    const IN_FLIGHT = 16;
    const LIMIT = 600; // the `read` IP profile
    const statuses: number[] = [];
    const codes: string[] = [];
    let sent = 0;
    const started = Date.now();
    await Promise.all(
      Array.from({ length: IN_FLIGHT }, async (_, lane) => {
        while (sent < TOTAL) {
          sent += 1;
          const res =
            lane % 2
              ? await second.get('/api/v1/tags', ws.key, ip)
              : await api.request('GET', '/api/v1/tags', { key: ws.key, headers: { 'x-forwarded-for': ip } });
          statuses.push(res.status);
          if (res.status === 429) codes.push(res.body.code);
        }
      }),
    );
    const seconds = (Date.now() - started) / 1000;
    const allowed = statuses.filter((s) => s === 200).length;
    expect(statuses).toHaveLength(TOTAL);
    expect(statuses.filter((s) => s !== 200 && s !== 429)).toEqual([]);
    expect(allowed).toBeGreaterThanOrEqual(LIMIT);
    // The documented bound (domain/access/rate-limit LocalCounts): the requests in flight, plus what the
    // other process admitted before its counts reached this one (a flush interval, twice for the phase).
    const otherProcessRate = TOTAL / seconds / 2;
    expect(allowed).toBeLessThanOrEqual(LIMIT + IN_FLIGHT + Math.ceil((otherProcessRate * 2 * FLUSH_MS) / 1000));
    // Every request is counted once both processes flushed.
    await new Promise((r) => setTimeout(r, 4 * FLUSH_MS));
    expect(new Set(codes)).toEqual(new Set(['IP_RATE_LIMITED']));
    const rows = await api
      .db('rate_limit_counters')
      .where({ bucket: `ip:read:${ip}` })
      .select('shard', 'count');
    expect(rows.length).toBeGreaterThan(1);
    expect(rows.reduce((sum: number, r: { count: number }) => sum + r.count, 0)).toBe(TOTAL);
  }, 60_000);

  it('refuses a key revoked through one API process on the other at once, and an expired key within a second of its expiry', async () => {
    // A key of the default limit (100/min) is read and counted by the exact statement on every request.
    const ws = await createWorkspace(api, { scopes: ['tags:read'], rateLimitPerMinute: 100 });
    expect((await second.get('/api/v1/tags', ws.key)).status).toBe(200);
    expect((await api.admin('DELETE', `/admin/v1/workspaces/${ws.id}/api-keys/${ws.keyId}`)).status).toBe(200);
    expectError(await second.get('/api/v1/tags', ws.key), 401, 'UNAUTHORIZED');

    const expiresAt = new Date(Date.now() + 1500);
    const created = await api.admin('POST', `/admin/v1/workspaces/${ws.id}/api-keys`, {
      name: 'short',
      scopes: ['tags:read'],
      expiresAt: expiresAt.toISOString(),
    });
    const key: string = created.body.data.key;
    expect((await second.get('/api/v1/tags', key)).status).toBe(200);
    await new Promise((r) => setTimeout(r, expiresAt.getTime() + 1000 - Date.now()));
    expectError(await second.get('/api/v1/tags', key), 401, 'UNAUTHORIZED');
  });

  it('refuses a high-rate key (read from the cache, counted in memory) within a second of its revocation or expiry, on every process', async () => {
    const ws = await createWorkspace(api, { scopes: ['tags:read'], rateLimitPerMinute: 1000 });
    const refusedWithin = async (key: string, from: number): Promise<number> => {
      for (;;) {
        const res = await second.get('/api/v1/tags', key);
        if (res.status === 401) return Date.now() - from;
        expect(res.status).toBe(200);
        if (Date.now() - from > 3000) throw new Error('still accepted 3 s later');
        await new Promise((r) => setTimeout(r, 50));
      }
    };
    for (let i = 0; i < 3; i++) expect((await second.get('/api/v1/tags', ws.key)).status).toBe(200); // now cached there
    expect((await api.admin('DELETE', `/admin/v1/workspaces/${ws.id}/api-keys/${ws.keyId}`)).status).toBe(200);
    expect(await refusedWithin(ws.key, Date.now())).toBeLessThanOrEqual(KEY_CACHE_MS + 300);

    const expiresAt = Date.now() + 1500;
    const created = await api.admin('POST', `/admin/v1/workspaces/${ws.id}/api-keys`, {
      name: 'fast',
      scopes: ['tags:read'],
      rateLimitPerMinute: 1000,
      expiresAt: new Date(expiresAt).toISOString(),
    });
    const key: string = created.body.data.key;
    for (let i = 0; i < 3; i++) expect((await second.get('/api/v1/tags', key)).status).toBe(200);
    await new Promise((r) => setTimeout(r, Math.max(0, expiresAt - Date.now())));
    expect(await refusedWithin(key, expiresAt)).toBeLessThanOrEqual(KEY_CACHE_MS + 300);
  });

  it('refuses a revoked high-rate key on the other process more than a second after its revocation, even while its counter rows are locked (reads and flushes stall)', async () => {
    // The second process counts on the real clock; the lock holds this real minute's rows and the next's.
    const ws = await createWorkspace(api, { scopes: ['tags:read'], rateLimitPerMinute: 1000 });
    for (let i = 0; i < 3; i++) expect((await second.get('/api/v1/tags', ws.key)).status).toBe(200); // cached there, counted in memory
    // What stalls a flush for real: another transaction holding the key's counter rows (every shard,
    // this minute and the next). The second process's flush and its exact reads of the key wait on it.
    const lock = await api.db.transaction();
    try {
      const [{ pid }] = (await lock.raw('SELECT pg_backend_pid() AS pid')).rows;
      await lock.raw(
        `INSERT INTO rate_limit_counters AS c (bucket, window_start, shard, count)
         SELECT ?, date_trunc('minute', now()) + m * interval '1 minute', s, 0 FROM generate_series(0, 1) m, generate_series(0, 7) s
         ON CONFLICT (bucket, window_start, shard) DO UPDATE SET count = c.count`,
        [`key:${ws.keyId}`],
      );
      const waiting = async (): Promise<number> =>
        (await api.db.raw(`SELECT count(*)::int AS n FROM pg_stat_activity WHERE ? = ANY(pg_blocking_pids(pid))`, [pid])).rows[0].n;
      // The cached entry goes stale; the next request reads the key again, and that read waits.
      await new Promise((r) => setTimeout(r, KEY_CACHE_MS + 100));
      const already = await waiting();
      const before = second.get('/api/v1/tags', ws.key);
      await eventually('the read of the key waiting on the lock', async () => (await waiting()) > already);
      expect((await api.admin('DELETE', `/admin/v1/workspaces/${ws.id}/api-keys/${ws.keyId}`)).status).toBe(200);
      await new Promise((r) => setTimeout(r, KEY_CACHE_MS + 100));
      // More than a second after the revocation: must not be answered with the key the stalled read found.
      const after = second.get('/api/v1/tags', ws.key);
      // Its own read waits on the lock too (with the fix); give it time to reach the process either way.
      await new Promise((r) => setTimeout(r, 1000));
      await lock.rollback();
      expect([200, 401]).toContain((await before).status); // begun before the revocation: either
      expectError(await after, 401, 'UNAUTHORIZED');
      expectError(await second.get('/api/v1/tags', ws.key), 401, 'UNAUTHORIZED');
    } finally {
      if (!lock.isCompleted()) await lock.rollback();
    }
  }, 60_000);
});
