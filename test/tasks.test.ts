import {
  countQueries,
  createKey,
  createWorkspace,
  expectError,
  seedContact,
  seedMember,
  seedPipeline,
  startApi,
  TestApi,
  Workspace,
} from './helpers';
import { createTask } from '../domain/sales/tasks';
import { uniqueMobile } from './phones';

let api: TestApi;
const ISO_MS = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/;
const MISSING = '00000000-0000-4000-8000-000000000000';

beforeAll(async () => {
  api = await startApi();
});
afterAll(async () => api.close());

const nextPhone = (): string => uniqueMobile('11');

interface Fixture {
  ws: Workspace;
  contact: { id: string };
  contact2: { id: string };
  member: { id: string; name: string };
  member2: { id: string; name: string };
  dealId: string;
  deal2Id: string;
}

/** A deal row inserted directly (the deals endpoints are not ours). */
async function insertDeal(workspaceId: string, contactId: string): Promise<string> {
  const pipeline = await seedPipeline(api, workspaceId, { name: `Sales ${Math.random().toString(36).slice(2, 8)}`, stages: ['New'] });
  const [deal] = await api
    .db('deals')
    .insert({ workspace_id: workspaceId, contact_id: contactId, pipeline_id: pipeline.id, stage_id: pipeline.stages[0].id, name: 'A deal' })
    .returning('id');
  return deal.id;
}

async function fixture(): Promise<Fixture> {
  const ws = await createWorkspace(api, { scopes: ['tasks:read', 'tasks:write'] });
  const contact = await seedContact(api, ws.id, { phone: nextPhone(), name: 'Ana' });
  const contact2 = await seedContact(api, ws.id, { phone: nextPhone(), name: 'Bruno' });
  const member = await seedMember(api, ws.id, 'Carla Seller');
  const member2 = await seedMember(api, ws.id, 'Davi Seller');
  const dealId = await insertDeal(ws.id, contact.id);
  const deal2Id = await insertDeal(ws.id, contact2.id);
  return { ws, contact, contact2, member, member2, dealId, deal2Id };
}

let f: Fixture;
beforeAll(async () => {
  f = await fixture();
});

const post = (body: unknown, key = f.ws.key) => api.request('POST', '/api/v1/tasks', { key, body });
const patch = (id: string, body: unknown, key = f.ws.key) => api.request('PATCH', `/api/v1/tasks/${id}`, { key, body });
const get = (id: string, key = f.ws.key) => api.request('GET', `/api/v1/tasks/${id}`, { key });
const del = (id: string, key = f.ws.key) => api.request('DELETE', `/api/v1/tasks/${id}`, { key });
const list = (query = '', key = f.ws.key) => api.request('GET', `/api/v1/tasks${query}`, { key });

async function make(body: Record<string, unknown>, key = f.ws.key): Promise<any> {
  const res = await post(body, key);
  expect(res.status).toBe(201);
  return res.body.data;
}

