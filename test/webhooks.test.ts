/**
 * Outbound webhooks end to end: the subscriptions API, the worker's outbox dispatcher, the
 * delivery workflow on the real Temporal dev server, and a real HTTP receiver in this process.
 * The suite's worker runs with WEBHOOK_RETRY_SCALE=0.001 (5 s → 5 ms, 5 min → 0.3 s).
 */
import type { Payload } from '@temporalio/common';
import { EncryptionCodec } from '../domain/platform/payload-codec';
import { dataConverterFor } from '../domain/platform/temporal';
import { createHmac } from 'node:crypto';
import { Connection, Client, WorkflowNotFoundError } from '@temporalio/client';
import { ALL_SCOPES } from '../domain/access/scopes';
import { verifyWebhookSignature } from '../domain/webhooks/webhook-signature';
import { deliveryWorkflowId } from '../domain/webhooks/webhooks';
import { WEBHOOK_MAX_ATTEMPTS, WEBHOOK_RETRY_SCHEDULE_SECONDS, type DeliveryInput, type DeliveryResult } from '../types/webhooks';
import {
  createWorkspace,
  eventually,
  expectError,
  Receiver,
  ReceivedWebhook,
  seedContact,
  seedPipeline,
  settleOutbox,
  startApi,
  startReceiver,
  TestApi,
  Workspace,
} from './helpers';
import { deliveredOnce, outboxCount } from './deliveries';
import { uniqueMobile } from './phones';

let api: TestApi;
let receiver: Receiver;
let temporal: Client;
let connection: Connection;

beforeAll(async () => {
  api = await startApi();
  receiver = await startReceiver();
  connection = await Connection.connect({ address: api.config.temporalAddress });
  temporal = new Client({ connection, namespace: api.config.temporalNamespace, dataConverter: dataConverterFor(api.config) });
});
afterAll(async () => {
  await receiver.close();
  await connection.close();
  await api.close();
});

let seq = 0;
const phone = (): string => uniqueMobile('41');
const unique = (label: string): string => `${label}-${process.pid}-${++seq}`;

async function workspace(plan?: Record<string, unknown>): Promise<Workspace> {
  return createWorkspace(api, { scopes: [...ALL_SCOPES], plan });
}

async function subscribe(ws: Workspace, path: string, events: string[] = ['*'], extra: Record<string, unknown> = {}) {
  const res = await api.request('POST', '/api/v1/webhooks', { key: ws.key, body: { url: `${receiver.url}${path}`, events, ...extra } });
  expect(res.status).toBe(201);
  return res.body.data as { id: string; secret: string; url: string; events: string[]; active: boolean };
}

async function deliveries(ws: Workspace, subscriptionId: string) {
  const res = await api.request('GET', `/api/v1/webhooks/${subscriptionId}/deliveries?limit=100`, { key: ws.key });
  expect(res.status).toBe(200);
  return res.body.data as Array<{
    id: string;
    event: string;
    status: string;
    attempts: number;
    lastStatusCode: number | null;
    lastError: string | null;
  }>;
}

const received = (path: string, event?: string): ReceivedWebhook[] =>
  receiver.to(path).filter((r) => !event || r.headers['x-service-event'] === event);

async function waitFor(path: string, count: number, event?: string, timeoutMs = 20_000): Promise<ReceivedWebhook[]> {
  return eventually(
    `${count} ${event ?? 'request'}(s) on ${path}`,
    async () => received(path, event).length >= count && received(path, event),
    timeoutMs,
  );
}

async function dealIn(ws: Workspace) {
  const pipeline = await seedPipeline(api, ws.id, { name: 'Sales', stages: ['New', 'Won'] });
  const contact = await seedContact(api, ws.id, { phone: phone(), name: 'Ana Lima' });
  const res = await api.request('POST', '/api/v1/deals', {
    key: ws.key,
    body: { contactId: contact.id, pipeline: pipeline.id, name: 'Big deal', value: 1500.5 },
  });
  expect(res.status).toBe(201);
  return { pipeline, contact, deal: res.body.data };
}

