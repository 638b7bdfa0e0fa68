/**
 * Instagram conversations end to end, through the real stack: the emulator's Instagram (Graph API
 * sends, signed webhooks, CDN files), the API's `/webhooks/instagram/{instanceId}`, the worker's
 * send workflow and media dispatcher, PostgreSQL and Temporal.
 */
import { createHash, createHmac } from 'node:crypto';
import { createWorkspace, eventually, expectError, outbox, seedMember, startApi, TestApi, Workspace } from './helpers';
import { cloudInstance, emulator, instagramInstance, uniqueIgId } from './stack-fixtures';
import { uniqueMobile } from './phones';

let api: TestApi;
beforeAll(async () => {
  api = await startApi();
});
afterAll(async () => api.close());

const SCOPES = [
  'leads:read',
  'leads:write',
  'conversations:read',
  'conversations:send',
  'tags:write',
  'broadcasts:read',
  'broadcasts:write',
  'automations:read',
  'automations:write',
  'instances:read',
] as const;
const DAY = 24 * 60 * 60 * 1000;

type Account = Awaited<ReturnType<typeof instagramInstance>>;

/** A person writes a DM to the account (through the emulator: a signed webhook to the service). */
async function dm(account: Account, from: string, body: Record<string, unknown> = {}): Promise<any> {
  const answer = await emulator('/__emulator/instagram/inbound', { igUserId: account.igUserId, from, ...body });
  expect(answer.delivered).toBe(200);
  return answer;
}

async function conversationOf(ws: Workspace, contactId: string): Promise<any> {
  const res = await api.request('GET', `/api/v1/conversations?contactId=${contactId}`, { key: ws.key });
  expect(res.status).toBe(200);
  return res.body.data[0];
}

async function leadByInstagram(ws: Workspace, igsid: string): Promise<any> {
  const row = await api.db('contact_identities').where({ workspace_id: ws.id, external_id: igsid }).first('contact_id');
  expect(row).toBeDefined();
  const res = await api.request('GET', `/api/v1/leads/${row.contact_id}`, { key: ws.key });
  expect(res.status).toBe(200);
  return res.body.data;
}

const emulatorCalls = async (to: string): Promise<any[]> =>
  ((await (await fetch(`${process.env.EMULATOR_URL}/__emulator/calls?to=${to}`)).json()) as { calls: any[] }).calls;

const reply = (ws: Workspace, conversationId: string, text: string) =>
  api.request('POST', `/api/v1/conversations/${conversationId}/messages`, { key: ws.key, body: { type: 'text', text } });