describe('POST /api/v1/tasks', () => {
  it('creates a task with defaults', async () => {
    const res = await post({ title: '  Follow up  ' });
    expect(res.status).toBe(201);
    expect(res.body.data).toEqual({
      id: expect.any(String),
      title: 'Follow up',
      type: 'task',
      dueDate: null,
      status: 'pending',
      contactId: null,
      cardId: null,
      assignedTo: null,
      createdAt: expect.stringMatching(ISO_MS),
      updatedAt: expect.stringMatching(ISO_MS),
    });
    expect((await get(res.body.data.id)).body).toEqual({ data: res.body.data });
  });

  it('creates a task linked to a contact, a deal and a member, due at an ISO instant', async () => {
    const task = await make({
      title: 'Call Ana',
      type: 'call',
      dueDate: '2026-03-01T12:30:00-03:00',
      contactId: f.contact.id,
      cardId: f.dealId,
      assignedTo: f.member.id,
    });
    expect(task).toMatchObject({
      title: 'Call Ana',
      type: 'call',
      dueDate: '2026-03-01T15:30:00.000Z',
      status: 'pending',
      contactId: f.contact.id,
      cardId: f.dealId,
      assignedTo: { id: f.member.id, name: 'Carla Seller' },
    });
    expect((await get(task.id)).body.data).toEqual(task);
    const row = await api.db('tasks').where({ id: task.id }).first();
    expect(row).toMatchObject({
      workspace_id: f.ws.id,
      contact_id: f.contact.id,
      deal_id: f.dealId,
      assigned_to: f.member.id,
      completed_at: null,
    });
  });

  it('creates a task already done, with its completion time', async () => {
    const task = await make({ title: 'Logged call', status: 'done', dueDate: '2026-03-01' });
    expect(task).toMatchObject({ status: 'done', dueDate: '2026-03-01T00:00:00.000Z' });
    expect((await api.db('tasks').where({ id: task.id }).first()).completed_at).toBeInstanceOf(Date);
  });

  it.each([
    { body: {}, field: 'body.title', why: 'missing title' },
    { body: { title: '' }, field: 'body.title', why: 'empty title' },
    { body: { title: '  ' }, field: 'body.title', why: 'blank title' },
    { body: { title: 't'.repeat(501) }, field: 'body.title', why: '501-character title' },
    { body: { title: 'ok', type: '' }, field: 'body.type', why: 'empty type' },
    { body: { title: 'ok', type: 'x'.repeat(65) }, field: 'body.type', why: '65-character type' },
    { body: { title: 'ok', dueDate: 'tomorrow' }, field: 'body.dueDate', why: 'non-ISO dueDate' },
    { body: { title: 'ok', dueDate: '2026-13-45' }, field: 'body.dueDate', why: 'impossible dueDate' },
    { body: { title: 'ok', status: 'started' }, field: 'body.status', why: 'unknown status' },
    { body: { title: 'ok', contactId: 5 }, field: 'body.contactId', why: 'numeric contactId' },
  ])('answers 400 VALIDATION naming $field for a $why', async ({ body, field }) => {
    const res = await post(body);
    expectError(res, 400, 'VALIDATION');
    expect(res.body.error).toContain(field);
  });

  it('keeps due dates within years 0001-9999, after the offset is applied', async () => {
    expect((await make({ title: 'far', dueDate: '9999-12-31T23:59:59.999Z' })).dueDate).toBe('9999-12-31T23:59:59.999Z');
    for (const dueDate of ['9999-12-31T23:59:59-14:00', '0000-06-01T00:00:00Z']) {
      const res = await post({ title: 'out of range', dueDate });
      expectError(res, 400, 'VALIDATION');
      expect(res.body.error).toContain('dueDate');
    }
  });

  it('accepts the bounds of title and type', async () => {
    const task = await make({ title: 't'.repeat(500), type: 'y'.repeat(64) });
    expect(task.title).toHaveLength(500);
  });

  it('checks every reference: contact 404 CONTACT_NOT_FOUND, card 404 NOT_FOUND, assignee 400 ASSIGNEE_NOT_FOUND', async () => {
    const before = await api.db('tasks').where({ workspace_id: f.ws.id }).count<{ n: number }[]>({ n: '*' });
    expectError(await post({ title: 'x', contactId: MISSING }), 404, 'CONTACT_NOT_FOUND');
    expectError(await post({ title: 'x', contactId: 'Ana' }), 404, 'CONTACT_NOT_FOUND');
    expectError(await post({ title: 'x', cardId: MISSING }), 404, 'NOT_FOUND');
    expectError(await post({ title: 'x', cardId: 'deal-1' }), 404, 'NOT_FOUND');
    expectError(await post({ title: 'x', assignedTo: MISSING }), 400, 'ASSIGNEE_NOT_FOUND');
    // The API takes member ids, not names.
    expectError(await post({ title: 'x', assignedTo: 'Carla Seller' }), 400, 'ASSIGNEE_NOT_FOUND');
    const deleted = await seedContact(api, f.ws.id, { phone: nextPhone(), name: 'Gone' });
    await api.db('contacts').where({ id: deleted.id }).update({ deleted_at: new Date() });
    expectError(await post({ title: 'x', contactId: deleted.id }), 404, 'CONTACT_NOT_FOUND');
    const after = await api.db('tasks').where({ workspace_id: f.ws.id }).count<{ n: number }[]>({ n: '*' });
    expect(after).toEqual(before);
  });
});

