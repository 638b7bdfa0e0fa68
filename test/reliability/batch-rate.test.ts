/**
 * Issue 32, batches and rate limits: a batch of N items counts N against the API key's own
 * per-minute limit, a batch larger than what the key has left is refused whole (429
 * RATE_LIMITED, Retry-After) before any item runs, per-IP limits count the request once, and the
 * X-RateLimit-* headers report the key after its items are counted. Both ways a key is counted:
 * exactly in PostgreSQL (limits under 600) and in the API process's memory (larger limits).
 */
import { ALL_SCOPES } from '../../domain/access/scopes';
import { resetClock } from '../../domain/kernel/clock';
import { createWorkspace, eventually, expectError, pinRateClock, startApi, TestApi, uniqueIp, Workspace } from '../helpers';
import { uniqueMobile } from '../phones';

let api: TestApi;
beforeAll(async () => {
  api = await startApi();
});
afterAll(async () => api.close());
afterEach(() => resetClock());

const leads = (n: number, label: string) => Array.from({ length: n }, (_, i) => ({ phone: uniqueMobile('41'), name: `${label} ${i}` }));
const batch = (ws: Workspace, items: unknown[], headers: Record<string, string> = {}) =>
  api.request('POST', '/api/v1/leads/batch', { key: ws.key, body: { leads: items }, headers });
const limitHeaders = (res: { headers: Headers }) => ({
  limit: Number(res.headers.get('x-ratelimit-limit')),
  remaining: Number(res.headers.get('x-ratelimit-remaining')),
});
const named = async (ws: Workspace, label: string) =>
  (
    (await api.db('contacts').where({ workspace_id: ws.id }).whereLike('name', `${label} %`).count({ n: '*' }).first()) as {
      n: string | number;
    }
  ).n;

