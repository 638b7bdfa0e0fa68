/**
 * Automations end to end: the API, the inbound receiver, internal triggers fed by the worker's
 * outbox dispatcher, and run workflows on the real Temporal dev server. The suite's worker runs
 * with AUTOMATION_WAIT_SCALE=0.00001 (a day's wait takes under a second).
 */
import { randomUUID } from 'node:crypto';
import { ALL_SCOPES } from '../domain/access/scopes';
import { MAX_CHAIN_DEPTH, render } from '../domain/automations/automations';
import { createAutomationActivities } from '../activities/automations';
import { resetClock } from '../domain/kernel/clock';
import {
  createWorkspace,
  eventually,
  expectError,
  outbox,
  pinRateClock,
  seedContact,
  seedPipeline,
  startApi,
  TestApi,
  uniqueIp,
  Workspace,
} from './helpers';
import { uniqueMobile } from './phones';

let api: TestApi;
beforeAll(async () => {
  api = await startApi();
});
afterAll(() => api.close());
afterEach(() => resetClock());

const phone = (): string => uniqueMobile('41');

async function workspace(plan?: Record<string, unknown>): Promise<Workspace> {
  return createWorkspace(api, { scopes: [...ALL_SCOPES], plan });
}

async function automation(ws: Workspace, body: Record<string, unknown>) {
  const res = await api.request('POST', '/api/v1/automations', { key: ws.key, body: { name: 'flow', ...body } });
  expect(res.status).toBe(201);
  return res.body.data as { id: string; webhookUrl: string | null; trigger: any; actions: any[] };
}

/** Posts to the receiver by full URL (the token is the only credential). */
async function hook(webhookUrl: string, body: unknown, headers: Record<string, string> = {}) {
  const path = new URL(webhookUrl).pathname;
  return api.request('POST', path, {
    rawBody: typeof body === 'string' ? body : JSON.stringify(body),
    headers: { 'content-type': 'application/json', ...headers },
  });
}

async function runs(ws: Workspace, automationId: string) {
  const res = await api.request('GET', `/api/v1/automations/${automationId}/runs?limit=100`, { key: ws.key });
  expect(res.status).toBe(200);
  return res.body.data as Array<{
    id: string;
    status: string;
    error: string | null;
    trigger: any;
    externalId: string | null;
    finishedAt: string | null;
  }>;
}

async function settledRuns(ws: Workspace, automationId: string, count: number, timeoutMs = 20_000) {
  return eventually(
    `${count} finished run(s) of ${automationId}`,
    async () => {
      const all = await runs(ws, automationId);
      return all.length >= count && all.every((r) => r.status !== 'running') && all;
    },
    timeoutMs,
  );
}

async function tagsOf(ws: Workspace, contactId: string): Promise<string[]> {
  const res = await api.request('GET', `/api/v1/leads/${contactId}`, { key: ws.key });
  return res.body.data.tags.map((t: { name: string }) => t.name).sort();
}

describe('automations API, token and quota', () => {
  it('creates a webhook_received automation with an unguessable URL; regenerating or removing the token stops the old URL at once', async () => {
    const ws = await workspace();
    const created = await automation(ws, { trigger: { type: 'webhook_received' }, actions: [{ type: 'add_tag', tag: 'hooked' }] });
    expect(created.webhookUrl).toMatch(/\/api\/automations\/webhook-in\/[A-Za-z0-9_-]{32}$/);
    const got = await api.request('GET', `/api/v1/automations/${created.id}`, { key: ws.key });
    expect(got.body.data).toMatchObject({
      id: created.id,
      active: true,
      trigger: { type: 'webhook_received' },
      actions: [{ type: 'add_tag', tag: 'hooked' }],
    });

    expect((await hook(created.webhookUrl!, { hello: 'world' })).status).toBe(202);
    const regenerated = await api.request('POST', `/api/v1/automations/${created.id}/token`, { key: ws.key });
    expect(regenerated.status).toBe(200);
    expect(regenerated.body.data.webhookUrl).not.toBe(created.webhookUrl);
    expectError(await hook(created.webhookUrl!, { hello: 'again' }), 404, 'NOT_FOUND');
    expect((await hook(regenerated.body.data.webhookUrl, { hello: 'new' })).status).toBe(202);

    const removed = await api.request('DELETE', `/api/v1/automations/${created.id}/token`, { key: ws.key });
    expect(removed.body.data.webhookUrl).toBeNull();
    expectError(await hook(regenerated.body.data.webhookUrl, { hello: 'gone' }), 404, 'NOT_FOUND');
  });

  it('takes one inbound-webhook quota unit per automation with the trigger and returns it on delete or token removal', async () => {
    const ws = await workspace({ inboundWebhookQuota: 1 });
    const body = { trigger: { type: 'webhook_received' }, actions: [{ type: 'add_tag', tag: 'x' }] };
    const first = await automation(ws, body);
    expectError(
      await api.request('POST', '/api/v1/automations', { key: ws.key, body: { name: 'second', ...body } }),
      402,
      'INBOUND_WEBHOOK_LIMIT_REACHED',
    );
    // Other triggers do not use the quota.
    await automation(ws, { trigger: { type: 'deal_won' }, actions: [{ type: 'add_tag', tag: 'x' }] });
    await api.request('DELETE', `/api/v1/automations/${first.id}/token`, { key: ws.key });
    const second = await automation(ws, body);
    // Restoring the first one's token now needs a unit: none left.
    expectError(await api.request('POST', `/api/v1/automations/${first.id}/token`, { key: ws.key }), 402, 'INBOUND_WEBHOOK_LIMIT_REACHED');
    await api.request('DELETE', `/api/v1/automations/${second.id}`, { key: ws.key });
    expect((await api.request('POST', `/api/v1/automations/${first.id}/token`, { key: ws.key })).status).toBe(200);
  });

  it('validates triggers and actions with VALIDATION naming the field', async () => {
    const ws = await workspace();
    const post = (body: unknown) => api.request('POST', '/api/v1/automations', { key: ws.key, body });
    const bad = await post({ name: 'x', trigger: { type: 'deal_exploded' }, actions: [{ type: 'add_tag', tag: 't' }] });
    expectError(bad, 400, 'VALIDATION');
    expect(bad.body.error).toMatch(/body\.trigger\.type/);
    const action = await post({ name: 'x', trigger: { type: 'deal_won' }, actions: [{ type: 'teleport' }] });
    expectError(action, 400, 'VALIDATION');
    expect(action.body.error).toMatch(/body\.actions\.0/);
    expectError(
      await post({
        name: 'x',
        trigger: { type: 'deal_won', pipelineId: '00000000-0000-4000-8000-000000000000' },
        actions: [{ type: 'add_tag', tag: 't' }],
      }),
      400,
      'VALIDATION',
    );
    expectError(await post({ name: 'x', trigger: { type: 'deal_won' }, actions: [] }), 400, 'VALIDATION');
    const created = await automation(ws, { trigger: { type: 'deal_won' }, actions: [{ type: 'add_tag', tag: 't' }] });
    expectError(
      await api.request('PATCH', `/api/v1/automations/${created.id}`, { key: ws.key, body: { trigger: { type: 'deal_lost' } } }),
      400,
      'VALIDATION',
    );
    const renamed = await api.request('PATCH', `/api/v1/automations/${created.id}`, {
      key: ws.key,
      body: { name: 'renamed', active: false },
    });
    expect(renamed.body.data).toMatchObject({ name: 'renamed', active: false });
  });
});

