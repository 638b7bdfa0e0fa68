import type { Scope } from '../domain/access/scopes';
import { settledHorizon } from '../domain/platform/cursor';
import { ApiResponse, createKey, createWorkspace, eventually, expectError, seedPipeline, startApi, TestApi, Workspace } from './helpers';
import { uniqueMobile } from './phones';
import { ensureDatabase, migrateLatest } from '../scripts/stack';

/**
 * Incremental sync (cursor paging) of leads, deals, tasks, products and conversations, through the
 * real API and PostgreSQL: a job that reads "everything changed since my last run", pages while
 * others write, and must end with an exact copy, deletions included.
 */
let api: TestApi;
beforeAll(async () => {
  // A database of its own: the settled horizon is the oldest transaction open on the database, and
  // the other test files, running side by side, hold transactions open for seconds on purpose (a
  // send held in its prepare step, a lock to wait on). Here only this file's transactions count.
  const databaseUrl = await ensureDatabase(process.env.TEST_ADMIN_DATABASE_URL!, 'crm_sync_test', true);
  await migrateLatest(databaseUrl, () => undefined);
  api = await startApi({ config: { databaseUrl } });
});
afterAll(async () => api.close());

const EVERY: Scope[] = [
  'leads:read',
  'leads:write',
  'tags:write',
  'deals:read',
  'deals:write',
  'tasks:read',
  'tasks:write',
  'products:read',
  'products:write',
  'conversations:read',
  'conversations:write',
];
const workspace = () => createWorkspace(api, { scopes: EVERY });

/** A distinct mobile per call: 55 + area 41 + 9 + 8 digits. */
const mobile = (): string => uniqueMobile('41');

type Page = { data: any[]; pagination: { limit: number; hasMore: boolean; nextCursor: string } };
const get = (w: Workspace, path: string): Promise<ApiResponse> => api.request('GET', path, { key: w.key });

/**
 * Waits until every transaction open on the database when called has ended (the settled horizon of
 * domain/platform/cursor.ts has passed that moment): a page read at once could end before this
 * test's own last write. The database is this file's own, so only its own transactions count.
 */
async function settled(): Promise<void> {
  const since = BigInt(Date.now()) * 1000n;
  await eventually('transactions open elsewhere to end', async () => BigInt(await settledHorizon(api.db)) >= since);
}

/**
 * One cursor page: the first (paging=cursor plus `first`) or the one after `cursor`, read once the
 * transactions open elsewhere have ended (`settle: false` while the test holds one open itself).
 */
async function page(w: Workspace, list: string, from: { cursor?: string; first?: string }, extra = '', settle = true): Promise<Page> {
  if (settle) await settled();
  const qs = from.cursor ? `cursor=${encodeURIComponent(from.cursor)}` : `paging=cursor${from.first ?? ''}`;
  const res = await get(w, `/api/v1/${list}?${qs}${extra}`);
  expect({ status: res.status, error: res.body.error }).toEqual({ status: 200, error: undefined });
  expect(Object.keys(res.body.pagination).sort()).toEqual(['hasMore', 'limit', 'nextCursor']);
  return res.body;
}

/** Pages until hasMore is false: every row read (in order, repeats kept) and the cursor to resume from. */
async function readToEnd(
  w: Workspace,
  list: string,
  from: { cursor?: string; first?: string },
  extra = '',
  settle = true,
): Promise<{ rows: any[]; cursor: string; pages: number }> {
  const rows: any[] = [];
  let pages = 0;
  let current = from;
  for (;;) {
    const body = await page(w, list, current, extra, settle);
    pages += 1;
    rows.push(...body.data);
    if (!body.pagination.hasMore) return { rows, cursor: body.pagination.nextCursor, pages };
    current = { cursor: body.pagination.nextCursor };
  }
}

/** The whole list with offset paging (the spec's endpoints), in a stable order. */
async function offsetList(w: Workspace, list: string, order = ''): Promise<any[]> {
  const rows: any[] = [];
  for (let offset = 0; ; offset += 100) {
    const res = await get(w, `/api/v1/${list}?limit=100&offset=${offset}${order}`);
    expect(res.status).toBe(200);
    rows.push(...res.body.data);
    if (!res.body.pagination.hasMore) return rows;
  }
}

