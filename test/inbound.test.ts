import { createMessagingActivities } from '../activities/messaging';
import { createHmac } from 'node:crypto';
import { createKey, createWorkspace, expectError, outbox, seedContact, startApi, TestApi, Workspace } from './helpers';
import { uniqueSubscriber } from './phones';

/**
 * Inbound provider traffic: Meta's WhatsApp Cloud API webhook on /webhooks/whatsapp/{instanceId}.
 * Bodies are the real Cloud API notification shape, signed like Meta signs them
 * (X-Hub-Signature-256 = sha256=<hex HMAC-SHA256(app secret, raw body)>).
 */
let api: TestApi;
beforeAll(async () => {
  api = await startApi();
});
afterAll(async () => api.close());

const SECRET = 'shh';
const OUR_NUMBER = '5511930000000';
const PHONE_NUMBER_ID = 'PN1';

let counter = 0;
/**
 * The modern (13-digit) and the old (12-digit, no ninth digit) form of one mobile no other test
 * file uses (test/phones.ts: its 8 digits start 6-9, so both forms are valid).
 */
const nextMobile = (): { modern: string; old: string } => {
  const local = uniqueSubscriber();
  return { modern: `55119${local}`, old: `5511${local}` };
};
const emulatorCalls = async (to: string): Promise<unknown[]> =>
  ((await (await fetch(`${process.env.EMULATOR_URL}/__emulator/calls?to=${to}`)).json()) as { calls: unknown[] }).calls;
const nextWamid = (): string => `wamid.HBgM${Date.now().toString(36)}${++counter}${Math.random().toString(36).slice(2, 10)}`;
/** Unix seconds as the Cloud API sends them (a string), `ago` seconds in the past. */
const unix = (ago = 60): string => String(Math.floor(Date.now() / 1000) - ago);

async function seedInstance(ws: { id: string }, input: { archived?: boolean; config?: Record<string, unknown> } = {}): Promise<string> {
  const res = await api.admin('POST', `/admin/v1/workspaces/${ws.id}/instances`, {
    name: 'Main number',
    channel: 'whatsapp',
    provider: 'cloud',
    connected: true,
    archived: input.archived ?? false,
    config: { appSecret: SECRET, phoneNumberId: PHONE_NUMBER_ID, accessToken: 't', baseUrl: process.env.EMULATOR_URL, ...input.config },
  });
  expect(res.status).toBe(201);
  return res.body.data.id;
}

type CloudMessage = Record<string, unknown> & { from: string; id: string; type: string };

function notification(value: {
  messages?: CloudMessage[];
  statuses?: Record<string, unknown>[];
  contacts?: unknown[];
  phoneNumberId?: string;
}) {
  return {
    object: 'whatsapp_business_account',
    entry: [
      {
        id: '102290129340398',
        changes: [
          {
            field: 'messages',
            value: {
              messaging_product: 'whatsapp',
              metadata: { display_phone_number: OUR_NUMBER, phone_number_id: value.phoneNumberId ?? PHONE_NUMBER_ID },
              ...(value.contacts ? { contacts: value.contacts } : {}),
              ...(value.messages ? { messages: value.messages } : {}),
              ...(value.statuses ? { statuses: value.statuses } : {}),
            },
          },
        ],
      },
    ],
  };
}

/** One inbound text message from `from`, with the contact's profile name. */
function textFrom(from: string, options: { id?: string; text?: string; name?: string; timestamp?: string } = {}) {
  return notification({
    contacts: [{ profile: { name: options.name ?? 'Maria Souza' }, wa_id: from }],
    messages: [
      {
        from,
        id: options.id ?? nextWamid(),
        timestamp: options.timestamp ?? unix(),
        type: 'text',
        text: { body: options.text ?? 'Oi, tudo bem?' },
      },
    ],
  });
}

const sign = (raw: string, secret = SECRET): string => `sha256=${createHmac('sha256', secret).update(raw, 'utf8').digest('hex')}`;

/** Posts `payload` (or an exact raw text) signed with `secret` unless a signature header is given. */
function deliver(instanceId: string, payload: unknown, options: { secret?: string; signature?: string | null; raw?: string } = {}) {
  const raw = options.raw ?? JSON.stringify(payload);
  const headers: Record<string, string> = { 'content-type': 'application/json' };
  if (options.signature !== null) headers['x-hub-signature-256'] = options.signature ?? sign(raw, options.secret);
  return api.request('POST', `/webhooks/whatsapp/${instanceId}`, { rawBody: raw, headers });
}

/** Everything inbound traffic could have changed in a workspace. */
async function snapshot(workspaceId: string) {
  const count = async (table: string): Promise<number> =>
    Number((await api.db(table).where({ workspace_id: workspaceId }).count({ n: '*' }))[0].n);
  return {
    contacts: await count('contacts'),
    conversations: await count('conversations'),
    messages: await count('messages'),
    events: await count('outbox_events'),
    statuses: await api.db('messages').where({ workspace_id: workspaceId }).orderBy('id').pluck('status'),
  };
}

async function setup(): Promise<{ ws: Workspace; instanceId: string }> {
  const ws = await createWorkspace(api, { scopes: ['conversations:read'] });
  return { ws, instanceId: await seedInstance(ws) };
}