describe("a batch counts its items against the key's per-minute limit", () => {
  let scaledApi: TestApi;
  beforeAll(async () => {
    // RATE_LIMIT_SCALE 2: the write IP profile becomes 600, so a cached key's requests are counted in memory.
    scaledApi = await startApi({ config: { rateLimitScale: 2 } });
  });
  afterAll(async () => scaledApi.close());

  it.each([
    ['on one counter row, exactly (a limit under 600)', 'db', 50, 50, [30, 25, 19]],
    ['on sharded counter rows (a limit of 600 or more)', 'db', 1000, 1000, [650, 400, 49]],
    ['in memory (every limit of the request 600 or more)', 'memory', 300, 600, [350, 300, 48]],
  ] as const)(
    '%s: N items count N, a batch over what is left is refused whole, the headers report the key',
    async (_how, mode, keyLimit, limit, [first, tooMany, rest]) => {
      const { windowStart } = pinRateClock(5);
      const client = mode === 'memory' ? scaledApi : api;
      const ws = await createWorkspace(client, { scopes: [...ALL_SCOPES], rateLimitPerMinute: keyLimit });
      const post = (items: unknown[]) => client.request('POST', '/api/v1/leads/batch', { key: ws.key, body: { leads: items } });
      // The key's count in PostgreSQL once the API process flushed what it counted in memory (at once when counted there).
      const flushed = (count: number) =>
        eventually(`the key's count to reach ${count}`, async () => {
          const [row] = (
            await api.db.raw(
              `SELECT coalesce(sum(count), 0)::int AS count FROM rate_limit_counters WHERE bucket = ? AND window_start = ?`,
              [`key:${ws.keyId}`, windowStart],
            )
          ).rows;
          return row.count === count;
        });
      let counted = 0;
      // Batches of at most 100 items: the sizes above are made of several.
      const send = async (n: number, label: string) => {
        const answers = [];
        for (let sent = 0; sent < n; sent += 100) {
          const size = Math.min(100, n - sent);
          const res = await post(leads(size, label));
          answers.push(res);
          counted += res.status === 200 ? size : 1;
          await flushed(counted);
        }
        return answers;
      };
      if (mode === 'memory') {
        // The key read once (one request counted): its next requests need no statement.
        expect((await client.request('GET', '/api/v1/tags', { key: ws.key })).status).toBe(200);
        counted += 1;
      }
      const before = counted;

      const accepted = await send(first, 'first');
      expect(accepted.map((r) => r.status)).toEqual(accepted.map(() => 200));
      expect(limitHeaders(accepted.at(-1)!)).toEqual({ limit, remaining: limit - before - first });

      // More than what is left: the last batch (or the only one) is refused whole, nothing of it written.
      const over = await send(tooMany, 'over');
      const refused = over.at(-1)!;
      expectError(refused, 429, 'RATE_LIMITED');
      expect(refused.headers.get('retry-after')).toBe('55');
      const admittedBefore = over.slice(0, -1).length * 100;
      // The refused request counts as one request, its items not at all.
      const left = limit - before - first - admittedBefore - 1;
      expect(limitHeaders(refused)).toEqual({ limit, remaining: left });
      expect(refused.body.hint).toContain(`Send at most ${left} items`);
      expect(Number(await named(ws, 'over'))).toBe(admittedBefore);

      // What is left is still usable, to the last item.
      expect(rest).toBe(left);
      const last = await send(rest, 'rest');
      expect(last.map((r) => r.status)).toEqual(last.map(() => 200));
      expect(limitHeaders(last.at(-1)!)).toEqual({ limit, remaining: 0 });
      expectError(await post(leads(1, 'none')), 429, 'RATE_LIMITED');
      // A single call is counted as before: the key is exhausted.
      expectError(await client.request('GET', '/api/v1/tags', { key: ws.key }), 429, 'RATE_LIMITED');
    },
  );

  it('holds the limit exactly under concurrent batches (PostgreSQL-counted key)', async () => {
    pinRateClock(5);
    const ws = await createWorkspace(api, { scopes: [...ALL_SCOPES], rateLimitPerMinute: 100 });
    // Ten batches of 30 at once: each request counts one when authenticated, and its other 29
    // items only if they fit; 10 + 3 x 29 = 97 fits, a fourth would not.
    const results = await Promise.all(Array.from({ length: 10 }, (_, i) => batch(ws, leads(30, `race${i}`))));
    expect(results.filter((r) => r.status === 200)).toHaveLength(3);
    for (const r of results.filter((r) => r.status !== 200)) expectError(r, 429, 'RATE_LIMITED');
    expect(await api.db('contacts').where({ workspace_id: ws.id }).count({ n: '*' }).first()).toEqual({ n: 90 });
  });

  it('counts the request once against the per-IP limit (the write profile allows 300 a minute)', async () => {
    const { windowStart } = pinRateClock(5);
    const ws = await createWorkspace(api, { scopes: [...ALL_SCOPES], rateLimitPerMinute: 1000 });
    const ip = uniqueIp();
    // 400 items from one IP in four requests: the key counts 400, the IP 4.
    for (let i = 0; i < 4; i++) expect((await batch(ws, leads(100, `ip${i}`), { 'x-forwarded-for': ip })).status).toBe(200);
    const [{ count }] = (
      await api.db.raw(`SELECT coalesce(sum(count), 0)::int AS count FROM rate_limit_counters WHERE bucket = ? AND window_start = ?`, [
        `ip:write:${ip}`,
        windowStart,
      ])
    ).rows;
    expect(count).toBe(4);
  });

  it('documents the counting on the batch operations', async () => {
    const doc = (await api.request('GET', '/api/v1/openapi.json')).body;
    for (const path of ['/api/v1/leads/batch', '/api/v1/deals/batch']) {
      expect(doc.paths[path].post.description).toContain('a batch of N items counts N');
      expect(doc.paths[path].post.responses['429'].description).toContain('RATE_LIMITED');
    }
  });
});
