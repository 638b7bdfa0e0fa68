import { countQueries, createWorkspace, expectError, seedContact, seedPipeline, startApi, TestApi, Workspace } from './helpers';
import { parsePrice } from '../domain/sales/products';
import { uniqueMobile } from './phones';

let api: TestApi;
let ws: Workspace;
const ISO_MS = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/;

beforeAll(async () => {
  api = await startApi();
  ws = await createWorkspace(api, { scopes: ['products:read', 'products:write'] });
});
afterAll(async () => api.close());

const post = (body: unknown, key = ws.key) => api.request('POST', '/api/v1/products', { key, body });
const patch = (id: string, body: unknown, key = ws.key) => api.request('PATCH', `/api/v1/products/${id}`, { key, body });
const get = (id: string, key = ws.key) => api.request('GET', `/api/v1/products/${id}`, { key });
const list = (query = '', key = ws.key) => api.request('GET', `/api/v1/products${query}`, { key });

async function make(body: Record<string, unknown>, key = ws.key): Promise<any> {
  const res = await post(body, key);
  expect(res.status).toBe(201);
  return res.body.data;
}

const nextPhone = (): string => uniqueMobile('11');

/** A deal row inserted directly (the deals endpoints are not ours), optionally with a product. */
async function insertDeal(workspaceId: string, productId: string | null): Promise<string> {
  const contact = await seedContact(api, workspaceId, { phone: nextPhone(), name: 'Deal contact' });
  const pipeline = await seedPipeline(api, workspaceId, { name: `Sales ${Math.random().toString(36).slice(2, 8)}`, stages: ['New'] });
  const [deal] = await api
    .db('deals')
    .insert({
      workspace_id: workspaceId,
      contact_id: contact.id,
      pipeline_id: pipeline.id,
      stage_id: pipeline.stages[0].id,
      name: 'A deal',
      product_id: productId,
    })
    .returning('id');
  return deal.id;
}

describe('POST /api/v1/products', () => {
  it('creates a product with defaults, price as a two-place decimal string, ISO timestamps', async () => {
    const res = await post({ name: '  Widget  ', price: 10.5 });
    expect(res.status).toBe(201);
    expect(res.body.data).toEqual({
      id: expect.any(String),
      name: 'Widget',
      description: null,
      sku: null,
      price: '10.50',
      active: true,
      createdAt: expect.stringMatching(ISO_MS),
      updatedAt: expect.stringMatching(ISO_MS),
    });
    const full = await make({ name: 'Gadget', description: 'Shiny', sku: ' GAD-1 ', price: '1999.9', active: false });
    expect(full).toMatchObject({ name: 'Gadget', description: 'Shiny', sku: 'GAD-1', price: '1999.90', active: false });
    expect((await get(full.id)).body).toEqual({ data: full });
    const free = await make({ name: 'Freebie', price: 0, sku: '   ' });
    expect(free).toMatchObject({ price: '0.00', sku: null });
    expect((await make({ name: 'Unpriced', price: null })).price).toBeNull();
  });

  it('rejects a duplicate name, ignoring case, with 409 CONFLICT', async () => {
    await make({ name: 'Consulting hour' });
    expectError(await post({ name: 'CONSULTING HOUR' }), 409, 'CONFLICT');
    expectError(await post({ name: '  consulting hour ' }), 409, 'CONFLICT');
  });

  it.each([
    { body: {}, field: 'body.name', why: 'missing name' },
    { body: { name: '' }, field: 'body.name', why: 'empty name' },
    { body: { name: '   ' }, field: 'body.name', why: 'blank name' },
    { body: { name: 'x'.repeat(201) }, field: 'body.name', why: '201-character name' },
    { body: { name: 42 }, field: 'body.name', why: 'numeric name' },
    { body: { name: 'ok', description: 'd'.repeat(2001) }, field: 'body.description', why: '2001-character description' },
    { body: { name: 'ok', sku: 's'.repeat(121) }, field: 'body.sku', why: '121-character sku' },
    { body: { name: 'ok', active: 'yes' }, field: 'body.active', why: 'non-boolean active' },
  ])('answers 400 VALIDATION naming $field for a $why', async ({ body, field }) => {
    const res = await post(body);
    expectError(res, 400, 'VALIDATION');
    expect(res.body.error).toContain(field);
  });

  it('accepts the field bounds', async () => {
    const p = await make({ name: 'n'.repeat(200), description: 'd'.repeat(2000), sku: 's'.repeat(120), price: '999999999999.99' });
    expect(p.price).toBe('999999999999.99');
  });

  it('answers 400 INVALID_PRICE for a bad price on creation too', async () => {
    expectError(await post({ name: 'Bad price', price: '-1' }), 400, 'INVALID_PRICE');
    expectError(await post({ name: 'Bad price', price: 1.234 }), 400, 'INVALID_PRICE');
    expect((await list('?q=bad%20price')).body.pagination.total).toBe(0);
  });
});

