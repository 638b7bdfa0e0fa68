/**
 * POST /api/v1/messages and POST /api/v1/conversations/{id}/messages end to end: the real API,
 * the send workflow on the real Temporal dev server and worker, the provider emulator speaking
 * the Cloud API wire format. Cold sends are limited to 5/min per key, so tests spread
 * requests over keys of one workspace where they need more.
 */
import {
  ApiResponse,
  createKey,
  createWorkspace,
  eventually,
  expectError,
  outbox,
  startApi,
  TestApi,
  uniqueIp,
  Workspace,
} from './helpers';

const EMULATOR = process.env.EMULATOR_URL!;
let api: TestApi;
let seq = 0;
/** A distinct mobile per call (area 11: the emulator's wa_id keeps the ninth digit there). */
const mobile = (): string => `55119${String(60000000 + ((process.pid * 7 + ++seq * 7919) % 39999999))}`;
const withoutNinth = (phone: string): string => phone.slice(0, 4) + phone.slice(5);

async function emulator(path: string, body?: unknown): Promise<any> {
  const res = await fetch(
    `${EMULATOR}${path}`,
    body === undefined ? {} : { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) },
  );
  return res.json();
}
const callsTo = async (to: string) => (await emulator(`/__emulator/calls?to=${to}`)).calls as any[];

interface Setup {
  ws: Workspace;
  instanceId: string;
  keys: string[];
}