const byId = <T extends { id: string }>(rows: T[]): T[] => [...rows].sort((a, b) => a.id.localeCompare(b.id));
const upsert = async (w: Workspace, body: Record<string, unknown>) => {
  const res = await api.request('POST', '/api/v1/leads', { key: w.key, body });
  expect([200, 201]).toContain(res.status);
  return res.body.data;
};
/** What a cursor names, for the assertions that must see inside it (clients treat it as opaque). */
const positionOf = (cursor: string): [string, string] => cursor.split('_').slice(1) as [string, string];
const cursorOf = (kind: string, position: unknown[]): string => [kind, ...position].join('_');

describe('cursor paging', () => {
  it('returns every row once, in (updatedAt, id) order, also when rows share a timestamp', async () => {
    const ws = await workspace();
    const leads = [];
    for (let i = 0; i < 23; i++) leads.push(await upsert(ws, { phone: mobile(), name: `Lead ${i}` }));
    // Seven leads stamped in one statement: one timestamp, ordered by id.
    await api
      .db('contacts')
      .whereIn(
        'id',
        leads.slice(5, 12).map((l) => l.id),
      )
      .update({ updated_at: api.db.raw(`now() - interval '1 hour'`) });

    const { rows, pages, cursor } = await readToEnd(ws, 'leads', {}, '&limit=5');
    expect(pages).toBe(5);
    expect(rows.map((r) => r.id)).toEqual(
      await api
        .db('contacts')
        .where({ workspace_id: ws.id })
        .orderBy([{ column: 'updated_at' }, { column: 'id' }])
        .pluck('id'),
    );
    // The same records as the offset list, field for field.
    expect(byId(rows)).toEqual(byId(await offsetList(ws, 'leads')));

    // Read again from the end: nothing new, and the same position to resume from.
    const again = await page(ws, 'leads', { cursor });
    expect(again).toEqual({ data: [], pagination: { limit: 25, hasMore: false, nextCursor: cursor } });
    // A lead changed after the run comes in the next one.
    await api.request('PATCH', `/api/v1/leads/${leads[0].id}`, { key: ws.key, body: { name: 'Changed' } });
    const next = await eventually('the change to pass the horizon', async () => {
      const body = await page(ws, 'leads', { cursor });
      return body.data.length > 0 && body;
    });
    expect(next.data.map((l: { id: string; name: string }) => [l.id, l.name])).toEqual([[leads[0].id, 'Changed']]);
  });

  it('starts at updatedAfter (inclusive), and an empty first page still gives a cursor to resume from', async () => {
    const ws = await workspace();
    const products = [];
    for (let i = 0; i < 6; i++) {
      const res = await api.request('POST', '/api/v1/products', { key: ws.key, body: { name: `Product ${i}` } });
      products.push(res.body.data);
      await api
        .db('products')
        .where({ id: res.body.data.id })
        .update({ updated_at: `2026-01-01T00:00:0${i}.000001Z` });
    }
    const { rows } = await readToEnd(ws, 'products', { first: '&updatedAfter=2026-01-01T00:00:03Z' });
    expect(rows.map((p) => p.name)).toEqual(['Product 3', 'Product 4', 'Product 5']);
    // The offset list takes updatedAfter as a filter, like the lead list.
    const filtered = await get(ws, '/api/v1/products?updatedAfter=2026-01-01T00:00:04Z&sort=updatedAt');
    expect(filtered.body.data.map((p: { name: string }) => p.name)).toEqual(['Product 4', 'Product 5']);

    const empty = await page(ws, 'tasks', {});
    expect(empty.data).toEqual([]);
    expect(empty.pagination.hasMore).toBe(false);
    const task = await api.request('POST', '/api/v1/tasks', { key: ws.key, body: { title: 'Call back' } });
    const later = await eventually('the task to be readable', async () => {
      const body = await page(ws, 'tasks', { cursor: empty.pagination.nextCursor });
      return body.data.length > 0 && body;
    });
    expect(later.data).toEqual([task.body.data]);
  });

  it('refuses a cursor of another list, a garbled one, and a position that is not one', async () => {
    const ws = await workspace();
    const deals = await page(ws, 'deals', {});
    for (const cursor of [
      deals.pagination.nextCursor,
      'leads_%%%',
      'leads_bm90IGpzb24',
      cursorOf('leads', ['1', 'not-a-uuid']),
      cursorOf('leads', ['soon', '3f1c2a9e-8b7d-4c6e-9a10-5d2b7e4f8c01']),
      cursorOf('leads', ['1', '3F1C2A9E-8B7D-4C6E-9A10-5D2B7E4F8C01', 'x']),
    ]) {
      const res = await get(ws, `/api/v1/leads?cursor=${encodeURIComponent(cursor)}`);
      expectError(res, 400, 'VALIDATION');
      expect(res.body.error).toContain('query.cursor');
    }
  });

  it.each([
    ['leads', 'paging=cursor&sort=name', 'query.sort'],
    ['leads', 'paging=cursor&order=asc', 'query.order'],
    ['leads', 'paging=cursor&offset=0', 'query.offset'],
    ['leads', 'paging=cursor&q=maria', 'query.q'],
    ['leads', 'paging=cursor&createdAfter=2026-01-01', 'query.createdAfter'],
    ['leads', 'includeDeleted=true', 'query.includeDeleted'],
    ['deals', 'paging=cursor&status=open', 'query.status'],
    ['tasks', 'paging=cursor&sort=updatedAt', 'query.sort'],
    ['products', 'paging=cursor&active=true', 'query.active'],
    ['conversations', 'paging=cursor&instanceId=x', 'query.instanceId'],
  ])('refuses %s?%s with 400 VALIDATION naming the parameter', async (list, qs, name) => {
    const ws = await workspace();
    const res = await get(ws, `/api/v1/${list}?${qs}`);
    expectError(res, 400, 'VALIDATION');
    expect(res.body.error).toContain(name);
  });

  it('refuses updatedAfter beside a cursor, and offset or sort on later pages', async () => {
    const ws = await workspace();
    const { pagination } = await page(ws, 'leads', {});
    const cursor = encodeURIComponent(pagination.nextCursor);
    for (const [qs, name] of [
      [`cursor=${cursor}&updatedAfter=2026-01-01`, 'query.updatedAfter'],
      [`cursor=${cursor}&offset=25`, 'query.offset'],
      [`cursor=${cursor}&sort=createdAt`, 'query.sort'],
    ]) {
      const res = await get(ws, `/api/v1/leads?${qs}`);
      expectError(res, 400, 'VALIDATION');
      expect(res.body.error).toContain(name);
    }
  });

  it('keeps each workspace to its own rows, whatever cursor it is given', async () => {
    const [a, b] = [await workspace(), await workspace()];
    const aLeads = [await upsert(a, { phone: mobile() }), await upsert(a, { phone: mobile() })];
    const { cursor, rows } = await readToEnd(a, 'leads', {}, '&limit=1');
    expect(rows.map((l) => l.id)).toEqual(aLeads.map((l) => l.id));
    const bLead = await upsert(b, { phone: mobile() });
    await upsert(a, { phone: mobile() });
    // B reads from A's position: B's rows after it, never A's.
    const read = await eventually("B's lead to be readable", async () => {
      const body = await readToEnd(b, 'leads', { cursor }, '&includeDeleted=true');
      return body.rows.length > 0 && body;
    });
    expect(read.rows.map((l) => l.id)).toEqual([bLead.id]);
    // And from the beginning, B has only its own.
    expect((await readToEnd(b, 'leads', {})).rows.map((l) => l.id)).toEqual([bLead.id]);
  });

  it.each([
    ['leads', 'leads:read'],
    ['deals', 'deals:read'],
    ['tasks', 'tasks:read'],
    ['products', 'products:read'],
    ['conversations', 'conversations:read'],
  ] as const)("reads %s with the list's own scope (%s) and its rate-limit headers", async (list, scope) => {
    const ws = await workspace();
    const other = EVERY.filter((s) => s !== scope && !(list === 'leads' && s === 'leads:write'));
    const without = await createKey(api, ws.id, other);
    expectError(await api.request('GET', `/api/v1/${list}?paging=cursor`, { key: without.key }), 403, 'INSUFFICIENT_SCOPE');
    const only = await createKey(api, ws.id, [scope]);
    const res = await api.request('GET', `/api/v1/${list}?paging=cursor`, { key: only.key });
    expect(res.status).toBe(200);
    expect(res.headers.get('x-ratelimit-limit')).toBeTruthy();
    expect(res.body).toEqual({
      data: [],
      pagination: { limit: 25, hasMore: false, nextCursor: expect.stringMatching(new RegExp(`^${list}_`)) },
    });
  });
});

