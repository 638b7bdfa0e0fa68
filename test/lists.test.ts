import { countQueries, createKey, createWorkspace, expectError, seedContact, startApi, TestApi, Workspace } from './helpers';
import { uniqueMobile } from './phones';

let api: TestApi;
beforeAll(async () => {
  api = await startApi();
});
afterAll(async () => api.close());

const newWorkspace = (): Promise<Workspace> => createWorkspace(api, { scopes: ['lists:read', 'lists:write'] });

/** Distinct valid mobile numbers (55 + DDD 11 + 9 digits starting with 9). */
const nextPhone = (): string => uniqueMobile('11');

const seed = (ws: Workspace, name: string, tags?: string[]) => seedContact(api, ws.id, { phone: nextPhone(), name, tags });

async function newList(ws: Workspace, name = 'Leads'): Promise<any> {
  const res = await api.request('POST', '/api/v1/lists', { key: ws.key, body: { name } });
  expect(res.status).toBe(201);
  return res.body.data;
}

const count = async (ws: Workspace, listId: string): Promise<number> =>
  (await api.request('GET', `/api/v1/lists/${listId}`, { key: ws.key })).body.data.contactCount;

describe('lists', () => {
  it('creates, reads, lists, renames and deletes lists', async () => {
    const ws = await newWorkspace();
    const created = await api.request('POST', '/api/v1/lists', { key: ws.key, body: { name: '  Black Friday  ' } });
    expect(created.status).toBe(201);
    expect(created.body.data).toEqual({
      id: expect.any(String),
      name: 'Black Friday',
      contactCount: 0,
      createdAt: expect.stringMatching(/\.\d{3}Z$/),
      updatedAt: expect.stringMatching(/\.\d{3}Z$/),
    });
    const id = created.body.data.id;
    const second = await newList(ws, 'Second');
    expect((await api.request('GET', `/api/v1/lists/${id}`, { key: ws.key })).body.data).toEqual(created.body.data);
    const all = await api.request('GET', '/api/v1/lists', { key: ws.key });
    expect(all.body.data.map((l: any) => l.id)).toEqual([second.id, id]);
    expect(all.body.pagination).toEqual({ total: 2, limit: 25, offset: 0, hasMore: false });
    const page = await api.request('GET', '/api/v1/lists?limit=1&offset=1', { key: ws.key });
    expect(page.body.data.map((l: any) => l.id)).toEqual([id]);

    const renamed = await api.request('PATCH', `/api/v1/lists/${id}`, { key: ws.key, body: { name: 'Cyber Monday' } });
    expect(renamed.status).toBe(200);
    expect(renamed.body.data).toMatchObject({ id, name: 'Cyber Monday', contactCount: 0 });

    const contact = await seed(ws, 'Ana');
    await api.request('POST', `/api/v1/lists/${id}/contacts`, { key: ws.key, body: { contactIds: [contact.id] } });
    const deleted = await api.request('DELETE', `/api/v1/lists/${id}`, { key: ws.key });
    expect(deleted.body).toEqual({ data: { id, deleted: true } });
    expectError(await api.request('GET', `/api/v1/lists/${id}`, { key: ws.key }), 404, 'NOT_FOUND');
    expectError(await api.request('DELETE', `/api/v1/lists/${id}`, { key: ws.key }), 404, 'NOT_FOUND');
    expect(await api.db('contacts').where({ id: contact.id }).first('id', 'name', 'deleted_at')).toEqual({
      id: contact.id,
      name: 'Ana',
      deleted_at: null,
    });
  });

  it('validates names and contact ids, naming the field', async () => {
    const ws = await newWorkspace();
    const list = await newList(ws);
    const cases: [string, string, unknown, string][] = [
      ['POST', '/api/v1/lists', {}, 'body.name'],
      ['POST', '/api/v1/lists', { name: ' ' }, 'body.name'],
      ['POST', '/api/v1/lists', { name: 'x'.repeat(121) }, 'body.name'],
      ['PATCH', `/api/v1/lists/${list.id}`, {}, 'body.name'],
      ['PATCH', `/api/v1/lists/${list.id}`, { name: 'x'.repeat(121) }, 'body.name'],
      ['POST', `/api/v1/lists/${list.id}/contacts`, {}, 'body.contactIds'],
      ['POST', `/api/v1/lists/${list.id}/contacts`, { contactIds: [] }, 'body.contactIds'],
      ['POST', `/api/v1/lists/${list.id}/contacts`, { contactIds: 'abc' }, 'body.contactIds'],
      ['POST', `/api/v1/lists/${list.id}/contacts`, { contactIds: Array.from({ length: 1001 }, () => list.id) }, 'body.contactIds'],
    ];
    for (const [method, path, body, field] of cases) {
      const res = await api.request(method, path, { key: ws.key, body });
      expectError(res, 400, 'VALIDATION');
      expect(res.body.error).toContain(field);
    }
    expect((await api.request('POST', '/api/v1/lists', { key: ws.key, body: { name: 'x'.repeat(120) } })).status).toBe(201);
    expectError(await api.request('GET', '/api/v1/lists?limit=101', { key: ws.key }), 400, 'VALIDATION');
    expectError(await api.request('GET', '/api/v1/lists/nope', { key: ws.key }), 404, 'NOT_FOUND');
  });

  it('adds and removes contacts, keeping contactCount exact and listing the contacts as Leads', async () => {
    const ws = await newWorkspace();
    const list = await newList(ws);
    await api.admin('POST', `/admin/v1/workspaces/${ws.id}/contacts`, { phone: nextPhone() }); // not in the list
    const tag = await api.db('tags').insert({ workspace_id: ws.id, name: 'vip', color: '#ff0000' }).returning('id');
    const [a, b, c] = [await seed(ws, 'A', ['vip']), await seed(ws, 'B'), await seed(ws, 'C')];

    const add = await api.request('POST', `/api/v1/lists/${list.id}/contacts`, { key: ws.key, body: { contactIds: [a.id, b.id, a.id] } });
    expect(add.status).toBe(200);
    expect(add.body.data).toEqual({ listId: list.id, added: 2, contactCount: 2 });
    // Adding again is a no-op; only the new one counts as added.
    const again = await api.request('POST', `/api/v1/lists/${list.id}/contacts`, { key: ws.key, body: { contactIds: [b.id, c.id] } });
    expect(again.body.data).toEqual({ listId: list.id, added: 1, contactCount: 3 });
    expect(await count(ws, list.id)).toBe(3);

    const contacts = await api.request('GET', `/api/v1/lists/${list.id}/contacts`, { key: ws.key });
    expect(contacts.status).toBe(200);
    expect(contacts.body.pagination).toEqual({ total: 3, limit: 25, offset: 0, hasMore: false });
    expect(contacts.body.data.map((l: any) => l.id).sort()).toEqual([a.id, b.id, c.id].sort());
    // The most recently added first.
    expect(contacts.body.data[0].id).toBe(c.id);
    const leadA = contacts.body.data.find((l: any) => l.id === a.id);
    expect(leadA).toEqual({
      id: a.id,
      name: 'A',
      phone: a.phone,
      email: null,
      instagram: null,
      notes: '',
      tags: [{ id: tag[0].id, name: 'vip', color: '#ff0000' }],
      optedOut: false,
      createdAt: expect.any(String),
      updatedAt: expect.any(String),
    });
    const page = await api.request('GET', `/api/v1/lists/${list.id}/contacts?limit=2&offset=2`, { key: ws.key });
    expect(page.body.data).toHaveLength(1);
    expect(page.body.pagination).toEqual({ total: 3, limit: 2, offset: 2, hasMore: false });

    const removed = await api.request('DELETE', `/api/v1/lists/${list.id}/contacts/${b.id}`, { key: ws.key });
    expect(removed.body).toEqual({ data: { listId: list.id, contactId: b.id, removed: true } });
    const twice = await api.request('DELETE', `/api/v1/lists/${list.id}/contacts/${b.id}`, { key: ws.key });
    expect(twice.body.data.removed).toBe(false);
    expect(await count(ws, list.id)).toBe(2);
  });

  it('adds all or nothing: an unknown, deleted, merged or foreign contact is 404 CONTACT_NOT_FOUND', async () => {
    const ws = await newWorkspace();
    const other = await newWorkspace();
    const list = await newList(ws);
    const ok = await seed(ws, 'ok');
    const gone = await seed(ws, 'gone');
    await api.db('contacts').where({ id: gone.id }).update({ deleted_at: new Date() });
    const foreign = await seed(other, 'foreign');
    for (const bad of ['00000000-0000-4000-8000-000000000000', 'not-a-uuid', gone.id, foreign.id]) {
      const res = await api.request('POST', `/api/v1/lists/${list.id}/contacts`, { key: ws.key, body: { contactIds: [ok.id, bad] } });
      expectError(res, 404, 'CONTACT_NOT_FOUND');
      expect(res.body.hint).toContain(bad);
    }
    expect(await api.db('list_members').where({ list_id: list.id })).toEqual([]);
    expectError(await api.request('DELETE', `/api/v1/lists/${list.id}/contacts/not-a-uuid`, { key: ws.key }), 404, 'CONTACT_NOT_FOUND');
  });

  it('counts only canonical contacts: soft-deleted and merged members drop out of contactCount and the contacts page', async () => {
    const ws = await newWorkspace();
    const list = await newList(ws);
    const [a, b, c] = [await seed(ws, 'A'), await seed(ws, 'B'), await seed(ws, 'C')];
    await api.request('POST', `/api/v1/lists/${list.id}/contacts`, { key: ws.key, body: { contactIds: [a.id, b.id, c.id] } });
    expect(await count(ws, list.id)).toBe(3);
    await api.db('contacts').where({ id: a.id }).update({ deleted_at: new Date() });
    expect(await count(ws, list.id)).toBe(2);
    await api.db('contacts').where({ id: b.id }).update({ merged_into_id: c.id });
    expect(await count(ws, list.id)).toBe(1);
    const listed = await api.request('GET', '/api/v1/lists', { key: ws.key });
    expect(listed.body.data[0].contactCount).toBe(1);
    const contacts = await api.request('GET', `/api/v1/lists/${list.id}/contacts`, { key: ws.key });
    expect(contacts.body.data.map((l: any) => l.id)).toEqual([c.id]);
    expect(contacts.body.pagination.total).toBe(1);
    // A non-canonical member cannot be removed through the API (it is not a contact any more).
    expectError(await api.request('DELETE', `/api/v1/lists/${list.id}/contacts/${a.id}`, { key: ws.key }), 404, 'CONTACT_NOT_FOUND');
  });

  it('pages lists and list contacts with a constant number of queries', async () => {
    const ws = await newWorkspace();
    const contacts = [];
    for (let i = 0; i < 4; i += 1) contacts.push(await seed(ws, `C${i}`));
    const lists = [];
    for (let i = 0; i < 6; i += 1) lists.push(await newList(ws, `L${i}`));
    // List Ln holds n contacts (L5 none).
    for (const [i, list] of lists.entries()) {
      if (i === 0 || i === 5) continue;
      const res = await api.request('POST', `/api/v1/lists/${list.id}/contacts`, {
        key: ws.key,
        body: { contactIds: contacts.slice(0, i).map((c) => c.id) },
      });
      expect(res.status).toBe(200);
    }
    const small = await countQueries(api, () => api.request('GET', '/api/v1/lists?limit=1', { key: ws.key }));
    const large = await countQueries(api, () => api.request('GET', '/api/v1/lists?limit=6', { key: ws.key }));
    expect(large).toBe(small);
    const page = await api.request('GET', '/api/v1/lists?limit=6', { key: ws.key });
    expect(page.body.data.map((l: any) => [l.name, l.contactCount])).toEqual([
      ['L5', 0],
      ['L4', 4],
      ['L3', 3],
      ['L2', 2],
      ['L1', 1],
      ['L0', 0],
    ]);
    const full = lists[4];
    const one = await countQueries(api, () => api.request('GET', `/api/v1/lists/${full.id}/contacts?limit=1`, { key: ws.key }));
    const four = await countQueries(api, () => api.request('GET', `/api/v1/lists/${full.id}/contacts?limit=4`, { key: ws.key }));
    expect(four).toBe(one);
  });

  it('answers 403 INSUFFICIENT_SCOPE without the lists scopes', async () => {
    const ws = await newWorkspace();
    const list = await newList(ws);
    const contact = await seed(ws, 'A');
    const readOnly = await createKey(api, ws.id, ['lists:read']);
    const none = await createKey(api, ws.id, ['leads:read', 'leads:write']);
    for (const [method, path] of [
      ['GET', '/api/v1/lists'],
      ['GET', `/api/v1/lists/${list.id}`],
      ['GET', `/api/v1/lists/${list.id}/contacts`],
    ]) {
      expectError(await api.request(method, path, { key: none.key }), 403, 'INSUFFICIENT_SCOPE');
      expect((await api.request(method, path, { key: readOnly.key })).status).toBe(200);
    }
    const writes: [string, string, unknown][] = [
      ['POST', '/api/v1/lists', { name: 'x' }],
      ['PATCH', `/api/v1/lists/${list.id}`, { name: 'x' }],
      ['DELETE', `/api/v1/lists/${list.id}`, undefined],
      ['POST', `/api/v1/lists/${list.id}/contacts`, { contactIds: [contact.id] }],
      ['DELETE', `/api/v1/lists/${list.id}/contacts/${contact.id}`, undefined],
    ];
    for (const [method, path, body] of writes) {
      expectError(await api.request(method, path, { key: readOnly.key, body }), 403, 'INSUFFICIENT_SCOPE');
    }
    expect(await count(ws, list.id)).toBe(0);
    expect((await api.request('GET', `/api/v1/lists/${list.id}`, { key: ws.key })).body.data.name).toBe('Leads');
  });

  it("never shows or changes another workspace's lists, and never adds its contacts", async () => {
    const ws = await newWorkspace();
    const other = await newWorkspace();
    const mine = await newList(ws, 'Mine');
    const myContact = await seed(ws, 'Mine');
    const theirs = await newList(other, 'Theirs');
    const theirContact = await seed(other, 'Theirs');
    await api.request('POST', `/api/v1/lists/${theirs.id}/contacts`, { key: other.key, body: { contactIds: [theirContact.id] } });
    const snapshot = async () => ({
      lists: await api.db('lists').whereIn('id', [mine.id, theirs.id]).orderBy('id').select('id', 'name', 'updated_at'),
      members: await api
        .db('list_members')
        .whereIn('list_id', [mine.id, theirs.id])
        .orderBy(['list_id', 'contact_id'])
        .select('list_id', 'contact_id'),
    });
    const before = await snapshot();

    expect((await api.request('GET', '/api/v1/lists', { key: ws.key })).body.data.map((l: any) => l.id)).toEqual([mine.id]);
    expectError(await api.request('GET', `/api/v1/lists/${theirs.id}`, { key: ws.key }), 404, 'NOT_FOUND');
    expectError(await api.request('GET', `/api/v1/lists/${theirs.id}/contacts`, { key: ws.key }), 404, 'NOT_FOUND');
    expectError(await api.request('PATCH', `/api/v1/lists/${theirs.id}`, { key: ws.key, body: { name: 'hijack' } }), 404, 'NOT_FOUND');
    expectError(await api.request('DELETE', `/api/v1/lists/${theirs.id}`, { key: ws.key }), 404, 'NOT_FOUND');
    expectError(
      await api.request('POST', `/api/v1/lists/${theirs.id}/contacts`, { key: ws.key, body: { contactIds: [myContact.id] } }),
      404,
      'NOT_FOUND',
    );
    expectError(await api.request('DELETE', `/api/v1/lists/${theirs.id}/contacts/${theirContact.id}`, { key: ws.key }), 404, 'NOT_FOUND');
    // Their contact in my list.
    expectError(
      await api.request('POST', `/api/v1/lists/${mine.id}/contacts`, { key: ws.key, body: { contactIds: [theirContact.id] } }),
      404,
      'CONTACT_NOT_FOUND',
    );
    expectError(
      await api.request('DELETE', `/api/v1/lists/${mine.id}/contacts/${theirContact.id}`, { key: ws.key }),
      404,
      'CONTACT_NOT_FOUND',
    );
    expect(await snapshot()).toEqual(before);
    expect(await count(other, theirs.id)).toBe(1);
  });
});