describe('subscriptions API', () => {
  it('creates a subscription and shows its whsec_ secret only once', async () => {
    const ws = await workspace();
    const res = await api.request('POST', '/api/v1/webhooks', {
      key: ws.key,
      body: { url: `${receiver.url}/ok/create`, events: ['card.won', 'lead.created', 'card.won'] },
    });
    expect(res.status).toBe(201);
    const created = res.body.data;
    expect(created).toEqual({
      id: expect.any(String),
      url: `${receiver.url}/ok/create`,
      events: ['lead.created', 'card.won'],
      active: true,
      disabledReason: null,
      createdAt: expect.any(String),
      updatedAt: expect.any(String),
      secret: expect.stringMatching(/^whsec_[A-Za-z0-9_-]{43}$/),
    });
    const got = await api.request('GET', `/api/v1/webhooks/${created.id}`, { key: ws.key });
    expect(got.status).toBe(200);
    expect(got.body.data).not.toHaveProperty('secret');
    const { secret, ...rest } = created;
    expect(got.body.data).toEqual(rest);
    const list = await api.request('GET', '/api/v1/webhooks', { key: ws.key });
    expect(list.body).toEqual({ data: [rest], pagination: { total: 1, limit: 25, offset: 0, hasMore: false } });
    expect(list.text).not.toContain(secret);
    expect(api.logs.join('\n')).not.toContain(secret);
  });

  it('updates url, events and active, and deletes', async () => {
    const ws = await workspace();
    const sub = await subscribe(ws, '/ok/update', ['card.won']);
    const patched = await api.request('PATCH', `/api/v1/webhooks/${sub.id}`, {
      key: ws.key,
      body: { url: `${receiver.url}/ok/updated`, events: ['*'], active: false },
    });
    expect(patched.status).toBe(200);
    expect(patched.body.data).toMatchObject({
      url: `${receiver.url}/ok/updated`,
      events: ['*'],
      active: false,
      disabledReason: 'Disabled through the API',
    });
    const enabled = await api.request('PATCH', `/api/v1/webhooks/${sub.id}`, { key: ws.key, body: { active: true } });
    expect(enabled.body.data).toMatchObject({ active: true, disabledReason: null });
    expectError(await api.request('PATCH', `/api/v1/webhooks/${sub.id}`, { key: ws.key, body: {} }), 400, 'VALIDATION');
    const deleted = await api.request('DELETE', `/api/v1/webhooks/${sub.id}`, { key: ws.key });
    expect(deleted.body).toEqual({ data: { id: sub.id, deleted: true } });
    expectError(await api.request('GET', `/api/v1/webhooks/${sub.id}`, { key: ws.key }), 404, 'NOT_FOUND');
    expectError(await api.request('DELETE', `/api/v1/webhooks/${sub.id}`, { key: ws.key }), 404, 'NOT_FOUND');
  });

  it('validates events and URLs with stable codes', async () => {
    const ws = await workspace();
    const post = (body: unknown) => api.request('POST', '/api/v1/webhooks', { key: ws.key, body });
    const url = `${receiver.url}/ok/v`;
    const noEvents = await post({ url, events: [] });
    expectError(noEvents, 400, 'VALIDATION');
    expect(noEvents.body.error).toMatch(/body\.events/);
    const unknown = await post({ url, events: ['card.exploded'] });
    expectError(unknown, 400, 'VALIDATION');
    expect(unknown.body.error).toMatch(/body\.events\.0/);
    expectError(await post({ url, events: ['test.ping'] }), 400, 'VALIDATION');
    expectError(await post({ url, events: ['*', 'card.won'] }), 400, 'VALIDATION');
    expectError(await post({ events: ['*'] }), 400, 'VALIDATION');
    expectError(await post({ url: 'ftp://example.com/hook', events: ['*'] }), 400, 'INVALID_URL');
    expectError(await post({ url: 'https://user:pass@example.com/hook', events: ['*'] }), 400, 'INVALID_URL');
    expectError(await post({ url: `https://example.com/${'a'.repeat(2048)}`, events: ['*'] }), 400, 'VALIDATION');
    expect((await api.request('GET', '/api/v1/webhooks', { key: ws.key })).body.pagination.total).toBe(0);
  });

  it('refuses private and local subscriber URLs when private addresses are not allowed', async () => {
    const strict = await startApi({ config: { allowPrivateUrls: false } });
    try {
      const ws = await createWorkspace(strict, { scopes: ['webhooks:write', 'webhooks:read'] });
      for (const url of [
        `${receiver.url}/ok/strict`,
        'https://127.0.0.1/hook',
        'https://localhost/hook',
        'https://10.1.2.3/hook',
        'https://169.254.169.254/latest/meta-data',
        'https://[::1]/hook',
        'https://[::ffff:127.0.0.1]/hook',
        'https://2130706433/hook',
        'https://0x7f.0.0.1/hook',
        'https://hooks.internal/hook',
        'http://93.184.216.34/hook',
      ]) {
        const res = await strict.request('POST', '/api/v1/webhooks', { key: ws.key, body: { url, events: ['*'] } });
        expect({ url, status: res.status, code: res.body.code }).toEqual({ url, status: 400, code: 'INVALID_URL' });
      }
      const ok = await strict.request('POST', '/api/v1/webhooks', {
        key: ws.key,
        body: { url: 'https://93.184.216.34/hook', events: ['*'] },
      });
      expect(ok.status).toBe(201);
      const moved = await strict.request('PATCH', `/api/v1/webhooks/${ok.body.data.id}`, {
        key: ws.key,
        body: { url: 'https://192.168.0.10/hook' },
      });
      expectError(moved, 400, 'INVALID_URL');
    } finally {
      await strict.close();
    }
  });

  it("enforces the plan's subscription quota with 402 WEBHOOK_LIMIT_REACHED, also under concurrency", async () => {
    const ws = await workspace({ webhookQuota: 2 });
    const results = await Promise.all(
      Array.from({ length: 6 }, (_, i) =>
        api.request('POST', '/api/v1/webhooks', { key: ws.key, body: { url: `${receiver.url}/ok/quota-${i}`, events: ['*'] } }),
      ),
    );
    expect(results.filter((r) => r.status === 201)).toHaveLength(2);
    for (const r of results.filter((r) => r.status !== 201)) expectError(r, 402, 'WEBHOOK_LIMIT_REACHED');
    const [first] = results.filter((r) => r.status === 201);
    await api.request('DELETE', `/api/v1/webhooks/${first.body.data.id}`, { key: ws.key });
    expect(
      (await api.request('POST', '/api/v1/webhooks', { key: ws.key, body: { url: `${receiver.url}/ok/quota-again`, events: ['*'] } }))
        .status,
    ).toBe(201);
  });

  it('requires webhooks:read to read and webhooks:write to change', async () => {
    const ws = await workspace();
    const reader = await createWorkspace(api, { scopes: ['webhooks:read'] });
    expectError(
      await api.request('POST', '/api/v1/webhooks', { key: reader.key, body: { url: `${receiver.url}/ok/x`, events: ['*'] } }),
      403,
      'INSUFFICIENT_SCOPE',
    );
    const writerOnly = await createWorkspace(api, { scopes: ['webhooks:write'] });
    expectError(await api.request('GET', '/api/v1/webhooks', { key: writerOnly.key }), 403, 'INSUFFICIENT_SCOPE');
    expect((await api.request('GET', '/api/v1/webhooks', { key: ws.key })).status).toBe(200);
  });
});

