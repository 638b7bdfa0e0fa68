/**
 * The message lifecycle's status events (issue 37, part 1): `message.status_updated` whenever an
 * outbound message moves forward, from the Cloud API's status notifications and the web gateway's
 * `messages.update` acks, both posted by the provider emulator at their real wire format
 * (`POST /__emulator/status`). Never backwards, never twice, never for the initial `sent`.
 */
import { createWorkspace, eventually, outbox, startApi, TestApi, uniqueIp, Workspace } from './helpers';
import { cloudInstance, emulator, webInstance } from './stack-fixtures';
import { uniqueMobile } from './phones';
import { signBody } from '../domain/messaging/inbound';

let api: TestApi;
beforeAll(async () => {
  api = await startApi();
});
afterAll(async () => {
  await api.close();
});

const SCOPES = ['conversations:send', 'conversations:read', 'events:read', 'webhooks:write'] as const;
const request = (ws: Workspace, method: string, path: string, body?: unknown) =>
  api.request(method, path, { key: ws.key, body, headers: { 'x-forwarded-for': uniqueIp() } });

/** The workspace's status events, oldest first, as delivered (their root fields). */
async function statusEvents(ws: Workspace): Promise<any[]> {
  return (await outbox(api, ws.id, 'message.status_updated')).map((e) => e.payload);
}

/** The provider reports a later status of our message (by its provider id): what our webhook answered. */
async function report(providerMessageId: string, status: string, extra: Record<string, unknown> = {}): Promise<any> {
  const answer = await emulator('/__emulator/status', { messageId: providerMessageId, status, ...extra });
  expect(answer.delivered).toBe(200);
  return answer;
}

async function messageRow(id: string): Promise<{ status: string; provider_message_id: string; conversation_id: string }> {
  return api.db('messages').where({ id }).first('status', 'provider_message_id', 'conversation_id');
}