describe('the inbound receiver', () => {
  it('upserts the lead by phone from the mapping, exposes webhook.<field> variables and neutralises templates', async () => {
    const ws = await workspace();
    const flow = await automation(ws, {
      trigger: {
        type: 'webhook_received',
        mapping: { phone: 'customer.phone', name: 'customer.name', email: 'customer.email', externalId: 'order.id', value: 'order.total' },
      },
      actions: [
        { type: 'add_tag', tag: 'buyer' },
        { type: 'add_note', body: 'Order {{webhook.order.id}} for {{contact.name}}: {{webhook.note}} / total {{deal.value}}' },
      ],
    });
    const body = {
      customer: { phone: '+55 41 99123-4567', name: 'Carla Dias', email: 'carla@example.com' },
      order: { id: 'A-1', total: 99.9 },
      note: 'inject {{contact.phone}} here',
    };
    const res = await hook(flow.webhookUrl!, body);
    expect(res.status).toBe(202);
    expect(res.body.data).toEqual({ runId: expect.any(String), status: 'accepted' });
    const [run] = await settledRuns(ws, flow.id, 1);
    expect(run).toMatchObject({ id: res.body.data.runId, status: 'completed', externalId: 'A-1', error: null });

    const contact = await api.db('contacts').where({ workspace_id: ws.id, phone: '5541991234567' }).first('id', 'name', 'email');
    expect(contact).toMatchObject({ name: 'Carla Dias', email: 'carla@example.com' });
    expect(await tagsOf(ws, contact.id)).toEqual(['buyer']);
    const note = await api.db('notes').where({ workspace_id: ws.id, contact_id: contact.id }).first('body');
    expect(note.body).toBe('Order A-1 for Carla Dias: inject { {contact.phone} } here / total 99.9');
    expect(note.body).not.toContain('5541991234567');

    // The same phone without the ninth digit, another order: the same contact.
    await hook(flow.webhookUrl!, { ...body, customer: { phone: '554191234567', name: 'Carla D.' }, order: { id: 'A-2', total: 1 } });
    await settledRuns(ws, flow.id, 2);
    expect(await api.db('contacts').where({ workspace_id: ws.id }).count('* as n').first()).toEqual({ n: 1 });
    const tagEvents = await outbox(api, ws.id, 'contact.tag_added');
    expect(tagEvents.map((e) => e.payload.source)).toEqual(['automation']);
  });

  it('records a non-matching event as filtered and runs nothing', async () => {
    const ws = await workspace();
    const flow = await automation(ws, {
      trigger: { type: 'webhook_received', eventFilter: { path: 'status', op: 'equals', value: 'refunded' }, mapping: { phone: 'phone' } },
      actions: [{ type: 'add_tag', tag: 'refund' }],
    });
    const skipped = await hook(flow.webhookUrl!, { status: 'paid', phone: phone() });
    expect(skipped.body.data.status).toBe('filtered');
    const taken = await hook(flow.webhookUrl!, { status: 'refunded', phone: phone() });
    expect(taken.body.data.status).toBe('accepted');
    const all = await settledRuns(ws, flow.id, 2);
    expect(all.map((r) => r.status).sort()).toEqual(['completed', 'filtered']);
    expect(await api.db('contacts').where({ workspace_id: ws.id }).count('* as n').first()).toEqual({ n: 1 });
  });

  it('runs one externalId once, even for 20 concurrent deliveries', async () => {
    const ws = await workspace();
    const flow = await automation(ws, {
      trigger: { type: 'webhook_received', mapping: { phone: 'phone', externalId: 'id' } },
      actions: [{ type: 'add_note', body: 'order {{webhook.id}}' }],
    });
    const number = phone();
    const results = await Promise.all(Array.from({ length: 20 }, () => hook(flow.webhookUrl!, { id: 'ext-42', phone: number })));
    for (const r of results) expect(r.status).toBe(202);
    const statuses = results.map((r) => r.body.data.status);
    expect(statuses.filter((s) => s === 'accepted')).toHaveLength(1);
    expect(statuses.filter((s) => s === 'duplicate')).toHaveLength(19);
    await settledRuns(ws, flow.id, 20);
    expect(await api.db('notes').where({ workspace_id: ws.id }).count('* as n').first()).toEqual({ n: 1 });
    // Later, the same externalId is still a duplicate.
    expect((await hook(flow.webhookUrl!, { id: 'ext-42', phone: number })).body.data.status).toBe('duplicate');
  });

  it("frees the externalId of a failed run: the sender's retry runs again, and once completed it is a duplicate", async () => {
    const ws = await workspace();
    // The tag comes from the body: the first call carries none, so its run fails.
    const flow = await automation(ws, {
      trigger: { type: 'webhook_received', mapping: { phone: 'phone', externalId: 'id' } },
      actions: [{ type: 'add_tag', tag: '{{webhook.tag}}' }],
    });
    const number = phone();
    expect((await hook(flow.webhookUrl!, { id: 'order-7', phone: number })).body.data.status).toBe('accepted');
    expect((await settledRuns(ws, flow.id, 1)).map((r) => r.status)).toEqual(['failed']);
    const retry = await hook(flow.webhookUrl!, { id: 'order-7', phone: number, tag: 'paid' });
    expect(retry.body.data.status).toBe('accepted');
    const settled = await settledRuns(ws, flow.id, 2);
    expect(settled.find((r) => r.id === retry.body.data.runId)).toMatchObject({ status: 'completed', externalId: 'order-7' });
    const contact = await api.db('contacts').where({ workspace_id: ws.id }).first('id');
    expect(await tagsOf(ws, contact.id)).toEqual(['paid']);
    expect((await hook(flow.webhookUrl!, { id: 'order-7', phone: number, tag: 'again' })).body.data.status).toBe('duplicate');
    expect(await tagsOf(ws, contact.id)).toEqual(['paid']);
  });

  it('records contact.created, not lead.created, for a contact its lead intake creates', async () => {
    const ws = await workspace();
    const flow = await automation(ws, {
      trigger: { type: 'webhook_received', mapping: { phone: 'phone', name: 'name' } },
      actions: [{ type: 'add_tag', tag: 'hooked' }],
    });
    await hook(flow.webhookUrl!, { phone: phone(), name: 'Intake' });
    await settledRuns(ws, flow.id, 1);
    const contact = await api.db('contacts').where({ workspace_id: ws.id }).first('id');
    expect((await outbox(api, ws.id, 'contact.created')).map((e) => e.payload.contact_id)).toEqual([contact.id]);
    expect(await outbox(api, ws.id, 'lead.created')).toEqual([]);
  });

  it('reads JSON whatever its label; answers 400 to non-JSON and non-object bodies, 413 above 256 KiB, 404 to unknown tokens', async () => {
    const ws = await workspace();
    const flow = await automation(ws, { trigger: { type: 'webhook_received' }, actions: [{ type: 'add_tag', tag: 'x' }] });
    expectError(await hook(flow.webhookUrl!, '{not json'), 400, 'VALIDATION');
    expectError(await hook(flow.webhookUrl!, '[1,2]'), 400, 'VALIDATION');
    expectError(await hook(flow.webhookUrl!, 'hello', { 'content-type': 'text/plain' }), 400, 'VALIDATION');
    expectError(await hook(flow.webhookUrl!, '', { 'content-type': 'text/plain' }), 400, 'VALIDATION');
    // Form tools often label JSON text/plain or send no type at all: still accepted.
    expect((await hook(flow.webhookUrl!, '{"a":1}', { 'content-type': 'text/plain' })).status).toBe(202);
    expect((await hook(flow.webhookUrl!, '{"a":2}', { 'content-type': '' })).status).toBe(202);
    expectError(await hook(flow.webhookUrl!, 'x'.repeat(2 * 1024 * 1024), { 'content-type': 'text/plain' }), 413, 'PAYLOAD_TOO_LARGE');
    expectError(await hook(flow.webhookUrl!, { blob: 'x'.repeat(260 * 1024) }), 413, 'PAYLOAD_TOO_LARGE');
    expect((await hook(flow.webhookUrl!, { blob: 'x'.repeat(200 * 1024) })).status).toBe(202);
    expectError(await api.request('POST', '/api/automations/webhook-in/not-a-real-token', { body: { a: 1 } }), 404, 'NOT_FOUND');
  });
});