describe('delivery of every event type', () => {
  it('posts each event with the documented fields at the root, the headers, and a verifiable signature', async () => {
    const ws = await workspace();
    const path = `/ok/${unique('all')}`;
    const sub = await subscribe(ws, path);
    const key = ws.key;

    const lead = await api.request('POST', '/api/v1/leads', {
      key,
      body: { name: 'Lead One', phone: '+55 (41) 99876-1234', email: 'lead@example.com' },
    });
    expect(lead.status).toBe(201);
    const contact = await seedContact(api, ws.id, { phone: phone(), name: 'Panel Person', email: null });
    const edit = await api.admin('PATCH', `/admin/v1/workspaces/${ws.id}/contacts/${contact.id}`, { name: 'Panel Person II' });
    expect(edit.status).toBe(200);
    const tag = await api.request('POST', '/api/v1/tags', { key, body: { name: 'vip' } });
    expect(
      (await api.request('POST', `/api/v1/leads/${lead.body.data.id}/tags`, { key, body: { tag: tag.body.data.id } })).status,
    ).toBeLessThan(300);
    expect((await api.request('DELETE', `/api/v1/leads/${lead.body.data.id}/tags/${tag.body.data.id}`, { key })).status).toBe(200);
    const pipeline = await seedPipeline(api, ws.id, { name: 'Sales', stages: ['New', 'Next'] });
    const won = await api.request('POST', '/api/v1/deals', {
      key,
      body: { contactId: contact.id, pipeline: pipeline.id, name: 'Win me', value: 1234.5 },
    });
    const lost = await api.request('POST', '/api/v1/deals', {
      key,
      body: { contactId: contact.id, pipeline: pipeline.id, name: 'Lose me' },
    });
    expect(
      (await api.request('PATCH', `/api/v1/deals/${won.body.data.id}`, { key, body: { stageId: pipeline.stages[1].id } })).status,
    ).toBe(200);
    expect((await api.request('PATCH', `/api/v1/deals/${won.body.data.id}`, { key, body: { status: 'won' } })).status).toBe(200);
    expect(
      (await api.request('PATCH', `/api/v1/deals/${lost.body.data.id}`, { key, body: { status: 'lost', lostReason: 'Too expensive' } }))
        .status,
    ).toBe(200);

    const expected: Record<string, string[]> = {
      'lead.created': ['contact_id', 'name', 'phone', 'email'],
      'contact.created': ['contact_id', 'name', 'phone', 'email'],
      'contact.updated': ['contact_id', 'contact_name', 'phone', 'email'],
      'contact.tag_added': ['contact_id', 'contact_name', 'phone', 'tag', 'source'],
      'contact.tag_removed': ['contact_id', 'contact_name', 'phone', 'tag', 'source'],
      'card.created': ['card_id', 'stage_id', 'pipeline_id', 'contact_id', 'name'],
      'card.moved': ['card_id', 'from_stage_id', 'to_stage_id', 'contact_id', 'name'],
      'card.won': ['card_id', 'stage_id', 'pipeline_id', 'contact_id', 'name', 'value', 'closed_at'],
      'card.lost': ['card_id', 'stage_id', 'pipeline_id', 'contact_id', 'name', 'lost_reason', 'closed_at'],
    };
    // contact.created, lead.created, contact.updated, tag added/removed, 2 card.created, moved, won, lost
    const all = await waitFor(path, 10);
    await settleOutbox(api, ws.id);
    expect(received(path)).toHaveLength(10);

    for (const request of all) {
      const event = request.headers['x-service-event'] as string;
      expect(Object.keys(expected)).toContain(event);
      expect(request.headers['content-type']).toBe('application/json');
      expect(request.headers['user-agent']).toBe('Service-Webhooks/1.0');
      expect(request.headers['x-service-delivery']).toMatch(/^[0-9a-f-]{36}$/);
      const signature = request.headers['x-service-signature'] as string;
      expect(signature).toMatch(/^t=\d+,v1=[0-9a-f]{64}$/);
      expect(verifyWebhookSignature(sub.secret, signature, request.raw)).toBe(true);
      // Exactly the documented fields, at the root, no envelope.
      expect(Object.keys(request.json).sort()).toEqual(['event', 'workspace_id', 'timestamp', ...expected[event]].sort());
      expect(Object.keys(request.json).slice(0, 3)).toEqual(['event', 'workspace_id', 'timestamp']);
      expect(request.json).toMatchObject({ event, workspace_id: ws.id });
      expect(new Date(request.json.timestamp).toISOString()).toBe(request.json.timestamp);
    }
    const one = (event: string) => all.find((r) => r.headers['x-service-event'] === event)!.json;
    expect(one('lead.created')).toMatchObject({
      contact_id: lead.body.data.id,
      name: 'Lead One',
      phone: '5541998761234',
      email: 'lead@example.com',
    });
    expect(one('contact.created')).toMatchObject({ contact_id: contact.id, name: 'Panel Person', email: null });
    expect(one('contact.updated')).toMatchObject({ contact_id: contact.id, contact_name: 'Panel Person II' });
    expect(one('contact.tag_added')).toMatchObject({ tag: { id: tag.body.data.id, name: 'vip' }, source: 'api' });
    expect(one('contact.tag_removed')).toMatchObject({ tag: { id: tag.body.data.id, name: 'vip' }, source: 'api' });
    expect(one('card.moved')).toMatchObject({
      card_id: won.body.data.id,
      from_stage_id: pipeline.stages[0].id,
      to_stage_id: pipeline.stages[1].id,
    });
    expect(one('card.won')).toMatchObject({
      card_id: won.body.data.id,
      value: 1234.5,
      stage_id: pipeline.stages[1].id,
      pipeline_id: pipeline.id,
    });
    expect(typeof one('card.won').closed_at).toBe('string');
    expect(one('card.lost')).toMatchObject({ card_id: lost.body.data.id, lost_reason: 'Too expensive' });

    // The body is what was signed: one changed byte and the signature no longer verifies.
    const wonRequest = all.find((r) => r.headers['x-service-event'] === 'card.won')!;
    expect(
      verifyWebhookSignature(sub.secret, wonRequest.headers['x-service-signature'] as string, wonRequest.raw.replace('1234.5', '9234.5')),
    ).toBe(false);
    expect(verifyWebhookSignature(`${sub.secret}x`, wonRequest.headers['x-service-signature'] as string, wonRequest.raw)).toBe(false);

    // The delivery log has each of them once, succeeded on the first attempt, with the header's id
    // (each attempt records its answer a moment after the receiver got the request).
    await settleOutbox(api, ws.id);
    const log = await deliveries(ws, sub.id);
    expect(log).toHaveLength(10);
    for (const d of log) expect(d).toMatchObject({ status: 'succeeded', attempts: 1, lastStatusCode: 200, lastError: null });
    for (const d of log) expect(d).not.toHaveProperty('payload'); // contact data needs more than webhooks:read
    expect(new Set(log.map((d) => d.id))).toEqual(new Set(all.map((r) => r.headers['x-service-delivery'])));
  });

  it('message.received carries the inbound message fields, without its content', async () => {
    const ws = await workspace();
    const path = `/ok/${unique('inbound')}`;
    const sub = await subscribe(ws, path, ['message.received']);
    const appSecret = 'inbound-app-secret';
    const phoneNumberId = `pn-${unique('wh')}`;
    const instance = await api.admin('POST', `/admin/v1/workspaces/${ws.id}/instances`, {
      name: 'Main',
      channel: 'whatsapp',
      provider: 'cloud',
      connected: true,
      config: { appSecret, phoneNumberId, accessToken: 't', baseUrl: process.env.EMULATOR_URL },
    });
    expect(instance.status).toBe(201);
    const from = '5541998760001';
    const wamid = `wamid.${unique('in')}`;
    const payload = {
      object: 'whatsapp_business_account',
      entry: [
        {
          id: '1',
          changes: [
            {
              field: 'messages',
              value: {
                messaging_product: 'whatsapp',
                metadata: { display_phone_number: '554130000000', phone_number_id: phoneNumberId },
                contacts: [{ profile: { name: 'Maria Souza' }, wa_id: from }],
                messages: [
                  {
                    from,
                    id: wamid,
                    timestamp: String(Math.floor(Date.now() / 1000)),
                    type: 'text',
                    text: { body: 'a secret message body' },
                  },
                ],
              },
            },
          ],
        },
      ],
    };
    const raw = JSON.stringify(payload);
    const signature = `sha256=${createHmac('sha256', appSecret).update(raw).digest('hex')}`;
    const inbound = await api.request('POST', `/webhooks/whatsapp/${instance.body.data.id}`, {
      rawBody: raw,
      headers: { 'content-type': 'application/json', 'x-hub-signature-256': signature },
    });
    expect(inbound.status).toBe(200);
    const [request] = await waitFor(path, 1, 'message.received');
    const message = await api.db('messages').where({ workspace_id: ws.id, provider_message_id: wamid }).first('id', 'conversation_id');
    const conversation = await api.db('conversations').where({ id: message.conversation_id }).first('contact_id');
    expect(request.json).toEqual({
      event: 'message.received',
      workspace_id: ws.id,
      timestamp: expect.any(String),
      contact_id: conversation.contact_id,
      contact_name: 'Maria Souza',
      phone: expect.stringMatching(/^554199876000?1$/),
      message_id: message.id,
      type: 'text',
      instance_id: instance.body.data.id,
      channel: 'whatsapp',
      conversation_id: message.conversation_id,
    });
    expect(request.raw).not.toContain('a secret message body');
    expect(verifyWebhookSignature(sub.secret, request.headers['x-service-signature'] as string, request.raw)).toBe(true);
  });

  it('delivers only the events a subscription names, and nothing for inactive subscriptions', async () => {
    const ws = await workspace();
    const wonPath = `/ok/${unique('only-won')}`;
    const offPath = `/ok/${unique('inactive')}`;
    await subscribe(ws, wonPath, ['card.won']);
    await subscribe(ws, offPath, ['*'], { active: false });
    const { deal } = await dealIn(ws);
    await api.request('PATCH', `/api/v1/deals/${deal.id}`, { key: ws.key, body: { status: 'won' } });
    await waitFor(wonPath, 1, 'card.won');
    await settleOutbox(api, ws.id);
    expect(received(wonPath).map((r) => r.headers['x-service-event'])).toEqual(['card.won']);
    expect(received(offPath)).toHaveLength(0);
  });
});

