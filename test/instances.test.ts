import { createWorkspace, expectError, startApi, TestApi } from './helpers';

let api: TestApi;
beforeAll(async () => {
  api = await startApi();
});
afterAll(async () => api.close());

const SECRETS = { accessToken: 'EAAG-instance-access-token-secret', appSecret: 'instance-app-secret-value' };

async function seedInstance(
  workspaceId: string,
  input: { name: string; channel?: 'whatsapp' | 'instagram'; provider?: 'cloud' | 'web'; connected?: boolean; archived?: boolean },
): Promise<string> {
  const res = await api.admin('POST', `/admin/v1/workspaces/${workspaceId}/instances`, {
    channel: 'whatsapp',
    provider: 'cloud',
    ...input,
    config: { baseUrl: 'https://graph.example.com', phoneNumberId: '1029384756', ...SECRETS },
  });
  expect(res.status).toBe(201);
  return res.body.data.id;
}

describe('GET /api/v1/instances', () => {
  it('lists the connections with id, name, channel, provider, connected and createdAt only', async () => {
    const ws = await createWorkspace(api, { scopes: ['instances:read'] });
    const main = await seedInstance(ws.id, { name: 'Main number', connected: true });
    const web = await seedInstance(ws.id, { name: 'Web gateway', provider: 'web', connected: false });
    const insta = await seedInstance(ws.id, { name: 'Instagram', channel: 'instagram', connected: true });

    const res = await api.request('GET', '/api/v1/instances', { key: ws.key });
    expect(res.status).toBe(200);
    expect(res.headers.get('x-ratelimit-limit')).toBe('1000');
    expect(res.body.pagination).toEqual({ total: 3, limit: 25, offset: 0, hasMore: false });
    const stored = await api.db('instances').where({ workspace_id: ws.id }).select('id', 'created_at');
    const createdAt = (id: string) => stored.find((r: any) => r.id === id).created_at.toISOString();
    expect(res.body.data).toEqual([
      { id: main, name: 'Main number', channel: 'whatsapp', provider: 'cloud', connected: true, createdAt: createdAt(main) },
      { id: web, name: 'Web gateway', channel: 'whatsapp', provider: 'web', connected: false, createdAt: createdAt(web) },
      { id: insta, name: 'Instagram', channel: 'instagram', provider: 'cloud', connected: true, createdAt: createdAt(insta) },
    ]);
    for (const item of res.body.data) {
      expect(Object.keys(item).sort()).toEqual(['channel', 'connected', 'createdAt', 'id', 'name', 'provider']);
      expect(item.createdAt).toMatch(/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/);
    }
    // No configuration, so no secrets, anywhere in the body.
    for (const leak of [
      SECRETS.accessToken,
      SECRETS.appSecret,
      'accessToken',
      'appSecret',
      'config',
      '1029384756',
      'graph.example.com',
      'archived',
    ]) {
      expect(res.text).not.toContain(leak);
    }
  });

  it('never lists archived instances, nor counts them', async () => {
    const ws = await createWorkspace(api, { scopes: ['instances:read'] });
    const live = await seedInstance(ws.id, { name: 'Live' });
    await seedInstance(ws.id, { name: 'Archived at creation', archived: true });
    const later = await seedInstance(ws.id, { name: 'Archived later', connected: true });
    await api.admin('PATCH', `/admin/v1/workspaces/${ws.id}/instances/${later}`, { archived: true });

    const res = await api.request('GET', '/api/v1/instances', { key: ws.key });
    expect(res.body.data.map((i: any) => i.id)).toEqual([live]);
    expect(res.body.pagination.total).toBe(1);
    expect(res.text).not.toContain('Archived');

    // Un-archiving brings it back.
    await api.admin('PATCH', `/admin/v1/workspaces/${ws.id}/instances/${later}`, { archived: false });
    expect((await api.request('GET', '/api/v1/instances', { key: ws.key })).body.data.map((i: any) => i.id)).toEqual([live, later]);
  });

  it("never lists another workspace's instances", async () => {
    const mine = await createWorkspace(api, { scopes: ['instances:read'] });
    const theirs = await createWorkspace(api, { scopes: ['instances:read'] });
    const myId = await seedInstance(mine.id, { name: 'Mine' });
    const theirId = await seedInstance(theirs.id, { name: 'Theirs' });
    const res = await api.request('GET', '/api/v1/instances', { key: mine.key });
    expect(res.body.data.map((i: any) => i.id)).toEqual([myId]);
    expect(res.body.pagination.total).toBe(1);
    expect(res.text).not.toContain(theirId);
    const empty = await createWorkspace(api, { scopes: ['instances:read'] });
    expect((await api.request('GET', '/api/v1/instances', { key: empty.key })).body).toEqual({
      data: [],
      pagination: { total: 0, limit: 25, offset: 0, hasMore: false },
    });
  });

  it('pages in creation order with the list envelope; limit outside 1..100 is 400 VALIDATION', async () => {
    const ws = await createWorkspace(api, { scopes: ['instances:read'] });
    const ids: string[] = [];
    for (let i = 0; i < 4; i += 1) ids.push(await seedInstance(ws.id, { name: `Number ${i}` }));
    const page = await api.request('GET', '/api/v1/instances?limit=2&offset=1', { key: ws.key });
    expect(page.body.data.map((i: any) => i.id)).toEqual(ids.slice(1, 3));
    expect(page.body.pagination).toEqual({ total: 4, limit: 2, offset: 1, hasMore: true });
    const last = await api.request('GET', '/api/v1/instances?limit=2&offset=2', { key: ws.key });
    expect(last.body.pagination).toEqual({ total: 4, limit: 2, offset: 2, hasMore: false });
    const beyond = await api.request('GET', '/api/v1/instances?offset=10', { key: ws.key });
    expect(beyond.body).toEqual({ data: [], pagination: { total: 4, limit: 25, offset: 10, hasMore: false } });
    for (const bad of ['limit=0', 'limit=101', 'limit=ten', 'offset=-1']) {
      expectError(await api.request('GET', `/api/v1/instances?${bad}`, { key: ws.key }), 400, 'VALIDATION');
    }
  });

  it('requires instances:read', async () => {
    const ws = await createWorkspace(api, { scopes: ['conversations:read', 'conversations:send'] });
    expectError(await api.request('GET', '/api/v1/instances', { key: ws.key }), 403, 'INSUFFICIENT_SCOPE');
    expectError(await api.request('GET', '/api/v1/instances'), 401, 'UNAUTHORIZED');
    expectError(await api.request('GET', '/api/v1/instances', { key: 'vg_live_not-a-real-key' }), 401, 'UNAUTHORIZED');
  });
});