describe('Instagram DMs', () => {
  it('a DM creates a phoneless contact and a conversation, emits message.received, and a reply reaches Instagram in the Graph API format', async () => {
    const ws = await createWorkspace(api, { scopes: [...SCOPES] });
    const account = await instagramInstance(api, ws.id);
    const person = uniqueIgId();
    const sent = await dm(account, person, { text: 'Oi, quanto custa o curso?', username: 'maria.silva', name: 'Maria Silva' });
    expect(sent.answer.data).toMatchObject({ received: 1, duplicates: 0 });

    const lead = await leadByInstagram(ws, person);
    expect(lead).toMatchObject({ name: 'Maria Silva', phone: null, instagram: { id: person, username: 'maria.silva' } });
    const conversation = await conversationOf(ws, lead.id);
    expect(conversation).toMatchObject({ channel: 'instagram', instanceId: account.instanceId, contact: { id: lead.id, phone: null } });

    const received = await outbox(api, ws.id, 'message.received');
    expect(received).toHaveLength(1);
    expect(received[0].payload).toMatchObject({ contact_id: lead.id, phone: null, instagram_id: person, channel: 'instagram' });
    const created = await outbox(api, ws.id, 'contact.created');
    expect(created[0].payload).toMatchObject({ contact_id: lead.id, phone: null, instagram_id: person });

    const res = await reply(ws, conversation.id, 'Oi Maria! Custa R$ 297.');
    expect(res.status).toBe(201);
    const [call] = await emulatorCalls(person);
    expect(call).toMatchObject({
      api: 'instagram',
      phoneNumberId: account.igUserId,
      outcome: 'ok',
      body: { recipient: { id: person }, messaging_type: 'RESPONSE', message: { text: 'Oi Maria! Custa R$ 297.' } },
    });
    // Meta echoes what the business sent: the echo is not a customer's message.
    await new Promise((resolve) => setTimeout(resolve, 400));
    const messages = await api.db('messages').where({ workspace_id: ws.id, conversation_id: conversation.id }).orderBy('timestamp');
    expect(messages.map((m) => m.direction)).toEqual(['in', 'out']);
  });

  it('a duplicate mid is recorded once, and a wrong signature changes nothing', async () => {
    const ws = await createWorkspace(api, { scopes: [...SCOPES] });
    const account = await instagramInstance(api, ws.id);
    const person = uniqueIgId();
    const first = await dm(account, person, { mid: `mid-${person}`, text: 'primeira' });
    expect(first.answer.data).toMatchObject({ received: 1 });
    const again = await dm(account, person, { mid: `mid-${person}`, text: 'primeira' });
    expect(again.answer.data).toMatchObject({ received: 0, duplicates: 1 });
    expect(await api.db('messages').where({ workspace_id: ws.id, provider_message_id: `mid-${person}` })).toHaveLength(1);

    const stranger = uniqueIgId();
    const raw = JSON.stringify({
      object: 'instagram',
      entry: [
        {
          id: account.igUserId,
          time: Date.now(),
          messaging: [
            { sender: { id: stranger }, recipient: { id: account.igUserId }, timestamp: Date.now(), message: { mid: 'forged', text: 'x' } },
          ],
        },
      ],
    });
    const forged = await fetch(`${api.url}/webhooks/instagram/${account.instanceId}`, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        'x-hub-signature-256': `sha256=${createHmac('sha256', 'not-the-secret').update(raw).digest('hex')}`,
      },
      body: raw,
    });
    expect(forged.status).toBe(401);
    expect(((await forged.json()) as any).code).toBe('UNAUTHORIZED');
    expect(await api.db('contact_identities').where({ external_id: stranger })).toHaveLength(0);

    // Meta's verification handshake with the instance's verify token.
    const ok = await fetch(
      `${api.url}/webhooks/instagram/${account.instanceId}?hub.mode=subscribe&hub.verify_token=ig-verify&hub.challenge=42`,
    );
    expect([ok.status, await ok.text()]).toEqual([200, '42']);
    const wrong = await fetch(
      `${api.url}/webhooks/instagram/${account.instanceId}?hub.mode=subscribe&hub.verify_token=nope&hub.challenge=42`,
    );
    expect(wrong.status).toBe(401);
  });

  it('outside 24 hours an API reply is WINDOW_CLOSED, a panel reply within 7 days carries HUMAN_AGENT, after 7 days none goes out', async () => {
    const ws = await createWorkspace(api, { scopes: [...SCOPES] });
    const account = await instagramInstance(api, ws.id);
    const member = await seedMember(api, ws.id, 'Ana Vendas');
    const person = uniqueIgId();
    // An old DM is recorded and creates the conversation, but leaves the window closed.
    await dm(account, person, { text: 'Vi o post', timestamp: Date.now() - 2 * DAY });
    const lead = await leadByInstagram(ws, person);
    const conversation = await conversationOf(ws, lead.id);

    expectError(await reply(ws, conversation.id, 'Oi!'), 422, 'WINDOW_CLOSED');
    expect(await emulatorCalls(person)).toHaveLength(0);

    const panel = await api.admin('POST', `/admin/v1/workspaces/${ws.id}/conversations/${conversation.id}/messages`, {
      memberId: member.id,
      text: 'Oi, aqui é a Ana. Ainda tem interesse?',
    });
    expect(panel.status).toBe(201);
    const [call] = await emulatorCalls(person);
    expect(call).toMatchObject({
      outcome: 'ok',
      body: {
        recipient: { id: person },
        messaging_type: 'MESSAGE_TAG',
        tag: 'HUMAN_AGENT',
        message: { text: 'Oi, aqui é a Ana. Ainda tem interesse?' },
      },
    });

    // Templates do not exist on Instagram, decided before any template lookup.
    const template = await api.request('POST', `/api/v1/conversations/${conversation.id}/messages`, {
      key: ws.key,
      body: { type: 'template', templateName: 'nenhum', templateLanguage: 'pt_BR' },
    });
    expectError(template, 422, 'TEMPLATE_UNSUPPORTED');

    const late = uniqueIgId();
    await dm(account, late, { text: 'Oi', timestamp: Date.now() - 8 * DAY });
    const lateConversation = await conversationOf(ws, (await leadByInstagram(ws, late)).id);
    const tooLate = await api.admin('POST', `/admin/v1/workspaces/${ws.id}/conversations/${lateConversation.id}/messages`, {
      memberId: member.id,
      text: 'Oi?',
    });
    expectError(tooLate, 422, 'WINDOW_CLOSED');
    expect(await emulatorCalls(late)).toHaveLength(0);
  });

  it('an image DM is stored and downloadable byte for byte, never showing the CDN URL', async () => {
    const ws = await createWorkspace(api, { scopes: [...SCOPES] });
    const account = await instagramInstance(api, ws.id);
    const person = uniqueIgId();
    const sent = await dm(account, person, { media: { type: 'image', bytes: 300_000 } });
    const row = await api.db('messages').where({ workspace_id: ws.id, provider_message_id: sent.mid }).first('id', 'conversation_id');
    const message = await eventually(
      'the image to be stored',
      async () => {
        const res = await api.request('GET', `/api/v1/conversations/${row.conversation_id}`, { key: ws.key });
        const found = res.body.data.messages.find((m: any) => m.id === row.id);
        return found?.media?.status === 'stored' ? found : undefined;
      },
      60_000,
      200,
    );
    expect(message).toMatchObject({ direction: 'in', type: 'image', media: { status: 'stored', size: 300_000, sha256: sent.sha256 } });
    expect(message.mediaUrl).toBeUndefined();
    const download = await fetch(`${api.url}/api/v1/messages/${row.id}/media`, { headers: { authorization: `Bearer ${ws.key}` } });
    expect(download.status).toBe(200);
    expect(
      createHash('sha256')
        .update(Buffer.from(await download.arrayBuffer()))
        .digest('hex'),
    ).toBe(sent.sha256);
  });

  it('a seen event moves our reply to read and emits message.status_updated', async () => {
    const ws = await createWorkspace(api, { scopes: [...SCOPES] });
    const account = await instagramInstance(api, ws.id);
    const person = uniqueIgId();
    await dm(account, person, { text: 'Oi' });
    const conversation = await conversationOf(ws, (await leadByInstagram(ws, person)).id);
    const res = await reply(ws, conversation.id, 'Olá!');
    expect(res.status).toBe(201);
    const [call] = await emulatorCalls(person);
    const seen = await emulator('/__emulator/instagram/seen', { igUserId: account.igUserId, from: person, mid: call.messageId });
    expect(seen).toMatchObject({ delivered: 200, answer: { data: { statuses: 1 } } });
    const message = await api.db('messages').where({ workspace_id: ws.id, id: res.body.data.id }).first('status');
    expect(message.status).toBe('read');
    const [event] = await outbox(api, ws.id, 'message.status_updated');
    expect(event.payload).toMatchObject({ message_id: res.body.data.id, status: 'read' });
  });
});

