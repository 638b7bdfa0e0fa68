/**
 * Concurrency, end to end: identical requests at once must do their work once — what the
 * receiver, the provider emulator and the run log see afterwards, not only what the API answered.
 * The figures are the (50 PATCHes, 50 moves, 20 sends, 20 inbound, 20 upserts).
 */
import { Client, Connection } from '@temporalio/client';
import { ALL_SCOPES } from '../../domain/access/scopes';
import { dataConverterFor } from '../../domain/platform/temporal';
import {
  createWorkspace,
  eventually,
  Receiver,
  seedContact,
  seedPipeline,
  settleOutbox,
  startApi,
  startReceiver,
  TestApi,
  uniqueIp,
  Workspace,
} from '../helpers';
import { deliveredOnce, outboxCount } from '../deliveries';
import { uniqueMobile } from '../phones';

const EMULATOR = process.env.EMULATOR_URL!;
// Subscriptions are never unlimited (a number, default 10): a quota far above what this file makes.
const UNLIMITED = { dealLimit: null, dailyMessageQuota: null, broadcastLimit: null, inboundWebhookQuota: null, webhookQuota: 1000 };
const report = (message: string): void => console.log(`[concurrency] ${message}`);

let api: TestApi;
let receiver: Receiver;
let connection: Connection;
let temporal: Client;
const mobile = (): string => uniqueMobile('31');
const tally = (statuses: number[]): string =>
  Object.entries(statuses.reduce<Record<number, number>>((acc, s) => ((acc[s] = (acc[s] ?? 0) + 1), acc), {}))
    .map(([s, n]) => `${s} x${n}`)
    .join(', ');

beforeAll(async () => {
  // Limits raised: fifty identical requests from one key within a second are the point here.
  api = await startApi({ config: { rateLimitScale: 100 } });
  receiver = await startReceiver();
  connection = await Connection.connect({ address: api.config.temporalAddress });
  temporal = new Client({ connection, namespace: api.config.temporalNamespace, dataConverter: dataConverterFor(api.config) });
});

afterAll(async () => {
  await connection?.close();
  await receiver?.close();
  await api?.close();
});

async function workspace(): Promise<Workspace> {
  return createWorkspace(api, { scopes: [...ALL_SCOPES], plan: UNLIMITED });
}

async function subscribe(ws: Workspace, path: string, events: string[]): Promise<void> {
  const res = await api.request('POST', '/api/v1/webhooks', { key: ws.key, body: { url: `${receiver.url}${path}`, events } });
  expect(res.status).toBe(201);
}

async function dealIn(ws: Workspace) {
  const pipeline = await seedPipeline(api, ws.id, { name: 'Sales', stages: ['New', 'Won over', 'Signed'] });
  const contact = await seedContact(api, ws.id, { phone: mobile(), name: 'Ana' });
  const deal = await api.request('POST', '/api/v1/deals', {
    key: ws.key,
    body: { contactId: contact.id, pipeline: pipeline.id, value: 100 },
  });
  expect(deal.status).toBe(201);
  return { pipeline, deal: deal.body.data as { id: string } };
}