describe('POST /webhooks/web/{instanceId}: the web gateway', () => {
  it("records a contact's message sent through a web gateway instance (via the emulator's messages.upsert), and refuses a wrong API key", async () => {
    const ws = await createWorkspace(api, { scopes: ['conversations:read', 'conversations:send'] });
    const instanceName = `web-${ws.id.slice(0, 8)}`;
    const created = await api.admin('POST', `/admin/v1/workspaces/${ws.id}/instances`, {
      name: 'Web',
      channel: 'whatsapp',
      provider: 'web',
      connected: true,
      config: { baseUrl: process.env.EMULATOR_URL, instanceName, accessToken: 'gateway-key' },
    });
    const instanceId = created.body.data.id;
    const emu = (path: string, body: unknown) =>
      fetch(`${process.env.EMULATOR_URL}${path}`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify(body),
      }).then((r) => r.json() as Promise<any>);
    await emu('/__emulator/web/webhook', { instanceName, url: `${api.url}/webhooks/web/${instanceId}`, apikey: 'gateway-key' });
    const { modern } = nextMobile();
    const delivered = await emu('/__emulator/web/inbound', { instanceName, from: modern, text: 'Oi, vi o anúncio', name: 'Joana' });
    expect(delivered).toMatchObject({ delivered: 200, answer: { data: { received: 1, duplicates: 0 } } });
    // Our own send echoed by the gateway (fromMe) is not an inbound message.
    expect(await emu('/__emulator/web/inbound', { instanceName, from: modern, text: 'echo', fromMe: true })).toMatchObject({
      answer: { data: { received: 0, ignored: 1 } },
    });

    const contact = await api.db('contacts').where({ workspace_id: ws.id, phone: modern }).first();
    expect(contact.name).toBe('Joana');
    const conversation = await api.request('GET', `/api/v1/conversations?contactId=${contact.id}`, { key: ws.key });
    expect(conversation.body.data).toHaveLength(1);
    const detail = await api.request('GET', `/api/v1/conversations/${conversation.body.data[0].id}`, { key: ws.key });
    expect(detail.body.data.messages).toMatchObject([{ direction: 'in', type: 'text', body: 'Oi, vi o anúncio', status: 'received' }]);
    const received = (await outbox(api, ws.id, 'message.received')).map((e) => e.payload);
    expect(received).toEqual([expect.objectContaining({ contact_id: contact.id, type: 'text', instance_id: instanceId, phone: modern })]);
    // The reply goes back through the same gateway.
    const reply = await api.request('POST', `/api/v1/conversations/${conversation.body.data[0].id}/messages`, {
      key: ws.key,
      body: { text: 'Olá Joana!' },
    });
    expect(reply.status).toBe(201);

    await emu('/__emulator/web/webhook', { instanceName, url: `${api.url}/webhooks/web/${instanceId}`, apikey: 'not-the-key' });
    expect(await emu('/__emulator/web/inbound', { instanceName, from: modern, text: 'again' })).toMatchObject({ delivered: 401 });
    expect(await api.db('messages').where({ workspace_id: ws.id, direction: 'in' })).toHaveLength(1);
  });
});

describe('opt-out by message', () => {
  /** A workspace whose instance receives the contact's messages, and a key that sends to them and reads their lead. */
  async function consentSetup() {
    const { ws, instanceId } = await setup();
    const key = (await createKey(api, ws.id, ['conversations:send', 'leads:read'])).key;
    return { ws, instanceId, key };
  }
  const optedOut = async (key: string, workspaceId: string, phone: string): Promise<boolean> => {
    const contact = await api.db('contacts').where({ workspace_id: workspaceId, phone }).first('id');
    const lead = await api.request('GET', `/api/v1/leads/${contact.id}`, { key });
    expect(lead.status).toBe(200);
    return lead.body.data.optedOut;
  };
  const sendText = (key: string, phone: string) => api.request('POST', '/api/v1/messages', { key, body: { phone, text: 'Oi' } });

  it('a contact who writes STOP is opted out: a send to them is 403 OPTED_OUT and never reaches the provider; START opts them back in', async () => {
    const { ws, instanceId, key } = await consentSetup();
    const { modern } = nextMobile();
    expect((await deliver(instanceId, textFrom(modern, { text: 'Oi, tudo bem?' }))).status).toBe(200);
    expect(await optedOut(key, ws.id, modern)).toBe(false);
    expect((await deliver(instanceId, textFrom(modern, { text: 'STOP' }))).status).toBe(200);
    expect(await optedOut(key, ws.id, modern)).toBe(true);
    expectError(await sendText(key, modern), 403, 'OPTED_OUT');
    expect(await emulatorCalls(modern)).toHaveLength(0);
    expect((await deliver(instanceId, textFrom(modern, { text: 'START' }))).status).toBe(200);
    expect(await optedOut(key, ws.id, modern)).toBe(false);
    expect((await sendText(key, modern)).status).toBe(201);
    expect(await emulatorCalls(modern)).toHaveLength(1);
  });

  it.each([
    ['STOP', 'START'],
    ['parar', 'voltar'],
    ['sair', 'receber'],
    ['pare', 'START'],
    ['cancelar', 'voltar'],
    ['descadastrar', 'receber'],
  ])('"%s" from a contact opts them out (sends refused, nothing sent), "%s" opts them back in', async (stop, start) => {
    const { ws, instanceId, key } = await consentSetup();
    const { modern } = nextMobile();
    expect((await deliver(instanceId, textFrom(modern, { text: stop }))).body.data).toMatchObject({ received: 1 });
    expect(await optedOut(key, ws.id, modern)).toBe(true);
    expectError(await sendText(key, modern), 403, 'OPTED_OUT');
    expect(await emulatorCalls(modern)).toHaveLength(0);
    expect((await deliver(instanceId, textFrom(modern, { text: start }))).body.data).toMatchObject({ received: 1 });
    expect(await optedOut(key, ws.id, modern)).toBe(false);
    expect((await sendText(key, modern)).status).toBe(201);
    expect(await emulatorCalls(modern)).toHaveLength(1);
  });

  it('a sentence that merely contains a stop word changes nothing; case, accents and punctuation around the word do not matter', async () => {
    const { ws, instanceId, key } = await consentSetup();
    const { modern } = nextMobile();
    expect((await deliver(instanceId, textFrom(modern, { text: 'Quero parar de receber? talvez' }))).status).toBe(200);
    expect(await optedOut(key, ws.id, modern)).toBe(false);
    expect((await deliver(instanceId, textFrom(modern, { text: '  Párar! ' }))).status).toBe(200);
    expect(await optedOut(key, ws.id, modern)).toBe(true);
    expectError(await sendText(key, modern), 403, 'OPTED_OUT');
    expect(await emulatorCalls(modern)).toHaveLength(0);
  });
});