describe('phoneless contacts in the lead API', () => {
  it('lists, searches (by username), syncs and isolates them by workspace', async () => {
    const ws = await createWorkspace(api, { scopes: [...SCOPES] });
    const other = await createWorkspace(api, { scopes: [...SCOPES] });
    const account = await instagramInstance(api, ws.id);
    const person = uniqueIgId();
    await dm(account, person, { text: 'Oi', username: 'joana.doces', name: 'Joana' });
    const lead = await leadByInstagram(ws, person);

    const list = await api.request('GET', '/api/v1/leads', { key: ws.key });
    expect(list.status).toBe(200);
    expect(list.body.data.map((l: any) => l.id)).toContain(lead.id);
    const search = await api.request('GET', '/api/v1/leads?q=joana.doc', { key: ws.key });
    expect(search.body.data.map((l: any) => l.id)).toEqual([lead.id]);
    const sync = await api.request('GET', '/api/v1/leads?updatedAfter=2000-01-01T00:00:00Z', { key: ws.key });
    expect(sync.status).toBe(200);
    expect(sync.body.data.find((l: any) => l.id === lead.id)).toMatchObject({
      phone: null,
      instagram: { id: person, username: 'joana.doces' },
    });

    expect((await api.request('GET', `/api/v1/leads/${lead.id}`, { key: other.key })).status).toBe(404);
    expect((await api.request('GET', '/api/v1/leads?q=joana.doc', { key: other.key })).body.data).toEqual([]);
  });
});