describe('tombstones', () => {
  it('shows a deleted and a merged lead as tombstones with includeDeleted=true, never a group chat', async () => {
    const ws = await workspace();
    const [kept, deleted, merged] = [
      await upsert(ws, { phone: mobile(), name: 'Kept' }),
      await upsert(ws, { phone: mobile(), name: 'Deleted' }),
      await upsert(ws, { phone: mobile(), name: 'Merged' }),
    ];
    const pipeline = await seedPipeline(api, ws.id, { name: 'Sales', stages: ['New'] });
    const deal = await api.request('POST', '/api/v1/deals', { key: ws.key, body: { contactId: deleted.id, pipeline: pipeline.id } });
    expect(deal.status).toBe(201);
    const { cursor } = await readToEnd(ws, 'leads', {}, '&includeDeleted=true');
    const deals = await readToEnd(ws, 'deals', {});
    expect(deals.rows.map((d) => d.id)).toEqual([deal.body.data.id]);

    expect((await api.request('DELETE', `/api/v1/leads/${deleted.id}`, { key: ws.key })).status).toBe(200);
    // The merge (an admin operation of its own) marks the contact merged and stamps it, in one transaction.
    await api.db('contacts').where({ id: merged.id }).update({ merged_into_id: kept.id, updated_at: api.db.fn.now() });
    const group = `1203630${String(Date.now()).slice(-11)}@g.us`;
    await api.db('contacts').insert({ workspace_id: ws.id, name: 'Family', phone: group, phone_key: group, is_group: true });

    const after = await eventually('the tombstones', async () => {
      const body = await readToEnd(ws, 'leads', { cursor }, '&includeDeleted=true');
      return body.rows.length === 2 && body;
    });
    const rows = await api.db('contacts').whereIn('id', [deleted.id, merged.id]).select('id', 'deleted_at', 'updated_at');
    const at = (id: string, column: 'deleted_at' | 'updated_at') => rows.find((r) => r.id === id)[column].toISOString();
    expect(byId(after.rows)).toEqual(
      byId([
        {
          id: deleted.id,
          deleted: true,
          deletedAt: at(deleted.id, 'deleted_at'),
          mergedIntoId: null,
          updatedAt: at(deleted.id, 'updated_at'),
        },
        {
          id: merged.id,
          deleted: true,
          deletedAt: at(merged.id, 'updated_at'),
          mergedIntoId: kept.id,
          updatedAt: at(merged.id, 'updated_at'),
        },
      ]),
    );
    // Without includeDeleted they are simply gone, and so is the deleted lead's deal.
    expect((await readToEnd(ws, 'leads', { cursor })).rows).toEqual([]);
    expect((await readToEnd(ws, 'leads', {})).rows.map((l) => l.id)).toEqual([kept.id]);
    expect((await readToEnd(ws, 'deals', {})).rows).toEqual([]);
  });
});

