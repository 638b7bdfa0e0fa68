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
import { uniqueMobile, uniqueSubscriber } from './phones';
import { resetClock, setNow } from '../domain/kernel/clock';
import { signBody } from '../domain/messaging/inbound';
import { TEMPLATE_STATUSES } from '../domain/messaging/templates';
import { temporalClientFactory } from '../domain/platform/temporal';

const EMULATOR = process.env.EMULATOR_URL!;
let api: TestApi;
let temporal: ReturnType<typeof temporalClientFactory>;
let seq = 0;
// Phones come from test/phones.ts. Area 11 (uniqueMobile's default): the emulator's wa_id keeps the ninth digit there.
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

/** The daily counter rows of a workspace as the sends wrote them, by kind then day (`day` as the database holds it). */
async function counterRows(workspaceId: string): Promise<{ kind: string; day: string; count: number }[]> {
  return api
    .db('daily_counters')
    .where({ workspace_id: workspaceId })
    .orderBy(['kind', 'day'])
    .select('kind', api.db.raw('day::text AS day'), 'count');
}

const HOUR = 3_600_000;

/**
 * A text from `phone` delivered to the instance's Cloud API webhook as Meta sends it (signed with
 * the app secret), written `ageMs` ago: the payload's own `timestamp` says when.
 */
async function inboundText(s: Setup, phone: string, ageMs: number): Promise<void> {
  const raw = JSON.stringify({
    object: 'whatsapp_business_account',
    entry: [
      {
        id: '102290129340398',
        changes: [
          {
            field: 'messages',
            value: {
              messaging_product: 'whatsapp',
              metadata: { phone_number_id: `PN-${s.ws.id.slice(0, 8)}` },
              contacts: [{ profile: { name: 'Cliente' }, wa_id: phone }],
              messages: [
                {
                  from: phone,
                  id: `wamid.window.${phone}.${++seq}`,
                  timestamp: String(Math.floor((Date.now() - ageMs) / 1000)),
                  type: 'text',
                  text: { body: 'Oi' },
                },
              ],
            },
          },
        ],
      },
    ],
  });
  const res = await api.request('POST', `/webhooks/whatsapp/${s.instanceId}`, {
    rawBody: raw,
    headers: { 'content-type': 'application/json', 'x-hub-signature-256': signBody('s', raw) },
  });
  expect({ status: res.status, received: res.body?.data?.received }).toEqual({ status: 200, received: 1 });
}

beforeAll(async () => {
  api = await startApi();
  temporal = temporalClientFactory(api.config);
});
afterAll(async () => {
  await temporal.close();
  await api.close();
});