describe('PATCH /api/v1/tasks/{id}', () => {
  it('changes each field and null clears dueDate, contactId, cardId and assignedTo', async () => {
    const task = await make({
      title: 'Old',
      dueDate: '2026-01-01T00:00:00Z',
      contactId: f.contact.id,
      cardId: f.dealId,
      assignedTo: f.member.id,
    });
    await api
      .db('tasks')
      .where({ id: task.id })
      .update({ updated_at: new Date('2020-01-01T00:00:00Z') });
    const res = await patch(task.id, {
      title: 'New',
      type: 'meeting',
      dueDate: '2026-02-02T10:00:00.000Z',
      contactId: f.contact2.id,
      cardId: f.deal2Id,
      assignedTo: f.member2.id,
    });
    expect(res.status).toBe(200);
    expect(res.body.data).toMatchObject({
      id: task.id,
      title: 'New',
      type: 'meeting',
      dueDate: '2026-02-02T10:00:00.000Z',
      contactId: f.contact2.id,
      cardId: f.deal2Id,
      assignedTo: { id: f.member2.id, name: 'Davi Seller' },
      createdAt: task.createdAt,
    });
    expect(res.body.data.updatedAt > '2020-01-01T00:00:00.000Z').toBe(true);
    const cleared = await patch(task.id, { dueDate: null, contactId: null, cardId: null, assignedTo: null });
    expect(cleared.body.data).toMatchObject({ title: 'New', dueDate: null, contactId: null, cardId: null, assignedTo: null });
    expect((await get(task.id)).body.data).toEqual(cleared.body.data);
  });

  it('done records the completion time, pending clears it', async () => {
    const task = await make({ title: 'Complete me' });
    const completedAt = async () => (await api.db('tasks').where({ id: task.id }).first()).completed_at;
    expect((await patch(task.id, { status: 'done' })).body.data.status).toBe('done');
    const first = await completedAt();
    expect(first).toBeInstanceOf(Date);
    // Done again keeps the first completion time.
    await patch(task.id, { status: 'done', title: 'Completed' });
    expect(await completedAt()).toEqual(first);
    expect((await patch(task.id, { status: 'pending' })).body.data.status).toBe('pending');
    expect(await completedAt()).toBeNull();
  });

  it('requires at least one valid field', async () => {
    const task = await make({ title: 'Untouched' });
    expectError(await patch(task.id, {}), 400, 'VALIDATION');
    const res = await patch(task.id, { status: 'closed' });
    expectError(res, 400, 'VALIDATION');
    expect(res.body.error).toContain('body.status');
    expectError(await patch(task.id, { title: '' }), 400, 'VALIDATION');
    expect((await get(task.id)).body.data.title).toBe('Untouched');
  });

  it('checks references and changes nothing when one is wrong', async () => {
    const task = await make({ title: 'Refs', contactId: f.contact.id, cardId: f.dealId, assignedTo: f.member.id });
    const before = await api.db('tasks').where({ id: task.id }).first();
    expectError(await patch(task.id, { title: 'Changed', contactId: MISSING }), 404, 'CONTACT_NOT_FOUND');
    expectError(await patch(task.id, { title: 'Changed', cardId: MISSING }), 404, 'NOT_FOUND');
    expectError(await patch(task.id, { title: 'Changed', assignedTo: MISSING }), 400, 'ASSIGNEE_NOT_FOUND');
    expect(await api.db('tasks').where({ id: task.id }).first()).toEqual(before);
  });

  it('answers 404 NOT_FOUND for an unknown or malformed id', async () => {
    expectError(await patch(MISSING, { title: 'x' }), 404, 'NOT_FOUND');
    expectError(await patch('nope', { title: 'x' }), 404, 'NOT_FOUND');
  });
});

describe('GET and DELETE /api/v1/tasks/{id}', () => {
  it('deletes a task, after which it is not found', async () => {
    const task = await make({ title: 'Delete me', contactId: f.contact.id });
    const res = await del(task.id);
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ data: { id: task.id, deleted: true } });
    expectError(await get(task.id), 404, 'NOT_FOUND');
    expectError(await del(task.id), 404, 'NOT_FOUND');
    expectError(await get('nope'), 404, 'NOT_FOUND');
    expect(await api.db('contacts').where({ id: f.contact.id }).first('id', 'deleted_at')).toEqual({ id: f.contact.id, deleted_at: null });
  });
});