describe('reading while others write', () => {
  it('never passes a change still being written: the page stops at the oldest open transaction and reads it once committed', async () => {
    const ws = await workspace();
    const created = [];
    for (let i = 0; i < 4; i++)
      created.push((await api.request('POST', '/api/v1/products', { key: ws.key, body: { name: `Slow ${i}` } })).body.data);
    const trx = await api.db.transaction();
    let committed = false;
    try {
      // A slow writer: its change is stamped with its transaction's start.
      await trx('products').where({ id: created[0].id }).update({ price: '9.99', updated_at: trx.fn.now() });
      const [{ stamp }] = (await trx.raw(`SELECT (floor(extract(epoch FROM now()) * 1000000))::bigint::text AS stamp`)).rows;
      // A quicker one commits after it began.
      const quick = (await api.request('POST', '/api/v1/products', { key: ws.key, body: { name: 'Quick' } })).body.data;

      // (Another transaction on the database, older than the products, would hold them back too: wait it out.)
      const first = await eventually('the committed products', async () => {
        const body = await readToEnd(ws, 'products', {}, '&limit=2', false);
        return body.rows.length >= 4 && body;
      });
      expect(first.rows.map((p) => p.name)).toEqual(['Slow 0', 'Slow 1', 'Slow 2', 'Slow 3']);
      expect(first.rows[0].price).toBeNull();
      // The quick row waits behind the slow one: the position stays before the slow writer's stamp.
      expect(BigInt(positionOf(first.cursor)[0])).toBeLessThan(BigInt(stamp));

      await trx.commit();
      committed = true;
      const rest = await eventually("both writers' rows", async () => {
        const body = await readToEnd(ws, 'products', { cursor: first.cursor });
        return body.rows.length === 2 && body;
      });
      expect(rest.rows.map((p) => [p.name, p.price])).toEqual([
        ['Slow 0', '9.99'],
        ['Quick', null],
      ]);
      expect(rest.rows[1].id).toBe(quick.id);
    } finally {
      if (!committed) await trx.rollback();
    }
  });

  it('ends with an exact copy of the leads when a sync reads while another client upserts, edits, tags, deletes and merges', async () => {
    const ws = await workspace();
    const live: string[] = [];
    const removed = new Set<string>();
    for (let i = 0; i < 30; i++) live.push((await upsert(ws, { phone: mobile(), name: `Seed ${i}`, tags: [`t${i % 3}`] })).id);
    const tags: { id: string; name: string }[] = (await api.db('tags').where({ workspace_id: ws.id }).select('id', 'name')) as never;

    let writing = true;
    let ops = 0;
    const pick = () => live[Math.floor(Math.random() * live.length)];
    // Every write answers as documented: a lead another client just removed is 404, nothing else fails.
    const unexpected: string[] = [];
    const write = async (method: string, path: string, body: unknown, ok: number[]) => {
      const res = await api.request(method, path, { key: ws.key, body });
      if (!ok.includes(res.status)) unexpected.push(`${method} ${path}: ${res.status} ${res.text}`);
    };
    const writer = async (n: number) => {
      for (let i = 0; i < n; i++) {
        const op = i % 7;
        if (op === 0) live.push((await upsert(ws, { phone: mobile(), name: `New ${i}`, tags: ['fresh'] })).id);
        if (op === 1) await write('PATCH', `/api/v1/leads/${pick()}`, { name: `Edited ${i}`, notes: `note ${i}` }, [200, 404]);
        if (op === 2) await write('POST', `/api/v1/leads/${pick()}/tags`, { tag: `t${i % 4}` }, [200, 404]);
        if (op === 3) await write('DELETE', `/api/v1/leads/${pick()}/tags/${tags[i % tags.length].id}`, undefined, [200, 404]);
        if (op === 4 && live.length > 10) {
          const id = live.splice(Math.floor(Math.random() * live.length), 1)[0];
          removed.add(id);
          await write('DELETE', `/api/v1/leads/${id}`, undefined, [200]);
        }
        if (op === 5 && live.length > 10) {
          const [id] = live.splice(Math.floor(Math.random() * live.length), 1);
          removed.add(id);
          await api.db('contacts').where({ id }).update({ merged_into_id: pick(), updated_at: api.db.fn.now() });
        }
        if (op === 6) await write('PATCH', `/api/v1/tags/${tags[i % tags.length].id}`, { color: i % 2 ? '#112233' : '#445566' }, [200]);
        ops += 1;
      }
    };
    // Four clients at once, so transactions overlap and commit out of their start order.
    const writers = Promise.all([writer(35), writer(35), writer(35), writer(35)]).finally(() => (writing = false));

    const copy = new Map<string, any>();
    const apply = (rows: any[]) => {
      for (const row of rows) {
        if (row.deleted) copy.delete(row.id);
        else copy.set(row.id, row);
      }
    };
    // The job reads with a key of its own (leads:read only), so its requests never count against the writers' limit.
    const reader = { ...ws, key: (await createKey(api, ws.id, ['leads:read'])).key };
    let cursor: string | undefined;
    let reads = 0;
    while (writing) {
      // Not settled: this reader reads while the writers' transactions are open, on purpose.
      const body = await page(reader, 'leads', cursor ? { cursor } : {}, '&limit=7&includeDeleted=true', false);
      apply(body.data);
      cursor = body.pagination.nextCursor;
      reads += 1;
      // Within the key's 1,000 requests a minute when it has caught up.
      if (!body.pagination.hasMore) await new Promise((r) => setTimeout(r, 5));
    }
    await writers;
    expect(unexpected).toEqual([]);
    expect(ops).toBe(140);
    expect(reads).toBeGreaterThan(20);

    // One catch-up run after the writers stop (repeated only while a transaction elsewhere on the
    // database still holds the horizon back): the copy is then exact, field for field.
    const truth = byId(await offsetList(ws, 'leads'));
    await eventually(
      'the copy to match the list',
      async () => {
        const rest = await readToEnd(reader, 'leads', { cursor: cursor! }, '&limit=7&includeDeleted=true');
        apply(rest.rows);
        cursor = rest.cursor;
        return JSON.stringify(byId([...copy.values()])) === JSON.stringify(truth);
      },
      20_000,
      200,
    ).catch(() => undefined);
    expect(byId([...copy.values()])).toEqual(truth);
    for (const id of removed) expect(copy.has(id)).toBe(false);
    expect(removed.size).toBeGreaterThan(5);
  }, 120_000);
});

