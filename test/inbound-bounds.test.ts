import { createHmac } from 'node:crypto';
import path from 'node:path';
import { settledHorizon } from '../domain/platform/cursor';
import { ITEMS_PER_TRANSACTION, MAX_DELIVERY_ITEMS } from '../domain/messaging/inbound';
import { freePort, nodeTs, ROOT, startChild, waitForHttp } from '../scripts/stack';
import { ApiResponse, createWorkspace, eventually, expectError, startApi, TestApi, Workspace } from './helpers';
import { uniqueMobile } from './phones';

/**
 * Bounds of an inbound provider delivery (issue 32, "no tenant can slow down the others"): a
 * delivery carrying more items than any provider sends is refused whole; a large one below that is
 * recorded in short transactions, so another workspace's sync (which reads up to the oldest open
 * transaction) never waits for the whole delivery; and a delivery cut off between two of them and
 * sent again records each item exactly once. Bodies are the real Cloud API and web gateway shapes,
 * signed as the providers sign them.
 */
let api: TestApi;
beforeAll(async () => {
  api = await startApi();
});
afterAll(async () => api.close());

const SECRET = 'bounds-secret';
const GATEWAY_KEY = 'bounds-gateway-key';
const OUR_NUMBER = '5511930000000';
const PHONE_NUMBER_ID = 'PN-BOUNDS';
const LOG_DIR = path.join(process.env.TEST_STACK_DIR ? path.resolve(process.env.TEST_STACK_DIR) : path.join(ROOT, '.data', 'test'), 'logs');

/** The i-th distinct mobile of this file, the same number for the same i (each test has its own workspace); from the one allocator. */
const mobiles = new Map<number, string>();
const mobile = (i: number): string => {
  if (!mobiles.has(i)) mobiles.set(i, uniqueMobile('11'));
  return mobiles.get(i)!;
};
let seq = 0;
const wamid = (tag: string): string => `wamid.${tag}.${process.pid}.${Date.now().toString(36)}.${++seq}`;
/** Unix seconds as the Cloud API sends them (a string), `ago` seconds in the past. */
const unix = (ago: number): string => String(Math.floor(Date.now() / 1000) - ago);

async function cloudInstance(ws: { id: string }): Promise<string> {
  const res = await api.admin('POST', `/admin/v1/workspaces/${ws.id}/instances`, {
    name: 'Main number',
    channel: 'whatsapp',
    provider: 'cloud',
    connected: true,
    config: { appSecret: SECRET, phoneNumberId: PHONE_NUMBER_ID, accessToken: 't', baseUrl: process.env.EMULATOR_URL },
  });
  expect(res.status).toBe(201);
  return res.body.data.id;
}

interface Inbound {
  from: string;
  id: string;
  text: string;
  timestamp: string;
}
const text = (m: Inbound) => ({ from: m.from, id: m.id, timestamp: m.timestamp, type: 'text', text: { body: m.text } });
const change = (value: Record<string, unknown>) => ({
  field: 'messages',
  value: { messaging_product: 'whatsapp', metadata: { display_phone_number: OUR_NUMBER, phone_number_id: PHONE_NUMBER_ID }, ...value },
});
const notification = (entries: unknown[][]) => ({
  object: 'whatsapp_business_account',
  entry: entries.map((changes) => ({ id: '102290129340398', changes })),
});

/** Meta's batching: one change per message (with its sender's contact), 100 changes per entry. */
function batched(messages: Inbound[]) {
  const entries: unknown[][] = [];
  messages.forEach((m, i) => {
    if (i % 100 === 0) entries.push([]);
    entries.at(-1)!.push(change({ contacts: [{ profile: { name: `Contact ${m.from.slice(-4)}` }, wa_id: m.from }], messages: [text(m)] }));
  });
  return notification(entries);
}

const sign = (raw: string): string => `sha256=${createHmac('sha256', SECRET).update(raw, 'utf8').digest('hex')}`;
const headersFor = (raw: string) => ({ 'content-type': 'application/json', 'x-hub-signature-256': sign(raw) });
const deliver = (instanceId: string, raw: string): Promise<ApiResponse> =>
  api.request('POST', `/webhooks/whatsapp/${instanceId}`, { rawBody: raw, headers: headersFor(raw) });

const count = async (table: string, workspaceId: string, where: Record<string, unknown> = {}): Promise<number> =>
  Number(
    (
      await api
        .db(table)
        .where({ workspace_id: workspaceId, ...where })
        .count({ n: '*' })
    )[0].n,
  );

/** Everything a delivery could write in a workspace. */
async function written(workspaceId: string) {
  return {
    contacts: await count('contacts', workspaceId),
    conversations: await count('conversations', workspaceId),
    messages: await count('messages', workspaceId),
    events: await count('outbox_events', workspaceId),
  };
}