/** A workspace with one connected Cloud API instance pointing at the emulator, an approved template and spare keys. */
async function setup(options: { plan?: Record<string, unknown>; keys?: number; provider?: 'cloud' | 'web' } = {}): Promise<Setup> {
  const ws = await createWorkspace(api, { scopes: ['conversations:send', 'conversations:read'], plan: options.plan });
  const instance = await api.admin('POST', `/admin/v1/workspaces/${ws.id}/instances`, {
    name: 'Main',
    channel: 'whatsapp',
    provider: options.provider ?? 'cloud',
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
  const keys = [ws.key];
  for (let i = 1; i < (options.keys ?? 1); i++)
    keys.push((await createKey(api, ws.id, ['conversations:send'], { rateLimitPerMinute: 1000 })).key);
  return { ws, instanceId: instance.body.data.id, keys };
}

const send = (key: string, body: Record<string, unknown>, headers: Record<string, string> = {}) =>
  api.request('POST', '/api/v1/messages', { key, body, headers: { 'x-forwarded-for': uniqueIp(), ...headers } });
const template = (phone: string, extra: Record<string, unknown> = {}) => ({
  phone,
  type: 'template',
  templateName: 'welcome',
  templateLanguage: 'pt_BR',
  templateVariables: ['Ana'],
  ...extra,
});

async function leftovers(workspaceId: string) {
  const [contacts, conversations, counters] = await Promise.all([
    api.db('contacts').where({ workspace_id: workspaceId }).count('* as n').first(),
    api.db('conversations').where({ workspace_id: workspaceId }).count('* as n').first(),
    api.db('daily_counters').where({ workspace_id: workspaceId }).sum('count as n').first(),
  ]);
  return { contacts: Number(contacts!.n), conversations: Number(conversations!.n), counted: Number(counters!.n ?? 0) };
}

beforeAll(async () => {
  api = await startApi();
});
afterAll(() => api.close());

describe('POST /api/v1/messages', () => {
  it('sends an approved template to a new number: 201 with the created flags, one provider call, status sent, contact.created', async () => {
    const s = await setup();
    const phone = mobile();
    const res = await send(s.ws.key, template(`+55 (${phone.slice(2, 4)}) ${phone.slice(4, 9)}-${phone.slice(9)}`));
    expect(res.status).toBe(201);
    // No key sent: the send got one, so a client that timed out can repeat and join it.
    const generated = res.headers.get('idempotency-key')!;
    expect(generated).toMatch(/^[0-9a-f-]{36}$/);
    const joined = await send(s.ws.key, template(phone), { 'Idempotency-Key': generated });
    expect({ status: joined.status, body: joined.body }).toEqual({ status: 200, body: res.body });
    expect(res.body.data).toEqual({
      id: expect.any(String),
      status: 'sent',
      type: 'template',
      conversationId: expect.any(String),
      contactId: expect.any(String),
      created: { contact: true, conversation: true },
    });
    const calls = await callsTo(phone);
    expect(calls).toHaveLength(1);
    expect(calls[0].body).toMatchObject({
      messaging_product: 'whatsapp',
      to: phone,
      type: 'template',
      template: {
        name: 'welcome',
        language: { code: 'pt_BR' },
        components: [{ type: 'body', parameters: [{ type: 'text', text: 'Ana' }] }],
      },
    });
    const message = await api.db('messages').where({ id: res.body.data.id }).first();
    expect(message).toMatchObject({ direction: 'out', status: 'sent', provider_message_id: calls[0].messageId });
    const created = (await outbox(api, s.ws.id, 'contact.created')).map((e) => e.payload);
    expect(created).toEqual([
      {
        event: 'contact.created',
        workspace_id: s.ws.id,
        timestamp: expect.any(String),
        contact_id: res.body.data.contactId,
        name: '',
        phone,
        email: null,
      },
    ]);

    // The same number without its ninth digit: the same contact and conversation, nothing created.
    const again = await send(s.ws.key, template(withoutNinth(phone)));
    expect(again.status).toBe(201);
    expect(again.body.data).toMatchObject({
      contactId: res.body.data.contactId,
      conversationId: res.body.data.conversationId,
      created: { contact: false, conversation: false },
    });
  });

  it('keeps a landline and the mobile ending in its 8 digits apart: the cold send to the mobile reaches the mobile, not the landline', async () => {
    const s = await setup({ keys: 2 });
    const last8 = String(30000000 + ((process.pid * 11 + ++seq * 7919) % 20000000));
    const landline = `5521${last8}`;
    const mobilePhone = `55219${last8}`;
    const lead = await api.request('POST', '/api/v1/leads', {
      key: (await createKey(api, s.ws.id, ['leads:write'])).key,
      body: { phone: landline, name: 'Office' },
    });
    expect(lead.status).toBe(201);
    const sent = await send(s.keys[0], template(mobilePhone));
    expect(sent.status).toBe(201);
    expect(sent.body.data.created).toEqual({ contact: true, conversation: true });
    expect(sent.body.data.contactId).not.toBe(lead.body.data.id);
    expect((await api.db('contacts').where({ id: sent.body.data.contactId }).first()).phone).toBe(mobilePhone);
    expect((await callsTo(mobilePhone)).map((c) => c.to)).toEqual([mobilePhone]);
    expect(await callsTo(landline)).toHaveLength(0);
    expect(await api.db('conversations').where({ contact_id: lead.body.data.id })).toHaveLength(0);
  });

  it("reconciles the number with the provider's wa_id (a mobile it knows without the ninth digit) and sends to it next time", async () => {
    const s = await setup({ keys: 2 });
    const phone = `55319${String(60000000 + ((process.pid * 13 + ++seq * 7919) % 30000000))}`;
    const first = await send(s.keys[0], template(phone));
    expect(first.status).toBe(201);
    const contact = await api.db('contacts').where({ id: first.body.data.contactId }).first();
    expect({ phone: contact.phone, wa_id: contact.wa_id }).toEqual({ phone, wa_id: withoutNinth(phone) });
    await send(s.keys[1], template(phone));
    expect((await callsTo(phone)).map((c) => c.to)).toEqual([phone, withoutNinth(phone)]);
  });

  it('refuses text to a number outside the 24-hour window (WINDOW_CLOSED) and leaves nothing behind; accepts it once the window is open', async () => {
    const s = await setup();
    const phone = mobile();
    expectError(await send(s.ws.key, { phone, text: 'hello' }), 422, 'WINDOW_CLOSED');
    expect(await leftovers(s.ws.id)).toEqual({ contacts: 0, conversations: 0, counted: 0 });
    expect(await callsTo(phone)).toHaveLength(0);

    const first = await send(s.ws.key, template(phone));
    await api.db('conversations').where({ id: first.body.data.conversationId }).update({ last_inbound_at: new Date() });
    const text = await send(s.ws.key, { phone, text: 'hello again' });
    expect(text.status).toBe(201);
    expect((await callsTo(phone)).at(-1).body).toMatchObject({ type: 'text', text: { body: 'hello again' } });
  });

  it("answers TEMPLATE_INVALID for an unknown template or a wrong variable count, and for the provider's 132000, compensating", async () => {
    const s = await setup({ keys: 2 });
    const phone = mobile();
    expectError(await send(s.keys[0], template(phone, { templateName: 'nope' })), 422, 'TEMPLATE_INVALID');
    expectError(await send(s.keys[0], template(phone, { templateVariables: ['a', 'b'] })), 422, 'TEMPLATE_INVALID');
    await emulator('/__emulator/script', { to: phone, behaviour: 'error', code: 132000, httpStatus: 400, times: 1 });
    expectError(await send(s.keys[0], template(phone)), 422, 'TEMPLATE_INVALID');
    // Created, then compensated: no contact, no conversation, quota and daily slot returned.
    expect(await leftovers(s.ws.id)).toEqual({ contacts: 0, conversations: 0, counted: 0 });
    // A provider refusal that retrying cannot fix: 502 SEND_FAILED, compensated too.
    await emulator('/__emulator/script', { to: phone, behaviour: 'error', code: 131026, httpStatus: 400, times: 1 });
    expectError(await send(s.keys[1], template(phone)), 502, 'SEND_FAILED');
    expect(await leftovers(s.ws.id)).toEqual({ contacts: 0, conversations: 0, counted: 0 });
  });

  it('retries a provider that is down for a moment and sends once it is back', async () => {
    const s = await setup();
    const phone = mobile();
    await emulator('/__emulator/script', { to: phone, behaviour: 'ok', down: true, times: 1 });
    const res = await send(s.ws.key, template(phone));
    expect(res.status).toBe(201);
    const calls = await callsTo(phone);
    expect(calls.map((c) => c.outcome)).toEqual(['down', 'ok']);
  }, 30_000);

  it('resolves the instance: NO_INSTANCE, INSTANCE_REQUIRED, INSTANCE_NOT_FOUND, INSTANCE_DISCONNECTED', async () => {
    const bare = await createWorkspace(api, { scopes: ['conversations:send'] });
    expectError(await send(bare.key, template(mobile())), 422, 'NO_INSTANCE');
    const s = await setup({ keys: 2 });
    expectError(
      await send(s.keys[0], template(mobile(), { instanceId: '00000000-0000-4000-8000-000000000000' })),
      404,
      'INSTANCE_NOT_FOUND',
    );
    expectError(await send(s.keys[0], template(mobile(), { instanceId: 'nope' })), 404, 'INSTANCE_NOT_FOUND');
    const other = await setup();
    expectError(await send(s.keys[0], template(mobile(), { instanceId: other.instanceId })), 404, 'INSTANCE_NOT_FOUND');
    const second = await api.admin('POST', `/admin/v1/workspaces/${s.ws.id}/instances`, {
      name: 'Second',
      channel: 'whatsapp',
      provider: 'cloud',
      connected: false,
      config: { baseUrl: EMULATOR, phoneNumberId: 'PN2', accessToken: 't' },
    });
    expectError(await send(s.keys[0], template(mobile())), 422, 'INSTANCE_REQUIRED');
    expectError(await send(s.keys[1], template(mobile(), { instanceId: second.body.data.id })), 422, 'INSTANCE_DISCONNECTED');
    expect(await leftovers(s.ws.id)).toEqual({ contacts: 0, conversations: 0, counted: 0 });
  });

  it('refuses a contact the integrator opted out (403 OPTED_OUT) until the opt-out is cleared', async () => {
    const s = await setup({ keys: 2 });
    const phone = mobile();
    const leads = (await createKey(api, s.ws.id, ['leads:write', 'leads:read'])).key;
    const created = await api.request('POST', '/api/v1/leads', { key: leads, body: { phone, name: 'Quiet', optedOut: true } });
    expect(created.status).toBe(201);
    expect(created.body.data.optedOut).toBe(true);
    expectError(await send(s.keys[0], template(phone)), 403, 'OPTED_OUT');
    expect(await callsTo(phone)).toHaveLength(0);
    expect(await leftovers(s.ws.id)).toMatchObject({ conversations: 0, counted: 0 });
    const cleared = await api.request('PATCH', `/api/v1/leads/${created.body.data.id}`, { key: leads, body: { optedOut: false } });
    expect(cleared.body.data.optedOut).toBe(false);
    expect((await api.request('GET', `/api/v1/leads/${created.body.data.id}`, { key: leads })).body.data.optedOut).toBe(false);
    expect((await send(s.keys[1], template(phone))).status).toBe(201);
  });

  it('stops a send whose provider call is retried after the contact opted out or the workspace was suspended: refused, compensated, never sent', async () => {
    const s = await setup({ keys: 2 });
    const leads = (await createKey(api, s.ws.id, ['leads:write'])).key;
    const quiet = mobile();
    // The provider is down for the first call, which answers slowly: the opt-out lands while it is in flight.
    await emulator('/__emulator/script', { to: quiet, behaviour: 'ok', down: true, times: 1, delayMs: 3000 });
    const pending = send(s.keys[0], template(quiet));
    await eventually('the first provider call', async () => (await callsTo(quiet)).length === 1);
    const contact = await api.db('contacts').where({ workspace_id: s.ws.id, phone: quiet }).first('id');
    expect((await api.request('PATCH', `/api/v1/leads/${contact.id}`, { key: leads, body: { optedOut: true } })).status).toBe(200);
    expectError(await pending, 403, 'OPTED_OUT');
    expect((await callsTo(quiet)).map((c) => c.outcome)).toEqual(['down']);
    expect(await leftovers(s.ws.id)).toMatchObject({ counted: 0 });

    const phone = mobile();
    await emulator('/__emulator/script', { to: phone, behaviour: 'ok', down: true, times: 1, delayMs: 3000 });
    const suspended = send(s.keys[1], template(phone));
    await eventually('the first provider call', async () => (await callsTo(phone)).length === 1);
    expect((await api.admin('PATCH', `/admin/v1/workspaces/${s.ws.id}`, { plan: { active: false } })).status).toBe(200);
    expectError(await suspended, 402, 'SUBSCRIPTION_INACTIVE');
    expect((await callsTo(phone)).map((c) => c.outcome)).toEqual(['down']);
    expect(await leftovers(s.ws.id)).toMatchObject({ counted: 0 });
  }, 60_000);

  it('enforces the daily cap of new numbers and the daily message quota, and returns them when a send fails', async () => {
    const s = await setup({ plan: { dailyMessageQuota: 2 }, keys: 2 });
    const day = new Intl.DateTimeFormat('en-CA', { timeZone: 'America/Sao_Paulo' }).format(new Date());
    await api.db('daily_counters').insert({ workspace_id: s.ws.id, day, kind: 'cold_conversations', count: 200 });
    expectError(await send(s.keys[0], template(mobile())), 429, 'COLD_LIMIT_REACHED');
    await api.db('daily_counters').where({ workspace_id: s.ws.id, kind: 'cold_conversations' }).update({ count: 0 });
    const phone = mobile();
    expect((await send(s.keys[0], template(phone))).status).toBe(201);
    expect((await send(s.keys[0], template(phone))).status).toBe(201);
    expectError(await send(s.keys[1], template(phone)), 429, 'MESSAGE_LIMIT_REACHED');
    const counters = await api.db('daily_counters').where({ workspace_id: s.ws.id }).select('kind', 'count');
    expect(Object.fromEntries(counters.map((c) => [c.kind, c.count]))).toEqual({ cold_conversations: 1, messages: 2 });
  });

  it('answers a reached daily cap with Retry-After: the whole seconds to the next midnight in São Paulo (cold send and conversation send)', async () => {
    const s = await setup({ plan: { dailyMessageQuota: 1 }, keys: 2 });
    // São Paulo keeps UTC-3 all year: its next midnight is the next 03:00 UTC.
    const untilMidnight = (at: number) => {
      const local = new Date(at - 3 * 3_600_000);
      return Math.max(
        1,
        Math.ceil((Date.UTC(local.getUTCFullYear(), local.getUTCMonth(), local.getUTCDate() + 1) + 3 * 3_600_000 - at) / 1000),
      );
    };
    const expectRetryAfter = async (request: () => Promise<ApiResponse>, code: string) => {
      const before = Date.now();
      const res = await request();
      const after = Date.now();
      expectError(res, 429, code);
      const seconds = Number(res.headers.get('retry-after'));
      expect(Number.isInteger(seconds)).toBe(true);
      expect(seconds).toBeGreaterThanOrEqual(untilMidnight(after));
      expect(seconds).toBeLessThanOrEqual(untilMidnight(before));
    };
    const day = new Intl.DateTimeFormat('en-CA', { timeZone: 'America/Sao_Paulo' }).format(new Date());
    await api.db('daily_counters').insert({ workspace_id: s.ws.id, day, kind: 'cold_conversations', count: 200 });
    await expectRetryAfter(() => send(s.keys[0], template(mobile())), 'COLD_LIMIT_REACHED');
    await api.db('daily_counters').where({ workspace_id: s.ws.id, kind: 'cold_conversations' }).update({ count: 0 });
    const first = await send(s.keys[0], template(mobile()));
    expect(first.status).toBe(201);
    const conversationId = first.body.data.conversationId;
    await api.db('conversations').where({ id: conversationId }).update({ last_inbound_at: new Date() });
    await expectRetryAfter(
      () => api.request('POST', `/api/v1/conversations/${conversationId}/messages`, { key: s.keys[1], body: { text: 'hi' } }),
      'MESSAGE_LIMIT_REACHED',
    );
  });

  it('validates the body: PHONE_REQUIRED, INVALID_PHONE, bounds naming the field, INVALID_URL', async () => {
    const s = await setup({ keys: 3 });
    const k = (i: number) => s.keys[Math.floor(i / 5)];
    const cases: [Record<string, unknown>, number, string, string?][] = [
      [{ text: 'x' }, 400, 'PHONE_REQUIRED'],
      [{ phone: '11987654321', text: 'x' }, 400, 'INVALID_PHONE'],
      [{ phone: mobile(), text: 'x'.repeat(4097) }, 400, 'VALIDATION', 'body.text'],
      [{ phone: mobile(), type: 'text' }, 400, 'VALIDATION', 'body.text'],
      [
        { phone: mobile(), type: 'image', mediaUrl: 'https://example.com/a.jpg', caption: 'c'.repeat(1025) },
        400,
        'VALIDATION',
        'body.caption',
      ],
      [
        { phone: mobile(), type: 'document', mediaUrl: 'https://example.com/a.pdf', fileName: 'f'.repeat(256) },
        400,
        'VALIDATION',
        'body.fileName',
      ],
      [template(mobile(), { templateLanguage: 'p' }), 400, 'VALIDATION', 'body.templateLanguage'],
      [template(mobile(), { templateVariables: Array(21).fill('v') }), 400, 'VALIDATION', 'body.templateVariables'],
      [{ phone: mobile(), type: 'image', mediaUrl: 'ftp://example.com/a.jpg' }, 400, 'INVALID_URL'],
      [{ phone: mobile(), type: 'image', mediaUrl: `https://example.com/${'a'.repeat(2040)}` }, 400, 'VALIDATION', 'body.mediaUrl'],
      [{ phone: '5'.repeat(33), text: 'x' }, 400, 'VALIDATION', 'body.phone'],
      [{ phone: mobile(), type: 'sticker', text: 'x' }, 400, 'VALIDATION', 'body.type'],
    ];
    for (const [i, [body, status, code, field]] of cases.entries()) {
      const res = await send(k(i), body);
      expectError(res, status, code);
      if (field) expect(res.body.error).toContain(field);
    }
  });

  it('refuses media above the per-type limit (MEDIA_TOO_LARGE) before anything is created', async () => {
    const s = await setup();
    const phone = mobile();
    const first = await send(s.ws.key, template(phone));
    await api.db('conversations').where({ id: first.body.data.conversationId }).update({ last_inbound_at: new Date() });
    const big = await send(s.ws.key, { phone, type: 'image', mediaUrl: `${EMULATOR}/__emulator/media/${6 * 1024 * 1024}/photo.jpg` });
    expectError(big, 422, 'MEDIA_TOO_LARGE');
    const ok = await send(s.ws.key, { phone, type: 'image', mediaUrl: `${EMULATOR}/__emulator/media/1024/photo.jpg`, caption: 'look' });
    expect(ok.status).toBe(201);
    expect((await callsTo(phone)).at(-1).body).toMatchObject({
      type: 'image',
      image: { link: `${EMULATOR}/__emulator/media/1024/photo.jpg`, caption: 'look' },
    });
  });

  it('limits cold sends to 5 per minute per key even when the key allows 1000 (COLD_SEND_RATE_LIMITED)', async () => {
    const s = await setup();
    const results = [];
    for (let i = 0; i < 6; i++) results.push(await send(s.ws.key, {}));
    expect(results.slice(0, 5).map((r) => r.status)).toEqual([400, 400, 400, 400, 400]);
    expectError(results[5], 429, 'COLD_SEND_RATE_LIMITED');
    expect(Number(results[5].headers.get('retry-after'))).toBeGreaterThan(0);
  });
});

describe('idempotency', () => {
  it('makes exactly one provider call for 20 concurrent requests with one key; the rest get 409 or the replay', async () => {
    // Cold sends are 5/min per API key: four keys carry the 20 requests, a fifth the replay.
    const s = await setup({ keys: 5 });
    const phone = mobile();
    await emulator('/__emulator/script', { to: phone, behaviour: 'ok', delayMs: 300, times: 1 });
    const results = await Promise.all(
      Array.from({ length: 20 }, (_, i) => send(s.keys[i % 4], template(phone), { 'Idempotency-Key': `order-${phone}` })),
    );
    expect(results.every((r) => [200, 201, 409].includes(r.status))).toBe(true);
    expect(results.filter((r) => r.status === 201)).toHaveLength(1);
    for (const r of results.filter((r) => r.status === 409)) expectError(r, 409, 'IN_PROGRESS');
    expect(await callsTo(phone)).toHaveLength(1);

    const winner = results.find((r) => r.status === 201)!;
    const replay = await send(s.keys[4], template(phone), { 'Idempotency-Key': `order-${phone}` });
    expect(replay.status).toBe(200);
    expect(replay.headers.get('idempotent-replayed')).toBe('true');
    expect(replay.body).toEqual(winner.body);
    expect(await callsTo(phone)).toHaveLength(1);
  });

  it('frees the key after a failed send so the same key can be retried', async () => {
    const s = await setup();
    const phone = mobile();
    expectError(
      await send(s.ws.key, template(phone, { templateVariables: [] }), { 'Idempotency-Key': 'retry-me' }),
      422,
      'TEMPLATE_INVALID',
    );
    const res = await send(s.ws.key, template(phone), { 'Idempotency-Key': 'retry-me' });
    expect(res.status).toBe(201);
    // Keys are scoped to the workspace: another workspace's identical key is its own send.
    const other = await setup();
    expect((await send(other.ws.key, template(mobile()), { 'Idempotency-Key': 'retry-me' })).status).toBe(201);
  });

  it('takes any printable key of 1 to 255 characters, spaces included, and refuses a longer one naming the header', async () => {
    const s = await setup({ keys: 2 });
    const phone = mobile();
    const key = `order 42 / Ana's #${seq} (retry: 1)`;
    const first = await send(s.keys[0], template(phone), { 'Idempotency-Key': key });
    expect(first.status).toBe(201);
    expect(first.headers.get('idempotency-key')).toBe(key);
    const again = await send(s.keys[1], template(phone), { 'Idempotency-Key': key });
    expect({ status: again.status, replayed: again.headers.get('idempotent-replayed'), body: again.body }).toEqual({
      status: 200,
      replayed: 'true',
      body: first.body,
    });
    expect(await callsTo(phone)).toHaveLength(1);
    const long = await send(s.keys[0], template(mobile()), { 'Idempotency-Key': `k ${'x'.repeat(254)}` });
    expectError(long, 400, 'VALIDATION');
    expect(JSON.stringify(long.body)).toContain('Idempotency-Key');
  });
  it('binds a key to its request: another body or the other send endpoint is 422 IDEMPOTENCY_KEY_REUSED, the same body replays', async () => {
    const s = await setup({ keys: 3 });
    const phone = mobile();
    const key = `bound-${phone}`;
    const first = await send(s.keys[0], template(phone), { 'Idempotency-Key': key });
    expect(first.status).toBe(201);
    expectError(
      await send(s.keys[1], template(phone, { templateVariables: ['Bruno'] }), { 'Idempotency-Key': key }),
      422,
      'IDEMPOTENCY_KEY_REUSED',
    );
    expectError(await send(s.keys[1], template(mobile()), { 'Idempotency-Key': key }), 422, 'IDEMPOTENCY_KEY_REUSED');
    const path = `/api/v1/conversations/${first.body.data.conversationId}/messages`;
    const other = await api.request('POST', path, {
      key: s.ws.key,
      body: { type: 'template', templateName: 'welcome', templateLanguage: 'pt_BR', templateVariables: ['Ana'] },
      headers: { 'Idempotency-Key': key },
    });
    expectError(other, 422, 'IDEMPOTENCY_KEY_REUSED');
    // The same request (fields in another order, phone in another form) is the same request.
    const written = `+55 (${phone.slice(2, 4)}) ${phone.slice(4, 9)}-${phone.slice(9)}`;
    const same = await send(
      s.keys[2],
      { templateVariables: ['Ana'], templateLanguage: 'pt_BR', templateName: 'welcome', type: 'template', phone: written },
      { 'Idempotency-Key': key },
    );
    expect({ status: same.status, body: same.body }).toEqual({ status: 200, body: first.body });
    expect(await callsTo(phone)).toHaveLength(1);
  });

  it('never sends twice under a stream of repeats with one key spanning the send and after it: one call, then replays', async () => {
    const s = await setup({ keys: 8 });
    const phone = mobile();
    await emulator('/__emulator/script', { to: phone, behaviour: 'ok', delayMs: 200, times: 1 });
    const requests: Promise<Awaited<ReturnType<typeof send>>>[] = [];
    for (let i = 0; i < 32; i++) {
      requests.push(send(s.keys[i % 8], template(phone), { 'Idempotency-Key': `stream-${phone}` }));
      await new Promise((r) => setTimeout(r, 25));
    }
    const results = await Promise.all(requests);
    expect(results.filter((r) => r.status === 201)).toHaveLength(1);
    expect(results.every((r) => r.status === 201 || r.status === 200 || (r.status === 409 && r.body.code === 'IN_PROGRESS'))).toBe(true);
    // Once the send answered, a repeat is its replay (on a slow machine the whole stream may fall inside the send).
    const after = await send(s.keys[0], template(phone), { 'Idempotency-Key': `stream-${phone}` });
    expect({ status: after.status, body: after.body }).toEqual({ status: 200, body: results.find((r) => r.status === 201)!.body });
    expect(await callsTo(phone)).toHaveLength(1);
  });
});

describe('answers a client can act on', () => {
  it('a provider that stays down: a prompt 502 SEND_FAILED (not a 30 s wait), compensated, and the key free for a retry', async () => {
    const s = await setup({ keys: 2 });
    const phone = mobile();
    await emulator('/__emulator/script', { to: phone, behaviour: 'ok', down: true });
    const started = Date.now();
    const res = await send(s.keys[0], template(phone), { 'Idempotency-Key': `down-${phone}` });
    expectError(res, 502, 'SEND_FAILED');
    expect(Date.now() - started).toBeLessThan(15_000);
    expect((await callsTo(phone)).length).toBeGreaterThan(1);
    expect(await leftovers(s.ws.id)).toEqual({ contacts: 0, conversations: 0, counted: 0 });
    await emulator('/__emulator/reset', { to: phone });
    expect((await send(s.keys[1], template(phone), { 'Idempotency-Key': `down-${phone}` })).status).toBe(201);
  }, 30_000);

  it('a send whose outcome is unknown (the web gateway did not answer in time): 409 SEND_OUTCOME_UNKNOWN, kept by its key, never sent twice', async () => {
    const s = await setup({ provider: 'web', keys: 2 });
    const phone = mobile();
    await emulator('/__emulator/script', { to: phone, behaviour: 'ok', delayMs: 11_000, times: 1 });
    const key = `unknown-${phone}`;
    const first = await send(s.keys[0], { phone, text: 'Oi' }, { 'Idempotency-Key': key });
    expectError(first, 409, 'SEND_OUTCOME_UNKNOWN');
    expect(first.body.hint).toMatch(/check the conversation/i);
    const again = await send(s.keys[1], { phone, text: 'Oi' }, { 'Idempotency-Key': key });
    expectError(again, 409, 'SEND_OUTCOME_UNKNOWN');
    await new Promise((r) => setTimeout(r, 1500));
    expect(await callsTo(phone)).toHaveLength(1);
    // The contact and conversation stay: the provider may have delivered the message.
    expect(await leftovers(s.ws.id)).toMatchObject({ contacts: 1, conversations: 1 });
  }, 40_000);

  it('refuses what an instance cannot carry before any provider call: a template through the web gateway, an Instagram instance', async () => {
    const web = await setup({ provider: 'web' });
    const phone = mobile();
    expectError(await send(web.ws.key, template(phone)), 422, 'TEMPLATE_UNSUPPORTED');
    expect(await leftovers(web.ws.id)).toEqual({ contacts: 0, conversations: 0, counted: 0 });
    const s = await setup({ keys: 2 });
    const instagram = await api.admin('POST', `/admin/v1/workspaces/${s.ws.id}/instances`, {
      name: 'IG',
      channel: 'instagram',
      provider: 'cloud',
      connected: true,
      config: { baseUrl: EMULATOR },
    });
    expect(instagram.status).toBe(201);
    expectError(await send(s.keys[0], template(phone, { instanceId: instagram.body.data.id })), 422, 'CHANNEL_UNSUPPORTED');
    // Without instanceId the workspace's one WhatsApp instance is still the default.
    expect((await send(s.keys[1], template(phone))).status).toBe(201);
    expect(await callsTo(phone)).toHaveLength(1);
  });
});

describe('a provider call that gets no answer', () => {
  it('waits for the status callback: accepted → recorded with its one call; not accepted → sent once more after the window', async () => {
    // Its own API (same worker and task queue) with a short reconciliation window; the emulator
    // posts the Cloud API's status callbacks to it, as Meta posts to the app's callback URL.
    const quick = await startApi({ config: { sendReconcileWindowMs: 4000 } });
    try {
      const run = async (behaviour: 'ok' | 'error') => {
        const s = await setup();
        await emulator('/__emulator/webhook', {
          phoneNumberId: `PN-${s.ws.id.slice(0, 8)}`,
          url: `${quick.url}/webhooks/whatsapp/${s.instanceId}`,
          appSecret: 's',
        });
        const phone = mobile();
        // The provider answers after 11 s: the adapter gives up at 10 s, not knowing whether it was accepted.
        await emulator('/__emulator/script', {
          to: phone,
          behaviour,
          ...(behaviour === 'error' ? { code: 131000 } : {}),
          delayMs: 11_000,
          times: 1,
        });
        const res = await quick.request('POST', '/api/v1/messages', {
          key: s.ws.key,
          body: template(phone),
          headers: { 'x-forwarded-for': uniqueIp() },
        });
        const messages = await api.db('messages').where({ workspace_id: s.ws.id }).select('id', 'status', 'provider_message_id');
        return { res, calls: await callsTo(phone), messages };
      };
      const [accepted, refused] = await Promise.all([run('ok'), run('error')]);

      // Accepted: its `sent` callback settles the send; the provider is not called again.
      expect(accepted.res.status).toBe(201);
      expect(accepted.calls.map((c) => c.outcome)).toEqual(['ok']);
      expect(accepted.messages).toEqual([
        { id: accepted.res.body.data.id, status: 'sent', provider_message_id: accepted.calls[0].messageId },
      ]);
      // Not accepted: no callback within the window, so one more call; still one accepted message.
      expect(refused.res.status).toBe(201);
      expect(refused.calls.map((c) => c.outcome)).toEqual(['error', 'ok']);
      expect(refused.messages).toEqual([{ id: refused.res.body.data.id, status: 'sent', provider_message_id: refused.calls[1].messageId }]);
    } finally {
      await quick.close();
    }
  }, 50_000);
});

describe('POST /api/v1/conversations/{id}/messages', () => {
  it("sends in an existing conversation with the same rules, and 404 for another workspace's conversation", async () => {
    const s = await setup();
    const phone = mobile();
    const first = await send(s.ws.key, template(phone));
    const conversationId = first.body.data.conversationId;
    const path = `/api/v1/conversations/${conversationId}/messages`;
    expectError(await api.request('POST', path, { key: s.ws.key, body: { text: 'hi' } }), 422, 'WINDOW_CLOSED');
    await api.db('conversations').where({ id: conversationId }).update({ last_inbound_at: new Date() });
    const res = await api.request('POST', path, { key: s.ws.key, body: { text: 'hi' } });
    expect(res.status).toBe(201);
    expect(res.body.data).toEqual({
      id: expect.any(String),
      status: 'sent',
      type: 'text',
      conversationId,
      contactId: first.body.data.contactId,
    });
    const stranger = await setup();
    expectError(await api.request('POST', path, { key: stranger.ws.key, body: { text: 'hi' } }), 404, 'NOT_FOUND');
    const readOnly = await createWorkspace(api, { scopes: ['conversations:read'] });
    expectError(await api.request('POST', path, { key: readOnly.key, body: { text: 'hi' } }), 403, 'INSUFFICIENT_SCOPE');
  });
});
