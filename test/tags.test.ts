import { createKey, createWorkspace, expectError, outbox, seedContact, startApi, TestApi, Workspace } from './helpers';

let api: TestApi;
beforeAll(async () => {
  api = await startApi();
});
afterAll(async () => api.close());

const newWorkspace = (): Promise<Workspace> => createWorkspace(api, { scopes: ['tags:read', 'tags:write', 'leads:read'] });

describe('tags', () => {
  it('creates, lists, searches, reads, patches and deletes tags', async () => {
    const ws = await newWorkspace();
    const created = await api.request('POST', '/api/v1/tags', { key: ws.key, body: { name: '  VIP  ', color: '#FF0000' } });
    expect(created.status).toBe(201);
    expect(created.body.data).toEqual({
      id: expect.any(String),
      name: 'VIP',
      color: '#ff0000',
      createdAt: expect.stringMatching(/\.\d{3}Z$/),
    });
    const plain = await api.request('POST', '/api/v1/tags', { key: ws.key, body: { name: 'cold lead' } });
    expect(plain.body.data.color).toBe('#6b7280');
    await api.request('POST', '/api/v1/tags', { key: ws.key, body: { name: 'alpha' } });
    await api.request('POST', '/api/v1/tags', { key: ws.key, body: { name: '50%_off' } });

    const all = await api.request('GET', '/api/v1/tags', { key: ws.key });
    expect(all.status).toBe(200);
    expect(all.body.data.map((t: any) => t.name)).toEqual(['50%_off', 'alpha', 'cold lead', 'VIP']);
    expect(all.body.pagination).toEqual({ total: 4, limit: 25, offset: 0, hasMore: false });
    const page = await api.request('GET', '/api/v1/tags?limit=2&offset=1', { key: ws.key });
    expect(page.body.data.map((t: any) => t.name)).toEqual(['alpha', 'cold lead']);
    expect(page.body.pagination).toEqual({ total: 4, limit: 2, offset: 1, hasMore: true });
    const search = await api.request('GET', '/api/v1/tags?q=L', { key: ws.key });
    expect(search.body.data.map((t: any) => t.name)).toEqual(['alpha', 'cold lead']);
    // LIKE wildcards in q are literal.
    expect((await api.request('GET', '/api/v1/tags?q=%25_', { key: ws.key })).body.data.map((t: any) => t.name)).toEqual(['50%_off']);
    expect((await api.request('GET', '/api/v1/tags?q=_', { key: ws.key })).body.pagination.total).toBe(1);

    const id = created.body.data.id;
    expect((await api.request('GET', `/api/v1/tags/${id}`, { key: ws.key })).body.data).toEqual(created.body.data);
    const renamed = await api.request('PATCH', `/api/v1/tags/${id}`, { key: ws.key, body: { name: 'Gold' } });
    expect(renamed.status).toBe(200);
    expect(renamed.body.data).toMatchObject({ id, name: 'Gold', color: '#ff0000' });
    const recolored = await api.request('PATCH', `/api/v1/tags/${id}`, { key: ws.key, body: { color: '#00aa00' } });
    expect(recolored.body.data).toMatchObject({ id, name: 'Gold', color: '#00aa00' });
    // Renaming to the same name in another case is allowed for the tag itself.
    expect((await api.request('PATCH', `/api/v1/tags/${id}`, { key: ws.key, body: { name: 'GOLD' } })).body.data.name).toBe('GOLD');

    const deleted = await api.request('DELETE', `/api/v1/tags/${id}`, { key: ws.key });
    expect(deleted.status).toBe(200);
    expect(deleted.body).toEqual({ data: { id, deleted: true } });
    expectError(await api.request('GET', `/api/v1/tags/${id}`, { key: ws.key }), 404, 'NOT_FOUND');
    expectError(await api.request('DELETE', `/api/v1/tags/${id}`, { key: ws.key }), 404, 'NOT_FOUND');
  });

  it('validates names and colours, naming the field', async () => {
    const ws = await newWorkspace();
    const cases: [unknown, string][] = [
      [{}, 'body.name'],
      [{ name: '   ' }, 'body.name'],
      [{ name: 'x'.repeat(101) }, 'body.name'],
      [{ name: 'ok', color: 'red' }, 'body.color'],
      [{ name: 'ok', color: '#12345' }, 'body.color'],
      [{ name: 'ok', color: '#12345g' }, 'body.color'],
    ];
    for (const [body, field] of cases) {
      const res = await api.request('POST', '/api/v1/tags', { key: ws.key, body });
      expectError(res, 400, 'VALIDATION');
      expect(res.body.error).toContain(field);
    }
    expect((await api.request('POST', '/api/v1/tags', { key: ws.key, body: { name: 'x'.repeat(100) } })).status).toBe(201);
    const tag = (await api.request('POST', '/api/v1/tags', { key: ws.key, body: { name: 'a' } })).body.data;
    expectError(await api.request('PATCH', `/api/v1/tags/${tag.id}`, { key: ws.key, body: {} }), 400, 'VALIDATION');
    const badColor = await api.request('PATCH', `/api/v1/tags/${tag.id}`, { key: ws.key, body: { color: 'blue' } });
    expectError(badColor, 400, 'VALIDATION');
    expect(badColor.body.error).toContain('body.color');
    expectError(await api.request('GET', '/api/v1/tags?limit=0', { key: ws.key }), 400, 'VALIDATION');
    expectError(await api.request('GET', '/api/v1/tags/not-a-uuid', { key: ws.key }), 404, 'NOT_FOUND');
  });

  it('keeps names unique in the workspace regardless of case (409 CONFLICT), on create and rename', async () => {
    const ws = await newWorkspace();
    const other = await newWorkspace();
    await api.request('POST', '/api/v1/tags', { key: ws.key, body: { name: 'Hot' } });
    expectError(await api.request('POST', '/api/v1/tags', { key: ws.key, body: { name: 'hOT ' } }), 409, 'CONFLICT');
    const cold = (await api.request('POST', '/api/v1/tags', { key: ws.key, body: { name: 'Cold' } })).body.data;
    expectError(await api.request('PATCH', `/api/v1/tags/${cold.id}`, { key: ws.key, body: { name: 'hot' } }), 409, 'CONFLICT');
    // Another workspace may use the same name.
    expect((await api.request('POST', '/api/v1/tags', { key: other.key, body: { name: 'hot' } })).status).toBe(201);
    // Concurrent creates of one name: exactly one wins.
    const results = await Promise.all(
      Array.from({ length: 5 }, () => api.request('POST', '/api/v1/tags', { key: ws.key, body: { name: 'Race' } })),
    );
    expect(results.map((r) => r.status).sort()).toEqual([201, 409, 409, 409, 409]);
  });

  it('refuses to delete a tag used by a broadcast in progress (409 TAG_IN_USE); other broadcasts do not block', async () => {
    const ws = await newWorkspace();
    const tag = (await api.request('POST', '/api/v1/tags', { key: ws.key, body: { name: 'campaign' } })).body.data;
    const done = (await api.request('POST', '/api/v1/tags', { key: ws.key, body: { name: 'done' } })).body.data;
    for (const status of ['completed', 'draft', 'cancelled']) {
      expect((await api.admin('POST', `/admin/v1/workspaces/${ws.id}/broadcasts`, { tagIds: [done.id, tag.id], status })).status).toBe(201);
    }
    const running = await api.admin('POST', `/admin/v1/workspaces/${ws.id}/broadcasts`, { tagIds: [tag.id], status: 'in_progress' });
    expectError(await api.request('DELETE', `/api/v1/tags/${tag.id}`, { key: ws.key }), 409, 'TAG_IN_USE');
    expect(await api.db('tags').where({ id: tag.id }).first('id', 'name')).toEqual({ id: tag.id, name: 'campaign' });
    // Completed, draft and cancelled broadcasts do not block.
    expect((await api.request('DELETE', `/api/v1/tags/${done.id}`, { key: ws.key })).status).toBe(200);
    // Once the broadcast completes the tag can go.
    await api.db('broadcasts').where({ id: running.body.data.id }).update({ status: 'completed' });
    expect((await api.request('DELETE', `/api/v1/tags/${tag.id}`, { key: ws.key })).body).toEqual({ data: { id: tag.id, deleted: true } });
  });

  it('checks and deletes atomically: a broadcast starting concurrently makes the delete wait and fail with TAG_IN_USE', async () => {
    const ws = await newWorkspace();
    /** Resolves once the DELETE request waits on a lock in its check (tag row or broadcasts using it). */
    const lockWaiter = async (): Promise<void> => {
      for (let i = 0; i < 500; i += 1) {
        const { rows } = await api.db.raw(
          `SELECT count(*)::int AS n FROM pg_stat_activity
            WHERE wait_event_type = 'Lock' AND datname = current_database()
              AND (query ILIKE '%from "tags"%for update%' OR query ILIKE '%FOR SHARE OF b%')`,
        );
        if (rows[0].n > 0) return;
        await new Promise((resolve) => setTimeout(resolve, 10));
      }
      throw new Error('the delete never waited on a lock');
    };

    // 1. A new in-progress broadcast being inserted with the tag.
    const a = (await api.request('POST', '/api/v1/tags', { key: ws.key, body: { name: 'a' } })).body.data;
    let trx = await api.db.transaction();
    const [inserted] = await trx('broadcasts').insert({ workspace_id: ws.id, status: 'in_progress' }).returning('id');
    await trx('broadcast_tags').insert({ workspace_id: ws.id, broadcast_id: inserted.id, tag_id: a.id });
    let pending = api.request('DELETE', `/api/v1/tags/${a.id}`, { key: ws.key });
    await lockWaiter();
    await trx.commit();
    expectError(await pending, 409, 'TAG_IN_USE');

    // 2. A scheduled broadcast switched to in_progress.
    const b = (await api.request('POST', '/api/v1/tags', { key: ws.key, body: { name: 'b' } })).body.data;
    const scheduled = await api.admin('POST', `/admin/v1/workspaces/${ws.id}/broadcasts`, { tagIds: [b.id], status: 'scheduled' });
    trx = await api.db.transaction();
    await trx('broadcasts').where({ id: scheduled.body.data.id }).update({ status: 'in_progress' });
    pending = api.request('DELETE', `/api/v1/tags/${b.id}`, { key: ws.key });
    await lockWaiter();
    await trx.commit();
    expectError(await pending, 409, 'TAG_IN_USE');
    expect(await api.db('tags').whereIn('id', [a.id, b.id]).count({ n: '*' })).toEqual([{ n: 2 }]);
  });

  it('removes a deleted tag from its contacts without contact.tag_removed events', async () => {
    const ws = await newWorkspace();
    const tag = (await api.request('POST', '/api/v1/tags', { key: ws.key, body: { name: 'lead' } })).body.data;
    const contact = await seedContact(api, ws.id, { phone: '5511987650001', name: 'Ana', tags: ['lead'] });
    expect(await api.db('contact_tags').where({ contact_id: contact.id }).count({ n: '*' })).toEqual([{ n: 1 }]);
    await api.request('DELETE', `/api/v1/tags/${tag.id}`, { key: ws.key });
    expect(await api.db('contact_tags').where({ contact_id: contact.id }).count({ n: '*' })).toEqual([{ n: 0 }]);
    expect(await outbox(api, ws.id, 'contact.tag_removed')).toEqual([]);
  });

  it('answers 403 INSUFFICIENT_SCOPE without the tags scopes', async () => {
    const ws = await newWorkspace();
    const tag = (await api.request('POST', '/api/v1/tags', { key: ws.key, body: { name: 't' } })).body.data;
    const readOnly = await createKey(api, ws.id, ['tags:read']);
    const none = await createKey(api, ws.id, ['leads:read']);
    expectError(await api.request('GET', '/api/v1/tags', { key: none.key }), 403, 'INSUFFICIENT_SCOPE');
    expectError(await api.request('GET', `/api/v1/tags/${tag.id}`, { key: none.key }), 403, 'INSUFFICIENT_SCOPE');
    expect((await api.request('GET', '/api/v1/tags', { key: readOnly.key })).status).toBe(200);
    expectError(await api.request('POST', '/api/v1/tags', { key: readOnly.key, body: { name: 'x' } }), 403, 'INSUFFICIENT_SCOPE');
    expectError(
      await api.request('PATCH', `/api/v1/tags/${tag.id}`, { key: readOnly.key, body: { name: 'x' } }),
      403,
      'INSUFFICIENT_SCOPE',
    );
    expectError(await api.request('DELETE', `/api/v1/tags/${tag.id}`, { key: readOnly.key }), 403, 'INSUFFICIENT_SCOPE');
    expect(await api.db('tags').where({ workspace_id: ws.id }).pluck('name')).toEqual(['t']);
  });

  it("never shows or changes another workspace's tags", async () => {
    const ws = await newWorkspace();
    const other = await newWorkspace();
    const theirs = (await api.request('POST', '/api/v1/tags', { key: other.key, body: { name: 'secret', color: '#123456' } })).body.data;
    expect((await api.request('GET', '/api/v1/tags', { key: ws.key })).body.data).toEqual([]);
    expectError(await api.request('GET', `/api/v1/tags/${theirs.id}`, { key: ws.key }), 404, 'NOT_FOUND');
    expectError(await api.request('PATCH', `/api/v1/tags/${theirs.id}`, { key: ws.key, body: { name: 'mine' } }), 404, 'NOT_FOUND');
    expectError(await api.request('DELETE', `/api/v1/tags/${theirs.id}`, { key: ws.key }), 404, 'NOT_FOUND');
    expect((await api.request('GET', `/api/v1/tags/${theirs.id}`, { key: other.key })).body.data).toEqual(theirs);
  });
});
