/**
 * Credentials that stay in their scope (issue 33): an automation's inbound webhook URL is a bearer
 * credential (it creates leads and sends messages), so a key that may only read automations never
 * sees it, only whether a token exists.
 */
import { ALL_SCOPES } from '../../domain/access/scopes';
import { createKey, createWorkspace, startApi, TestApi } from '../helpers';

let api: TestApi;
beforeAll(async () => {
  api = await startApi();
});
afterAll(async () => {
  await api?.close();
});

interface AutomationView {
  id: string;
  webhookUrl: string | null;
  webhookToken: boolean;
}

describe('automations:read without automations:write', () => {
  it('sees webhookUrl null and webhookToken true|false in every answer; a key with automations:write sees the URL', async () => {
    const ws = await createWorkspace(api, { scopes: [...ALL_SCOPES] });
    const reader = await createKey(api, ws.id, ['automations:read']);
    const inbound = await api.request<{ data: AutomationView }>('POST', '/api/v1/automations', {
      key: ws.key,
      body: { name: 'inbound', trigger: { type: 'webhook_received' }, actions: [{ type: 'add_tag', tag: 'hooked' }] },
    });
    expect(inbound.status).toBe(201);
    expect(inbound.body.data.webhookUrl).toMatch(/\/api\/automations\/webhook-in\/[\w-]{20,}$/);
    expect(inbound.body.data.webhookToken).toBe(true);
    const url = inbound.body.data.webhookUrl!;
    const token = url.split('/').pop()!;
    const triggered = await api.request<{ data: AutomationView }>('POST', '/api/v1/automations', {
      key: ws.key,
      body: { name: 'on won', trigger: { type: 'deal_won' }, actions: [{ type: 'add_tag', tag: 'won' }] },
    });
    expect(triggered.status).toBe(201);
    expect(triggered.body.data).toMatchObject({ webhookUrl: null, webhookToken: false });

    // The reader: the record, never the credential.
    const one = await api.request<{ data: AutomationView }>('GET', `/api/v1/automations/${inbound.body.data.id}`, { key: reader.key });
    expect(one.status).toBe(200);
    expect(one.body.data).toMatchObject({ id: inbound.body.data.id, webhookUrl: null, webhookToken: true });
    const list = await api.request<{ data: AutomationView[] }>('GET', '/api/v1/automations', { key: reader.key });
    expect(list.status).toBe(200);
    const byId = new Map(list.body.data.map((a) => [a.id, a]));
    expect(byId.get(inbound.body.data.id)).toMatchObject({ webhookUrl: null, webhookToken: true });
    expect(byId.get(triggered.body.data.id)).toMatchObject({ webhookUrl: null, webhookToken: false });
    expect(one.text + list.text).not.toContain(token);

    // The writer still sees it, in the same answers.
    const own = await api.request<{ data: AutomationView }>('GET', `/api/v1/automations/${inbound.body.data.id}`, { key: ws.key });
    expect(own.body.data).toMatchObject({ webhookUrl: url, webhookToken: true });
    const ownList = await api.request<{ data: AutomationView[] }>('GET', '/api/v1/automations', { key: ws.key });
    expect(ownList.body.data.find((a) => a.id === inbound.body.data.id)).toMatchObject({ webhookUrl: url, webhookToken: true });

    // Removed: no token for anyone.
    const removed = await api.request<{ data: AutomationView }>('DELETE', `/api/v1/automations/${inbound.body.data.id}/token`, {
      key: ws.key,
    });
    expect(removed.body.data).toMatchObject({ webhookUrl: null, webhookToken: false });
    expect(
      (await api.request<{ data: AutomationView }>('GET', `/api/v1/automations/${inbound.body.data.id}`, { key: reader.key })).body.data,
    ).toMatchObject({
      webhookUrl: null,
      webhookToken: false,
    });
  });

  it('is documented: the Automation schema has webhookToken, and webhookUrl says who sees it', async () => {
    const doc = await api.request<{
      components: { schemas: Record<string, { properties: Record<string, { description?: string }>; required?: string[] }> };
    }>('GET', '/api/v1/openapi.json');
    const schema = doc.body.components.schemas.Automation;
    expect(schema.required).toEqual(expect.arrayContaining(['webhookUrl', 'webhookToken']));
    expect(schema.properties.webhookToken).toEqual({
      type: 'boolean',
      description: 'Whether the automation has an inbound webhook token (whatever the key may see of it).',
    });
    expect(schema.properties.webhookUrl.description).toContain('automations:write');
  });
});