describe('retries, failures and the delivery log', () => {
  it('a receiver that fails twice then succeeds gets exactly three attempts with one delivery id', async () => {
    const ws = await workspace();
    const path = `/fail/2/${unique('flaky')}`;
    const sub = await subscribe(ws, path, ['card.created']);
    await dealIn(ws);
    const attempts = await waitFor(path, 3);
    await settleOutbox(api, ws.id);
    expect(received(path)).toHaveLength(3);
    expect(new Set(attempts.map((a) => a.headers['x-service-delivery'])).size).toBe(1);
    expect(new Set(attempts.map((a) => a.raw)).size).toBe(1); // the same body every time
    for (const a of attempts) expect(verifyWebhookSignature(sub.secret, a.headers['x-service-signature'] as string, a.raw)).toBe(true);
    const [delivery] = await deliveries(ws, sub.id);
    expect(delivery).toMatchObject({
      id: attempts[0].headers['x-service-delivery'],
      status: 'succeeded',
      attempts: 3,
      lastStatusCode: 200,
      lastError: null,
    });
  });

  it('410 Gone disables the subscription and fails the delivery; later events are not sent', async () => {
    const ws = await workspace();
    const path = `/status/410/${unique('gone')}`;
    const sub = await subscribe(ws, path, ['card.created', 'card.won']);
    const { deal } = await dealIn(ws);
    await waitFor(path, 1);
    await settleOutbox(api, ws.id);
    const got = await api.request('GET', `/api/v1/webhooks/${sub.id}`, { key: ws.key });
    expect(got.body.data).toMatchObject({ active: false, disabledReason: expect.stringMatching(/410 Gone/) });
    const [delivery] = await deliveries(ws, sub.id);
    expect(delivery).toMatchObject({ status: 'failed', attempts: 1, lastStatusCode: 410, lastError: expect.stringMatching(/410 Gone/) });
    await api.request('PATCH', `/api/v1/deals/${deal.id}`, { key: ws.key, body: { status: 'won' } });
    await settleOutbox(api, ws.id);
    expect(received(path)).toHaveLength(1);
    expect(await deliveries(ws, sub.id)).toHaveLength(1);
  });

  it('a redirect is a failed attempt and is not followed', async () => {
    const ws = await workspace();
    const name = unique('redirect');
    const path = `/redirect/${name}`;
    const sub = await subscribe(ws, path, ['card.created']);
    await dealIn(ws);
    await waitFor(path, 2); // the first attempt and a retry: the redirect did not count as success
    const log = await eventually('the redirect attempt to be recorded', async () => {
      const [d] = await deliveries(ws, sub.id);
      return d && d.attempts >= 1 && d;
    });
    expect(log).toMatchObject({ status: 'pending', lastStatusCode: 302, lastError: expect.stringMatching(/redirect/) });
    expect(receiver.received.filter((r) => r.path.includes(`/ok/redirected/redirect/${name}`))).toHaveLength(0);
    await api.request('DELETE', `/api/v1/webhooks/${sub.id}`, { key: ws.key }); // stops the retries
  });

  it(`after the last of ${WEBHOOK_MAX_ATTEMPTS} attempts the delivery is failed (whole schedule, scaled down)`, async () => {
    const ws = await workspace();
    const path = `/status/503/${unique('exhaust')}`;
    const sub = await subscribe(ws, path, ['card.lost']);
    const [delivery] = await api
      .db('webhook_deliveries')
      .insert({
        workspace_id: ws.id,
        subscription_id: sub.id,
        event: 'card.lost',
        payload: { event: 'card.lost', workspace_id: ws.id, timestamp: new Date().toISOString(), card_id: 'x' },
      })
      .returning('id');
    // The schedule itself is the workflow's: 272,105 s of waits × 1e-5 ≈ 2.7 s.
    const input: DeliveryInput = { workspaceId: ws.id, deliveryId: delivery.id, retryScale: 0.00001 };
    const result: DeliveryResult = await temporal.workflow.execute('webhookDeliveryWorkflow', {
      workflowId: `test-exhaust/${delivery.id}`,
      taskQueue: api.config.taskQueue,
      args: [input],
    });
    expect(result).toMatchObject({ status: 'failed', statusCode: 503, attempts: WEBHOOK_MAX_ATTEMPTS });
    expect(received(path)).toHaveLength(WEBHOOK_MAX_ATTEMPTS);
    const [logged] = await deliveries(ws, sub.id);
    expect(logged).toMatchObject({
      status: 'failed',
      attempts: WEBHOOK_MAX_ATTEMPTS,
      lastStatusCode: 503,
      lastError: expect.stringMatching(/HTTP 503/),
    });
    const row = await api.db('webhook_deliveries').where({ id: delivery.id }).first('next_attempt_at');
    expect(row.next_attempt_at).toBeNull();
    // The attempts were spread over the (scaled) schedule, not fired back to back. Each gap is at
    // least its wait minus the 20% jitter; Temporal timers add up to about a second each on top.
    const times = received(path).map((r) => r.at);
    const scheduled = WEBHOOK_RETRY_SCHEDULE_SECONDS.reduce((sum, s) => sum + s * 1000 * 0.00001, 0);
    expect(times[times.length - 1] - times[0]).toBeGreaterThanOrEqual(scheduled * 0.8);
  });

  it('50 concurrent identical PATCH status: won produce exactly one card.won delivery per subscription', async () => {
    const ws = await workspace();
    const one = `/ok/${unique('won-a')}`;
    const two = `/ok/${unique('won-b')}`;
    await subscribe(ws, one, ['card.won']);
    await subscribe(ws, two, ['*']);
    const { deal } = await dealIn(ws);
    const results = await Promise.all(
      Array.from({ length: 50 }, () => api.request('PATCH', `/api/v1/deals/${deal.id}`, { key: ws.key, body: { status: 'won' } })),
    );
    for (const r of results) expect(r.status).toBe(200);
    // One card.won event, hence one delivery per subscription, each posted once.
    expect(await outboxCount(api, ws.id, 'card.won')).toBe(1);
    const toOne = await deliveredOnce(api, temporal, receiver, ws.id, one);
    const toTwo = await deliveredOnce(api, temporal, receiver, ws.id, two);
    expect(toOne.requests.map((r) => r.json.event)).toEqual(['card.won']);
    expect(received(two, 'card.won')).toHaveLength(1);
    expect(toTwo.deliveries.filter((d) => d.event === 'card.won').map((d) => d.event_id)).toEqual(toOne.deliveries.map((d) => d.event_id));
    expect(received(one, 'card.won')[0].json.value).toBe(1500.5);
  });
});