describe('receiver limits', () => {
  it('limits each token per minute with 429 TOKEN_RATE_LIMITED and Retry-After, whatever the sender IP', async () => {
    const limited = await startApi({ config: { inboundTokenLimit: 3 } });
    try {
      const ws = await workspace();
      const flow = await automation(ws, { trigger: { type: 'webhook_received' }, actions: [{ type: 'add_tag', tag: 'x' }] });
      const other = await automation(ws, { trigger: { type: 'webhook_received' }, actions: [{ type: 'add_tag', tag: 'y' }] });
      const post = (url: string) => limited.request('POST', new URL(url).pathname, { body: { a: 1 } });
      // The token's count is the API's (this process's clock); 5 s into the minute, 55 s are left.
      pinRateClock(5);
      for (let i = 0; i < 3; i++) expect((await post(flow.webhookUrl!)).status).toBe(202);
      const refused = await post(flow.webhookUrl!);
      expectError(refused, 429, 'TOKEN_RATE_LIMITED');
      expect(refused.headers.get('retry-after')).toBe('55');
      // The refused delivery left no run; another token is not affected.
      expect(await runs(ws, flow.id)).toHaveLength(3);
      expect((await post(other.webhookUrl!)).status).toBe(202);
    } finally {
      await limited.close();
    }
  });
});