describe('POST /webhooks/whatsapp/{instanceId}: signature', () => {
  it('rejects a missing, malformed or wrong signature with 401 and changes nothing', async () => {
    const { ws, instanceId } = await setup();
    const payload = textFrom(nextMobile().modern);
    const raw = JSON.stringify(payload);
    const before = await snapshot(ws.id);
    const attempts = [
      await deliver(instanceId, payload, { signature: null }),
      await deliver(instanceId, payload, { signature: '' }),
      await deliver(instanceId, payload, { signature: 'sha256=abc' }),
      await deliver(instanceId, payload, { signature: sign(raw).replace('sha256=', 'sha1=') }),
      await deliver(instanceId, payload, { signature: sign(raw).slice(0, -2) + (sign(raw).endsWith('00') ? '11' : '00') }),
      await deliver(instanceId, payload, { secret: 'not-the-secret' }),
      // Signed for other bytes than the ones sent (tampered body).
      await deliver(instanceId, payload, { signature: sign(raw.replace('Oi', 'Oh')) }),
    ];
    for (const res of attempts) expectError(res, 401, 'UNAUTHORIZED');
    expect(await snapshot(ws.id)).toEqual(before);
    expect(before).toMatchObject({ contacts: 0, messages: 0, events: 0 });
  });

  it('signs the raw bytes: a pretty-printed body with non-ASCII text verifies as sent', async () => {
    const { ws, instanceId } = await setup();
    const raw = JSON.stringify(textFrom(nextMobile().modern, { text: 'Olá! Quero saber o preço 😀' }), null, 2);
    const res = await deliver(instanceId, undefined, { raw });
    expect(res.status).toBe(200);
    expect(res.body.data).toMatchObject({ received: 1 });
    const [message] = await api.db('messages').where({ workspace_id: ws.id }).select('body');
    expect(message.body).toBe('Olá! Quero saber o preço 😀');
  });

  it('answers 404 for an unknown or malformed instance id', async () => {
    const payload = textFrom(nextMobile().modern);
    expectError(await deliver('00000000-0000-4000-8000-000000000000', payload), 404, 'NOT_FOUND');
    expectError(await deliver('not-a-uuid', payload), 404, 'NOT_FOUND');
  });

  it("does not accept another workspace's instance id with this workspace's secret", async () => {
    const mine = await setup();
    const other = await createWorkspace(api);
    const otherInstance = await seedInstance(other, { config: { appSecret: 'other-secret' } });
    const before = { mine: await snapshot(mine.ws.id), other: await snapshot(other.id) };
    expectError(await deliver(otherInstance, textFrom(nextMobile().modern), { secret: SECRET }), 401, 'UNAUTHORIZED');
    expect({ mine: await snapshot(mine.ws.id), other: await snapshot(other.id) }).toEqual(before);
    // Its own secret is what works there, and the message lands in that workspace only.
    const ok = await deliver(otherInstance, textFrom(nextMobile().modern), { secret: 'other-secret' });
    expect(ok.status).toBe(200);
    expect((await snapshot(other.id)).messages).toBe(1);
    expect(await snapshot(mine.ws.id)).toEqual(before.mine);
  });

  it('rejects every delivery for an instance without an app secret', async () => {
    const ws = await createWorkspace(api);
    const res = await api.admin('POST', `/admin/v1/workspaces/${ws.id}/instances`, {
      name: 'No secret',
      channel: 'whatsapp',
      provider: 'cloud',
      config: {},
    });
    expect(res.status).toBe(201);
    expectError(await deliver(res.body.data.id, textFrom(nextMobile().modern), { secret: '' }), 401, 'UNAUTHORIZED');
    expect((await snapshot(ws.id)).messages).toBe(0);
  });
});