describe('joining a phoneless contact to a phone', () => {
  it('an upsert with the phone and instagramId merges the Instagram contact into the lead, whose next DM reaches it', async () => {
    const ws = await createWorkspace(api, { scopes: [...SCOPES] });
    const account = await instagramInstance(api, ws.id);
    const person = uniqueIgId();
    await dm(account, person, { text: 'Oi', username: 'carla.moda', name: 'Carla' });
    const phoneless = await leadByInstagram(ws, person);
    const phone = uniqueMobile();
    const joined = await api.request('POST', '/api/v1/leads', { key: ws.key, body: { phone, name: 'Carla Souza', instagramId: person } });
    expect(joined.status).toBe(201);
    expect(joined.body.data).toMatchObject({ phone: expect.any(String), instagram: { id: person, username: 'carla.moda' } });
    expect(joined.body.data.id).not.toBe(phoneless.id);
    expect((await api.request('GET', `/api/v1/leads/${phoneless.id}`, { key: ws.key })).status).toBe(404);
    const [merged] = await outbox(api, ws.id, 'contact.merged');
    expect(merged.payload).toMatchObject({ contact_id: phoneless.id, merged_into_id: joined.body.data.id });
    // The conversation went with the merge, and the person's next DM lands on the lead with the phone.
    await dm(account, person, { text: 'Voltei' });
    const conversation = await conversationOf(ws, joined.body.data.id);
    expect(conversation).toMatchObject({ channel: 'instagram' });
    expect(await api.db('contacts').where({ workspace_id: ws.id }).whereNull('merged_into_id')).toHaveLength(1);
  });
});

describe('automations and broadcasts', () => {
  it("an automation's send_message replies in the Instagram conversation of a contact without a phone", async () => {
    const ws = await createWorkspace(api, { scopes: [...SCOPES] });
    const account = await instagramInstance(api, ws.id);
    const person = uniqueIgId();
    await dm(account, person, { text: 'Oi', name: 'Rita' });
    const lead = await leadByInstagram(ws, person);
    const flow = await api.request('POST', '/api/v1/automations', {
      key: ws.key,
      body: {
        name: 'hello on email',
        trigger: { type: 'contact_updated', fields: ['email'] },
        actions: [{ type: 'send_message', text: 'Oi {{contact.name}}, recebemos seu e-mail' }],
      },
    });
    expect(flow.status).toBe(201);
    expect((await api.request('PATCH', `/api/v1/leads/${lead.id}`, { key: ws.key, body: { email: 'rita@example.com' } })).status).toBe(200);
    const run = await eventually('the run to finish', async () => {
      const runs = (await api.request('GET', `/api/v1/automations/${flow.body.data.id}/runs`, { key: ws.key })).body.data;
      return runs[0]?.status !== 'running' && runs[0];
    });
    expect(run).toMatchObject({ status: 'completed', error: null });
    const [call] = await emulatorCalls(person);
    expect(call.body).toMatchObject({
      recipient: { id: person },
      messaging_type: 'RESPONSE',
      message: { text: 'Oi Rita, recebemos seu e-mail' },
    });
  });

  it("a broadcast's audience member without a phone is skipped with PHONE_REQUIRED", async () => {
    const ws = await createWorkspace(api, { scopes: [...SCOPES] });
    await cloudInstance(api, ws.id, { label: 'igbc' });
    const account = await instagramInstance(api, ws.id);
    const person = uniqueIgId();
    await dm(account, person, { text: 'Oi' });
    const phoneless = await leadByInstagram(ws, person);
    const withPhone = await api.request('POST', '/api/v1/leads', {
      key: ws.key,
      body: { phone: uniqueMobile(), name: 'Lia', tags: ['vip'] },
    });
    expect((await api.request('POST', `/api/v1/leads/${phoneless.id}/tags`, { key: ws.key, body: { tag: 'vip' } })).status).toBeLessThan(
      300,
    );
    const tagId = withPhone.body.data.tags[0].id;
    const created = await api.request('POST', '/api/v1/broadcasts', {
      key: ws.key,
      body: {
        name: 'VIP',
        template: { name: 'welcome', language: 'pt_BR', variables: ['{{contact.name}}'] },
        audience: { tagIds: [tagId] },
        ratePerSecond: 80,
      },
    });
    expect(created.status).toBe(201);
    const done = await eventually(
      'the broadcast to complete',
      async () => {
        const b = (await api.request('GET', `/api/v1/broadcasts/${created.body.data.id}`, { key: ws.key })).body.data;
        return b.status === 'completed' && b;
      },
      60_000,
      200,
    );
    expect(done.counts).toMatchObject({ total: 2, sent: 1, skipped: 1, failed: 0 });
    const recipients = (await api.request('GET', `/api/v1/broadcasts/${created.body.data.id}/recipients`, { key: ws.key })).body.data;
    expect(recipients.find((r: any) => r.contactId === phoneless.id)).toMatchObject({
      phone: null,
      status: 'skipped',
      code: 'PHONE_REQUIRED',
    });
  });
});