describe('POST /api/v1/messages', () => {
  it('sends an approved template to a new number: 201 with the created flags, one provider call, status sent, contact.created', async () => {
    const s = await setup();
    const phone = uniqueMobile();
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
    // A landline's 8 digits start 2-5: this file's own subscriber (6-9) moved down by 4 in its first digit, so no other file has it.
    const last8 = String(Number(uniqueSubscriber()) - 40_000_000);
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
    const phone = uniqueMobile('31');
    const first = await send(s.keys[0], template(phone));
    expect(first.status).toBe(201);
    const contact = await api.db('contacts').where({ id: first.body.data.contactId }).first();
    expect({ phone: contact.phone, wa_id: contact.wa_id }).toEqual({ phone, wa_id: withoutNinth(phone) });
    await send(s.keys[1], template(phone));
    expect((await callsTo(phone)).map((c) => c.to)).toEqual([phone, withoutNinth(phone)]);
  });

  it('refuses text to a number outside the 24-hour window (WINDOW_CLOSED) and leaves nothing behind; accepts it once the window is open', async () => {
    const s = await setup();
    const phone = uniqueMobile();
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
    const phone = uniqueMobile();
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
    const phone = uniqueMobile();
    await emulator('/__emulator/script', { to: phone, behaviour: 'ok', down: true, times: 1 });
    const res = await send(s.ws.key, template(phone));
    expect(res.status).toBe(201);
    const calls = await callsTo(phone);
    expect(calls.map((c) => c.outcome)).toEqual(['down', 'ok']);
  }, 30_000);

  it('resolves the instance: NO_INSTANCE, INSTANCE_REQUIRED, INSTANCE_NOT_FOUND, INSTANCE_DISCONNECTED', async () => {
    const bare = await createWorkspace(api, { scopes: ['conversations:send'] });
    expectError(await send(bare.key, template(uniqueMobile())), 422, 'NO_INSTANCE');
    const s = await setup({ keys: 2 });
    expectError(
      await send(s.keys[0], template(uniqueMobile(), { instanceId: '00000000-0000-4000-8000-000000000000' })),
      404,
      'INSTANCE_NOT_FOUND',
    );
    expectError(await send(s.keys[0], template(uniqueMobile(), { instanceId: 'nope' })), 404, 'INSTANCE_NOT_FOUND');
    const other = await setup();
    expectError(await send(s.keys[0], template(uniqueMobile(), { instanceId: other.instanceId })), 404, 'INSTANCE_NOT_FOUND');
    const second = await api.admin('POST', `/admin/v1/workspaces/${s.ws.id}/instances`, {
      name: 'Second',
      channel: 'whatsapp',
      provider: 'cloud',
      connected: false,
      config: { baseUrl: EMULATOR, phoneNumberId: 'PN2', accessToken: 't' },
    });
    expectError(await send(s.keys[0], template(uniqueMobile())), 422, 'INSTANCE_REQUIRED');
    expectError(await send(s.keys[1], template(uniqueMobile(), { instanceId: second.body.data.id })), 422, 'INSTANCE_DISCONNECTED');
    expect(await leftovers(s.ws.id)).toEqual({ contacts: 0, conversations: 0, counted: 0 });
  });

  it('refuses a contact the integrator opted out (403 OPTED_OUT) until the opt-out is cleared', async () => {
    const s = await setup({ keys: 2 });
    const phone = uniqueMobile();
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
    const quiet = uniqueMobile();
    // The provider is down for the first call, which answers slowly: the opt-out lands while it is in flight.
    await emulator('/__emulator/script', { to: quiet, behaviour: 'ok', down: true, times: 1, delayMs: 3000 });
    const pending = send(s.keys[0], template(quiet));
    await eventually('the first provider call', async () => (await callsTo(quiet)).length === 1);
    const contact = await api.db('contacts').where({ workspace_id: s.ws.id, phone: quiet }).first('id');
    expect((await api.request('PATCH', `/api/v1/leads/${contact.id}`, { key: leads, body: { optedOut: true } })).status).toBe(200);
    expectError(await pending, 403, 'OPTED_OUT');
    expect((await callsTo(quiet)).map((c) => c.outcome)).toEqual(['down']);
    expect(await leftovers(s.ws.id)).toMatchObject({ counted: 0 });

    const phone = uniqueMobile();
    await emulator('/__emulator/script', { to: phone, behaviour: 'ok', down: true, times: 1, delayMs: 3000 });
    const suspended = send(s.keys[1], template(phone));
    await eventually('the first provider call', async () => (await callsTo(phone)).length === 1);
    expect((await api.admin('PATCH', `/admin/v1/workspaces/${s.ws.id}`, { plan: { active: false } })).status).toBe(200);
    expectError(await suspended, 402, 'SUBSCRIPTION_INACTIVE');
    expect((await callsTo(phone)).map((c) => c.outcome)).toEqual(['down']);
    expect(await leftovers(s.ws.id)).toMatchObject({ counted: 0 });
  }, 60_000);

  it('enforces the daily cap of new numbers and the daily message quota on the rows the sends counted on', async () => {
    const s = await setup({ plan: { dailyMessageQuota: 2 }, keys: 2 });
    const phone = uniqueMobile();
    expect((await send(s.keys[0], template(phone))).status).toBe(201);
    // One cold send: one unit on each counter, both on the day the code counted it on.
    const [cold, messages] = await counterRows(s.ws.id);
    expect([cold, messages]).toEqual([
      { kind: 'cold_conversations', day: expect.stringMatching(/^\d{4}-\d{2}-\d{2}$/), count: 1 },
      { kind: 'messages', day: cold.day, count: 1 },
    ]);
    // That day's cap of new numbers (200 without a broadcast limit) reached: a new number is refused, a known one is not.
    await api.db('daily_counters').where({ workspace_id: s.ws.id, kind: 'cold_conversations', day: cold.day }).update({ count: 200 });
    const stranger = uniqueMobile();
    expectError(await send(s.keys[0], template(stranger)), 429, 'COLD_LIMIT_REACHED');
    expect(await callsTo(stranger)).toHaveLength(0);
    expect(await api.db('contacts').where({ workspace_id: s.ws.id, phone: stranger })).toHaveLength(0);
    expect((await send(s.keys[0], template(phone))).status).toBe(201);
    expectError(await send(s.keys[1], template(phone)), 429, 'MESSAGE_LIMIT_REACHED');
    expect(await callsTo(phone)).toHaveLength(2);
    expect(await counterRows(s.ws.id)).toEqual([
      { kind: 'cold_conversations', day: cold.day, count: 200 },
      { kind: 'messages', day: cold.day, count: 2 },
    ]);
  });

  it('answers a reached daily cap with Retry-After: the whole seconds until the day its counters were taken on ends in São Paulo (cold send and conversation send)', async () => {
    const s = await setup({ plan: { dailyMessageQuota: 1 }, keys: 2 });
    const first = await send(s.keys[0], template(uniqueMobile()));
    expect(first.status).toBe(201);
    const [cold] = await counterRows(s.ws.id);
    expect(cold).toMatchObject({ kind: 'cold_conversations', count: 1 });
    // São Paulo keeps UTC-3 all year: the day the counters were taken on ends at 03:00Z of the next calendar day.
    const resets = Date.parse(`${cold.day}T03:00:00.000Z`) + 24 * HOUR;
    const expectRetryAfter = async (request: () => Promise<ApiResponse>, code: string) => {
      const before = Date.now();
      const res = await request();
      const after = Date.now();
      expectError(res, 429, code);
      const seconds = Number(res.headers.get('retry-after'));
      expect(Number.isInteger(seconds)).toBe(true);
      // Counted when the refusal was answered (between before and after) and rounded up to a whole second.
      expect(after + seconds * 1000).toBeGreaterThanOrEqual(resets);
      expect(before + seconds * 1000).toBeLessThan(resets + 1000);
    };
    const conversationId = first.body.data.conversationId;
    await api.db('conversations').where({ id: conversationId }).update({ last_inbound_at: new Date() });
    await expectRetryAfter(
      () => api.request('POST', `/api/v1/conversations/${conversationId}/messages`, { key: s.keys[1], body: { text: 'hi' } }),
      'MESSAGE_LIMIT_REACHED',
    );
    await api.db('daily_counters').where({ workspace_id: s.ws.id, kind: 'cold_conversations', day: cold.day }).update({ count: 200 });
    await expectRetryAfter(() => send(s.keys[0], template(uniqueMobile())), 'COLD_LIMIT_REACHED');
  });

  it('a daily message quota of 0 refuses the very first send: 429 MESSAGE_LIMIT_REACHED with Retry-After, nothing sent, counted or kept', async () => {
    const s = await setup({ plan: { dailyMessageQuota: 0 } });
    const phone = uniqueMobile();
    const res = await send(s.ws.key, template(phone));
    expectError(res, 429, 'MESSAGE_LIMIT_REACHED');
    const seconds = Number(res.headers.get('retry-after'));
    expect(Number.isInteger(seconds) && seconds >= 1 && seconds <= 86_400).toBe(true);
    expect(await callsTo(phone)).toHaveLength(0);
    expect(await leftovers(s.ws.id)).toEqual({ contacts: 0, conversations: 0, counted: 0 });
    // A contact who wrote (window open) cannot be answered either.
    await inboundText(s, phone, 60_000);
    const conversation = await api.db('conversations').where({ workspace_id: s.ws.id }).first('id');
    const reply = await api.request('POST', `/api/v1/conversations/${conversation.id}/messages`, { key: s.ws.key, body: { text: 'Oi' } });
    expectError(reply, 429, 'MESSAGE_LIMIT_REACHED');
    expect(reply.headers.get('retry-after')).toMatch(/^[1-9]\d*$/);
    expect(await callsTo(phone)).toHaveLength(0);
    expect(await leftovers(s.ws.id)).toEqual({ contacts: 1, conversations: 1, counted: 0 });
  });

  it('validates the body: PHONE_REQUIRED, INVALID_PHONE, bounds naming the field, INVALID_URL', async () => {
    const s = await setup({ keys: 4 });
    const k = (i: number) => s.keys[Math.floor(i / 5)];
    const cases: [Record<string, unknown>, number, string, string?][] = [
      [{ text: 'x' }, 400, 'PHONE_REQUIRED'],
      [{ phone: '11987654321', text: 'x' }, 400, 'INVALID_PHONE'],
      [{ phone: uniqueMobile(), text: 'x'.repeat(4097) }, 400, 'VALIDATION', 'body.text'],
      [{ phone: uniqueMobile(), type: 'text' }, 400, 'VALIDATION', 'body.text'],
      [
        { phone: uniqueMobile(), type: 'image', mediaUrl: 'https://example.com/a.jpg', caption: 'c'.repeat(1025) },
        400,
        'VALIDATION',
        'body.caption',
      ],
      [
        { phone: uniqueMobile(), type: 'document', mediaUrl: 'https://example.com/a.pdf', fileName: 'f'.repeat(256) },
        400,
        'VALIDATION',
        'body.fileName',
      ],
      [template(uniqueMobile(), { templateLanguage: 'p' }), 400, 'VALIDATION', 'body.templateLanguage'],
      [template(uniqueMobile(), { templateVariables: Array(21).fill('v') }), 400, 'VALIDATION', 'body.templateVariables'],
      [{ phone: uniqueMobile(), type: 'image', mediaUrl: 'ftp://example.com/a.jpg' }, 400, 'INVALID_URL'],
      // The document states mediaUrl's pattern for every type: a text that carries a broken one is refused, not sent without it.
      [{ phone: uniqueMobile(), text: 'x', mediaUrl: '0' }, 400, 'INVALID_URL'],
      [{ phone: uniqueMobile(), type: 'image', mediaUrl: `https://example.com/${'a'.repeat(2040)}` }, 400, 'VALIDATION', 'body.mediaUrl'],
      [{ phone: '5'.repeat(33), text: 'x' }, 400, 'VALIDATION', 'body.phone'],
      [{ phone: uniqueMobile(), type: 'sticker', text: 'x' }, 400, 'VALIDATION', 'body.type'],
    ];
    for (const [i, [body, status, code, field]] of cases.entries()) {
      const res = await send(k(i), body);
      expectError(res, status, code);
      if (field) expect(res.body.error).toContain(field);
    }
  });

  it('refuses media above the per-type limit (MEDIA_TOO_LARGE) before anything is created', async () => {
    const s = await setup();
    const phone = uniqueMobile();
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

describe('the 24-hour window', () => {
  it("closes 24 hours after the contact's last message (its provider timestamp): 25 h old refuses text, takes a template; 23 h old takes text", async () => {
    const s = await setup({ keys: 3 });
    const [stale, recent] = [uniqueMobile(), uniqueMobile()];
    await inboundText(s, stale, 25 * HOUR);
    await inboundText(s, recent, 23 * HOUR);

    expectError(await send(s.keys[0], { phone: stale, text: 'Still interested?' }), 422, 'WINDOW_CLOSED');
    const conversation = await api
      .db('conversations as v')
      .join('contacts as c', 'c.id', 'v.contact_id')
      .where({ 'v.workspace_id': s.ws.id, 'c.phone': stale })
      .first('v.id');
    const path = `/api/v1/conversations/${conversation.id}/messages`;
    expectError(await api.request('POST', path, { key: s.ws.key, body: { text: 'Still interested?' } }), 422, 'WINDOW_CLOSED');
    expect(await callsTo(stale)).toHaveLength(0);
    const reopened = await send(s.keys[1], template(stale));
    expect(reopened.status).toBe(201);
    expect(reopened.body.data).toMatchObject({ conversationId: conversation.id, created: { contact: false, conversation: false } });
    expect((await callsTo(stale)).map((c) => c.body.type)).toEqual(['template']);

    const answered = await send(s.keys[2], { phone: recent, text: 'Oi de novo' });
    expect(answered.status).toBe(201);
    expect((await callsTo(recent)).map((c) => c.body)).toMatchObject([{ type: 'text', text: { body: 'Oi de novo' } }]);
  });
});

describe('templates', () => {
  it('sends approved templates only: every other status is 422 TEMPLATE_INVALID before any provider call; the approved language of a name still sends', async () => {
    const refusedStatuses = TEMPLATE_STATUSES.filter((status) => status !== 'approved');
    const s = await setup({ keys: refusedStatuses.length + 2 });
    const register = async (name: string, language: string, status: string) =>
      expect(
        (
          await api.admin('POST', `/admin/v1/workspaces/${s.ws.id}/templates`, {
            instanceId: s.instanceId,
            name,
            language,
            variableCount: 1,
            status,
          })
        ).status,
      ).toBe(201);
    for (const status of refusedStatuses) await register(`offer_${status}`, 'pt_BR', status);
    // One name, two languages: pending in Portuguese, approved in English.
    await register('promo', 'pt_BR', 'pending');
    await register('promo', 'en_US', 'approved');

    for (const [i, status] of refusedStatuses.entries()) {
      const phone = uniqueMobile();
      expectError(await send(s.keys[i], template(phone, { templateName: `offer_${status}` })), 422, 'TEMPLATE_INVALID');
      expect({ status, calls: await callsTo(phone) }).toEqual({ status, calls: [] });
    }
    const phone = uniqueMobile();
    expectError(await send(s.keys[refusedStatuses.length], template(phone, { templateName: 'promo' })), 422, 'TEMPLATE_INVALID');
    expect(await callsTo(phone)).toHaveLength(0);
    expect(await leftovers(s.ws.id)).toEqual({ contacts: 0, conversations: 0, counted: 0 });

    const english = await send(s.keys[refusedStatuses.length + 1], template(phone, { templateName: 'promo', templateLanguage: 'en_US' }));
    expect(english.status).toBe(201);
    expect((await callsTo(phone)).map((c) => c.body.template)).toEqual([
      { name: 'promo', language: { code: 'en_US' }, components: [{ type: 'body', parameters: [{ type: 'text', text: 'Ana' }] }] },
    ]);
  });
});

describe('the daily cap of new numbers: max(200, ceil(0.1 x broadcastLimit))', () => {
  it.each([
    [1000, 200],
    [2000, 200],
    [2001, 201],
    [2010, 201],
  ])('with a broadcast limit of %i: %i new numbers a day, the next one 429 COLD_LIMIT_REACHED', async (broadcastLimit, cap) => {
    const s = await setup({ plan: { broadcastLimit } });
    expect((await send(s.ws.key, template(uniqueMobile()))).status).toBe(201);
    const [row, ...others] = (await counterRows(s.ws.id)).filter((r) => r.kind === 'cold_conversations');
    expect({ row, others }).toEqual({ row: { kind: 'cold_conversations', day: expect.any(String), count: 1 }, others: [] });
    // As if cap - 1 new numbers were written to today (on the row the send counted on).
    await api
      .db('daily_counters')
      .where({ workspace_id: s.ws.id, kind: 'cold_conversations', day: row.day })
      .update({ count: cap - 1 });

    const last = uniqueMobile();
    expect((await send(s.ws.key, template(last))).status).toBe(201);
    expect(await callsTo(last)).toHaveLength(1);
    const over = uniqueMobile();
    const refused = await send(s.ws.key, template(over));
    expectError(refused, 429, 'COLD_LIMIT_REACHED');
    expect(refused.headers.get('retry-after')).toMatch(/^[1-9]\d*$/);
    expect(await callsTo(over)).toHaveLength(0);
    expect(await api.db('contacts').where({ workspace_id: s.ws.id, phone: over })).toHaveLength(0);
    expect((await counterRows(s.ws.id)).filter((r) => r.kind === 'cold_conversations')).toEqual([{ ...row, count: cap }]);
  });
});

describe('idempotency', () => {
  it('makes exactly one provider call for 20 concurrent requests with one key; the rest get 409 or the replay', async () => {
    // Cold sends are 5/min per API key: four keys carry the 20 requests, a fifth the replay.
    const s = await setup({ keys: 5 });
    const phone = uniqueMobile();
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

  it('replays a completed send for 10 minutes, and after that the same key is a new send', async () => {
    const s = await setup({ keys: 3 });
    const phone = uniqueMobile();
    const key = `memo-${phone}`;
    const first = await send(s.keys[0], template(phone), { 'Idempotency-Key': key });
    expect(first.status).toBe(201);
    try {
      // Just inside the window (the send closed before this instant, so less than 10 minutes have passed).
      setNow(Date.now() + 10 * 60_000 - 30_000);
      const replay = await send(s.keys[1], template(phone), { 'Idempotency-Key': key });
      expect({ status: replay.status, replayed: replay.headers.get('idempotent-replayed'), body: replay.body }).toEqual({
        status: 200,
        replayed: 'true',
        body: first.body,
      });
      expect(await callsTo(phone)).toHaveLength(1);
      // Past the window: the key names a new send, with a provider call of its own.
      setNow(Date.now() + 10 * 60_000 + 5_000);
      const fresh = await send(s.keys[2], template(phone), { 'Idempotency-Key': key });
      expect({ status: fresh.status, replayed: fresh.headers.get('idempotent-replayed') }).toEqual({ status: 201, replayed: null });
      expect(fresh.body.data.id).not.toBe(first.body.data.id);
      expect(await callsTo(phone)).toHaveLength(2);
    } finally {
      resetClock();
    }
  });

  it('frees the key after a failed send so the same key can be retried', async () => {
    const s = await setup();
    const phone = uniqueMobile();
    expectError(
      await send(s.ws.key, template(phone, { templateVariables: [] }), { 'Idempotency-Key': 'retry-me' }),
      422,
      'TEMPLATE_INVALID',
    );
    const res = await send(s.ws.key, template(phone), { 'Idempotency-Key': 'retry-me' });
    expect(res.status).toBe(201);
    // Keys are scoped to the workspace: another workspace's identical key is its own send.
    const other = await setup();
    expect((await send(other.ws.key, template(uniqueMobile()), { 'Idempotency-Key': 'retry-me' })).status).toBe(201);
  });

  it('takes any printable key of 1 to 255 characters, spaces included, and refuses a longer one naming the header', async () => {
    const s = await setup({ keys: 2 });
    const phone = uniqueMobile();
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
    const long = await send(s.keys[0], template(uniqueMobile()), { 'Idempotency-Key': `k ${'x'.repeat(254)}` });
    expectError(long, 400, 'VALIDATION');
    expect(JSON.stringify(long.body)).toContain('Idempotency-Key');
  });
  it('binds a key to its request: another body or the other send endpoint is 422 IDEMPOTENCY_KEY_REUSED, the same body replays', async () => {
    const s = await setup({ keys: 3 });
    const phone = uniqueMobile();
    const key = `bound-${phone}`;
    const first = await send(s.keys[0], template(phone), { 'Idempotency-Key': key });
    expect(first.status).toBe(201);
    expectError(
      await send(s.keys[1], template(phone, { templateVariables: ['Bruno'] }), { 'Idempotency-Key': key }),
      422,
      'IDEMPOTENCY_KEY_REUSED',
    );
    expectError(await send(s.keys[1], template(uniqueMobile()), { 'Idempotency-Key': key }), 422, 'IDEMPOTENCY_KEY_REUSED');
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
    const phone = uniqueMobile();
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
    const phone = uniqueMobile();
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
    const phone = uniqueMobile();
    await emulator('/__emulator/script', { to: phone, behaviour: 'ok', delayMs: 11_000, times: 1 });
    const key = `unknown-${phone}`;
    const first = await send(s.keys[0], { phone, text: 'Oi' }, { 'Idempotency-Key': key });
    expectError(first, 409, 'SEND_OUTCOME_UNKNOWN');
    expect(first.body.hint).toMatch(/check the conversation/i);
    const again = await send(s.keys[1], { phone, text: 'Oi' }, { 'Idempotency-Key': key });
    expectError(again, 409, 'SEND_OUTCOME_UNKNOWN');
    // Counted once the key's send is over (its last run closed: nothing of it can call the provider any more).
    const handle = (await temporal.get()).workflow.getHandle(`send/${s.ws.id}/key/${key}`);
    const closed = await eventually('the send workflow to close', async () => {
      const { status } = await handle.describe();
      return status.name !== 'RUNNING' && status.name;
    });
    expect(closed).toBe('FAILED');
    // One attempt, left in flight (only the provider knows whether it took it), and one provider call.
    const attempts = await api.db('send_attempts').where({ workspace_id: s.ws.id }).select('reference', 'state');
    expect(attempts).toEqual([{ reference: expect.stringMatching(`^send/${s.ws.id}/key/${key}/`), state: 'in_flight' }]);
    expect(await callsTo(phone)).toHaveLength(1);
    // The contact and conversation stay: the provider may have delivered the message.
    expect(await leftovers(s.ws.id)).toMatchObject({ contacts: 1, conversations: 1 });
  }, 40_000);

  it('refuses what an instance cannot carry before any provider call: a template through the web gateway, an Instagram instance', async () => {
    const web = await setup({ provider: 'web' });
    const phone = uniqueMobile();
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
        const phone = uniqueMobile();
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
    const phone = uniqueMobile();
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