describe('tasks of a merged or deleted contact', () => {
  it('stay visible without exposing the hidden contact, and filtering by it gives nothing', async () => {
    const gone = await seedContact(api, f.ws.id, { phone: nextPhone(), name: 'Soon deleted' });
    const merged = await seedContact(api, f.ws.id, { phone: nextPhone(), name: 'Soon merged' });
    const t1 = await make({ title: 'About deleted', contactId: gone.id });
    const t2 = await make({ title: 'About merged', contactId: merged.id });
    await api.db('contacts').where({ id: gone.id }).update({ deleted_at: new Date() });
    await api.db('contacts').where({ id: merged.id }).update({ merged_into_id: f.contact.id });

    expect((await get(t1.id)).body.data).toMatchObject({ title: 'About deleted', contactId: null });
    expect((await get(t2.id)).body.data).toMatchObject({ title: 'About merged', contactId: null });
    const all = await list('?limit=100');
    expect(all.text).not.toContain(gone.id);
    expect(all.text).not.toContain(merged.id);
    for (const id of [gone.id, merged.id]) {
      expect((await list(`?contactId=${id}`)).body).toEqual({ data: [], pagination: { total: 0, limit: 25, offset: 0, hasMore: false } });
    }
    // Writing it back is refused like any unknown contact.
    expectError(await patch(t1.id, { contactId: gone.id }), 404, 'CONTACT_NOT_FOUND');
    // Other edits keep working and still do not expose it.
    expect((await patch(t2.id, { status: 'done' })).body.data).toMatchObject({ status: 'done', contactId: null });
  });
});