describe('receiver counts per IP', () => {
  it('counts every call of an IP once, those refused before the lookup too, and answers IP_RATE_LIMITED first', async () => {
    const ws = await workspace();
    const flow = await automation(ws, { trigger: { type: 'webhook_received' }, actions: [{ type: 'add_tag', tag: 'x' }] });
    const ip = uniqueIp();
    const { windowStart } = pinRateClock(5);
    const bucket = `ip:webhookIn:${ip}`;
    const counted = async () =>
      (
        await api.db.raw(`SELECT coalesce(sum(count), 0)::int AS n FROM rate_limit_counters WHERE bucket = ? AND window_start = ?`, [
          bucket,
          windowStart,
        ])
      ).rows[0].n;
    const send = (path: string, rawBody: string) =>
      api.request('POST', path, { rawBody, headers: { 'content-type': 'application/json', 'x-forwarded-for': ip } });
    const path = new URL(flow.webhookUrl!).pathname;
    expect((await send(path, JSON.stringify({ a: 1 }))).status).toBe(202);
    // Refused by the body's reader, by the handler before its lookup, and by the lookup: each counted once.
    expectError(await send(path, '{not json'), 400, 'VALIDATION');
    expectError(await send(path, JSON.stringify({ blob: 'x'.repeat(260 * 1024) })), 413, 'PAYLOAD_TOO_LARGE');
    expectError(await send('/api/automations/webhook-in/not-a-real-token', JSON.stringify({ a: 1 })), 404, 'NOT_FOUND');
    expect(await counted()).toBe(4);
    // At the limit (600 a minute), the IP's 429 comes before anything else is looked at. The bucket
    // may be counted on several shard rows (one per backend's shard): the rest goes on one of them.
    const { shard } = await api.db('rate_limit_counters').where({ bucket, window_start: windowStart }).orderBy('shard').first('shard');
    await api
      .db('rate_limit_counters')
      .where({ bucket, window_start: windowStart, shard })
      .increment('count', 600 - 4);
    for (const refused of [
      await send(path, JSON.stringify({ a: 2 })),
      await send(path, '{not json'),
      await send('/api/automations/webhook-in/not-a-real-token', '{}'),
    ]) {
      expectError(refused, 429, 'IP_RATE_LIMITED');
      expect(refused.headers.get('retry-after')).toBe('55');
    }
    expect(await counted()).toBe(603);
    // The refused calls left no run; the token was counted only for the calls that found it.
    expect(await runs(ws, flow.id)).toHaveLength(1);
  });
});