describe('PATCH /api/v1/products/{id}', () => {
  it('changes each field, null clears description, sku and price, and moves updatedAt', async () => {
    const p = await make({ name: 'Patchable', description: 'old', sku: 'P-1', price: '5' });
    await api
      .db('products')
      .where({ id: p.id })
      .update({ updated_at: new Date('2020-01-01T00:00:00Z') });
    const res = await patch(p.id, { name: 'Patched', description: 'new', sku: 'P-2', price: '7.25', active: false });
    expect(res.status).toBe(200);
    expect(res.body.data).toMatchObject({
      id: p.id,
      name: 'Patched',
      description: 'new',
      sku: 'P-2',
      price: '7.25',
      active: false,
      createdAt: p.createdAt,
    });
    expect(res.body.data.updatedAt > '2020-01-01T00:00:00.000Z').toBe(true);
    const cleared = await patch(p.id, { description: null, sku: null, price: null });
    expect(cleared.body.data).toMatchObject({ name: 'Patched', description: null, sku: null, price: null, active: false });
    expect((await patch(p.id, { active: true })).body.data.active).toBe(true);
    expect((await patch(p.id, { price: 3 })).body.data.price).toBe('3.00');
    // Changing only the case of its own name is not a conflict.
    expect((await patch(p.id, { name: 'PATCHED' })).body.data.name).toBe('PATCHED');
  });

  it('requires at least one field', async () => {
    const p = await make({ name: 'Needs a field' });
    expectError(await patch(p.id, {}), 400, 'VALIDATION');
    expectError(await api.request('PATCH', `/api/v1/products/${p.id}`, { key: ws.key }), 400, 'VALIDATION');
    const res = await patch(p.id, { name: '' });
    expectError(res, 400, 'VALIDATION');
    expect(res.body.error).toContain('body.name');
  });

  it.each([
    ['abc'],
    ['-1'],
    [-1],
    [-0.01],
    ['1.234'],
    [1.234],
    [0.1 + 0.2],
    ['NaN'],
    ['Infinity'],
    [''],
    ['1e3'],
    [1e21],
    ['1,50'],
    ['+5'],
    ['0x10'],
    ['1000000000000'],
    [1e12],
    [true],
    [{}],
    [[1]],
  ])('answers 400 INVALID_PRICE (not VALIDATION) for price %j and changes nothing', async (price) => {
    const p = await make({ name: `Priced ${JSON.stringify(price)} ${Math.random()}`, price: '10.00' });
    expectError(await patch(p.id, { price }), 400, 'INVALID_PRICE');
    expect((await get(p.id)).body.data.price).toBe('10.00');
  });

  it('renames onto an existing name with 409 CONFLICT', async () => {
    await make({ name: 'Taken name' });
    const p = await make({ name: 'Free name' });
    expectError(await patch(p.id, { name: 'taken NAME' }), 409, 'CONFLICT');
    expect((await get(p.id)).body.data.name).toBe('Free name');
  });

  it('answers 404 NOT_FOUND for an unknown or malformed id', async () => {
    expectError(await patch('00000000-0000-4000-8000-000000000000', { name: 'x' }), 404, 'NOT_FOUND');
    expectError(await patch('not-a-uuid', { name: 'x' }), 404, 'NOT_FOUND');
  });
});

describe('price parsing', () => {
  it('normalises accepted forms to two decimal places', () => {
    expect(parsePrice('10')).toBe('10.00');
    expect(parsePrice(' 12.3 ')).toBe('12.30');
    expect(parsePrice('0012.5')).toBe('12.50');
    expect(parsePrice('7.')).toBe('7.00');
    expect(parsePrice(-0)).toBe('0.00');
    expect(parsePrice(99.99)).toBe('99.99');
    expect(parsePrice(null)).toBeNull();
    expect(parsePrice(undefined)).toBeUndefined();
  });
});

describe('GET /api/v1/products/{id}', () => {
  it('answers 404 NOT_FOUND for an unknown or malformed id', async () => {
    expectError(await get('00000000-0000-4000-8000-000000000000'), 404, 'NOT_FOUND');
    expectError(await get('nope'), 404, 'NOT_FOUND');
  });
});