describe('mixed WhatsApp and Instagram workspaces', () => {
  it('a send by phone chooses the WhatsApp instance, and refuses an Instagram one', async () => {
    const ws = await createWorkspace(api, { scopes: [...SCOPES] });
    const whatsapp = await cloudInstance(api, ws.id, { label: 'mix' });
    const instagram = await instagramInstance(api, ws.id);
    const phone = uniqueMobile();
    // The Instagram instance does not count: the only WhatsApp one carries the send (no INSTANCE_REQUIRED).
    const chosen = await api.request('POST', '/api/v1/messages', {
      key: ws.key,
      body: { phone, type: 'template', templateName: 'welcome', templateLanguage: 'pt_BR', templateVariables: ['Ana'] },
    });
    expect(chosen.status).toBe(201);
    const conversation = await api
      .db('conversations')
      .where({ workspace_id: ws.id, id: chosen.body.data.conversationId })
      .first('instance_id');
    expect(conversation.instance_id).toBe(whatsapp.instanceId);

    const refused = await api.request('POST', '/api/v1/messages', {
      key: ws.key,
      body: { phone: uniqueMobile(), instanceId: instagram.instanceId, type: 'text', text: 'Oi' },
    });
    expectError(refused, 422, 'CHANNEL_UNSUPPORTED');
  });

  it('an Instagram instance takes the Instagram provider only, with a numeric account id; its secrets are never shown', async () => {
    const ws = await createWorkspace(api, { scopes: [...SCOPES] });
    const create = (body: Record<string, unknown>) =>
      api.admin('POST', `/admin/v1/workspaces/${ws.id}/instances`, { name: 'IG', connected: true, ...body });
    expectError(await create({ channel: 'whatsapp', provider: 'instagram' }), 400, 'VALIDATION');
    expectError(await create({ channel: 'instagram', provider: 'instagram', config: { igUserId: '@loja' } }), 400, 'VALIDATION');
    const ok = await create({
      channel: 'instagram',
      provider: 'instagram',
      config: { igUserId: '17841400000000001', accessToken: 'tok-ig', appSecret: 'sec-ig' },
    });
    expect(ok.status).toBe(201);
    expect(ok.body.data.config).toEqual({ igUserId: '17841400000000001', accessTokenSet: true, appSecretSet: true, verifyTokenSet: false });
    expect(JSON.stringify(ok.body)).not.toMatch(/tok-ig|sec-ig/);
    const listed = await api.request('GET', '/api/v1/instances', { key: ws.key });
    expect(listed.body.data).toEqual([expect.objectContaining({ channel: 'instagram', provider: 'instagram' })]);
  });
});