describe('internal triggers', () => {
  it('deal_won fires exactly once under 20 concurrent identical PATCH requests', async () => {
    const ws = await workspace();
    const flow = await automation(ws, {
      trigger: { type: 'deal_won' },
      actions: [
        { type: 'add_tag', tag: 'customer' },
        { type: 'add_note', body: 'Won {{deal.name}} for {{deal.value}}' },
      ],
    });
    const pipeline = await seedPipeline(api, ws.id, { name: 'Sales', stages: ['New', 'Done'] });
    const contact = await seedContact(api, ws.id, { phone: phone(), name: 'Rui' });
    const deal = (
      await api.request('POST', '/api/v1/deals', {
        key: ws.key,
        body: { contactId: contact.id, pipeline: pipeline.id, name: 'Big', value: 500 },
      })
    ).body.data;
    await Promise.all(
      Array.from({ length: 20 }, () => api.request('PATCH', `/api/v1/deals/${deal.id}`, { key: ws.key, body: { status: 'won' } })),
    );
    const [run] = await settledRuns(ws, flow.id, 1);
    expect(run).toMatchObject({ status: 'completed', trigger: expect.objectContaining({ type: 'deal_won', dealId: deal.id }) });
    await new Promise((resolve) => setTimeout(resolve, 500));
    expect(await runs(ws, flow.id)).toHaveLength(1);
    expect(await tagsOf(ws, contact.id)).toEqual(['customer']);
    const notes = await api.db('notes').where({ workspace_id: ws.id, contact_id: contact.id }).pluck('body');
    expect(notes).toEqual(['Won Big for 500']);
  });

  it('card_created honours the pipelineId filter; stage_changed and deal_lost fire; contact_updated honours fields and changedFields', async () => {
    const ws = await workspace();
    const sales = await seedPipeline(api, ws.id, { name: 'Sales', stages: ['A', 'B'] });
    const other = await seedPipeline(api, ws.id, { name: 'Other', stages: ['X'] });
    const created = await automation(ws, {
      trigger: { type: 'card_created', pipelineId: sales.id },
      actions: [{ type: 'add_tag', tag: 'in-sales-{{pipelineId}}' }],
    });
    const moved = await automation(ws, { trigger: { type: 'stage_changed' }, actions: [{ type: 'add_tag', tag: 'moved' }] });
    const lost = await automation(ws, { trigger: { type: 'deal_lost' }, actions: [{ type: 'add_tag', tag: 'lost' }] });
    const emailChanged = await automation(ws, {
      trigger: { type: 'contact_updated', fields: ['email'] },
      actions: [{ type: 'add_note', body: 'changed: {{changedFields}}' }],
    });
    const contact = await seedContact(api, ws.id, { phone: phone(), name: 'Eva' });
    const deal = (await api.request('POST', '/api/v1/deals', { key: ws.key, body: { contactId: contact.id, pipeline: sales.id } })).body
      .data;
    await api.request('POST', '/api/v1/deals', { key: ws.key, body: { contactId: contact.id, pipeline: other.id } });
    await api.request('PATCH', `/api/v1/deals/${deal.id}`, { key: ws.key, body: { stageId: sales.stages[1].id } });
    await api.request('PATCH', `/api/v1/deals/${deal.id}`, { key: ws.key, body: { status: 'lost', lostReason: 'price' } });
    await api.request('PATCH', `/api/v1/leads/${contact.id}`, { key: ws.key, body: { name: 'Eva Maria' } });
    await api.request('PATCH', `/api/v1/leads/${contact.id}`, { key: ws.key, body: { email: 'eva@example.com' } });
    expect((await settledRuns(ws, created.id, 1)).map((r) => r.status)).toEqual(['completed']);
    expect((await settledRuns(ws, moved.id, 1)).map((r) => r.status)).toEqual(['completed']);
    expect((await settledRuns(ws, lost.id, 1)).map((r) => r.status)).toEqual(['completed']);
    const [emailRun] = await settledRuns(ws, emailChanged.id, 1);
    expect(emailRun.trigger).toMatchObject({ changedFields: 'email' });
    await new Promise((resolve) => setTimeout(resolve, 500));
    expect(await runs(ws, created.id)).toHaveLength(1); // not for the other pipeline
    expect(await runs(ws, emailChanged.id)).toHaveLength(1); // not for the name change
    expect(await tagsOf(ws, contact.id)).toEqual(['in-sales-' + sales.id, 'lost', 'moved'].sort());
  });

  it('card_created with pipelineId null or "" fires for a deal in any pipeline, like an omitted one', async () => {
    const ws = await workspace();
    const sales = await seedPipeline(api, ws.id, { name: 'Sales', stages: ['A'] });
    const other = await seedPipeline(api, ws.id, { name: 'Other', stages: ['X'] });
    const flows = [
      await automation(ws, { trigger: { type: 'card_created', pipelineId: null }, actions: [{ type: 'add_tag', tag: 'null' }] }),
      await automation(ws, { trigger: { type: 'card_created', pipelineId: '' }, actions: [{ type: 'add_tag', tag: 'empty' }] }),
      await automation(ws, { trigger: { type: 'card_created' }, actions: [{ type: 'add_tag', tag: 'omitted' }] }),
    ];
    for (const flow of flows) expect(flow.trigger).toEqual({ type: 'card_created' });
    const contact = await seedContact(api, ws.id, { phone: phone(), name: 'Any' });
    for (const p of [sales, other])
      expect((await api.request('POST', '/api/v1/deals', { key: ws.key, body: { contactId: contact.id, pipeline: p.id } })).status).toBe(
        201,
      );
    for (const flow of flows) expect((await settledRuns(ws, flow.id, 2)).map((r) => r.status)).toEqual(['completed', 'completed']);
    expect(await tagsOf(ws, contact.id)).toEqual(['empty', 'null', 'omitted']);
    // And on a change of trigger.
    const patched = await api.request('PATCH', `/api/v1/automations/${flows[2].id}`, {
      key: ws.key,
      body: { trigger: { type: 'card_created', pipelineId: '' } },
    });
    expect(patched.status).toBe(200);
    expect(patched.body.data.trigger).toEqual({ type: 'card_created' });
  });

  it('update_contact emits no contact.updated webhook; its tag events say automation', async () => {
    const ws = await workspace();
    const flow = await automation(ws, {
      trigger: { type: 'deal_won' },
      actions: [
        { type: 'update_contact', fields: { notes: 'VIP since {{deal.name}}' } },
        { type: 'add_tag', tag: 'vip' },
      ],
    });
    const pipeline = await seedPipeline(api, ws.id, { name: 'Sales', stages: ['New'] });
    const contact = await seedContact(api, ws.id, { phone: phone(), name: 'Lia' });
    const deal = (
      await api.request('POST', '/api/v1/deals', { key: ws.key, body: { contactId: contact.id, pipeline: pipeline.id, name: 'D1' } })
    ).body.data;
    await api.request('PATCH', `/api/v1/deals/${deal.id}`, { key: ws.key, body: { status: 'won' } });
    await settledRuns(ws, flow.id, 1);
    expect((await api.db('contacts').where({ id: contact.id }).first('notes')).notes).toBe('VIP since D1');
    const before = (await outbox(api, ws.id, 'contact.updated')).length; // the panel create records none
    expect(before).toBe(0);
    expect((await outbox(api, ws.id, 'contact.tag_added')).map((e) => e.payload.source)).toEqual(['automation']);
    expect((await outbox(api, ws.id, 'contact_updated')).map((e) => e.depth)).toEqual([1, 1]);
  });
});