describe('identical requests at once', () => {
  it('50 concurrent PATCH status: won: one card.won delivery per subscription, one automation run', async () => {
    const ws = await workspace();
    const one = `/ok/won-one-${ws.id}`;
    const all = `/ok/won-all-${ws.id}`;
    await subscribe(ws, one, ['card.won']);
    await subscribe(ws, all, ['*']);
    const flow = await api.request('POST', '/api/v1/automations', {
      key: ws.key,
      body: { name: 'Won', trigger: { type: 'deal_won' }, actions: [{ type: 'add_note', body: 'won' }] },
    });
    expect(flow.status).toBe(201);
    const { deal } = await dealIn(ws);

    const results = await Promise.all(
      Array.from({ length: 50 }, () => api.request('PATCH', `/api/v1/deals/${deal.id}`, { key: ws.key, body: { status: 'won' } })),
    );
    report(`50 x PATCH won: ${tally(results.map((r) => r.status))}`);
    for (const r of results) expect(r.status).toBe(200);
    await settleOutbox(api, ws.id);
    const runs = await eventually('the run settled', async () => {
      const rows = await api
        .db('automation_runs')
        .where({ workspace_id: ws.id, automation_id: flow.body.data.id })
        .whereNot('status', 'running');
      return rows.length > 0 ? rows : undefined;
    });
    // Once, where the design makes it unique: one card.won event and one deal_won trigger (outbox
    // rows, written with the change), hence one delivery per subscription, posted once.
    expect(await outboxCount(api, ws.id, 'card.won')).toBe(1);
    expect(await outboxCount(api, ws.id, 'deal_won', 'trigger')).toBe(1);
    const toOne = await deliveredOnce(api, temporal, receiver, ws.id, one);
    expect(toOne.requests.map((r) => [r.json?.event, r.json?.card_id])).toEqual([['card.won', deal.id]]);
    const toAll = await deliveredOnce(api, temporal, receiver, ws.id, all);
    expect(toAll.deliveries.filter((d) => d.event === 'card.won').map((d) => d.event_id)).toEqual(toOne.deliveries.map((d) => d.event_id));
    expect(toAll.requests.filter((r) => r.json?.event === 'card.won')).toHaveLength(1);
    expect(
      await api.db('automation_runs').where({ workspace_id: ws.id, automation_id: flow.body.data.id }).count({ n: '*' }).first(),
    ).toEqual({ n: 1 });
    expect(runs[0].status).toBe('completed');
    expect(await api.db('notes').where({ workspace_id: ws.id }).count({ n: '*' }).first()).toEqual({ n: 1 });
    report('one card.won per subscription, one run, one note');
  });

  it('50 concurrent identical stage moves: one history row, one card.moved', async () => {
    const ws = await workspace();
    const path = `/ok/moved-${ws.id}`;
    await subscribe(ws, path, ['card.moved']);
    const { pipeline, deal } = await dealIn(ws);
    const target = pipeline.stages[2].id;

    const results = await Promise.all(
      Array.from({ length: 50 }, () => api.request('PATCH', `/api/v1/deals/${deal.id}`, { key: ws.key, body: { stageId: target } })),
    );
    report(`50 x PATCH stageId: ${tally(results.map((r) => r.status))}`);
    for (const r of results) expect(r.status).toBe(200);
    for (const r of results) expect(r.body.data.stageId).toBe(target);
    expect(await outboxCount(api, ws.id, 'card.moved')).toBe(1);
    const { requests } = await deliveredOnce(api, temporal, receiver, ws.id, path);
    expect(requests).toHaveLength(1);
    expect(requests[0].json).toMatchObject({
      event: 'card.moved',
      card_id: deal.id,
      from_stage_id: pipeline.stages[0].id,
      to_stage_id: target,
    });
    const history = await api.request('GET', `/api/v1/deals/${deal.id}/activities`, { key: ws.key });
    expect(history.body.data.filter((a: { type: string }) => a.type === 'stage_changed')).toHaveLength(1);
    report('one stage_changed history row, one card.moved');
  });

  it('20 concurrent cold sends with one Idempotency-Key: one provider call; the rest 409 IN_PROGRESS or the replayed 200', async () => {
    const ws = await workspace();
    const phoneNumberId = `PN-conc-${ws.id.slice(0, 8)}`;
    const instance = await api.admin('POST', `/admin/v1/workspaces/${ws.id}/instances`, {
      name: 'Main',
      channel: 'whatsapp',
      provider: 'cloud',
      connected: true,
      config: { baseUrl: EMULATOR, phoneNumberId, accessToken: 'conc-token', appSecret: 'conc-secret' },
    });
    expect(instance.status).toBe(201);
    await api.admin('POST', `/admin/v1/workspaces/${ws.id}/templates`, {
      instanceId: instance.body.data.id,
      name: 'welcome',
      language: 'pt_BR',
      variableCount: 1,
      status: 'approved',
    });
    const phone = mobile();
    const body = { phone, type: 'template', templateName: 'welcome', templateLanguage: 'pt_BR', templateVariables: ['Ana'] };
    const results = await Promise.all(
      Array.from({ length: 20 }, () =>
        api.request('POST', '/api/v1/messages', {
          key: ws.key,
          body,
          headers: { 'x-forwarded-for': uniqueIp(), 'Idempotency-Key': `conc-${phone}` },
        }),
      ),
    );
    report(`20 x POST /api/v1/messages, one key: ${tally(results.map((r) => r.status))}`);
    for (const r of results) expect([200, 201, 409]).toContain(r.status);
    expect(results.filter((r) => r.status === 201).length).toBeLessThanOrEqual(1);
    for (const r of results.filter((x) => x.status === 409)) expect(r.body.code).toBe('IN_PROGRESS');
    const ids = new Set(results.filter((r) => r.status < 300).map((r) => r.body.data.id));
    expect(ids.size).toBeLessThanOrEqual(1);
    // Counted once the key's one send has settled (answered: a key that holds an answer never sends
    // again within 10 minutes), so no call of it can still be on its way.
    const keyState = async () =>
      (
        await api
          .db('send_keys')
          .where({ workspace_id: ws.id, key: `conc-${phone}` })
          .first('state')
      )?.state;
    for (let i = 0; i < 100 && (await keyState()) === 'sending'; i++) await new Promise((r) => setTimeout(r, 100));
    expect(await keyState()).toBe('answered');
    const calls = ((await (await fetch(`${EMULATOR}/__emulator/calls?to=${phone}`)).json()) as { calls: unknown[] }).calls;
    expect(calls).toHaveLength(1);
    expect(await api.db('messages').where({ workspace_id: ws.id }).count({ n: '*' }).first()).toEqual({ n: 1 });
    expect(await api.db('contacts').where({ workspace_id: ws.id }).count({ n: '*' }).first()).toEqual({ n: 1 });
    report('one provider call, one message, one contact');
  });

  it('20 concurrent inbound webhooks with one externalId: one run', async () => {
    const ws = await workspace();
    const flow = await api.request('POST', '/api/v1/automations', {
      key: ws.key,
      body: {
        name: 'Orders',
        trigger: { type: 'webhook_received', mapping: { externalId: 'order.id' } },
        actions: [{ type: 'create_task', title: 'Order {{webhook.order.id}}', dueInMinutes: 60 }],
      },
    });
    expect(flow.status).toBe(201);
    const hookPath = new URL(flow.body.data.webhookUrl).pathname;
    const results = await Promise.all(Array.from({ length: 20 }, () => api.request('POST', hookPath, { body: { order: { id: 'A-1' } } })));
    const statuses = results.map((r) => r.body?.data?.status);
    report(
      `20 x inbound, one externalId: ${tally(results.map((r) => r.status))}; ${statuses.filter((s) => s === 'accepted').length} accepted, ${statuses.filter((s) => s === 'duplicate').length} duplicate`,
    );
    for (const r of results) expect(r.status).toBe(202);
    expect(statuses.filter((s) => s === 'accepted')).toHaveLength(1);
    await eventually(
      'the run completed',
      async () => (await api.db('automation_runs').where({ workspace_id: ws.id, status: 'completed' })).length === 1,
    );
    expect(await api.db('tasks').where({ workspace_id: ws.id }).pluck('title')).toEqual(['Order A-1']);
    expect(
      await api
        .db('automation_runs')
        .where({ workspace_id: ws.id })
        .whereIn('status', ['running', 'completed', 'failed'])
        .count({ n: '*' })
        .first(),
    ).toEqual({ n: 1 });
  });

  it('20 concurrent lead upserts of one number in both ninth-digit forms: one contact, one lead.created', async () => {
    const ws = await workspace();
    const path = `/ok/upsert-${ws.id}`;
    await subscribe(ws, path, ['lead.created']);
    const phone = mobile(); // 55 31 9 XXXXXXXX
    const withoutNinth = phone.slice(0, 4) + phone.slice(5);
    const results = await Promise.all(
      Array.from({ length: 20 }, (_, i) =>
        api.request('POST', '/api/v1/leads', { key: ws.key, body: { phone: i % 2 ? phone : `+${withoutNinth}`, name: `N${i}` } }),
      ),
    );
    report(`20 x POST /api/v1/leads, ${phone} and ${withoutNinth}: ${tally(results.map((r) => r.status))}`);
    for (const r of results) expect([200, 201]).toContain(r.status);
    expect(results.filter((r) => r.status === 201)).toHaveLength(1);
    expect(new Set(results.map((r) => r.body.data.id)).size).toBe(1);
    expect(await api.db('contacts').where({ workspace_id: ws.id }).count({ n: '*' }).first()).toEqual({ n: 1 });
    expect(await outboxCount(api, ws.id, 'lead.created')).toBe(1);
    const { requests } = await deliveredOnce(api, temporal, receiver, ws.id, path);
    expect(requests.map((r) => r.json?.contact_id)).toEqual([results[0].body.data.id]);
  });
});