describe('GET /api/v1/products', () => {
  let lw: Workspace;
  const ids: Record<string, string> = {};
  beforeAll(async () => {
    lw = await createWorkspace(api, { scopes: ['products:read', 'products:write'] });
    const rows: [string, string | null, string | null, boolean, string, string][] = [
      // name, sku, price, active, createdAt, updatedAt
      ['banana', 'FRU-001', '3.00', true, '2026-01-03T00:00:00Z', '2026-02-01T00:00:00Z'],
      ['Apple', 'FRU-002', '10.00', true, '2026-01-01T00:00:00Z', '2026-02-03T00:00:00Z'],
      ['cherry 50%_off', null, null, false, '2026-01-02T00:00:00Z', '2026-02-02T00:00:00Z'],
      ['Durian', 'EXOTIC-9', '2.50', false, '2026-01-04T00:00:00Z', '2026-02-04T00:00:00Z'],
      ['elderberry', 'fru-003', '3.00', true, '2026-01-05T00:00:00Z', '2026-02-05T00:00:00Z'],
    ];
    for (const [name, sku, price, active, createdAt, updatedAt] of rows) {
      const p = await make({ name, sku, price, active }, lw.key);
      await api.db('products').where({ id: p.id }).update({ created_at: createdAt, updated_at: updatedAt });
      ids[name] = p.id;
    }
  });
  const names = async (query: string) => {
    const res = await list(query, lw.key);
    expect(res.status).toBe(200);
    return res.body.data.map((p: any) => p.name);
  };

  it('sorts by name case-insensitively by default, with an exact total and the list envelope', async () => {
    const res = await list('', lw.key);
    expect(res.body.pagination).toEqual({ total: 5, limit: 25, offset: 0, hasMore: false });
    expect(res.body.data.map((p: any) => p.name)).toEqual(['Apple', 'banana', 'cherry 50%_off', 'Durian', 'elderberry']);
    for (const p of res.body.data) expect(p.price === null || typeof p.price === 'string').toBe(true);
    expect(res.body.data[0].price).toBe('10.00');
    expect(await names('?order=desc')).toEqual(['elderberry', 'Durian', 'cherry 50%_off', 'banana', 'Apple']);
  });

  it('sorts by createdAt, updatedAt and price in both orders (no price last, id breaks ties)', async () => {
    expect(await names('?sort=createdAt')).toEqual(['Apple', 'cherry 50%_off', 'banana', 'Durian', 'elderberry']);
    expect(await names('?sort=createdAt&order=desc')).toEqual(['elderberry', 'Durian', 'banana', 'cherry 50%_off', 'Apple']);
    expect(await names('?sort=updatedAt')).toEqual(['banana', 'cherry 50%_off', 'Apple', 'Durian', 'elderberry']);
    expect(await names('?sort=updatedAt&order=desc')).toEqual(['elderberry', 'Durian', 'Apple', 'cherry 50%_off', 'banana']);
    const tie = [ids.banana, ids.elderberry].sort();
    const byId = (a: string) => (a === ids.banana ? 'banana' : 'elderberry');
    expect(await names('?sort=price')).toEqual(['Durian', byId(tie[0]), byId(tie[1]), 'Apple', 'cherry 50%_off']);
    expect(await names('?sort=price&order=desc')).toEqual(['Apple', byId(tie[1]), byId(tie[0]), 'Durian', 'cherry 50%_off']);
  });

  it('searches name or SKU case-insensitively, wildcards matching themselves', async () => {
    expect(await names('?q=FRU')).toEqual(['Apple', 'banana', 'elderberry']);
    expect(await names('?q=an')).toEqual(['banana', 'Durian']);
    expect(await names('?q=exotic-9')).toEqual(['Durian']);
    expect(await names('?q=50%25_')).toEqual(['cherry 50%_off']);
    expect(await names('?q=%25')).toEqual(['cherry 50%_off']);
    expect(await names('?q=_')).toEqual(['cherry 50%_off']);
    expect(await names('?q=zzz')).toEqual([]);
  });

  it('filters by active and combines filters', async () => {
    expect(await names('?active=true')).toEqual(['Apple', 'banana', 'elderberry']);
    expect(await names('?active=false')).toEqual(['cherry 50%_off', 'Durian']);
    expect(await names('?active=false&q=exotic')).toEqual(['Durian']);
    const res = await list('?active=true&sort=price&order=desc&limit=2&offset=1', lw.key);
    expect(res.body.pagination).toEqual({ total: 3, limit: 2, offset: 1, hasMore: false });
    expect(res.body.data).toHaveLength(2);
  });

  it('pages stably', async () => {
    const seen: string[] = [];
    for (let offset = 0; offset < 5; offset += 2) {
      const res = await list(`?sort=price&limit=2&offset=${offset}`, lw.key);
      expect(res.body.pagination.total).toBe(5);
      seen.push(...res.body.data.map((p: any) => p.id));
    }
    expect(new Set(seen).size).toBe(5);
  });

  it.each([
    ['?active=yes', 'query.active'],
    ['?active=1', 'query.active'],
    ['?sort=sku', 'query.sort'],
    ['?sort=price&order=up', 'query.order'],
    ['?limit=0', 'query.limit'],
    ['?limit=101', 'query.limit'],
    ['?offset=-1', 'query.offset'],
  ])('answers 400 VALIDATION for %s naming %s', async (query, field) => {
    const res = await list(query, lw.key);
    expectError(res, 400, 'VALIDATION');
    expect(res.body.error).toContain(field);
  });

  it('runs a constant number of queries whatever the page size', async () => {
    const one = await countQueries(api, () => list('?limit=1', lw.key));
    const five = await countQueries(api, () => list('?limit=5', lw.key));
    expect(five).toBe(one);
  });
});