describe('send_message action', () => {
  const EMULATOR = process.env.EMULATOR_URL!;
  const callsTo = async (to: string) => ((await (await fetch(`${EMULATOR}/__emulator/calls?to=${to}`)).json()) as { calls: any[] }).calls;

  async function withInstance(ws: Workspace): Promise<string> {
    const instance = await api.admin('POST', `/admin/v1/workspaces/${ws.id}/instances`, {
      name: 'Main',
      channel: 'whatsapp',
      provider: 'cloud',
      connected: true,
      config: {
        baseUrl: EMULATOR,
        phoneNumberId: `PN-${ws.id.slice(0, 8)}`,
        accessToken: 'token-never-logged',
        appSecret: 's',
        instanceName: `inst-${ws.id.slice(0, 8)}`,
      },
    });
    expect(instance.status).toBe(201);
    await api.admin('POST', `/admin/v1/workspaces/${ws.id}/templates`, {
      instanceId: instance.body.data.id,
      name: 'welcome',
      language: 'pt_BR',
      variableCount: 1,
      status: 'approved',
    });
    return instance.body.data.id;
  }

  it('sends a rendered template through the send saga (one provider call, quota counted); text outside the window fails the run with the reason', async () => {
    const ws = await workspace({ dailyMessageQuota: 1 });
    await withInstance(ws);
    const flow = await automation(ws, {
      trigger: { type: 'webhook_received', mapping: { phone: 'phone', name: 'name', externalId: 'id' } },
      actions: [
        {
          type: 'send_message',
          messageType: 'template',
          templateName: 'welcome',
          templateLanguage: 'pt_BR',
          templateVariables: ['{{contact.name}}'],
        },
        { type: 'add_note', body: 'welcome sent as {{message.id}}' },
      ],
    });
    const number = uniqueMobile();
    expect((await hook(flow.webhookUrl!, { id: 'w-1', phone: number, name: 'Bruna' })).body.data.status).toBe('accepted');
    const [run] = await settledRuns(ws, flow.id, 1);
    expect(run).toMatchObject({ status: 'completed', error: null });
    const calls = await callsTo(number);
    expect(calls).toHaveLength(1);
    expect(calls[0].body.template).toMatchObject({
      name: 'welcome',
      components: [{ type: 'body', parameters: [{ type: 'text', text: 'Bruna' }] }],
    });
    const message = await api.db('messages').where({ workspace_id: ws.id, provider_message_id: calls[0].messageId }).first('id', 'status');
    expect(message.status).toBe('sent');
    const note = await api.db('notes').where({ workspace_id: ws.id }).first('body');
    expect(note.body).toBe(`welcome sent as ${message.id}`);

    // The same rules as the send API: the daily message quota (1) is spent, so a second send fails the run.
    const second = uniqueMobile();
    await hook(flow.webhookUrl!, { id: 'w-2', phone: second, name: 'Caio' });
    const after = await settledRuns(ws, flow.id, 2);
    const failed = after.find((r) => r.externalId === 'w-2')!;
    expect(failed.status).toBe('failed');
    expect(failed.error).toMatch(/^Action 1 \(send_message\): MESSAGE_LIMIT_REACHED/);
    expect(await callsTo(second)).toHaveLength(0);

    // Free text to a number that never wrote: the 24-hour window rule, recorded as the run's reason.
    const textFlow = await automation(ws, {
      trigger: { type: 'webhook_received', mapping: { phone: 'phone' } },
      actions: [{ type: 'send_message', text: 'Hello {{webhook.who}}' }],
    });
    await hook(textFlow.webhookUrl!, { phone: number, who: 'there' });
    const [textRun] = await settledRuns(ws, textFlow.id, 1);
    expect(textRun.status).toBe('failed');
    expect(textRun.error).toMatch(/^Action 1 \(send_message\): WINDOW_CLOSED/);
  });
});