describe('throughput', () => {
  it('carries a burst to a receiver that answers at once on first attempts, not a workflow per delivery', async () => {
    // A smaller burst first, in another workspace, so the dispatcher's first-attempt path runs warm
    // (a worker that has just started, as when this test runs alone, misses the 250 ms wait more).
    const warm = await workspace();
    const warmPath = `/ok/${unique('warm')}`;
    await subscribe(warm, warmPath, ['lead.created']);
    const warmBurst = await api.request('POST', '/api/v1/leads/batch', {
      key: warm.key,
      body: { leads: Array.from({ length: 30 }, (_, i) => ({ phone: phone(), name: `Warm ${i}` })) },
    });
    expect(warmBurst.status).toBe(200);
    expect((await deliveredOnce(api, temporal, receiver, warm.id, warmPath)).deliveries).toHaveLength(30);

    const ws = await workspace();
    const path = `/ok/${unique('burst')}`;
    await subscribe(ws, path, ['lead.created']);
    // 100 events at once: more than the workspace's 16 first-attempt slots in one dispatcher pass.
    const res = await api.request('POST', '/api/v1/leads/batch', {
      key: ws.key,
      body: { leads: Array.from({ length: 100 }, (_, i) => ({ phone: phone(), name: `Burst ${i}` })) },
    });
    expect(res.status).toBe(200);
    const { deliveries } = await deliveredOnce(api, temporal, receiver, ws.id, path);
    expect(deliveries).toHaveLength(100);
    // A delivery whose first attempt found no free slot within FIRST_ATTEMPT_WAIT_MS went to a
    // workflow (as every one beyond the 16 slots did before the lane waited for them: about 70%).
    const withWorkflow = await Promise.all(
      deliveries.map((d) =>
        temporal.workflow
          .getHandle(deliveryWorkflowId(ws.id, d.subscription_id, d.event_id))
          .describe()
          .then(
            () => true,
            (err: unknown) => {
              if (err instanceof WorkflowNotFoundError) return false;
              throw err;
            },
          ),
      ),
    );
    expect(withWorkflow.filter(Boolean).length).toBeLessThanOrEqual(10);
  });
});