describe('GET /api/v1/tasks', () => {
  let lf: Fixture;
  const t: Record<string, string> = {};
  beforeAll(async () => {
    lf = await fixture();
    const specs: [string, Record<string, unknown>, string, string][] = [
      // name, body, createdAt, updatedAt
      [
        'a',
        { dueDate: '2026-05-03T00:00:00Z', contactId: lf.contact.id, cardId: lf.dealId, assignedTo: lf.member.id },
        '2026-01-02',
        '2026-02-05',
      ],
      [
        'b',
        { dueDate: '2026-05-01T00:00:00Z', contactId: lf.contact.id, status: 'done', assignedTo: lf.member2.id },
        '2026-01-04',
        '2026-02-01',
      ],
      ['c', { dueDate: null, contactId: lf.contact2.id, cardId: lf.deal2Id }, '2026-01-01', '2026-02-04'],
      ['d', { dueDate: '2026-05-02T12:00:00Z', cardId: lf.dealId, assignedTo: lf.member.id, status: 'done' }, '2026-01-05', '2026-02-03'],
      ['e', { dueDate: '2026-05-04T00:00:00Z' }, '2026-01-03', '2026-02-02'],
    ];
    for (const [name, body, createdAt, updatedAt] of specs) {
      const task = await make({ title: name, ...body }, lf.ws.key);
      await api
        .db('tasks')
        .where({ id: task.id })
        .update({ created_at: `${createdAt}T00:00:00Z`, updated_at: `${updatedAt}T00:00:00Z` });
      t[name] = task.id;
    }
  });
  const titles = async (query: string) => {
    const res = await list(query, lf.ws.key);
    expect(res.status).toBe(200);
    expect(res.body.pagination.total).toBe(res.body.data.length);
    return res.body.data.map((x: any) => x.title);
  };

  it('sorts by dueAt ascending by default, tasks without a due date last in both orders', async () => {
    const res = await list('', lf.ws.key);
    expect(res.body.pagination).toEqual({ total: 5, limit: 25, offset: 0, hasMore: false });
    expect(res.body.data.map((x: any) => x.title)).toEqual(['b', 'd', 'a', 'e', 'c']);
    expect(res.body.data[2]).toMatchObject({
      contactId: lf.contact.id,
      cardId: lf.dealId,
      assignedTo: { id: lf.member.id, name: 'Carla Seller' },
    });
    expect(await titles('?sort=dueAt&order=desc')).toEqual(['e', 'a', 'd', 'b', 'c']);
  });

  it('sorts by createdAt and updatedAt in both orders', async () => {
    expect(await titles('?sort=createdAt')).toEqual(['c', 'a', 'e', 'b', 'd']);
    expect(await titles('?sort=createdAt&order=desc')).toEqual(['d', 'b', 'e', 'a', 'c']);
    expect(await titles('?sort=updatedAt')).toEqual(['b', 'e', 'd', 'c', 'a']);
    expect(await titles('?sort=updatedAt&order=desc')).toEqual(['a', 'c', 'd', 'e', 'b']);
  });

  it('filters by contact, card, status, assignee and due window, alone and combined', async () => {
    expect(await titles(`?contactId=${lf.contact.id}`)).toEqual(['b', 'a']);
    expect(await titles(`?cardId=${lf.dealId}`)).toEqual(['d', 'a']);
    expect(await titles(`?cardId=${lf.deal2Id}`)).toEqual(['c']);
    expect(await titles('?status=done')).toEqual(['b', 'd']);
    expect(await titles('?status=pending')).toEqual(['a', 'e', 'c']);
    expect(await titles(`?assignedTo=${lf.member.id}`)).toEqual(['d', 'a']);
    expect(await titles(`?assignedTo=${lf.member2.id}`)).toEqual(['b']);
    expect(await titles('?dueAfter=2026-05-02T12:00:00Z')).toEqual(['d', 'a', 'e']);
    expect(await titles('?dueBefore=2026-05-03')).toEqual(['b', 'd', 'a']);
    expect(await titles('?dueAfter=2026-05-02&dueBefore=2026-05-03T00:00:00.000Z')).toEqual(['d', 'a']);
    expect(await titles('?dueAfter=2026-05-05')).toEqual([]);
    expect(await titles(`?contactId=${lf.contact.id}&status=pending&assignedTo=${lf.member.id}`)).toEqual(['a']);
    expect(await titles(`?cardId=${lf.dealId}&status=done&sort=createdAt&order=desc`)).toEqual(['d']);
    expect(await titles(`?contactId=${MISSING}`)).toEqual([]);
  });

  it('pages with an exact total', async () => {
    const res = await list('?limit=2&offset=1', lf.ws.key);
    expect(res.body.data.map((x: any) => x.title)).toEqual(['d', 'a']);
    expect(res.body.pagination).toEqual({ total: 5, limit: 2, offset: 1, hasMore: true });
  });

  it.each([
    ['?sort=title', 'query.sort'],
    ['?sort=dueDate', 'query.sort'],
    ['?order=newest', 'query.order'],
    ['?status=open', 'query.status'],
    ['?dueAfter=yesterday', 'query.dueAfter'],
    ['?dueBefore=2026-02-30T25:00:00Z', 'query.dueBefore'],
    ['?contactId=ana', 'query.contactId'],
    ['?cardId=1', 'query.cardId'],
    ['?assignedTo=Carla', 'query.assignedTo'],
    ['?limit=101', 'query.limit'],
  ])('answers 400 VALIDATION for %s naming %s', async (query, field) => {
    const res = await list(query, lf.ws.key);
    expectError(res, 400, 'VALIDATION');
    expect(res.body.error).toContain(field);
  });

  it('runs a constant number of queries whatever the page size and the number of assignees', async () => {
    const ws = await createWorkspace(api, { scopes: ['tasks:read', 'tasks:write'] });
    for (let i = 0; i < 12; i += 1) {
      const member = await seedMember(api, ws.id, `Seller ${i}`);
      await make({ title: `Task ${i}`, assignedTo: member.id, dueDate: `2026-06-${String(i + 1).padStart(2, '0')}` }, ws.key);
    }
    const one = await countQueries(api, async () => expect((await list('?limit=1', ws.key)).body.data).toHaveLength(1));
    const twelve = await countQueries(api, async () => {
      const res = await list('?limit=12', ws.key);
      expect(res.body.data).toHaveLength(12);
      expect(new Set(res.body.data.map((x: any) => x.assignedTo.name)).size).toBe(12);
    });
    expect(twelve).toBe(one);
  });
});