describe('POST /webhooks/whatsapp/{instanceId}: inbound messages', () => {
  it('creates the contact, the conversation and the message, opens the window and emits contact.created then message.received', async () => {
    const { ws, instanceId } = await setup();
    const { modern } = nextMobile();
    const wamid = nextWamid();
    const sentAt = unix(90);
    const res = await deliver(
      instanceId,
      textFrom(modern, { id: wamid, name: 'Maria Souza', text: 'Quero um orçamento', timestamp: sentAt }),
    );
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ data: { received: 1, duplicates: 0, statuses: 0, ignored: 0 } });

    const contact = await api.db('contacts').where({ workspace_id: ws.id }).first();
    expect(contact).toMatchObject({ name: 'Maria Souza', phone: modern, wa_id: modern, email: null, is_group: false });
    const conversation = await api.db('conversations').where({ workspace_id: ws.id }).first();
    expect(conversation).toMatchObject({ contact_id: contact.id, instance_id: instanceId, channel: 'whatsapp', status: 'open' });
    // The 24-hour window opens at the message's own time.
    expect(conversation.last_inbound_at.toISOString()).toBe(new Date(Number(sentAt) * 1000).toISOString());
    expect(conversation.last_message_at.toISOString()).toBe(new Date(Number(sentAt) * 1000).toISOString());
    const message = await api.db('messages').where({ workspace_id: ws.id }).first();
    expect(message).toMatchObject({
      conversation_id: conversation.id,
      direction: 'in',
      type: 'text',
      body: 'Quero um orçamento',
      status: 'received',
      provider_message_id: wamid,
      media_url: null,
      media_ref: null,
    });
    expect(message.timestamp.toISOString()).toBe(new Date(Number(sentAt) * 1000).toISOString());

    const events = await outbox(api, ws.id);
    expect(events.map((e) => e.name)).toEqual(['contact.created', 'message.received']);
    const [created, received] = events;
    expect(created.payload).toEqual({
      event: 'contact.created',
      workspace_id: ws.id,
      timestamp: expect.any(String),
      contact_id: contact.id,
      name: 'Maria Souza',
      phone: modern,
      email: null,
    });
    expect(received.payload).toEqual({
      event: 'message.received',
      workspace_id: ws.id,
      timestamp: expect.any(String),
      contact_id: contact.id,
      contact_name: 'Maria Souza',
      phone: modern,
      message_id: message.id,
      type: 'text',
      instance_id: instanceId,
      channel: 'whatsapp',
      conversation_id: conversation.id,
    });
    expect(new Date(received.payload.timestamp).toISOString()).toBe(received.payload.timestamp);
    // The conversation is visible through the API with its message.
    const read = await api.request('GET', `/api/v1/conversations/${conversation.id}`, { key: ws.key });
    expect(read.status).toBe(200);
    expect(read.body.data.messages).toEqual([
      {
        id: message.id,
        direction: 'in',
        type: 'text',
        body: 'Quero um orçamento',
        timestamp: expect.any(String),
        status: 'received',
        media: null,
      },
    ]);
  });

  it('finds an existing contact written in the other ninth-digit form: same contact, same conversation, no contact.created', async () => {
    const { ws, instanceId } = await setup();
    const { modern, old } = nextMobile();
    const existing = await seedContact(api, ws.id, { phone: modern, name: 'Cliente antigo' });
    const eventsBefore = (await outbox(api, ws.id)).length;

    // Brazilian wa_ids often lack the ninth digit.
    const first = await deliver(instanceId, textFrom(old, { name: 'Profile name' }));
    expect(first.body.data).toMatchObject({ received: 1 });
    const second = await deliver(instanceId, textFrom(modern, { name: 'Profile name' }));
    expect(second.body.data).toMatchObject({ received: 1 });

    const contacts = await api.db('contacts').where({ workspace_id: ws.id }).select('id', 'name', 'phone', 'wa_id');
    expect(contacts).toEqual([{ id: existing.id, name: 'Cliente antigo', phone: modern, wa_id: modern }]);
    const conversations = await api.db('conversations').where({ workspace_id: ws.id }).select('id', 'contact_id');
    expect(conversations).toHaveLength(1);
    expect(conversations[0].contact_id).toBe(existing.id);
    expect(Number((await api.db('messages').where({ conversation_id: conversations[0].id }).count({ n: '*' }))[0].n)).toBe(2);

    const events = (await outbox(api, ws.id)).slice(eventsBefore);
    expect(events.map((e) => e.name)).toEqual(['message.received', 'message.received']);
    for (const e of events) {
      expect(e.payload).toMatchObject({
        contact_id: existing.id,
        contact_name: 'Cliente antigo',
        phone: modern,
        conversation_id: conversations[0].id,
      });
    }
  });

  it('records one message and one event when the provider delivers the same message id twice, even concurrently', async () => {
    const { ws, instanceId } = await setup();
    const payload = textFrom(nextMobile().modern, { id: nextWamid() });
    const first = await deliver(instanceId, payload);
    expect(first.body.data).toEqual({ received: 1, duplicates: 0, statuses: 0, ignored: 0 });
    const again = await deliver(instanceId, payload);
    expect(again.status).toBe(200);
    expect(again.body.data).toEqual({ received: 0, duplicates: 1, statuses: 0, ignored: 0 });
    expect((await snapshot(ws.id)).messages).toBe(1);
    expect((await outbox(api, ws.id, 'message.received')).length).toBe(1);
    expect((await outbox(api, ws.id, 'contact.created')).length).toBe(1);

    // A new contact's message redelivered five times at once.
    const burst = textFrom(nextMobile().modern, { id: nextWamid() });
    const results = await Promise.all(Array.from({ length: 5 }, () => deliver(instanceId, burst)));
    expect(results.map((r) => r.status)).toEqual([200, 200, 200, 200, 200]);
    expect(results.reduce((n, r) => n + r.body.data.received, 0)).toBe(1);
    const after = await snapshot(ws.id);
    expect(after).toMatchObject({ contacts: 2, conversations: 2, messages: 2 });
    expect((await outbox(api, ws.id, 'message.received')).length).toBe(2);
    expect((await outbox(api, ws.id, 'contact.created')).length).toBe(2);
  });

  it('ignores group messages, echoes of our own number, foreign and invalid senders and unsupported types', async () => {
    const { ws, instanceId } = await setup();
    const { modern } = nextMobile();
    const payload = notification({
      contacts: [{ profile: { name: 'Someone' }, wa_id: modern }],
      messages: [
        { from: '120363025246125486@g.us', id: nextWamid(), timestamp: unix(), type: 'text', text: { body: 'group chatter' } },
        {
          from: modern,
          group_id: '120363025246125486@g.us',
          id: nextWamid(),
          timestamp: unix(),
          type: 'text',
          text: { body: 'in a group' },
        },
        { from: OUR_NUMBER, id: nextWamid(), timestamp: unix(), type: 'text', text: { body: 'our own echo' } },
        { from: '14155550123', id: nextWamid(), timestamp: unix(), type: 'text', text: { body: 'from the US' } },
        { from: '55001234', id: nextWamid(), timestamp: unix(), type: 'text', text: { body: 'garbage' } },
        { from: modern, id: nextWamid(), timestamp: unix(), type: 'reaction', reaction: { message_id: 'wamid.x', emoji: '👍' } },
      ],
    });
    const res = await deliver(instanceId, payload);
    expect(res.status).toBe(200);
    expect(res.body.data).toEqual({ received: 0, duplicates: 0, statuses: 0, ignored: 6 });
    expect(await snapshot(ws.id)).toEqual({ contacts: 0, conversations: 0, messages: 0, events: 0, statuses: [] });
  });

  it('ignores traffic of another phone number id and answers 200 for notifications it does not handle', async () => {
    const { ws, instanceId } = await setup();
    const foreign = { ...textFrom(nextMobile().modern) };
    const res = await deliver(
      instanceId,
      notification({ ...{ phoneNumberId: 'PN-OTHER' }, messages: (foreign.entry[0].changes[0].value as any).messages }),
    );
    expect(res.body.data).toMatchObject({ received: 0, ignored: 1 });
    const template = {
      object: 'whatsapp_business_account',
      entry: [{ id: '1', changes: [{ field: 'message_template_status_update', value: { event: 'APPROVED' } }] }],
    };
    expect((await deliver(instanceId, template)).status).toBe(200);
    expect((await deliver(instanceId, { object: 'page', entry: [] })).status).toBe(200);
    expect((await snapshot(ws.id)).messages).toBe(0);
  });

  it('stores media by its provider id as an internal reference, never as a public mediaUrl', async () => {
    const { ws, instanceId } = await setup();
    const { modern } = nextMobile();
    const kinds = [
      { type: 'image', image: { id: 'MEDIA-IMG-1', mime_type: 'image/jpeg', sha256: 'abc', caption: 'Foto do produto' } },
      { type: 'audio', audio: { id: 'MEDIA-AUD-1', mime_type: 'audio/ogg; codecs=opus', voice: true } },
      { type: 'video', video: { id: 'MEDIA-VID-1', mime_type: 'video/mp4' } },
      { type: 'document', document: { id: 'MEDIA-DOC-1', mime_type: 'application/pdf', filename: 'pedido.pdf', caption: 'Pedido' } },
      { type: 'sticker', sticker: { id: 'MEDIA-STK-1', mime_type: 'image/webp', animated: false } },
    ];
    const payload = notification({
      contacts: [{ profile: { name: 'Media sender' }, wa_id: modern }],
      messages: kinds.map((k, i) => ({ from: modern, id: nextWamid(), timestamp: unix(100 - i), ...k })),
    });
    const res = await deliver(instanceId, payload);
    expect(res.body.data).toMatchObject({ received: 5, ignored: 0 });
    const rows = await api
      .db('messages')
      .where({ workspace_id: ws.id })
      .orderBy('timestamp')
      .select('id', 'type', 'body', 'media_url', 'media_ref');
    expect(rows.map(({ id: _id, ...r }) => r)).toEqual([
      { type: 'image', body: 'Foto do produto', media_url: null, media_ref: 'MEDIA-IMG-1' },
      { type: 'audio', body: '', media_url: null, media_ref: 'MEDIA-AUD-1' },
      { type: 'video', body: '', media_url: null, media_ref: 'MEDIA-VID-1' },
      { type: 'document', body: 'Pedido', media_url: null, media_ref: 'MEDIA-DOC-1' },
      { type: 'sticker', body: '', media_url: null, media_ref: 'MEDIA-STK-1' },
    ]);
    const events = await outbox(api, ws.id, 'message.received');
    expect(events.map((e) => [e.payload.message_id, e.payload.type])).toEqual(
      rows.map((r, i) => [r.id, ['imageMessage', 'audioMessage', 'videoMessage', 'documentMessage', 'stickerMessage'][i]]),
    );
    const conversationId = events[0].payload.conversation_id;
    const read = await api.request('GET', `/api/v1/conversations/${conversationId}`, { key: ws.key });
    expect(read.status).toBe(200);
    expect(read.body.data.messages).toHaveLength(5);
    for (const m of read.body.data.messages) expect(m.mediaUrl).toBeUndefined();
    expect(read.text).not.toContain('MEDIA-');
  });

  it('opens the 24-hour window and never moves it back for a late, older message', async () => {
    const { ws, instanceId } = await setup();
    const { modern } = nextMobile();
    // A conversation whose window closed two days ago.
    const contact = await seedContact(api, ws.id, { phone: modern, name: 'Returning' });
    const twoDaysAgo = new Date(Date.now() - 48 * 3600 * 1000);
    await api.db('conversations').insert({
      workspace_id: ws.id,
      contact_id: contact.id,
      instance_id: instanceId,
      channel: 'whatsapp',
      last_inbound_at: twoDaysAgo,
      last_message_at: twoDaysAgo,
    });

    const recent = unix(30);
    await deliver(instanceId, textFrom(modern, { timestamp: recent }));
    let conversation = await api.db('conversations').where({ workspace_id: ws.id }).first();
    expect(conversation.last_inbound_at.toISOString()).toBe(new Date(Number(recent) * 1000).toISOString());
    expect(Date.now() - conversation.last_inbound_at.getTime()).toBeLessThan(24 * 3600 * 1000);

    // A delivery of an older message (out of order) does not close the window again.
    await deliver(instanceId, textFrom(modern, { timestamp: unix(3600) }));
    conversation = await api.db('conversations').where({ workspace_id: ws.id }).first();
    expect(conversation.last_inbound_at.toISOString()).toBe(new Date(Number(recent) * 1000).toISOString());
    expect(conversation.last_message_at.toISOString()).toBe(new Date(Number(recent) * 1000).toISOString());
    expect((await snapshot(ws.id)).messages).toBe(2);
  });

  it('records nothing for an archived instance but still answers 200 (and still checks the signature)', async () => {
    const ws = await createWorkspace(api);
    const instanceId = await seedInstance(ws, { archived: true });
    const payload = textFrom(nextMobile().modern);
    expectError(await deliver(instanceId, payload, { secret: 'wrong' }), 401, 'UNAUTHORIZED');
    const res = await deliver(instanceId, payload);
    expect(res.status).toBe(200);
    expect(res.body.data).toEqual({ received: 0, duplicates: 0, statuses: 0, ignored: 1 });
    expect(await snapshot(ws.id)).toEqual({ contacts: 0, conversations: 0, messages: 0, events: 0, statuses: [] });
  });
});