describe('Cloud API status notifications', () => {
  async function sentTemplate() {
    const ws = await createWorkspace(api, { scopes: [...SCOPES] });
    const { instanceId, phoneNumberId } = await cloudInstance(api, ws.id, { label: 'st' });
    const res = await request(ws, 'POST', '/api/v1/messages', {
      phone: uniqueMobile(),
      type: 'template',
      templateName: 'welcome',
      templateLanguage: 'pt_BR',
      templateVariables: ['Ana'],
    });
    expect(res.status).toBe(201);
    const message = res.body.data;
    const row = await messageRow(message.id);
    // The emulator's own `sent` notification has come and gone: it announced nothing.
    await eventually('the sent notification delivered', async () => {
      const log = await emulator(`/__emulator/webhook?phoneNumberId=${phoneNumberId}`);
      return log.deliveries.some((d: any) => d.messageId === row.provider_message_id && d.httpStatus === 200);
    });
    return { ws, instanceId, message, wamid: row.provider_message_id };
  }

  it('delivered then read: one event each, with previous_status and the ids; a replayed notification and the initial sent emit nothing', async () => {
    const { ws, instanceId, message, wamid } = await sentTemplate();
    expect(await statusEvents(ws)).toEqual([]);

    // The provider's own times (an hour ago, whole seconds as the Cloud API sends them), not when they reached us.
    const at = Math.floor(Date.now() / 1000 - 3600) * 1000;
    await report(wamid, 'delivered', { timestamp: at });
    await report(wamid, 'delivered', { timestamp: at });
    await report(wamid, 'read', { timestamp: at + 5000 });
    await report(wamid, 'read', { timestamp: at + 5000 });
    const base = {
      event: 'message.status_updated',
      workspace_id: ws.id,
      message_id: message.id,
      conversation_id: message.conversationId,
      contact_id: message.contactId,
      instance_id: instanceId,
      error_code: null,
    };
    expect(await statusEvents(ws)).toEqual([
      expect.objectContaining({ ...base, status: 'delivered', previous_status: 'sent', timestamp: new Date(at).toISOString() }),
      expect.objectContaining({ ...base, status: 'read', previous_status: 'delivered', timestamp: new Date(at + 5000).toISOString() }),
    ]);
    expect((await messageRow(message.id)).status).toBe('read');

    // In the events feed like every event. The feed shows an event once its commit is behind the
    // settled horizon, which other test files' writes in flight can hold back for a moment.
    const statuses = async () => {
      const feed = await request(ws, 'GET', '/api/v1/events?limit=100&order=asc');
      expect(feed.status).toBe(200);
      return feed.body.data.filter((e: any) => e.type === 'message.status_updated').map((e: any) => e.payload.status);
    };
    await eventually('both status events in the feed', async () => (await statuses()).length >= 2);
    expect(await statuses()).toEqual(['delivered', 'read']);
    // And subscribable.
    const subscription = await request(ws, 'POST', '/api/v1/webhooks', {
      url: 'https://example.com/hook',
      events: ['message.status_updated'],
    });
    expect(subscription.status).toBe(201);
  });

  it('out of order (read before delivered) ends at read, never moving back, and the late delivered emits nothing', async () => {
    const { ws, message, wamid } = await sentTemplate();
    await report(wamid, 'read');
    await report(wamid, 'delivered');
    expect((await statusEvents(ws)).map((e) => [e.previous_status, e.status])).toEqual([['sent', 'read']]);
    expect((await messageRow(message.id)).status).toBe('read');
    // The conversation shows it read too.
    const conversation = await request(ws, 'GET', `/api/v1/conversations/${message.conversationId}`);
    expect(conversation.body.data.messages.find((m: any) => m.id === message.id).status).toBe('read');
  });

  it("failed carries the provider's error code; nothing moves it afterwards", async () => {
    const { ws, message, wamid } = await sentTemplate();
    await report(wamid, 'failed', { errorCode: 131049 });
    await report(wamid, 'delivered');
    expect(await statusEvents(ws)).toEqual([
      expect.objectContaining({ message_id: message.id, status: 'failed', previous_status: 'sent', error_code: '131049' }),
    ]);
    expect((await messageRow(message.id)).status).toBe('failed');
  });

  it('a status that arrives before the send has its answer is announced once the message is recorded, from sent', async () => {
    const ws = await createWorkspace(api, { scopes: [...SCOPES] });
    const { phoneNumberId } = await cloudInstance(api, ws.id, { label: 'st-early' });
    // The provider takes the message at once but answers our call 1.5 s later: its delivered notification comes first.
    await emulator('/__emulator/script', { phoneNumberId, behaviour: 'ok', delayMs: 1500 });
    const sending = request(ws, 'POST', '/api/v1/messages', {
      phone: uniqueMobile(),
      type: 'template',
      templateName: 'welcome',
      templateLanguage: 'pt_BR',
      templateVariables: ['Ana'],
    });
    const call = await eventually('the provider got the call', async () => {
      const calls = (await emulator(`/__emulator/calls?phoneNumberId=${phoneNumberId}`)).calls;
      return calls[0]?.messageId ? calls[0] : undefined;
    });
    await report(call.messageId, 'delivered');
    const sent = await sending;
    expect(sent.status).toBe(201);
    expect((await messageRow(sent.body.data.id)).status).toBe('delivered');
    expect(await statusEvents(ws)).toEqual([
      expect.objectContaining({ message_id: sent.body.data.id, status: 'delivered', previous_status: 'sent', error_code: null }),
    ]);
    await emulator('/__emulator/reset', { phoneNumberId });
  });

  it("a notification through another workspace's number naming this workspace's message moves nothing, announces nothing", async () => {
    const { ws, message, wamid } = await sentTemplate();
    const other = await createWorkspace(api, { scopes: [...SCOPES] });
    const { instanceId: otherInstance, phoneNumberId } = await cloudInstance(api, other.id, { label: 'st-other' });
    // Correctly signed with the other instance's app secret: a genuine notification of that number.
    const raw = JSON.stringify({
      object: 'whatsapp_business_account',
      entry: [
        {
          id: 'waba',
          changes: [
            {
              field: 'messages',
              value: {
                messaging_product: 'whatsapp',
                metadata: { phone_number_id: phoneNumberId },
                statuses: [{ id: wamid, status: 'read', timestamp: String(Math.floor(Date.now() / 1000)), recipient_id: '5511900000000' }],
              },
            },
          ],
        },
      ],
    });
    const res = await api.request('POST', `/webhooks/whatsapp/${otherInstance}`, {
      rawBody: raw,
      headers: { 'content-type': 'application/json', 'x-hub-signature-256': signBody(`secret-${other.id.slice(0, 8)}`, raw) },
    });
    expect(res.status).toBe(200);
    expect(await statusEvents(other)).toEqual([]);
    expect(await statusEvents(ws)).toEqual([]);
    expect((await messageRow(message.id)).status).toBe('sent');
  });
});

describe('web gateway acks (messages.update)', () => {
  it('DELIVERY_ACK then READ: one event each; a repeated ack emits nothing', async () => {
    const ws = await createWorkspace(api, { scopes: [...SCOPES] });
    const { instanceId } = await webInstance(api, ws.id, 'web-st');
    const sent = await request(ws, 'POST', '/api/v1/messages', { phone: uniqueMobile(), text: 'Olá!' });
    expect(sent.status).toBe(201);
    const message = sent.body.data;
    const { provider_message_id: id } = await messageRow(message.id);

    await report(id, 'sent');
    await report(id, 'delivered');
    await report(id, 'delivered');
    await report(id, 'read');
    expect(await statusEvents(ws)).toEqual([
      expect.objectContaining({ message_id: message.id, instance_id: instanceId, status: 'delivered', previous_status: 'sent' }),
      expect.objectContaining({ message_id: message.id, instance_id: instanceId, status: 'read', previous_status: 'delivered' }),
    ]);
    expect((await messageRow(message.id)).status).toBe('read');
  });
});
