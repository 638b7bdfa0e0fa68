import { createWorkspace, expectError, startApi, TestApi, Workspace } from './helpers';

let api: TestApi;
let ws: Workspace;
beforeAll(async () => {
  api = await startApi();
  ws = await createWorkspace(api, { scopes: ['instances:read'] });
  for (let i = 0; i < 30; i += 1) {
    const res = await api.admin('POST', `/admin/v1/workspaces/${ws.id}/instances`, {
      name: `instance ${String(i).padStart(2, '0')}`,
      channel: 'whatsapp',
      provider: 'cloud',
      connected: i % 2 === 0,
      archived: i >= 28, // two archived: never listed, never counted
    });
    expect(res.status).toBe(201);
  }
});
afterAll(async () => api.close());

describe('list envelope and paging', () => {
  it('defaults to limit 25, offset 0 and gives an exact total', async () => {
    const res = await api.request('GET', '/api/v1/instances', { key: ws.key });
    expect(res.status).toBe(200);
    expect(res.body.data).toHaveLength(25);
    expect(res.body.pagination).toEqual({ total: 28, limit: 25, offset: 0, hasMore: true });
  });

  it('pages with limit and offset and says when there is no more', async () => {
    const last = await api.request('GET', '/api/v1/instances?limit=10&offset=20', { key: ws.key });
    expect(last.body.data).toHaveLength(8);
    expect(last.body.pagination).toEqual({ total: 28, limit: 10, offset: 20, hasMore: false });
    const past = await api.request('GET', '/api/v1/instances?offset=100', { key: ws.key });
    expect(past.body).toEqual({ data: [], pagination: { total: 28, limit: 25, offset: 100, hasMore: false } });
    const names = new Set<string>();
    for (let offset = 0; offset < 28; offset += 7) {
      const page = await api.request('GET', `/api/v1/instances?limit=7&offset=${offset}`, { key: ws.key });
      for (const item of page.body.data) names.add(item.name);
    }
    expect(names.size).toBe(28);
  });

  it.each(['0', '101', '-1', 'abc', '2.5', ''])('rejects limit=%p with 400 VALIDATION', async (limit) => {
    const res = await api.request('GET', `/api/v1/instances?limit=${limit}`, { key: ws.key });
    expectError(res, 400, 'VALIDATION');
    expect(res.body.error).toContain('query.limit');
  });

  it('accepts the bounds 1 and 100', async () => {
    expect((await api.request('GET', '/api/v1/instances?limit=1', { key: ws.key })).body.data).toHaveLength(1);
    expect((await api.request('GET', '/api/v1/instances?limit=100', { key: ws.key })).body.data).toHaveLength(28);
  });

  it('rejects a negative or non-numeric offset', async () => {
    expectError(await api.request('GET', '/api/v1/instances?offset=-5', { key: ws.key }), 400, 'VALIDATION');
    expectError(await api.request('GET', '/api/v1/instances?offset=x', { key: ws.key }), 400, 'VALIDATION');
  });

  it('shows instances without their configuration secrets, timestamps in ISO 8601 with milliseconds', async () => {
    const res = await api.request('GET', '/api/v1/instances?limit=1', { key: ws.key });
    const [item] = res.body.data;
    expect(Object.keys(item).sort()).toEqual(['channel', 'connected', 'createdAt', 'id', 'name', 'provider']);
    expect(item.createdAt).toMatch(/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/);
  });
});