describe('the outbox dispatcher recovers from a crash', () => {
  async function insertEvent(ws: Workspace, name: string, lease: string | null) {
    const [row] = await api
      .db('outbox_events')
      .insert({
        workspace_id: ws.id,
        kind: 'webhook',
        name,
        payload: {
          event: name,
          workspace_id: ws.id,
          timestamp: new Date().toISOString(),
          card_id: 'c',
          stage_id: 's',
          pipeline_id: 'p',
          contact_id: 'k',
          name: 'n',
        },
        claimed_until: lease === null ? null : api.db.raw(`now() + interval '${lease}'`),
      })
      .returning('id');
    return row.id as string;
  }

  it('a row leased by a dispatcher that died is delivered once its lease expires', async () => {
    const ws = await workspace();
    const path = `/ok/${unique('lease')}`;
    await subscribe(ws, path, ['card.created']);
    const started = Date.now();
    const eventId = await insertEvent(ws, 'card.created', '2 seconds');
    const [request] = await waitFor(path, 1);
    expect(request.at - started).toBeGreaterThanOrEqual(1500);
    expect(request.json.card_id).toBe('c');
    await settleOutbox(api, ws.id);
    expect(received(path)).toHaveLength(1);
    expect((await api.db('outbox_events').where({ id: eventId }).first('dispatched_at')).dispatched_at).not.toBeNull();
  });

  it('a dispatcher that died after creating the deliveries but before starting their workflows loses nothing', async () => {
    const ws = await workspace();
    const path = `/ok/${unique('half')}`;
    const sub = await subscribe(ws, path, ['card.created']);
    const eventId = await insertEvent(ws, 'card.created', '1 second');
    const [pre] = await api
      .db('webhook_deliveries')
      .insert({
        workspace_id: ws.id,
        subscription_id: sub.id,
        event_id: eventId,
        event: 'card.created',
        payload: { event: 'card.created', workspace_id: ws.id, timestamp: new Date().toISOString(), card_id: 'c' },
      })
      .returning('id');
    const [request] = await waitFor(path, 1);
    expect(request.headers['x-service-delivery']).toBe(pre.id);
    await settleOutbox(api, ws.id);
    expect(received(path)).toHaveLength(1);
    expect(await deliveries(ws, sub.id)).toHaveLength(1);
  });

  it('a dispatcher that died after starting the workflows but before marking the rows does not deliver twice', async () => {
    const ws = await workspace();
    const path = `/ok/${unique('redispatch')}`;
    await subscribe(ws, path, ['card.created']);
    await dealIn(ws);
    const before = await deliveredOnce(api, temporal, receiver, ws.id, path);
    expect(before.deliveries).toHaveLength(1);
    // Undo the mark, as if the crash came right before it: the next pass takes the row again.
    const reset = await api
      .db('outbox_events')
      .where({ workspace_id: ws.id, name: 'card.created' })
      .update({ dispatched_at: null, claimed_until: null });
    expect(reset).toBe(1);
    // Taken again and marked: the pass found the delivery it had made (same id, still one attempt)
    // and posted nothing, since a settled delivery is never attempted again.
    const after = await deliveredOnce(api, temporal, receiver, ws.id, path);
    expect(after.deliveries).toEqual(before.deliveries);
    expect(after.requests).toHaveLength(1);
  });
});

/** The input a delivery's workflow was started with (from its history, stored encrypted: read through the codec). */
async function workflowInput(workspaceId: string, subscriptionId: string, eventId: string): Promise<DeliveryInput> {
  const history = await temporal.workflow.getHandle(deliveryWorkflowId(workspaceId, subscriptionId, eventId)).fetchHistory();
  const stored = history.events![0].workflowExecutionStartedEventAttributes!.input!.payloads![0];
  const [payload] = await new EncryptionCodec(api.config.encryptionKeys!).decode([stored as Payload]);
  return JSON.parse(Buffer.from(payload.data!).toString('utf8'));
}

