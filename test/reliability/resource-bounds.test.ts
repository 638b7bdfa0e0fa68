/**
 * What one request, authenticated or not, can make the service spend, and what it keeps: bodies
 * are read only for a known route after its limits and authentication, unknown paths are limited
 * per IP, PostgreSQL cancels a statement that runs too long, `offset` is bounded, and what the
 * service only needs for a while (dispatched outbox rows, finished deliveries and runs) is pruned.
 */
import { route } from '../../api/route';
import { IP_PROFILES } from '../../domain/access/rate-limit';
import { MAX_OFFSET } from '../../domain/kernel/pagination';
import { pruneRetention } from '../../domain/maintenance/retention';
import type { Db } from '../../domain/platform/db';
import { resetClock } from '../../domain/kernel/clock';
import { createWorkspace, expectError, pinRateClock, startApi, TestApi } from '../helpers';

let api: TestApi;
beforeAll(async () => {
  api = await startApi();
});
afterAll(() => api.close());
afterEach(() => resetClock());

describe('before authentication', () => {
  it('reads no body: a refused caller gets 401 (not a parse error), an unknown path 404', async () => {
    const malformed = { rawBody: '{"phone": ', headers: { 'content-type': 'application/json' } };
    expectError(await api.request('POST', '/api/v1/leads', malformed), 401, 'UNAUTHORIZED');
    expectError(
      await api.request('POST', '/api/v1/leads', { rawBody: 'phone=1', headers: { 'content-type': 'application/x-www-form-urlencoded' } }),
      401,
      'UNAUTHORIZED',
    );
    expectError(await api.request('POST', '/api/v1/nothing-here', malformed), 404, 'NOT_FOUND');
    expectError(await api.request('POST', '/nothing-here', malformed), 404, 'NOT_FOUND');
    // An authenticated caller still gets the parse error.
    const ws = await createWorkspace(api, { scopes: ['leads:write'] });
    expectError(await api.request('POST', '/api/v1/leads', { ...malformed, key: ws.key }), 400, 'VALIDATION');
  });

  it('limits unknown paths per IP, outside /api/v1 too', async () => {
    pinRateClock(5);
    const ip = `203.0.${Math.floor(Math.random() * 255)}.${1 + Math.floor(Math.random() * 250)}`;
    const statuses = new Set<number>();
    for (let i = 0; i < IP_PROFILES.read; i++)
      statuses.add((await api.request('GET', `/no/such/path/${i}`, { headers: { 'x-forwarded-for': ip } })).status);
    expect([...statuses]).toEqual([404]);
    const over = await api.request('GET', '/no/such/path', { headers: { 'x-forwarded-for': ip } });
    expectError(over, 429, 'IP_RATE_LIMITED');
    expect(over.headers.get('retry-after')).toBe('55');
  });
});

describe('bounded work per request', () => {
  it('cancels a statement that runs longer than DB_STATEMENT_TIMEOUT_MS: a prompt 503, the connection freed', async () => {
    const slow = route({
      method: 'get',
      path: '/api/v1/__test/slow',
      operationId: 'testSlow',
      tag: 'Test',
      auth: 'none',
      summary: 'a statement that sleeps',
      handler: async (ctx) => ({ data: await ctx.deps.db.raw('SELECT pg_sleep(5)') }),
    });
    const bounded = await startApi({ config: { statementTimeoutMs: 300 }, extraRoutes: [slow] });
    try {
      const started = Date.now();
      const res = await bounded.request('GET', '/api/v1/__test/slow');
      expectError(res, 503, 'UNAVAILABLE');
      expect(res.body.error).toBe('The request took too long and was cancelled');
      expect(Date.now() - started).toBeLessThan(3000);
      expect((await bounded.db.raw('SELECT 1 AS ok')).rows).toEqual([{ ok: 1 }]);
    } finally {
      await bounded.close();
    }
  });

  it(`refuses an offset past ${MAX_OFFSET} with 400 VALIDATION naming it`, async () => {
    const ws = await createWorkspace(api, { scopes: ['leads:read'] });
    expect((await api.request('GET', `/api/v1/leads?offset=${MAX_OFFSET}`, { key: ws.key })).status).toBe(200);
    const deep = await api.request('GET', `/api/v1/leads?offset=${MAX_OFFSET + 1}`, { key: ws.key });
    expectError(deep, 400, 'VALIDATION');
    expect(deep.body.error).toMatch(/query\.offset/);
  });
});

