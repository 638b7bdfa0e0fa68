import { openText } from '../domain/platform/encryption';
import { createWorkspace, expectError, startApi, TestApi } from './helpers';

let api: TestApi;
beforeAll(async () => {
  api = await startApi();
});
afterAll(async () => api.close());

describe('admin API', () => {
  it('creates a workspace with a plan, reads it and patches it', async () => {
    const created = await api.admin('POST', '/admin/v1/workspaces', { name: 'Acme', plan: { dealLimit: 10, dailyMessageQuota: 500 } });
    expect(created.status).toBe(201);
    expect(created.body.data).toMatchObject({
      name: 'Acme',
      plan: {
        dealLimit: 10,
        dailyMessageQuota: 500,
        broadcastLimit: null,
        inboundWebhookQuota: null,
        webhookQuota: 10,
        automationLimit: 100,
        automationRunsPerMinute: 600,
        apiAccess: true,
        active: true,
      },
    });
    const id = created.body.data.id;
    const patched = await api.admin('PATCH', `/admin/v1/workspaces/${id}`, {
      name: 'Acme Ltda',
      plan: { dealLimit: null, webhookQuota: 3 },
    });
    expect(patched.body.data).toMatchObject({ name: 'Acme Ltda', plan: { dealLimit: null, dailyMessageQuota: 500, webhookQuota: 3 } });
    expect((await api.admin('GET', `/admin/v1/workspaces/${id}`)).body.data.name).toBe('Acme Ltda');
    expectError(await api.admin('GET', '/admin/v1/workspaces/00000000-0000-0000-0000-000000000000'), 404, 'NOT_FOUND');
    expectError(await api.admin('POST', '/admin/v1/workspaces', { name: '' }), 400, 'VALIDATION');
    expectError(await api.admin('POST', '/admin/v1/workspaces', { name: 'x', plan: { dealLimit: -1 } }), 400, 'VALIDATION');
  });

  it('creates API keys with validated scopes and limits, showing the key only once', async () => {
    const ws = await createWorkspace(api);
    const res = await api.admin('POST', `/admin/v1/workspaces/${ws.id}/api-keys`, {
      name: 'zapier',
      scopes: ['leads:read'],
      rateLimitPerMinute: 50,
    });
    expect(res.status).toBe(201);
    expect(res.body.data).toMatchObject({ name: 'zapier', scopes: ['leads:read'], rateLimitPerMinute: 50, revokedAt: null });
    expect(res.body.data.key).toMatch(/^vg_live_/);
    expect(res.body.data.prefix).toBe(res.body.data.key.slice(0, 12));
    const patched = await api.admin('PATCH', `/admin/v1/workspaces/${ws.id}/api-keys/${res.body.data.id}`, { rateLimitPerMinute: 1000 });
    expect(patched.body.data).not.toHaveProperty('key');
    expect(patched.body.data.rateLimitPerMinute).toBe(1000);
    expectError(
      await api.admin('POST', `/admin/v1/workspaces/${ws.id}/api-keys`, { name: 'bad', scopes: ['everything'] }),
      400,
      'VALIDATION',
    );
    expectError(
      await api.admin('POST', `/admin/v1/workspaces/${ws.id}/api-keys`, { name: 'bad', scopes: [], rateLimitPerMinute: 1001 }),
      400,
      'VALIDATION',
    );
    expectError(
      await api.admin('POST', `/admin/v1/workspaces/${ws.id}/api-keys`, { name: 'bad', scopes: [], rateLimitPerMinute: 0 }),
      400,
      'VALIDATION',
    );
    // Another workspace's key id under this workspace is not found.
    const other = await createWorkspace(api);
    expectError(
      await api.admin('PATCH', `/admin/v1/workspaces/${other.id}/api-keys/${res.body.data.id}`, { rateLimitPerMinute: 5 }),
      404,
      'NOT_FOUND',
    );
    expectError(await api.admin('DELETE', `/admin/v1/workspaces/${other.id}/api-keys/${res.body.data.id}`), 404, 'NOT_FOUND');
  });

  it('adds members, rejecting a duplicate e-mail with 409 CONFLICT', async () => {
    const ws = await createWorkspace(api);
    const member = await api.admin('POST', `/admin/v1/workspaces/${ws.id}/members`, { name: 'Bia', email: 'bia@example.com' });
    expect(member.status).toBe(201);
    expect(member.body.data).toMatchObject({ name: 'Bia', email: 'bia@example.com' });
    expectError(
      await api.admin('POST', `/admin/v1/workspaces/${ws.id}/members`, { name: 'Bia 2', email: 'BIA@example.com' }),
      409,
      'CONFLICT',
    );
    expectError(await api.admin('POST', `/admin/v1/workspaces/${ws.id}/members`, { name: 'x', email: 'not-an-email' }), 400, 'VALIDATION');
  });

  it('creates pipelines in display order with stages in funnel order and custom fields, as GET /api/v1/pipelines shows them', async () => {
    const ws = await createWorkspace(api, { scopes: ['pipelines:read'] });
    const first = await api.admin('POST', `/admin/v1/workspaces/${ws.id}/pipelines`, {
      name: 'Sales',
      stages: [{ name: 'New' }, { name: 'Won-ish' }, { name: 'Closing' }],
      customFields: [{ key: 'budget', label: 'Budget', type: 'number' }],
    });
    expect(first.status).toBe(201);
    await api.admin('POST', `/admin/v1/workspaces/${ws.id}/pipelines`, { name: 'Onboarding', stages: [{ name: 'Kickoff' }] });
    await api.admin('POST', `/admin/v1/workspaces/${ws.id}/pipelines`, { name: 'Empty' });
    expectError(await api.admin('POST', `/admin/v1/workspaces/${ws.id}/pipelines`, { name: 'sales' }), 409, 'CONFLICT');
    expectError(
      await api.admin('POST', `/admin/v1/workspaces/${ws.id}/pipelines`, {
        name: 'Bad',
        customFields: [{ key: '1bad', label: 'x', type: 'text' }],
      }),
      400,
      'VALIDATION',
    );
    expectError(
      await api.admin('POST', `/admin/v1/workspaces/${ws.id}/pipelines`, {
        name: 'Bad',
        customFields: [{ key: 'ok', label: 'x', type: 'blob' }],
      }),
      400,
      'VALIDATION',
    );

    const res = await api.request('GET', '/api/v1/pipelines', { key: ws.key });
    expect(res.status).toBe(200);
    expect(Object.keys(res.body)).toEqual(['pipelines']);
    const pipelines = res.body.pipelines;
    expect(pipelines.map((p: any) => [p.name, p.order])).toEqual([
      ['Sales', 0],
      ['Onboarding', 1],
      ['Empty', 2],
    ]);
    expect(pipelines[0].stages.map((s: any) => [s.name, s.order])).toEqual([
      ['New', 0],
      ['Won-ish', 1],
      ['Closing', 2],
    ]);
    expect(pipelines[0].customFields).toEqual([{ id: expect.any(String), key: 'budget', label: 'Budget', type: 'number' }]);
    expect(pipelines[2].stages).toEqual([]);
  });

  it('creates and patches instances without ever returning their secrets', async () => {
    const ws = await createWorkspace(api, { scopes: ['instances:read'] });
    const res = await api.admin('POST', `/admin/v1/workspaces/${ws.id}/instances`, {
      name: 'Main number',
      channel: 'whatsapp',
      provider: 'cloud',
      connected: true,
      config: { baseUrl: 'http://127.0.0.1:1', phoneNumberId: '123', accessToken: 'EAAG-super-secret', appSecret: 'app-secret-xyz' },
    });
    expect(res.status).toBe(201);
    expect(res.text).not.toContain('EAAG-super-secret');
    expect(res.text).not.toContain('app-secret-xyz');
    expect(res.body.data.config).toMatchObject({ phoneNumberId: '123', accessTokenSet: true, appSecretSet: true });
    const id = res.body.data.id;
    const patched = await api.admin('PATCH', `/admin/v1/workspaces/${ws.id}/instances/${id}`, {
      connected: false,
      config: { phoneNumberId: '456' },
    });
    expect(patched.body.data).toMatchObject({ connected: false, config: { phoneNumberId: '456', accessTokenSet: true } });
    const stored = await api.db('instances').where({ id }).first();
    // Kept sealed: the merge of a PATCH keeps the stored token, which opens to what was sent.
    expect(stored.config.accessToken).toMatch(/^enc:v2:/);
    expect(openText(api.config.encryptionKeys!, stored.config.accessToken)).toBe('EAAG-super-secret');
    await api.admin('PATCH', `/admin/v1/workspaces/${ws.id}/instances/${id}`, { archived: true });
    expect((await api.request('GET', '/api/v1/instances', { key: ws.key })).body.pagination.total).toBe(0);
    const other = await createWorkspace(api);
    expectError(
      await api.admin('PATCH', `/admin/v1/workspaces/${other.id}/instances/${id}`, { connected: true }),
      404,
      'INSTANCE_NOT_FOUND',
    );
    expectError(
      await api.admin('POST', `/admin/v1/workspaces/${ws.id}/instances`, { name: 'x', channel: 'sms', provider: 'cloud' }),
      400,
      'VALIDATION',
    );
  });

  it('registers templates only on an instance of the same workspace', async () => {
    const ws = await createWorkspace(api);
    const other = await createWorkspace(api);
    const instance = await api.admin('POST', `/admin/v1/workspaces/${ws.id}/instances`, {
      name: 'n',
      channel: 'whatsapp',
      provider: 'cloud',
    });
    const ok = await api.admin('POST', `/admin/v1/workspaces/${ws.id}/templates`, {
      instanceId: instance.body.data.id,
      name: 'welcome',
      language: 'pt_BR',
      variableCount: 2,
      status: 'approved',
    });
    expect(ok.status).toBe(201);
    expect(ok.body.data).toMatchObject({ name: 'welcome', language: 'pt_BR', variableCount: 2, status: 'approved' });
    expectError(
      await api.admin('POST', `/admin/v1/workspaces/${other.id}/templates`, {
        instanceId: instance.body.data.id,
        name: 'x',
        language: 'pt_BR',
      }),
      404,
      'INSTANCE_NOT_FOUND',
    );
    expectError(
      await api.admin('POST', `/admin/v1/workspaces/${ws.id}/templates`, { instanceId: instance.body.data.id, name: 'x', language: 'p' }),
      400,
      'VALIDATION',
    );
  });

  it('records broadcasts with tags of the same workspace only', async () => {
    const ws = await createWorkspace(api);
    const other = await createWorkspace(api);
    const [tag] = await api.db('tags').insert({ workspace_id: ws.id, name: 'vip' }).returning('id');
    const ok = await api.admin('POST', `/admin/v1/workspaces/${ws.id}/broadcasts`, { tagIds: [tag.id], status: 'in_progress' });
    expect(ok.status).toBe(201);
    expect(ok.body.data).toMatchObject({ status: 'in_progress', tagIds: [tag.id] });
    expectError(
      await api.admin('POST', `/admin/v1/workspaces/${other.id}/broadcasts`, { tagIds: [tag.id], status: 'in_progress' }),
      404,
      'NOT_FOUND',
    );
  });

  it("sets a contact's insight, only for a canonical contact of the workspace", async () => {
    const ws = await createWorkspace(api);
    const other = await createWorkspace(api);
    const [contact] = await api
      .db('contacts')
      .insert({ workspace_id: ws.id, name: 'Rui', phone: '5511987654321', phone_key: '5511987654321' })
      .returning('id');
    const body = {
      interest: 'CRM',
      products: ['Pro'],
      objections: ['price'],
      nextStep: 'demo',
      qualification: { score: 80, temperature: 'hot' },
      summary: 'Likes it',
    };
    const res = await api.admin('PUT', `/admin/v1/workspaces/${ws.id}/contacts/${contact.id}/insight`, body);
    expect(res.status).toBe(200);
    expect(res.body.data).toMatchObject(body);
    expect(res.body.data.updatedAt).toMatch(/\.\d{3}Z$/);
    expectError(await api.admin('PUT', `/admin/v1/workspaces/${other.id}/contacts/${contact.id}/insight`, body), 404, 'CONTACT_NOT_FOUND');
  });
});