describe('DELETE /api/v1/products/{id}', () => {
  it('deletes the product and detaches it from deals, which keep existing', async () => {
    const p = await make({ name: 'Doomed', price: '1.00' });
    const dealId = await insertDeal(ws.id, p.id);
    const otherProduct = await make({ name: 'Survivor' });
    const otherDeal = await insertDeal(ws.id, otherProduct.id);
    const res = await api.request('DELETE', `/api/v1/products/${p.id}`, { key: ws.key });
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ data: { id: p.id, deleted: true } });
    expectError(await get(p.id), 404, 'NOT_FOUND');
    expectError(await api.request('DELETE', `/api/v1/products/${p.id}`, { key: ws.key }), 404, 'NOT_FOUND');
    const deal = await api.db('deals').where({ id: dealId }).first();
    expect(deal.product_id).toBeNull();
    expect((await api.db('deals').where({ id: otherDeal }).first()).product_id).toBe(otherProduct.id);
    // The name is free again.
    await make({ name: 'doomed' });
  });
});

describe('scopes', () => {
  it('needs products:read to read and products:write to write', async () => {
    const p = await make({ name: 'Scoped' });
    const reader = await createKeyFor(['products:read']);
    expect((await get(p.id, reader)).status).toBe(200);
    expect((await list('', reader)).status).toBe(200);
    expectError(await post({ name: 'Nope' }, reader), 403, 'INSUFFICIENT_SCOPE');
    expectError(await patch(p.id, { name: 'Nope' }, reader), 403, 'INSUFFICIENT_SCOPE');
    expectError(await api.request('DELETE', `/api/v1/products/${p.id}`, { key: reader }), 403, 'INSUFFICIENT_SCOPE');
    const writer = await createKeyFor(['products:write', 'tasks:read']);
    expectError(await get(p.id, writer), 403, 'INSUFFICIENT_SCOPE');
    expectError(await list('', writer), 403, 'INSUFFICIENT_SCOPE');
    expect((await get(p.id)).body.data.name).toBe('Scoped');
  });
});

async function createKeyFor(scopes: any[]): Promise<string> {
  const res = await api.admin('POST', `/admin/v1/workspaces/${ws.id}/api-keys`, { name: 'scoped', scopes, rateLimitPerMinute: 1000 });
  expect(res.status).toBe(201);
  return res.body.data.key;
}

describe('tenancy', () => {
  it("never reads, changes or deletes another workspace's product", async () => {
    const other = await createWorkspace(api, { scopes: ['products:read', 'products:write'] });
    const theirs = await make({ name: 'Their secret product', sku: 'SECRET-1', price: '42.00' }, other.key);
    const dealId = await insertDeal(other.id, theirs.id);
    const before = await api.db('products').where({ id: theirs.id }).first();

    expectError(await get(theirs.id), 404, 'NOT_FOUND');
    expectError(await patch(theirs.id, { name: 'Hijacked', price: '0' }), 404, 'NOT_FOUND');
    expectError(await api.request('DELETE', `/api/v1/products/${theirs.id}`, { key: ws.key }), 404, 'NOT_FOUND');
    const search = await list('?q=secret');
    expect(search.body).toEqual({ data: [], pagination: { total: 0, limit: 25, offset: 0, hasMore: false } });
    // The same name is free in this workspace: uniqueness is per workspace.
    await make({ name: 'Their secret product' });

    expect(await api.db('products').where({ id: theirs.id }).first()).toEqual(before);
    expect((await api.db('deals').where({ id: dealId }).first()).product_id).toBe(theirs.id);
    expect((await get(theirs.id, other.key)).body.data).toEqual(theirs);
  });
});