describe('first attempts without a workflow', () => {
  it('delivers a first attempt that succeeds without starting a workflow for it', async () => {
    const ws = await workspace();
    const path = `/ok/${unique('fast')}`;
    const sub = await subscribe(ws, path, ['card.created']);
    await dealIn(ws);
    const [request] = await waitFor(path, 1);
    await settleOutbox(api, ws.id);
    const [delivery] = await deliveries(ws, sub.id);
    expect(delivery).toMatchObject({ id: request.headers['x-service-delivery'], status: 'succeeded', attempts: 1, lastStatusCode: 200 });
    const row = await api.db('webhook_deliveries').where({ id: delivery.id }).first('event_id');
    await expect(temporal.workflow.getHandle(deliveryWorkflowId(ws.id, sub.id, row.event_id)).describe()).rejects.toBeInstanceOf(
      WorkflowNotFoundError,
    );
  });

  it('hands a failed first attempt to a workflow that keeps the schedule from there', async () => {
    const ws = await workspace();
    const path = `/fail/2/${unique('handover')}`;
    const sub = await subscribe(ws, path, ['card.created']);
    await dealIn(ws);
    await waitFor(path, 3);
    const [first] = await eventually('the delivery succeeded', async () => {
      const list = await deliveries(ws, sub.id);
      return list.length === 1 && list[0].status === 'succeeded' && list;
    });
    expect(first.attempts).toBe(3);
    const row = await api.db('webhook_deliveries').where({ id: first.id }).first('event_id');
    // The attempt records `succeeded` a moment before its workflow completes: wait for the workflow itself.
    const handle = temporal.workflow.getHandle(deliveryWorkflowId(ws.id, sub.id, row.event_id));
    await handle.result();
    expect((await handle.describe()).status.name).toBe('COMPLETED');
    expect(received(path).map((r) => r.headers['x-service-delivery'])).toEqual([first.id, first.id, first.id]);
    expect(await workflowInput(ws.id, sub.id, row.event_id)).toMatchObject({ attemptsDone: 1, firstWaitMs: expect.any(Number) });
  });

  it('sends the new events of a subscription whose deliveries are being retried straight to workflows', async () => {
    const ws = await workspace();
    const path = `/status/500/${unique('retrying')}`;
    const sub = await subscribe(ws, path, ['card.created']);
    await dealIn(ws);
    await waitFor(path, 2); // the first attempt failed and the workflow's retries are under way
    await api.db('outbox_events').insert({
      workspace_id: ws.id,
      kind: 'webhook',
      name: 'card.created',
      payload: {
        event: 'card.created',
        workspace_id: ws.id,
        timestamp: new Date().toISOString(),
        card_id: 'c2',
        stage_id: 's',
        pipeline_id: 'p',
        contact_id: 'k',
        name: 'n',
      },
    });
    const rows = await eventually('both deliveries', async () => {
      const list = await api.db('webhook_deliveries').where({ subscription_id: sub.id }).orderBy('created_at').select('event_id');
      return list.length === 2 && list;
    });
    const second = await eventually('the second workflow', () => workflowInput(ws.id, sub.id, rows[1].event_id).catch(() => undefined));
    expect(second.attemptsDone).toBeUndefined();
    expect(await workflowInput(ws.id, sub.id, rows[0].event_id)).toMatchObject({ attemptsDone: 1 });
  });

  it('sweeps a delivery whose first attempt died with its worker: a workflow delivers it', async () => {
    const ws = await workspace();
    const path = `/ok/${unique('orphan')}`;
    const sub = await subscribe(ws, path, ['card.created']);
    // What a worker killed during a first attempt leaves: the event dispatched, its delivery pending, no workflow.
    const payload = {
      event: 'card.created',
      workspace_id: ws.id,
      timestamp: new Date().toISOString(),
      card_id: 'c',
      stage_id: 's',
      pipeline_id: 'p',
      contact_id: 'k',
      name: 'n',
    };
    const [event] = await api
      .db('outbox_events')
      .insert({ workspace_id: ws.id, kind: 'webhook', name: 'card.created', payload, dispatched_at: api.db.fn.now() })
      .returning('id');
    const [orphan] = await api
      .db('webhook_deliveries')
      .insert({
        workspace_id: ws.id,
        subscription_id: sub.id,
        event_id: event.id,
        event: 'card.created',
        payload,
        created_at: api.db.raw(`now() - interval '5 minutes'`),
      })
      .returning('id');
    const [request] = await waitFor(path, 1);
    expect(request.headers['x-service-delivery']).toBe(orphan.id);
    const [delivery] = await eventually('the orphan delivered', async () => {
      const list = await deliveries(ws, sub.id);
      return list[0]?.status === 'succeeded' && list;
    });
    expect(delivery.attempts).toBe(1);
  });
});

describe('a row the dispatcher cannot hand over', () => {
  it('is set aside with its error and retried later, while the rows after it (other tenants) are delivered', async () => {
    // The poison: a contact_updated trigger whose payload is JSON null (the trigger matcher reads
    // its fields), in a workspace with an automation listening for it; the same batch holds a
    // healthy event of another workspace, recorded after it.
    const poisoned = await workspace();
    const flow = await api.request('POST', '/api/v1/automations', {
      key: poisoned.key,
      body: { name: 'On update', trigger: { type: 'contact_updated' }, actions: [{ type: 'add_tag', tag: 'x' }] },
    });
    expect(flow.status).toBe(201);
    const healthy = await workspace();
    const path = `/ok/${unique('behind-poison')}`;
    await subscribe(healthy, path, ['card.created']);
    // One statement: both rows commit together, so one dispatcher pass takes them in one batch.
    const [poison] = await api
      .db('outbox_events')
      .insert([
        { workspace_id: poisoned.id, kind: 'trigger', name: 'contact_updated', payload: api.db.raw(`'null'::jsonb`) },
        {
          workspace_id: healthy.id,
          kind: 'webhook',
          name: 'card.created',
          payload: JSON.stringify({
            event: 'card.created',
            workspace_id: healthy.id,
            timestamp: new Date().toISOString(),
            card_id: 'c',
            stage_id: 's',
            pipeline_id: 'p',
            contact_id: 'k',
            name: 'n',
          }),
        },
      ])
      .returning('id');
    try {
      const [request] = await waitFor(path, 1);
      expect(request.json.card_id).toBe('c');
      const row = await eventually('the poison set aside', async () => {
        const r = await api
          .db('outbox_events')
          .where({ id: poison.id })
          .first('dispatched_at', 'dispatch_failures', 'last_dispatch_error', 'claimed_until');
        return r.dispatch_failures >= 1 ? r : undefined;
      });
      expect(row.dispatched_at).toBeNull();
      expect(row.last_dispatch_error).toMatch(/null/);
      // Retried later, not in a tight loop: its next try is in the future.
      expect(new Date(row.claimed_until).getTime()).toBeGreaterThan(Date.now() - 1000);
      expect(await api.db('automation_runs').where({ workspace_id: poisoned.id }).count({ n: '*' }).first()).toEqual({ n: 0 });
    } finally {
      await api.db('outbox_events').where({ id: poison.id }).delete();
    }
  });
});