describe('retention', () => {
  it('prunes dispatched outbox rows, finished deliveries, finished runs and send requests past RETENTION_DAYS, and nothing pending or running', async () => {
    const ws = await createWorkspace(api);
    const old = api.db.raw(`now() - interval '31 days'`);
    const events = await api
      .db('outbox_events')
      .insert([
        { workspace_id: ws.id, kind: 'webhook', name: 'lead.created', payload: {}, created_at: old, dispatched_at: old },
        // Not dispatched yet: claimed by a dispatcher still at work, so the suite's live dispatcher leaves it alone too.
        {
          workspace_id: ws.id,
          kind: 'webhook',
          name: 'lead.created',
          payload: {},
          created_at: old,
          dispatched_at: null,
          claimed_until: api.db.raw(`now() + interval '1 hour'`),
        },
        { workspace_id: ws.id, kind: 'webhook', name: 'lead.created', payload: {}, dispatched_at: api.db.fn.now() },
      ])
      .returning('id');
    const [subscription] = await api
      .db('webhook_subscriptions')
      .insert({ workspace_id: ws.id, url: 'https://example.com/hook', events: ['lead.created'], secret: 'whsec_test' })
      .returning('id');
    const deliveries = await api
      .db('webhook_deliveries')
      .insert(
        ['succeeded', 'failed', 'pending'].map((status) => ({
          workspace_id: ws.id,
          subscription_id: subscription.id,
          event: 'lead.created',
          payload: {},
          status,
          created_at: old,
          delivered_at: status === 'succeeded' ? old : null,
        })),
      )
      .returning('id');
    const [automation] = await api
      .db('automations')
      .insert({
        workspace_id: ws.id,
        name: 'kept',
        active: true,
        trigger_type: 'deal_won',
        trigger: {},
        actions: JSON.stringify([{ type: 'wait', seconds: 1 }]),
      })
      .returning('id');
    const runs = await api
      .db('automation_runs')
      .insert(
        ['completed', 'failed', 'running'].map((status) => ({
          workspace_id: ws.id,
          automation_id: automation.id,
          status,
          created_at: old,
        })),
      )
      .returning('id');
    const message = JSON.stringify({ type: 'text', text: 'private' });
    const requests = await api
      .db('send_requests')
      .insert([
        { workspace_id: ws.id, id: `old-${ws.id}`, message, created_at: old },
        { workspace_id: ws.id, id: `new-${ws.id}`, message },
      ])
      .returning('id');
    // A send request's id is the client's Idempotency-Key: another workspace may use the same one.
    const other = await createWorkspace(api, { scopes: ['leads:read'] });
    const shared = `order-${ws.id}`;
    await api.db('send_requests').insert([
      { workspace_id: ws.id, id: shared, message, created_at: old },
      { workspace_id: other.id, id: shared, message },
    ]);

    // The production pass (every workspace), inside a transaction rolled back afterwards, so it
    // removes nothing the test files running beside this one still read.
    const trx = await api.db.transaction();
    try {
      await pruneRetention(trx as unknown as Db, 30);
      const left = async (table: string, ids: { id: string }[]) =>
        (
          await trx(table)
            .whereIn(
              'id',
              ids.map((r) => r.id),
            )
            .pluck('id')
        ).sort();
      expect(await left('outbox_events', events)).toEqual([events[1].id, events[2].id].sort());
      expect(await left('webhook_deliveries', deliveries)).toEqual([deliveries[2].id]);
      expect(await left('automation_runs', runs)).toEqual([runs[2].id]);
      expect(await left('send_requests', requests)).toEqual([requests[1].id]);
      // The old request of this workspace went; the other workspace's fresh one with the same key stays.
      expect(await trx('send_requests').where({ id: shared }).pluck('workspace_id')).toEqual([other.id]);
    } finally {
      await trx.rollback();
    }
  });
});