describe('POST /webhooks/whatsapp/{instanceId}: status callbacks', () => {
  it('moves our outbound message to delivered, then read, and never back; unknown ids are ignored', async () => {
    const { ws, instanceId } = await setup();
    const { modern } = nextMobile();
    await deliver(instanceId, textFrom(modern));
    const conversation = await api.db('conversations').where({ workspace_id: ws.id }).first('id');
    const outId = nextWamid();
    const [out] = await api
      .db('messages')
      .insert({
        workspace_id: ws.id,
        conversation_id: conversation.id,
        direction: 'out',
        type: 'text',
        body: 'Olá!',
        status: 'sent',
        provider_message_id: outId,
      })
      .returning('id');
    const eventsBefore = (await outbox(api, ws.id)).length;
    const status = (s: string) => notification({ statuses: [{ id: outId, status: s, timestamp: unix(5), recipient_id: modern }] });
    const statusOf = async () => (await api.db('messages').where({ id: out.id }).first('status')).status;

    expect((await deliver(instanceId, status('delivered'))).body.data).toEqual({ received: 0, duplicates: 0, statuses: 1, ignored: 0 });
    expect(await statusOf()).toBe('delivered');
    // Late or repeated callbacks never move it backwards.
    expect((await deliver(instanceId, status('sent'))).body.data).toMatchObject({ statuses: 0, ignored: 1 });
    expect((await deliver(instanceId, status('failed'))).body.data).toMatchObject({ statuses: 0, ignored: 1 });
    expect((await deliver(instanceId, status('delivered'))).body.data).toMatchObject({ statuses: 0, ignored: 1 });
    expect(await statusOf()).toBe('delivered');
    expect((await deliver(instanceId, status('read'))).body.data).toMatchObject({ statuses: 1 });
    expect((await deliver(instanceId, status('delivered'))).body.data).toMatchObject({ statuses: 0 });
    expect(await statusOf()).toBe('read');

    // An unknown id, and an inbound message's id, change nothing.
    const inbound = await api.db('messages').where({ workspace_id: ws.id, direction: 'in' }).first('provider_message_id', 'status');
    const unknown = notification({
      statuses: [
        { id: 'wamid.unknown', status: 'delivered', timestamp: unix(), recipient_id: modern },
        { id: inbound.provider_message_id, status: 'read', timestamp: unix(), recipient_id: modern },
      ],
    });
    expect((await deliver(instanceId, unknown)).body.data).toEqual({ received: 0, duplicates: 0, statuses: 0, ignored: 2 });
    expect((await api.db('messages').where({ workspace_id: ws.id, direction: 'in' }).first('status')).status).toBe('received');
    // Each move announced once, from where it was; nothing for what moved nothing.
    const events = (await outbox(api, ws.id)).slice(eventsBefore);
    expect(events.map((e) => [e.name, e.payload.message_id, e.payload.previous_status, e.payload.status])).toEqual([
      ['message.status_updated', out.id, 'sent', 'delivered'],
      ['message.status_updated', out.id, 'delivered', 'read'],
    ]);
  });

  it("moves a sent message to failed, and ignores another workspace's message id", async () => {
    const { ws, instanceId } = await setup();
    const other = await setup();
    const { modern } = nextMobile();
    await deliver(instanceId, textFrom(modern));
    await deliver(other.instanceId, textFrom(modern));
    const insertOut = async (workspaceId: string) => {
      const conversation = await api.db('conversations').where({ workspace_id: workspaceId }).first('id');
      const id = nextWamid();
      await api.db('messages').insert({
        workspace_id: workspaceId,
        conversation_id: conversation.id,
        direction: 'out',
        type: 'text',
        body: 'x',
        status: 'sent',
        provider_message_id: id,
      });
      return id;
    };
    const mine = await insertOut(ws.id);
    const theirs = await insertOut(other.ws.id);
    const res = await deliver(
      instanceId,
      notification({
        statuses: [
          {
            id: mine,
            status: 'failed',
            timestamp: unix(),
            recipient_id: modern,
            errors: [{ code: 131026, title: 'Message undeliverable' }],
          },
          { id: theirs, status: 'delivered', timestamp: unix(), recipient_id: modern },
        ],
      }),
    );
    expect(res.body.data).toMatchObject({ statuses: 1, ignored: 1 });
    expect((await api.db('messages').where({ provider_message_id: mine }).first('status')).status).toBe('failed');
    expect((await api.db('messages').where({ provider_message_id: theirs }).first('status')).status).toBe('sent');
  });
});