describe('ping and manual retry', () => {
  it('ping sends a signed test.ping now, reports the outcome, and stays out of the delivery log', async () => {
    const ws = await workspace();
    const path = `/ok/${unique('ping')}`;
    const sub = await subscribe(ws, path, ['card.won']);
    const res = await api.request('POST', `/api/v1/webhooks/${sub.id}/ping`, { key: ws.key });
    expect(res.status).toBe(200);
    expect(res.body.data).toEqual({
      event: 'test.ping',
      deliveryId: expect.any(String),
      delivered: true,
      statusCode: 200,
      error: null,
      durationMs: expect.any(Number),
    });
    const [ping] = received(path);
    expect(ping.headers['x-service-event']).toBe('test.ping');
    expect(ping.headers['x-service-delivery']).toBe(res.body.data.deliveryId);
    expect(ping.json).toEqual({ event: 'test.ping', workspace_id: ws.id, timestamp: expect.any(String), webhook_id: sub.id });
    expect(verifyWebhookSignature(sub.secret, ping.headers['x-service-signature'] as string, ping.raw)).toBe(true);
    expect(await deliveries(ws, sub.id)).toHaveLength(0);

    const broken = await subscribe(ws, `/status/500/${unique('ping-fail')}`, ['card.won']);
    const failed = await api.request('POST', `/api/v1/webhooks/${broken.id}/ping`, { key: ws.key });
    expect(failed.body.data).toMatchObject({ delivered: false, statusCode: 500, error: expect.stringMatching(/HTTP 500/) });
  });

  it('retry re-sends a failed delivery with the same id and body; a running one is 409 IN_PROGRESS; a disabled one 409 WEBHOOK_DISABLED', async () => {
    const ws = await workspace();
    const gonePath = `/status/410/${unique('retry')}`;
    const sub = await subscribe(ws, gonePath, ['card.created']);
    await dealIn(ws);
    await waitFor(gonePath, 1);
    await settleOutbox(api, ws.id);
    const [failed] = await deliveries(ws, sub.id);
    expect(failed.status).toBe('failed');
    const retryPath = `/api/v1/webhooks/${sub.id}/deliveries/${failed.id}/retry`;
    expectError(await api.request('POST', retryPath, { key: ws.key }), 409, 'WEBHOOK_DISABLED');

    const okPath = `/ok/${unique('retry-ok')}`;
    await api.request('PATCH', `/api/v1/webhooks/${sub.id}`, { key: ws.key, body: { url: `${receiver.url}${okPath}`, active: true } });
    const retried = await api.request('POST', retryPath, { key: ws.key });
    expect(retried.status).toBe(200);
    expect(retried.body.data).toMatchObject({ id: failed.id, status: 'succeeded', attempts: 2, lastStatusCode: 200, lastError: null });
    const [again] = received(okPath);
    expect(again.headers['x-service-delivery']).toBe(failed.id);
    expect(again.raw).toBe(received(gonePath)[0].raw);

    // A delivery still on its schedule.
    const slowSub = await subscribe(ws, `/fail/1000/${unique('busy')}`, ['card.won']);
    const deal = (await api.request('GET', '/api/v1/deals', { key: ws.key })).body.data[0];
    await api.request('PATCH', `/api/v1/deals/${deal.id}`, { key: ws.key, body: { status: 'won' } });
    const pending = await eventually('a pending delivery', async () =>
      (await deliveries(ws, slowSub.id)).find((d) => d.status === 'pending' && d.attempts >= 1),
    );
    expectError(
      await api.request('POST', `/api/v1/webhooks/${slowSub.id}/deliveries/${pending.id}/retry`, { key: ws.key }),
      409,
      'IN_PROGRESS',
    );
    // A delivery the dispatcher recorded but whose schedule has not started yet: a retry must not take its place.
    const [waiting] = await api
      .db('webhook_deliveries')
      .insert({
        workspace_id: ws.id,
        subscription_id: slowSub.id,
        event: 'card.won',
        payload: { event: 'card.won', workspace_id: ws.id, timestamp: new Date().toISOString() },
      })
      .returning('id');
    expectError(
      await api.request('POST', `/api/v1/webhooks/${slowSub.id}/deliveries/${waiting.id}/retry`, { key: ws.key }),
      409,
      'IN_PROGRESS',
    );
    expectError(await api.request('POST', `/api/v1/webhooks/${sub.id}/deliveries/${pending.id}/retry`, { key: ws.key }), 404, 'NOT_FOUND');
    await api.request('DELETE', `/api/v1/webhooks/${slowSub.id}`, { key: ws.key });
  });
});

describe('verifyWebhookSignature', () => {
  const secret = 'whsec_test';
  const body = '{"event":"card.won","workspace_id":"w","timestamp":"2026-01-01T00:00:00.000Z"}';
  const sign = (t: number, raw = body, key = secret) => `t=${t},v1=${createHmac('sha256', key).update(`${t}.${raw}`).digest('hex')}`;
  const now = 1_800_000_000;

  it('accepts a fresh signature over the exact body', () => {
    expect(verifyWebhookSignature(secret, sign(now), body, 300, now)).toBe(true);
    expect(verifyWebhookSignature(secret, sign(now), Buffer.from(body), 300, now)).toBe(true);
    expect(verifyWebhookSignature(secret, `${sign(now)},v1=${'0'.repeat(64)}`, body, 300, now)).toBe(true);
  });

  it('refuses a changed body, another secret, a stale or future timestamp, and malformed headers', () => {
    expect(verifyWebhookSignature(secret, sign(now), body.replace('won', 'lost'), 300, now)).toBe(false);
    expect(verifyWebhookSignature(secret, sign(now, body, 'whsec_other'), body, 300, now)).toBe(false);
    expect(verifyWebhookSignature(secret, sign(now - 301), body, 300, now)).toBe(false);
    expect(verifyWebhookSignature(secret, sign(now + 301), body, 300, now)).toBe(false);
    expect(verifyWebhookSignature(secret, sign(now - 3000), body, 3600, now)).toBe(true);
    for (const header of [
      undefined,
      null,
      '',
      'v1=abc',
      `t=${now}`,
      `t=abc,v1=${'a'.repeat(64)}`,
      `t=${now},v1=${'a'.repeat(63)}`,
      `t=${now},v0=${sign(now).split('v1=')[1]}`,
    ]) {
      expect(verifyWebhookSignature(secret, header, body, 300, now)).toBe(false);
    }
    expect(verifyWebhookSignature('', sign(now, body, ''), body, 300, now)).toBe(false);
  });
});
