import { hashApiKey } from '../domain/access/api-keys';
import { createKey, createWorkspace, expectError, startApi, TestApi } from './helpers';

let api: TestApi;
beforeAll(async () => {
  api = await startApi();
});
afterAll(async () => api.close());

describe('API key authentication', () => {
  it('answers 401 UNAUTHORIZED without a key, with a malformed one or an unknown one', async () => {
    expectError(await api.request('GET', '/api/v1/pipelines'), 401, 'UNAUTHORIZED');
    expectError(await api.request('GET', '/api/v1/pipelines', { headers: { authorization: 'Basic Zm9vOmJhcg==' } }), 401, 'UNAUTHORIZED');
    expectError(await api.request('GET', '/api/v1/pipelines', { headers: { authorization: 'Bearer not-a-key' } }), 401, 'UNAUTHORIZED');
    expectError(await api.request('GET', '/api/v1/pipelines', { key: 'vg_live_doesnotexist' }), 401, 'UNAUTHORIZED');
  });

  it('answers 401 for an expired key and for a revoked key', async () => {
    const ws = await createWorkspace(api, { scopes: ['pipelines:read'] });
    const expired = await createKey(api, ws.id, ['pipelines:read'], { expiresAt: new Date(Date.now() - 1000).toISOString() });
    expectError(await api.request('GET', '/api/v1/pipelines', { key: expired.key }), 401, 'UNAUTHORIZED');

    const future = await createKey(api, ws.id, ['pipelines:read'], { expiresAt: new Date(Date.now() + 3600_000).toISOString() });
    expect((await api.request('GET', '/api/v1/pipelines', { key: future.key })).status).toBe(200);

    expect((await api.request('GET', '/api/v1/pipelines', { key: ws.key })).status).toBe(200);
    const revoked = await api.admin('DELETE', `/admin/v1/workspaces/${ws.id}/api-keys/${ws.keyId}`);
    expect(revoked.body).toEqual({ data: { id: ws.keyId, deleted: true } });
    expectError(await api.request('GET', '/api/v1/pipelines', { key: ws.key }), 401, 'UNAUTHORIZED');
  });

  it('answers 403 INSUFFICIENT_SCOPE for a valid key without the scope, naming the scopes that would do', async () => {
    const ws = await createWorkspace(api, { scopes: ['deals:write'] });
    const res = await api.request('GET', '/api/v1/pipelines', { key: ws.key });
    expectError(res, 403, 'INSUFFICIENT_SCOPE');
    expect(res.body.hint).toContain('pipelines:read');
    expect(res.body.hint).toContain('leads:write');
  });

  it('lets leads:write read pipelines, and gives conversations:send nothing else', async () => {
    const writer = await createWorkspace(api, { scopes: ['leads:write'] });
    const ok = await api.request('GET', '/api/v1/pipelines', { key: writer.key });
    expect(ok.status).toBe(200);
    expect(ok.body).toEqual({ pipelines: [] });

    const sender = await createWorkspace(api, { scopes: ['conversations:send'] });
    expectError(await api.request('GET', '/api/v1/pipelines', { key: sender.key }), 403, 'INSUFFICIENT_SCOPE');
    expectError(await api.request('GET', '/api/v1/instances', { key: sender.key }), 403, 'INSUFFICIENT_SCOPE');
  });

  it('answers 402 when the subscription is inactive or the plan has no API access, and recovers when fixed', async () => {
    const ws = await createWorkspace(api, { scopes: ['pipelines:read'] });
    await api.admin('PATCH', `/admin/v1/workspaces/${ws.id}`, { plan: { active: false } });
    expectError(await api.request('GET', '/api/v1/pipelines', { key: ws.key }), 402, 'SUBSCRIPTION_INACTIVE');
    await api.admin('PATCH', `/admin/v1/workspaces/${ws.id}`, { plan: { active: true, apiAccess: false } });
    expectError(await api.request('GET', '/api/v1/pipelines', { key: ws.key }), 402, 'API_ACCESS_DISABLED');
    await api.admin('PATCH', `/admin/v1/workspaces/${ws.id}`, { plan: { apiAccess: true } });
    expect((await api.request('GET', '/api/v1/pipelines', { key: ws.key })).status).toBe(200);
  });

  it('stores keys only as a hash', async () => {
    const ws = await createWorkspace(api, { scopes: ['pipelines:read'] });
    expect(ws.key).toMatch(/^vg_live_[A-Za-z0-9_-]{43}$/);
    const row = await api.db('api_keys').where({ id: ws.keyId }).first();
    expect(row.key_hash).toBe(hashApiKey(ws.key));
    expect(JSON.stringify(row)).not.toContain(ws.key.slice('vg_live_'.length));
  });

  it('keeps keys of one workspace out of another: a key sees only its own pipelines', async () => {
    const a = await createWorkspace(api, { scopes: ['pipelines:read'] });
    const b = await createWorkspace(api, { scopes: ['pipelines:read'] });
    await api.admin('POST', `/admin/v1/workspaces/${a.id}/pipelines`, { name: 'A only', stages: [{ name: 'S1' }] });
    expect((await api.request('GET', '/api/v1/pipelines', { key: a.key })).body.pipelines).toHaveLength(1);
    expect((await api.request('GET', '/api/v1/pipelines', { key: b.key })).body.pipelines).toEqual([]);
  });
});

describe('admin authentication', () => {
  it('rejects a missing or wrong admin token with 401, and an API key is not an admin token', async () => {
    expectError(await api.request('POST', '/admin/v1/workspaces', { body: { name: 'x' } }), 401, 'UNAUTHORIZED');
    expectError(
      await api.request('POST', '/admin/v1/workspaces', { body: { name: 'x' }, headers: { authorization: 'Bearer wrong' } }),
      401,
      'UNAUTHORIZED',
    );
    const ws = await createWorkspace(api, { scopes: ['pipelines:read'] });
    expectError(await api.request('POST', '/admin/v1/workspaces', { body: { name: 'x' }, key: ws.key }), 401, 'UNAUTHORIZED');
  });

  it('is disabled entirely when ADMIN_TOKEN is empty', async () => {
    const locked = await startApi({ config: { adminToken: '' } });
    try {
      const res = await locked.request('POST', '/admin/v1/workspaces', { body: { name: 'x' }, headers: { authorization: 'Bearer ' } });
      expectError(res, 401, 'UNAUTHORIZED');
      expect(res.body.hint).toContain('ADMIN_TOKEN');
    } finally {
      await locked.close();
    }
  });
});