describe('POST /webhooks/whatsapp/{instanceId}: status callbacks reconcile interrupted sends', () => {
  const attempt = (workspaceId: string, state: 'in_flight' | 'failed' | 'sent', providerMessageId?: string) => {
    const reference = `send/${workspaceId}/key/k-${++counter}/run-${counter}`;
    return api
      .db('send_attempts')
      .insert({ reference, workspace_id: workspaceId, state, provider_message_id: providerMessageId ?? null })
      .then(() => reference);
  };
  const attemptRow = (reference: string) =>
    api.db('send_attempts').where({ reference }).first('state', 'provider_message_id', 'wa_id', 'error');

  it("records the provider's answer on the attempt its biz_opaque_callback_data names (in_flight or failed, this workspace only)", async () => {
    const { ws, instanceId } = await setup();
    const other = await setup();
    const { modern } = nextMobile();
    const [inFlight, failed, sent, theirs] = [
      await attempt(ws.id, 'in_flight'),
      await attempt(ws.id, 'failed'),
      await attempt(ws.id, 'sent', 'wamid.first'),
      await attempt(other.ws.id, 'in_flight'),
    ];
    const ids = [nextWamid(), nextWamid(), nextWamid(), nextWamid()];
    const res = await deliver(
      instanceId,
      notification({
        statuses: [
          { id: ids[0], status: 'sent', timestamp: unix(1), recipient_id: modern, biz_opaque_callback_data: inFlight },
          { id: ids[1], status: 'delivered', timestamp: unix(1), recipient_id: modern, biz_opaque_callback_data: failed },
          { id: ids[2], status: 'sent', timestamp: unix(1), recipient_id: modern, biz_opaque_callback_data: sent },
          { id: ids[3], status: 'sent', timestamp: unix(1), recipient_id: modern, biz_opaque_callback_data: theirs },
        ],
      }),
    );
    expect(res.status).toBe(200);
    expect(res.body.data).toEqual({ received: 0, duplicates: 0, statuses: 2, ignored: 2 });
    expect(await attemptRow(inFlight)).toEqual({ state: 'sent', provider_message_id: ids[0], wa_id: modern, error: null });
    expect(await attemptRow(failed)).toEqual({ state: 'sent', provider_message_id: ids[1], wa_id: modern, error: null });
    // Already settled: the first answer stays. Another workspace's attempt: untouched.
    expect(await attemptRow(sent)).toMatchObject({ state: 'sent', provider_message_id: 'wamid.first' });
    expect(await attemptRow(theirs)).toMatchObject({ state: 'in_flight', provider_message_id: null });
    // A badly signed callback changes nothing.
    const forged = await attempt(ws.id, 'in_flight');
    const body = notification({
      statuses: [{ id: nextWamid(), status: 'sent', timestamp: unix(1), recipient_id: modern, biz_opaque_callback_data: forged }],
    });
    expectError(await deliver(instanceId, body, { secret: 'not-the-secret' }), 401, 'UNAUTHORIZED');
    expect(await attemptRow(forged)).toMatchObject({ state: 'in_flight' });
  });

  it('keeps a delivered status that arrives before the sent message is recorded, and the message is recorded with it', async () => {
    const { ws, instanceId } = await setup();
    const { modern } = nextMobile();
    await deliver(instanceId, textFrom(modern));
    const conversation = await api.db('conversations').where({ workspace_id: ws.id }).first('id', 'contact_id');
    const wamid = nextWamid();
    await attempt(ws.id, 'sent', wamid);
    const early = await deliver(
      instanceId,
      notification({ statuses: [{ id: wamid, status: 'delivered', timestamp: unix(1), recipient_id: modern }] }),
    );
    expect(early.body.data).toMatchObject({ statuses: 1, ignored: 0 });
    // The send's record step (the activity itself, as the worker runs it) now writes the message.
    const activities = createMessagingActivities({ db: api.db, config: api.config });
    const prepared = {
      reference: `test/${wamid}`,
      workspaceId: ws.id,
      instanceId,
      contactId: conversation.contact_id,
      conversationId: conversation.id,
      to: modern,
      phone: modern,
      createdContact: false,
      createdConversation: false,
      day: '2026-01-01',
      tookCold: false,
    };
    const outcome = await activities.recordSent({
      workspaceId: ws.id,
      prepared,
      sent: { providerMessageId: wamid },
      message: { type: 'text', text: 'hi' },
      mode: 'conversation',
    });
    expect(outcome.status).toBe('sent');
    expect((await api.db('messages').where({ id: outcome.id }).first('status')).status).toBe('delivered');
  });

  it("receives the emulator's status callback (Meta's wire format, signed with the app secret) for an accepted Cloud API send", async () => {
    const phoneNumberId = `PN-cb-${process.pid}-${++counter}`;
    const ws = await createWorkspace(api, { scopes: ['conversations:read'] });
    const instanceId = await seedInstance(ws, { config: { phoneNumberId } });
    const emulator = process.env.EMULATOR_URL!;
    const post = (path: string, body: unknown, headers: Record<string, string> = {}) =>
      fetch(`${emulator}${path}`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', ...headers },
        body: JSON.stringify(body),
      });
    const registered = await post('/__emulator/webhook', {
      phoneNumberId,
      url: `${api.url}/webhooks/whatsapp/${instanceId}`,
      appSecret: SECRET,
    });
    expect(await registered.json()).toEqual({
      webhook: {
        phoneNumberId,
        url: `${api.url}/webhooks/whatsapp/${instanceId}`,
        displayPhoneNumber: expect.any(String),
        wabaId: expect.stringMatching(/^\d{15}$/),
      },
    });

    const reference = await attempt(ws.id, 'in_flight');
    const { modern } = nextMobile();
    const sent = await post(
      `/v21.0/${phoneNumberId}/messages`,
      { messaging_product: 'whatsapp', to: modern, type: 'text', text: { body: 'Olá' }, biz_opaque_callback_data: reference },
      { authorization: 'Bearer t' },
    );
    expect(sent.status).toBe(200);
    const answer = (await sent.json()) as { contacts: { wa_id: string }[]; messages: { id: string }[] };
    for (let i = 0; i < 50 && (await attemptRow(reference)).state !== 'sent'; i++) await new Promise((r) => setTimeout(r, 100));
    expect(await attemptRow(reference)).toEqual({
      state: 'sent',
      provider_message_id: answer.messages[0].id,
      wa_id: answer.contacts[0].wa_id,
      error: null,
    });
    const log = (await (await fetch(`${emulator}/__emulator/webhook?phoneNumberId=${phoneNumberId}`)).json()) as {
      deliveries: { httpStatus?: number; messageId: string }[];
    };
    expect(log.deliveries).toEqual([
      expect.objectContaining({ httpStatus: 200, messageId: answer.messages[0].id, status: 'sent', attempt: 1 }),
    ]);
    await post('/__emulator/reset', { phoneNumberId });
  });
});