describe('exact copies of the other lists', () => {
  it('copies deals exactly, stage moves and status changes included', async () => {
    const ws = await workspace();
    const pipeline = await seedPipeline(api, ws.id, { name: 'Sales', stages: ['New', 'Won'] });
    const lead = await upsert(ws, { phone: mobile(), name: 'Buyer' });
    const deals = [];
    for (let i = 0; i < 12; i++)
      deals.push(
        (
          await api.request('POST', '/api/v1/deals', {
            key: ws.key,
            body: { contactId: lead.id, pipeline: 'Sales', name: `Deal ${i}`, value: i * 10 },
          })
        ).body.data,
      );
    const copy = new Map<string, any>();
    const first = await readToEnd(ws, 'deals', {}, '&limit=5');
    first.rows.forEach((d) => copy.set(d.id, d));
    await api.request('PATCH', `/api/v1/deals/${deals[3].id}`, { key: ws.key, body: { stageId: pipeline.stages[1].id } });
    await api.request('PATCH', `/api/v1/deals/${deals[7].id}`, { key: ws.key, body: { status: 'won' } });
    const moved = await eventually('the two changes', async () => {
      const rest = await readToEnd(ws, 'deals', { cursor: first.cursor }, '&limit=5');
      return rest.rows.length === 2 && rest;
    });
    moved.rows.forEach((d) => copy.set(d.id, d));
    expect(moved.rows.map((d) => d.id)).toEqual([deals[3].id, deals[7].id]);
    expect(byId([...copy.values()])).toEqual(byId(await offsetList(ws, 'deals')));
  });
});