describe('durable actions', () => {
  it('a wait of a day completes (scaled) and the actions after it run', async () => {
    const ws = await workspace();
    const flow = await automation(ws, {
      trigger: { type: 'webhook_received', mapping: { phone: 'phone' } },
      actions: [
        { type: 'add_tag', tag: 'before' },
        { type: 'wait', seconds: 86_400 },
        { type: 'add_tag', tag: 'after' },
      ],
    });
    const number = phone();
    await hook(flow.webhookUrl!, { phone: number });
    const [run] = await settledRuns(ws, flow.id, 1);
    expect(run.status).toBe('completed');
    const contact = await api.db('contacts').where({ workspace_id: ws.id }).first('id');
    expect(await tagsOf(ws, contact.id)).toEqual(['after', 'before']);
  });

  it('a failing action stops the run, recorded failed with the action and its reason', async () => {
    const ws = await workspace();
    const flow = await automation(ws, {
      trigger: { type: 'webhook_received', mapping: { phone: 'phone' } },
      actions: [
        { type: 'add_tag', tag: 'first' },
        { type: 'create_deal', pipeline: 'No such pipeline' },
        { type: 'add_tag', tag: 'never' },
      ],
    });
    await hook(flow.webhookUrl!, { phone: phone() });
    const [run] = await settledRuns(ws, flow.id, 1);
    expect(run.status).toBe('failed');
    expect(run.error).toMatch(/^Action 2 \(create_deal\): .*Pipeline "No such pipeline" not found/);
    const contact = await api.db('contacts').where({ workspace_id: ws.id }).first('id');
    expect(await tagsOf(ws, contact.id)).toEqual(['first']);
  });

  it('applies an action once per run even when its activity runs again after a commit (a retry)', async () => {
    const ws = await workspace();
    const pipeline = await seedPipeline(api, ws.id, { name: 'Retry', stages: ['A'] });
    const contact = await seedContact(api, ws.id, { phone: phone(), name: 'Rita' });
    const flow = await automation(ws, { trigger: { type: 'webhook_received' }, actions: [{ type: 'create_deal', pipeline: pipeline.id }] });
    // A run as startRun leaves it: the actions snapshot and the context on its row.
    const [run] = await api
      .db('automation_runs')
      .insert({
        workspace_id: ws.id,
        automation_id: flow.id,
        status: 'running',
        trigger: JSON.stringify({ type: 'test' }),
        actions: JSON.stringify([
          { type: 'create_task', title: 'Call {{contact.name}}', dueInMinutes: 5 },
          { type: 'create_deal', pipeline: pipeline.id },
        ]),
        context: JSON.stringify({ contactId: contact.id, vars: {} }),
      })
      .returning('id');
    // The worker's own activity code, called twice with the same input as Temporal would on a retry.
    const activities = createAutomationActivities({ db: api.db });
    const input = { workspaceId: ws.id, automationId: flow.id, runId: run.id, depth: 0 };
    const tasksFirst = await activities.runAction({ ...input, index: 0 });
    const tasksAgain = await activities.runAction({ ...input, index: 0 });
    expect(tasksAgain).toEqual(tasksFirst);
    expect(await api.db('tasks').where({ workspace_id: ws.id }).pluck('title')).toEqual(['Call Rita']);
    const contextNow = async () => (await api.db('automation_runs').where({ id: run.id }).first('context')).context;
    await activities.runAction({ ...input, index: 1 });
    const dealFirst = await contextNow();
    await activities.runAction({ ...input, index: 1 });
    expect((await contextNow()).dealId).toBe(dealFirst.dealId);
    expect(dealFirst.dealId).toEqual(expect.any(String));
    expect(await api.db('deals').where({ workspace_id: ws.id }).count('* as n').first()).toEqual({ n: 1 });
    expect(await outbox(api, ws.id, 'card.created')).toHaveLength(1);
  });

  it('checks rendered values against the action rules: a too-long tag from the payload fails at once with the reason', async () => {
    const ws = await workspace();
    const flow = await automation(ws, {
      trigger: { type: 'webhook_received', mapping: { phone: 'phone' } },
      actions: [{ type: 'add_tag', tag: '{{webhook.product}}' }],
    });
    const started = Date.now();
    await hook(flow.webhookUrl!, { phone: phone(), product: 'p'.repeat(300), greeting: '{{constructor}}' });
    const [run] = await settledRuns(ws, flow.id, 1);
    expect(run.status).toBe('failed');
    expect(run.error).toMatch(/^Action 1 \(add_tag\): After filling in the variables, tag is invalid/);
    expect(Date.now() - started).toBeLessThan(5000); // not retried
    // Names of Object's own members are not variables.
    expect(render('[{{constructor}}] [{{toString}}]', {})).toBe('[] []');
  });

  /** A run that tagged its contact `first` and now waits (3 s on the test stack) before tagging it `second`. */
  async function runWaitingAfterItsFirstAction() {
    const ws = await workspace();
    const flow = await automation(ws, {
      trigger: { type: 'webhook_received', mapping: { phone: 'phone' } },
      // 300 000 s scaled by the test stack's 0.00001: 3 s.
      actions: [
        { type: 'add_tag', tag: 'first' },
        { type: 'wait', seconds: 300_000 },
        { type: 'add_tag', tag: 'second' },
      ],
    });
    await hook(flow.webhookUrl!, { phone: phone() });
    const contactId = await eventually('the first action', async () => {
      const contact = await api.db('contacts').where({ workspace_id: ws.id }).first('id');
      return contact && (await tagsOf(ws, contact.id)).includes('first') && (contact.id as string);
    });
    return { ws, flow, contactId };
  }

  it('stops a run whose automation is deactivated during a wait', async () => {
    const { ws, flow, contactId } = await runWaitingAfterItsFirstAction();
    expect((await api.request('PATCH', `/api/v1/automations/${flow.id}`, { key: ws.key, body: { active: false } })).status).toBe(200);
    const [run] = await settledRuns(ws, flow.id, 1);
    expect(run.status).toBe('failed');
    expect(run.error).toBe('Action 3 (add_tag): The automation was deleted or deactivated during the run');
    expect(await tagsOf(ws, contactId)).toEqual(['first']);
  });

  it('stops a run whose workspace is suspended during a wait: no further action', async () => {
    const { ws, flow, contactId } = await runWaitingAfterItsFirstAction();
    expect((await api.admin('PATCH', `/admin/v1/workspaces/${ws.id}`, { plan: { active: false } })).status).toBe(200);
    // The API answers a suspended workspace 402: the run and the tags are read in the database.
    const run = await eventually('the run finished', async () => {
      const row = await api.db('automation_runs').where({ workspace_id: ws.id, automation_id: flow.id }).first('status', 'error');
      return row && row.status !== 'running' && row;
    });
    expect(run).toEqual({ status: 'failed', error: 'Action 3 (add_tag): The workspace subscription is inactive' });
    const tags = await api
      .db('contact_tags as ct')
      .join('tags as t', 't.id', 'ct.tag_id')
      .where({ 'ct.workspace_id': ws.id, 'ct.contact_id': contactId })
      .pluck('t.name');
    expect(tags).toEqual(['first']);
  });

  it("keeps the contact's phone, email and name out of a run's error (automations:read reads it)", async () => {
    const ws = await workspace();
    const flow = await automation(ws, {
      trigger: { type: 'webhook_received', mapping: { phone: 'customer.phone', name: 'customer.name', email: 'customer.email' } },
      // The pipeline reference is rendered from the contact: the refusal quotes it.
      actions: [{ type: 'create_deal', pipeline: '{{contact.name}} {{contact.phone}} {{contact.email}} {{webhook.customer.phone}}' }],
    });
    const number = phone();
    const written = `+${number.slice(0, 2)} (${number.slice(2, 4)}) ${number.slice(4, 9)}-${number.slice(9)}`;
    await hook(flow.webhookUrl!, { customer: { phone: written, name: 'Carla Dias', email: 'carla.dias@example.com' } });
    const [run] = await settledRuns(ws, flow.id, 1);
    expect(run.status).toBe('failed');
    expect(run.error).toBe('Action 1 (create_deal): Pipeline "[name] [phone] [email] [phone]" not found');
    for (const personal of [number, number.slice(2), written, 'Carla', 'carla.dias']) expect(run.error).not.toContain(personal);
  });

  it('closes a run recorded by a pass whose start failed, even when the automation was deactivated before the next pass', async () => {
    const ws = await workspace();
    const flow = await automation(ws, { trigger: { type: 'deal_won' }, actions: [{ type: 'add_note', body: 'won' }] });
    expect((await api.request('PATCH', `/api/v1/automations/${flow.id}`, { key: ws.key, body: { active: false } })).status).toBe(200);
    // What the failed pass left: the trigger row (not dispatched) and its run, recorded `running`.
    const eventId = randomUUID();
    await api.db.transaction(async (trx) => {
      await trx('automation_runs').insert({
        workspace_id: ws.id,
        automation_id: flow.id,
        status: 'running',
        trigger: { type: 'deal_won' },
        event_id: eventId,
        depth: 0,
      });
      await trx('outbox_events').insert({ id: eventId, workspace_id: ws.id, kind: 'trigger', name: 'deal_won', payload: {} });
    });
    const [run] = await settledRuns(ws, flow.id, 1);
    expect(run.status).toBe('failed');
    expect(run.error).toBe('The automation was deleted or deactivated before the run began');
    expect(await api.db('notes').where({ workspace_id: ws.id }).count({ n: '*' }).first()).toEqual({ n: 0 });
  });

  it(`stops a chain of automations deeper than ${MAX_CHAIN_DEPTH} and records why`, async () => {
    const ws = await workspace();
    const pipeline = await seedPipeline(api, ws.id, { name: 'Loop', stages: ['One', 'Two'] });
    // Every new deal fires card_created, and this automation creates another deal: an endless
    // chain, one run per link, each on a new record (so only the depth stops it).
    const pingPong = await automation(ws, { trigger: { type: 'card_created' }, actions: [{ type: 'create_deal', pipeline: pipeline.id }] });
    const contact = await seedContact(api, ws.id, { phone: phone(), name: 'Loopy' });
    await api.request('POST', '/api/v1/deals', { key: ws.key, body: { contactId: contact.id, pipeline: pipeline.id } });
    const all = await settledRuns(ws, pingPong.id, MAX_CHAIN_DEPTH + 1);
    await new Promise((resolve) => setTimeout(resolve, 1000));
    const final = await runs(ws, pingPong.id);
    expect(final).toHaveLength(MAX_CHAIN_DEPTH + 1);
    expect(all.filter((r) => r.status === 'completed')).toHaveLength(MAX_CHAIN_DEPTH);
    const [stopped] = final.filter((r) => r.status === 'failed');
    expect(stopped.error).toMatch(new RegExp(`Loop protection: .* ${MAX_CHAIN_DEPTH} deep; the limit is ${MAX_CHAIN_DEPTH}`));
    const depths = (await outbox(api, ws.id, 'card.created')).map((e) => e.depth);
    expect(depths).toEqual(Array.from({ length: MAX_CHAIN_DEPTH + 1 }, (_, i) => i));
  });
});