describe('GET /webhooks/whatsapp/{instanceId}: verification', () => {
  const VERIFY = 'my-verify-token';
  const verify = (instanceId: string, params: Record<string, string>) =>
    api.request('GET', `/webhooks/whatsapp/${instanceId}?${new URLSearchParams(params).toString()}`);
  /** An instance whose verify token the operator set through the admin API. */
  const withVerifyToken = async () => {
    const { instanceId, ws } = await setup();
    const res = await api.admin('PATCH', `/admin/v1/workspaces/${ws.id}/instances/${instanceId}`, { config: { verifyToken: VERIFY } });
    expect(res.body.data.config).toMatchObject({ verifyTokenSet: true });
    expect(JSON.stringify(res.body)).not.toContain(VERIFY);
    return instanceId;
  };

  it('answers the challenge as text/plain when the verify token matches', async () => {
    const instanceId = await withVerifyToken();
    const res = await verify(instanceId, { 'hub.mode': 'subscribe', 'hub.verify_token': VERIFY, 'hub.challenge': '1158201444' });
    expect(res.status).toBe(200);
    expect(res.text).toBe('1158201444');
    expect(res.headers.get('content-type')).toMatch(/^text\/plain/);
    // Reflected as plain text, never as HTML.
    const html = await verify(instanceId, { 'hub.mode': 'subscribe', 'hub.verify_token': VERIFY, 'hub.challenge': '<script>x</script>' });
    expect(html.headers.get('content-type')).toMatch(/^text\/plain/);
  });

  it('answers 401 for a wrong token, a wrong mode or no challenge, and 404 for an unknown instance', async () => {
    const instanceId = await withVerifyToken();
    expectError(
      await verify(instanceId, { 'hub.mode': 'subscribe', 'hub.verify_token': 'wrong', 'hub.challenge': '1' }),
      401,
      'UNAUTHORIZED',
    );
    expectError(
      await verify(instanceId, { 'hub.mode': 'unsubscribe', 'hub.verify_token': VERIFY, 'hub.challenge': '1' }),
      401,
      'UNAUTHORIZED',
    );
    expectError(await verify(instanceId, { 'hub.mode': 'subscribe', 'hub.verify_token': VERIFY }), 401, 'UNAUTHORIZED');
    expectError(await verify(instanceId, {}), 401, 'UNAUTHORIZED');
    expectError(
      await verify('00000000-0000-4000-8000-000000000000', { 'hub.mode': 'subscribe', 'hub.verify_token': VERIFY, 'hub.challenge': '1' }),
      404,
      'NOT_FOUND',
    );
  });

  it('never accepts the app secret as the verify token (it signs inbound traffic and must not travel in a URL)', async () => {
    const { instanceId } = await setup();
    expectError(
      await verify(instanceId, { 'hub.mode': 'subscribe', 'hub.verify_token': SECRET, 'hub.challenge': 'abc' }),
      401,
      'UNAUTHORIZED',
    );
    const withToken = await withVerifyToken();
    expectError(
      await verify(withToken, { 'hub.mode': 'subscribe', 'hub.verify_token': SECRET, 'hub.challenge': 'abc' }),
      401,
      'UNAUTHORIZED',
    );
  });
});