describe('every change a record shows moves its updatedAt', () => {
  /** The rows changed since `cursor`, once they are readable. */
  const changedSince = (ws: Workspace, list: string, cursor: string, count: number, extra = '') =>
    eventually(`${count} changed ${list}`, async () => {
      const body = await readToEnd(ws, list, { cursor }, extra);
      return body.rows.length >= count && body.rows;
    });

  it('renaming or deleting a tag moves the leads that carry it', async () => {
    const ws = await workspace();
    const [tagged, other] = [await upsert(ws, { phone: mobile(), tags: ['vip', 'cold'] }), await upsert(ws, { phone: mobile() })];
    const tagId = tagged.tags.find((t: { name: string }) => t.name === 'vip').id;
    const { cursor } = await readToEnd(ws, 'leads', {});
    expect((await api.request('PATCH', `/api/v1/tags/${tagId}`, { key: ws.key, body: { name: 'VIP gold' } })).status).toBe(200);
    const renamed = await changedSince(ws, 'leads', cursor, 1);
    expect(renamed.map((l) => [l.id, l.tags.map((t: { name: string }) => t.name).sort()])).toEqual([[tagged.id, ['VIP gold', 'cold']]]);
    expect(renamed[0].updatedAt > tagged.updatedAt).toBe(true);

    const next = (await readToEnd(ws, 'leads', { cursor })).cursor;
    expect((await api.request('DELETE', `/api/v1/tags/${tagId}`, { key: ws.key })).status).toBe(200);
    const untagged = await changedSince(ws, 'leads', next, 1);
    expect(untagged.map((l) => [l.id, l.tags.map((t: { name: string }) => t.name)])).toEqual([[tagged.id, ['cold']]]);
    expect((await readToEnd(ws, 'leads', { cursor: next })).rows.map((l) => l.id)).not.toContain(other.id);
  });

  it('deleting a lead moves its tasks (their contactId becomes null), renaming it moves its conversations', async () => {
    const ws = await workspace();
    const [gone, renamed] = [await upsert(ws, { phone: mobile(), name: 'Gone' }), await upsert(ws, { phone: mobile(), name: 'Before' })];
    const task = (await api.request('POST', '/api/v1/tasks', { key: ws.key, body: { title: 'Call', contactId: gone.id } })).body.data;
    const instance = await api.admin('POST', `/admin/v1/workspaces/${ws.id}/instances`, {
      name: 'Main',
      channel: 'whatsapp',
      provider: 'cloud',
      connected: true,
      config: { accessToken: 'x', appSecret: 'y' },
    });
    const [conversation] = await api
      .db('conversations')
      .insert({ workspace_id: ws.id, contact_id: renamed.id, instance_id: instance.body.data.id, channel: 'whatsapp' })
      .returning('id');
    const tasks = await readToEnd(ws, 'tasks', {});
    const conversations = await readToEnd(ws, 'conversations', {});
    expect(conversations.rows.map((c) => c.contact.name)).toEqual(['Before']);

    await api.request('DELETE', `/api/v1/leads/${gone.id}`, { key: ws.key });
    const [moved] = await changedSince(ws, 'tasks', tasks.cursor, 1);
    expect(moved).toMatchObject({ id: task.id, contactId: null });
    expect(moved.updatedAt > task.updatedAt).toBe(true);

    await api.request('PATCH', `/api/v1/leads/${renamed.id}`, { key: ws.key, body: { name: 'After' } });
    const [shown] = await changedSince(ws, 'conversations', conversations.cursor, 1);
    expect(shown).toMatchObject({ id: conversation.id, contact: { id: renamed.id, name: 'After' } });
  });

  it('a conversation status change, and a connection restored from the archive, bring conversations back to a sync', async () => {
    const ws = await workspace();
    const lead = await upsert(ws, { phone: mobile() });
    const instance = await api.admin('POST', `/admin/v1/workspaces/${ws.id}/instances`, {
      name: 'Main',
      channel: 'whatsapp',
      provider: 'cloud',
      connected: true,
      config: { accessToken: 'x', appSecret: 'y' },
    });
    const instanceId = instance.body.data.id;
    const [conversation] = await api
      .db('conversations')
      .insert({ workspace_id: ws.id, contact_id: lead.id, instance_id: instanceId, channel: 'whatsapp' })
      .returning('id');
    const start = await readToEnd(ws, 'conversations', {});
    expect(
      (await api.request('PATCH', `/api/v1/conversations/${conversation.id}`, { key: ws.key, body: { status: 'closed' } })).status,
    ).toBe(200);
    expect((await changedSince(ws, 'conversations', start.cursor, 1)).map((c) => c.status)).toEqual(['closed']);

    expect((await api.admin('PATCH', `/admin/v1/workspaces/${ws.id}/instances/${instanceId}`, { archived: true })).status).toBe(200);
    const archived = await readToEnd(ws, 'conversations', { cursor: start.cursor });
    expect(archived.rows).toEqual([]);
    expect((await api.admin('PATCH', `/admin/v1/workspaces/${ws.id}/instances/${instanceId}`, { archived: false })).status).toBe(200);
    expect((await changedSince(ws, 'conversations', archived.cursor, 1)).map((c) => c.id)).toEqual([conversation.id]);
  });
});