describe('domain createTask (shared with automations)', () => {
  it('can resolve the assignee by name and validates its own input', async () => {
    const task = await createTask(
      api.db,
      f.ws.id,
      { title: 'From automation', type: 'call', assignedTo: 'carla seller' },
      { assigneeByName: true },
    );
    expect(task).toMatchObject({ title: 'From automation', type: 'call', assignedTo: { id: f.member.id, name: 'Carla Seller' } });
    await expect(createTask(api.db, f.ws.id, { title: '  ' })).rejects.toMatchObject({ code: 'VALIDATION' });
    await expect(createTask(api.db, f.ws.id, { title: 'x', assignedTo: 'Nobody' }, { assigneeByName: true })).rejects.toMatchObject({
      code: 'ASSIGNEE_NOT_FOUND',
    });
  });
});

describe('scopes', () => {
  it('needs tasks:read to read and tasks:write to write', async () => {
    const task = await make({ title: 'Scoped' });
    const reader = (await createKey(api, f.ws.id, ['tasks:read'])).key;
    expect((await get(task.id, reader)).status).toBe(200);
    expect((await list('', reader)).status).toBe(200);
    expectError(await post({ title: 'Nope' }, reader), 403, 'INSUFFICIENT_SCOPE');
    expectError(await patch(task.id, { title: 'Nope' }, reader), 403, 'INSUFFICIENT_SCOPE');
    expectError(await del(task.id, reader), 403, 'INSUFFICIENT_SCOPE');
    const writer = (await createKey(api, f.ws.id, ['tasks:write', 'products:read'])).key;
    expectError(await get(task.id, writer), 403, 'INSUFFICIENT_SCOPE');
    expectError(await list('', writer), 403, 'INSUFFICIENT_SCOPE');
    expect((await get(task.id)).body.data.title).toBe('Scoped');
  });
});

describe('tenancy', () => {
  it("never reads, changes or deletes another workspace's task, nor links to its records", async () => {
    const other = await fixture();
    const theirs = await make(
      { title: 'Their task', contactId: other.contact.id, cardId: other.dealId, assignedTo: other.member.id },
      other.ws.key,
    );
    const theirRow = await api.db('tasks').where({ id: theirs.id }).first();
    const mine = await make({ title: 'My task', contactId: f.contact.id, cardId: f.dealId, assignedTo: f.member.id });
    const myRow = await api.db('tasks').where({ id: mine.id }).first();
    const myCount = await api.db('tasks').where({ workspace_id: f.ws.id }).count<{ n: number }[]>({ n: '*' });

    // Their ids in paths.
    expectError(await get(theirs.id), 404, 'NOT_FOUND');
    expectError(await patch(theirs.id, { title: 'Hijacked', status: 'done' }), 404, 'NOT_FOUND');
    expectError(await del(theirs.id), 404, 'NOT_FOUND');
    // Their ids as filters.
    const empty = { data: [], pagination: { total: 0, limit: 25, offset: 0, hasMore: false } };
    expect((await list(`?contactId=${other.contact.id}`)).body).toEqual(empty);
    expect((await list(`?cardId=${other.dealId}`)).body).toEqual(empty);
    expect((await list(`?assignedTo=${other.member.id}`)).body).toEqual(empty);
    expect((await list('?limit=100')).text).not.toContain(theirs.id);
    // Their ids as references on create and update.
    expectError(await post({ title: 'x', contactId: other.contact.id }), 404, 'CONTACT_NOT_FOUND');
    expectError(await post({ title: 'x', cardId: other.dealId }), 404, 'NOT_FOUND');
    expectError(await post({ title: 'x', assignedTo: other.member.id }), 400, 'ASSIGNEE_NOT_FOUND');
    expectError(await patch(mine.id, { contactId: other.contact.id }), 404, 'CONTACT_NOT_FOUND');
    expectError(await patch(mine.id, { cardId: other.dealId }), 404, 'NOT_FOUND');
    expectError(await patch(mine.id, { assignedTo: other.member.id }), 400, 'ASSIGNEE_NOT_FOUND');

    expect(await api.db('tasks').where({ id: theirs.id }).first()).toEqual(theirRow);
    expect(await api.db('tasks').where({ id: mine.id }).first()).toEqual(myRow);
    expect(await api.db('tasks').where({ workspace_id: f.ws.id }).count<{ n: number }[]>({ n: '*' })).toEqual(myCount);
    expect((await get(theirs.id, other.ws.key)).body.data).toEqual(theirs);
  });
});