/** `n` text messages from `n` distinct contacts (numbered from `first`), oldest first. */
const fromDistinct = (n: number, tag: string, first = 0): Inbound[] =>
  Array.from({ length: n }, (_, i) => ({ from: mobile(first + i), id: wamid(tag), text: `Oi ${i}`, timestamp: unix(3600 - i) }));

describe('the item cap of a provider delivery', () => {
  it(`refuses a delivery of more than ${MAX_DELIVERY_ITEMS} items with 413 PAYLOAD_TOO_LARGE before writing anything, and logs it for the operator`, async () => {
    const ws = await createWorkspace(api);
    const instanceId = await cloudInstance(ws);
    // 2,600 messages with their 2,600 contacts (5,200 items), 100 of each per change: well under 1 MiB.
    const messages = fromDistinct(2600, 'over');
    const entries: unknown[][] = [];
    for (let i = 0; i < messages.length; i += 100) {
      const part = messages.slice(i, i + 100);
      entries.push([change({ contacts: part.map((m) => ({ profile: { name: 'X' }, wa_id: m.from })), messages: part.map(text) })]);
    }
    const raw = JSON.stringify(notification(entries));
    expect(Buffer.byteLength(raw)).toBeLessThan(1024 * 1024);
    const logsBefore = api.logs.length;

    const res = await deliver(instanceId, raw);
    expectError(res, 413, 'PAYLOAD_TOO_LARGE');
    expect(res.body.error).toContain('5200 items');
    expect(await written(ws.id)).toEqual({ contacts: 0, conversations: 0, messages: 0, events: 0 });
    const logged = api.logs
      .slice(logsBefore)
      .map((line) => JSON.parse(line))
      .find((l) => l.msg?.startsWith('inbound webhook refused'));
    expect(logged).toMatchObject({ level: 40, instanceId, workspaceId: ws.id, items: 5200, limit: MAX_DELIVERY_ITEMS });

    // Every kind of item counts: contacts alone, exactly at the cap, are taken (and write nothing); one more is refused.
    const contactsOnly = (n: number) =>
      JSON.stringify(
        notification([[change({ contacts: Array.from({ length: n }, (_, i) => ({ profile: { name: 'X' }, wa_id: mobile(i) })) })]]),
      );
    const atCap = await deliver(instanceId, contactsOnly(MAX_DELIVERY_ITEMS));
    expect({ status: atCap.status, data: atCap.body.data }).toEqual({
      status: 200,
      data: { received: 0, duplicates: 0, statuses: 0, ignored: 0 },
    });
    expectError(await deliver(instanceId, contactsOnly(MAX_DELIVERY_ITEMS + 1)), 413, 'PAYLOAD_TOO_LARGE');
    expect(await written(ws.id)).toEqual({ contacts: 0, conversations: 0, messages: 0, events: 0 });
  });

  it(`refuses a web gateway delivery of more than ${MAX_DELIVERY_ITEMS} messages the same way`, async () => {
    const ws = await createWorkspace(api);
    const created = await api.admin('POST', `/admin/v1/workspaces/${ws.id}/instances`, {
      name: 'Web',
      channel: 'whatsapp',
      provider: 'web',
      connected: true,
      config: { baseUrl: process.env.EMULATOR_URL, instanceName: `bounds-${ws.id.slice(0, 8)}`, accessToken: GATEWAY_KEY },
    });
    expect(created.status).toBe(201);
    const data = Array.from({ length: MAX_DELIVERY_ITEMS + 1 }, (_, i) => ({
      key: { remoteJid: `${mobile(i)}@s.whatsapp.net`, fromMe: false, id: `GW${i}` },
      messageType: 'conversation',
      message: { conversation: 'oi' },
    }));
    const res = await api.request('POST', `/webhooks/web/${created.body.data.id}`, {
      body: { event: 'messages.upsert', instance: 'x', data, apikey: GATEWAY_KEY },
    });
    expectError(res, 413, 'PAYLOAD_TOO_LARGE');
    expect(await written(ws.id)).toEqual({ contacts: 0, conversations: 0, messages: 0, events: 0 });
  });
});

describe('a large delivery below the cap', () => {
  it("is recorded in short transactions: another workspace's sync reads its own change before the delivery ends", async () => {
    const ws = await createWorkspace(api);
    const instanceId = await cloudInstance(ws);
    const other: Workspace = await createWorkspace(api, { scopes: ['leads:read', 'leads:write'] });

    // 940 contacts writing once, and one contact writing 60 times, interleaved through the delivery.
    const chatty = mobile(5000);
    const single = fromDistinct(940, 'bulk');
    const chattyMessages: Inbound[] = Array.from({ length: 60 }, (_, i) => ({
      from: chatty,
      id: wamid('chatty'),
      text: `Mensagem ${i}`,
      timestamp: unix(600 - i),
    }));
    const messages: Inbound[] = [];
    single.forEach((m, i) => {
      messages.push(m);
      if (i % 16 === 0 && chattyMessages[i / 16]) messages.push(chattyMessages[i / 16]);
    });
    messages.push(...chattyMessages.slice(messages.length - single.length));
    expect(messages).toHaveLength(1000);
    const raw = JSON.stringify(batched(messages));

    // The other workspace's sync position before the delivery (it has no leads yet).
    const since = BigInt(Date.now()) * 1000n;
    await eventually('transactions open elsewhere to end', async () => BigInt(await settledHorizon(api.db)) >= since);
    const first = await api.request('GET', '/api/v1/leads?paging=cursor&limit=100', { key: other.key });
    expect(first.body.data).toEqual([]);
    const cursor: string = first.body.pagination.nextCursor;

    const delivering = deliver(instanceId, raw);
    await eventually('the first messages of the delivery to be readable', async () => (await count('messages', ws.id)) > 0, 60_000, 10);
    // The other tenant writes while the delivery goes on, and its sync must see it before the delivery ends.
    const lead = await api.request('POST', '/api/v1/leads', {
      key: other.key,
      body: { phone: '+55 41 99876-5432', name: 'Written during the delivery' },
    });
    expect(lead.status).toBe(201);
    await eventually(
      "the other workspace's lead in its sync",
      async () =>
        (await api.request('GET', `/api/v1/leads?cursor=${encodeURIComponent(cursor)}`, { key: other.key })).body.data?.some(
          (l: { id: string }) => l.id === lead.body.data.id,
        ),
      60_000,
      20,
    );
    const recordedWhenSeen = await count('messages', ws.id);
    expect(recordedWhenSeen).toBeLessThan(messages.length);

    const res = await delivering;
    expect({ status: res.status, data: res.body.data }).toEqual({
      status: 200,
      data: { received: 1000, duplicates: 0, statuses: 0, ignored: 0 },
    });
    expect(await written(ws.id)).toMatchObject({ contacts: 941, conversations: 941, messages: 1000 });

    // No transaction held more than ITEMS_PER_TRANSACTION messages (rows of one transaction carry its start, now()).
    const perTransaction: { n: number }[] = (
      await api.db.raw(`SELECT count(*)::int AS n FROM messages WHERE workspace_id = ? GROUP BY created_at`, [ws.id])
    ).rows;
    expect(Math.max(...perTransaction.map((t) => t.n))).toBeLessThanOrEqual(ITEMS_PER_TRANSACTION);
    expect(perTransaction.length).toBeGreaterThanOrEqual(Math.ceil(1000 / ITEMS_PER_TRANSACTION));
    // Each message's message.received, and each new contact's contact.created, were written in its transaction.
    const { rows: apart } = await api.db.raw(
      `SELECT e.name, count(*)::int AS n, count(*) FILTER (WHERE e.created_at = coalesce(m.created_at, c.created_at))::int AS together
         FROM outbox_events e
         LEFT JOIN messages m ON e.name = 'message.received' AND m.workspace_id = e.workspace_id AND m.id = (e.payload->>'message_id')::uuid
         LEFT JOIN contacts c ON e.name = 'contact.created' AND c.workspace_id = e.workspace_id AND c.id = (e.payload->>'contact_id')::uuid
        WHERE e.workspace_id = ? GROUP BY e.name ORDER BY e.name`,
      [ws.id],
    );
    expect(apart).toEqual([
      { name: 'contact.created', n: 941, together: 941 },
      { name: 'message.received', n: 1000, together: 1000 },
    ]);

    // The chatty contact's 60 messages span transactions, and their events keep the order of the delivery.
    const contact = await api.db('contacts').where({ workspace_id: ws.id, phone: chatty }).first('id');
    const { rows: order } = await api.db.raw(
      `SELECT m.provider_message_id AS id FROM outbox_events e JOIN messages m ON m.workspace_id = e.workspace_id AND m.id = (e.payload->>'message_id')::uuid
        WHERE e.workspace_id = ? AND e.name = 'message.received' AND e.payload->>'contact_id' = ? ORDER BY e.seq`,
      [ws.id, contact.id],
    );
    expect(order.map((r: { id: string }) => r.id)).toEqual(chattyMessages.map((m) => m.id));
    // Its 24-hour window opened at its newest message.
    const conversation = await api.db('conversations').where({ workspace_id: ws.id, contact_id: contact.id }).first('last_inbound_at');
    expect(conversation.last_inbound_at.getTime()).toBe(Number(chattyMessages.at(-1)!.timestamp) * 1000);
  }, 180_000);

  it('records each item exactly once when the API process dies between two transactions and the provider sends the delivery again', async () => {
    const ws = await createWorkspace(api);
    const instanceId = await cloudInstance(ws);
    // Ten of our outbound messages, whose status callbacks come at the end of the delivery.
    const seedRaw = JSON.stringify(batched(fromDistinct(1, 'seed', 9000)));
    expect((await deliver(instanceId, seedRaw)).status).toBe(200);
    const conversation = await api.db('conversations').where({ workspace_id: ws.id }).first('id');
    const outbound = Array.from({ length: 10 }, () => wamid('out'));
    await api.db('messages').insert(
      outbound.map((id) => ({
        workspace_id: ws.id,
        conversation_id: conversation.id,
        direction: 'out',
        type: 'text',
        body: 'Olá',
        status: 'sent',
        provider_message_id: id,
      })),
    );
    const before = await written(ws.id);
    const inboundBefore = await count('messages', ws.id, { direction: 'in' });

    const messages = fromDistinct(1000, 'crash');
    const payload = batched(messages);
    payload.entry.push({
      id: '102290129340398',
      changes: [change({ statuses: outbound.map((id) => ({ id, status: 'delivered', timestamp: unix(5), recipient_id: mobile(9000) })) })],
    });
    const raw = JSON.stringify(payload);

    // The delivery goes to an API process of its own, killed (SIGKILL: no shutdown) once the first messages are committed.
    const port = await freePort();
    const child = startChild({
      name: 'inbound-bounds-api',
      ...nodeTs('api/server.ts'),
      env: { PORT: String(port), PUBLIC_BASE_URL: `http://127.0.0.1:${port}` },
      logFile: path.join(LOG_DIR, 'inbound-bounds-api.log'),
    });
    try {
      await waitForHttp(`http://127.0.0.1:${port}/health`, child);
      const cutOff = fetch(`http://127.0.0.1:${port}/webhooks/whatsapp/${instanceId}`, {
        method: 'POST',
        headers: headersFor(raw),
        body: raw,
      }).then(
        (r) => r.status,
        () => 0,
      );
      await eventually(
        'the first messages of the delivery to be committed',
        async () => (await count('messages', ws.id, { direction: 'in' })) > inboundBefore,
        60_000,
        5,
      );
      child.process.kill('SIGKILL');
      expect(await cutOff).toBe(0);
    } finally {
      await child.stop();
    }
    const recorded = (await count('messages', ws.id, { direction: 'in' })) - inboundBefore;
    expect(recorded).toBeGreaterThan(0);
    expect(recorded).toBeLessThan(messages.length);
    // What committed is whole: each recorded message has its conversation, its contact and its events.
    expect(await written(ws.id)).toEqual({
      contacts: before.contacts + recorded,
      conversations: before.conversations + recorded,
      messages: before.messages + recorded,
      events: before.events + 2 * recorded,
    });

    // Meta sends the same bytes again: only the rest is recorded, and the statuses move.
    const again = await deliver(instanceId, raw);
    expect({ status: again.status, data: again.body.data }).toEqual({
      status: 200,
      data: { received: messages.length - recorded, duplicates: recorded, statuses: 10, ignored: 0 },
    });
    const after = await written(ws.id);
    // Each message its contact.created and message.received; each status its message.status_updated, once.
    expect(after).toEqual({
      contacts: before.contacts + 1000,
      conversations: before.conversations + 1000,
      messages: before.messages + 1000,
      events: before.events + 2000 + 10,
    });
    const { rows: events } = await api.db.raw(
      `SELECT name, count(*)::int AS n, count(DISTINCT coalesce(payload->>'message_id', payload->>'contact_id'))::int AS distinct_items
         FROM outbox_events WHERE workspace_id = ? GROUP BY name ORDER BY name`,
      [ws.id],
    );
    expect(events).toEqual([
      { name: 'contact.created', n: 1001, distinct_items: 1001 },
      { name: 'message.received', n: 1001, distinct_items: 1001 },
      { name: 'message.status_updated', n: 10, distinct_items: 10 },
    ]);
    expect(await api.db('messages').where({ workspace_id: ws.id, direction: 'out' }).pluck('status')).toEqual(Array(10).fill('delivered'));

    // And once more: nothing is recorded twice, and no status moves again.
    const third = await deliver(instanceId, raw);
    expect(third.body.data).toEqual({ received: 0, duplicates: 1000, statuses: 0, ignored: 10 });
    expect(await written(ws.id)).toEqual(after);
  }, 180_000);
});
