import { Client, types } from 'pg';
import { compiledOnce, isoFromTimestamptz, prepared } from '../domain/platform/db';
import { leadListQuery, leadSyncSource, listLeads as listLeadsOf, syncLeads } from '../domain/leads/lead-list';
import { BEGINNING, syncPage, type SyncRead } from '../domain/platform/sync';
import { serializeLead, tagsOf } from '../domain/leads/contacts';
import { matchingDealsOfContact } from '../domain/sales';
import { ipClient, LocalCounts } from '../domain/access/rate-limit';
import { iso } from '../domain/kernel/time';
import { claimAttempt, failAttempt, markAttemptSent, readAttempt } from '../domain/messaging/send/ledger';
import { countQueries, createWorkspace, expectError, seedPipeline, startApi, TestApi } from './helpers';
import { uniqueMobile } from './phones';

/** The lead list as the route reads it (deal filters through sales' sub-query), its page's records parsed. */
const listLeads = async (...[db, workspaceId, query]: Parameters<typeof listLeadsOf>) => {
  const { rows, total } = await listLeadsOf(db, workspaceId, query, matchingDealsOfContact);
  return { rows: JSON.parse(rows.json) as ReturnType<typeof serializeLead>[], total };
};

/**
 * What the request path does to save CPU must not change an answer: instants read as text, a
 * statement compiled once (a search's first page and a page walked in its filter's index among
 * them), a repeated search's page read again by key, remembered IPv6 clients, one read of a busy key and one count of a
 * search for the requests that want it at once, the router choosing among a group of routes.
 */
let api: TestApi;
beforeAll(async () => {
  api = await startApi();
});
afterAll(() => api.close());

describe('instants read as text (isoFromTimestamptz)', () => {
  const instants = [
    '2026-11-26 00:56:35+00',
    '2026-11-26 00:56:35.8+00',
    '2026-11-26 00:56:35.80407+00',
    '2026-11-26 00:56:35.999999+00',
    '2026-11-26 00:56:35.000001+00',
    '1999-12-31 23:59:59.1234+00',
    '0044-03-15 12:00:00.5+00 BC',
    '9999-12-31 23:59:59.999+00',
  ];

  it.each(['UTC', 'America/Sao_Paulo', 'Asia/Kolkata'])(
    'give what a Date gives, for the text PostgreSQL writes in a %s session',
    async (zone) => {
      const client = new Client({ connectionString: api.config.databaseUrl });
      await client.connect();
      try {
        await client.query(`SET TimeZone = '${zone}'`);
        // The text PostgreSQL writes for each instant in this session, and the Date pg makes of it.
        const { rows } = await client.query<{ text: string }>(`SELECT v::timestamptz::text AS text FROM unnest($1::text[]) AS v`, [
          instants,
        ]);
        const asDate = types.getTypeParser(types.builtins.TIMESTAMPTZ) as (text: string) => Date;
        for (const { text } of rows) expect({ text, iso: isoFromTimestamptz(text) }).toEqual({ text, iso: asDate(text).toISOString() });
      } finally {
        await client.end();
      }
    },
  );

  it('leave the service unchanged: iso() keeps such text, and parses any other', () => {
    expect(iso('2026-11-26T00:56:35.804Z')).toBe('2026-11-26T00:56:35.804Z');
    expect(iso('2026-11-26T00:56:35Z')).toBe('2026-11-26T00:56:35.000Z');
    expect(iso('2026-11-26T02:56:35.804+02:00')).toBe('2026-11-26T00:56:35.804Z');
    expect(iso(new Date(Date.UTC(2026, 10, 26)))).toBe('2026-11-26T00:00:00.000Z');
  });
});

describe('a lead page written by PostgreSQL (LEAD_RECORD_SQL)', () => {
  it('is the record serializeLead makes of the same rows: fields, their order, nulls, tags and instants', async () => {
    const w = await createWorkspace(api, { scopes: ['leads:read', 'leads:write', 'tags:write'] });
    const bodies = [
      { name: 'Zoë "Quoted" \\ Líder', email: 'zoe@example.com', notes: 'line one\nline two \u2028 ☃', tags: ['beta', 'Alpha'] },
      { name: 'Sem email' },
      { name: 'Com Instagram', tags: ['beta'] },
    ];
    for (const body of bodies) {
      const res = await api.request('POST', '/api/v1/leads', { key: w.key, body: { phone: uniqueMobile('21'), ...body } });
      expect(res.status).toBe(201);
    }
    // What the API never writes itself here: an Instagram identity, an opt-out, instants to the microsecond.
    const contacts = () => api.db('contacts').where({ workspace_id: w.id });
    await contacts()
      .where({ name: 'Com Instagram' })
      .update({ instagram_id: '17841400000000001', instagram_username: 'com.insta', opted_out: true });
    await contacts()
      .where({ name: 'Sem email' })
      .update({ created_at: api.db.raw(`'2026-11-26 00:56:35.999999+00'`) });
    await contacts()
      .whereNot({ name: 'Sem email' })
      .update({ updated_at: api.db.raw(`'1999-12-31 23:59:59.000001+00'`) });

    for (const shape of [{}, { q: 'e' }, { tag: 'beta' }, { sort: 'name', order: 'asc' }, { limit: '1', offset: '1' }]) {
      const page = await listLeads(api.db, w.id, leadListQuery.parse(shape));
      const rows = await contacts().whereIn(
        'id',
        page.rows.map((r) => r.id),
      );
      const tags = await tagsOf(
        api.db,
        rows.map((r) => r.id),
      );
      const expected = page.rows.map((r) => {
        const row = rows.find((c) => c.id === r.id);
        return serializeLead(row, tags.get(r.id) ?? []);
      });
      expect(page.rows).toEqual(expected);
      expect(page.rows.map((r) => Object.keys(r))).toEqual(expected.map((r) => Object.keys(r)));
    }
    const all = (await listLeads(api.db, w.id, leadListQuery.parse({ sort: 'name', order: 'asc' }))).rows;
    expect(all.map((r) => [r.name, r.instagram, r.optedOut, r.tags.map((t) => t.name)])).toEqual([
      ['Com Instagram', { id: '17841400000000001', username: 'com.insta' }, true, ['beta']],
      ['Sem email', null, false, []],
      [bodies[0].name, null, false, ['Alpha', 'beta']],
    ]);
    expect(all[1].createdAt).toBe('2026-11-26T00:56:35.999Z');
    expect(all[0].updatedAt).toBe('1999-12-31T23:59:59.000Z');
  });
});

/** A contact row of leadSyncSource, as pg reads it. */
type SyncedRow = Parameters<typeof serializeLead>[0] & {
  tag_list: Parameters<typeof serializeLead>[1];
  deleted_at: Date | null;
  merged_into_id: string | null;
};

describe('a sync page written by PostgreSQL (syncJsonPage)', () => {
  it('is the page and the cursor the rows give: leads as serializeLead makes them, tombstones, in order', async () => {
    const w = await createWorkspace(api, { scopes: ['leads:read', 'leads:write', 'tags:write'] });
    for (const name of ['Ana', 'Bia', 'Caio', 'Duda', 'Enzo']) {
      const res = await api.request('POST', '/api/v1/leads', { key: w.key, body: { phone: uniqueMobile('31'), name, tags: ['sync'] } });
      expect(res.status).toBe(201);
    }
    const contacts = () => api.db('contacts').where({ workspace_id: w.id });
    const ids = Object.fromEntries((await contacts().select('id', 'name')).map((c) => [c.name, c.id as string]));
    // A lead deleted, one merged into another, one with Instagram and opted out; instants to the microsecond, two alike.
    await contacts()
      .where({ id: ids.Bia })
      .update({ deleted_at: api.db.raw(`'2026-11-26 00:56:35.999999+00'`) });
    await contacts().where({ id: ids.Caio }).update({ merged_into_id: ids.Ana });
    await contacts().where({ id: ids.Duda }).update({ instagram_id: '17841400000000002', instagram_username: 'duda', opted_out: true });
    await contacts()
      .whereIn('id', [ids.Ana, ids.Duda])
      .update({ updated_at: api.db.raw(`'2026-11-26 00:56:35.000001+00'`) });

    for (const includeDeleted of [false, true]) {
      for (const limit of [2, 10]) {
        let read: SyncRead = { after: BEGINNING, limit };
        const seen: string[] = [];
        for (let pages = 0; pages < 5; pages++) {
          const page = await syncLeads(api.db, w.id, read, { includeDeleted });
          // The same page read as rows and serialised by the API, as sync pages were.
          const reference = await syncPage<SyncedRow>(api.db, 'leads', leadSyncSource(api.db, w.id, { includeDeleted }), read);
          const expected = reference.rows.map((row) =>
            row.deleted_at || row.merged_into_id
              ? {
                  id: row.id,
                  deleted: true,
                  deletedAt: iso(row.deleted_at ?? row.updated_at),
                  mergedIntoId: row.merged_into_id,
                  updatedAt: iso(row.updated_at),
                }
              : serializeLead(row, row.tag_list),
          );
          const records = JSON.parse(page.rows.json) as { id: string }[];
          expect(records).toEqual(expected);
          expect(records.map((r) => Object.keys(r))).toEqual(expected.map((r) => Object.keys(r)));
          expect(page.rows.count).toBe(records.length);
          expect(page.pagination).toEqual(reference.pagination);
          seen.push(...records.map((r) => r.id));
          if (!page.pagination.hasMore) break;
          read = { after: page.pagination.nextCursor.split('_').slice(1), limit };
        }
        expect(seen.sort()).toEqual((includeDeleted ? Object.values(ids) : [ids.Ana, ids.Duda, ids.Enzo]).sort());
      }
    }
  });
});

describe('compiledOnce', () => {
  const echo = compiledOnce((db, v: { label: string; n: number }) =>
    db.select(db.raw('?::text AS label, ?::int AS n, ?::int AS constant', [v.label, v.n, 7])),
  );

  it('binds each call its own values to the one text', async () => {
    for (const [label, n] of [
      ['first', 1],
      ['second', 2],
      ['a ? mark', 3],
    ] as const) {
      const { rows } = (await prepared(echo(api.db, { label, n }))) as unknown as { rows: unknown[] };
      expect(rows).toEqual([{ label, n, constant: 7 }]);
    }
  });

  it('runs under the options given after it is built, and prints with its values (an explanation)', async () => {
    const statement = echo(api.db, { label: "it's", n: 4 }).options({ rowMode: 'array' });
    expect(((await statement) as unknown as { rows: unknown[] }).rows).toEqual([["it's", 4, 7]]);
    expect(statement.toString()).toBe(`select 'it''s'::text AS label, 4::int AS n, 7::int AS constant`);
  });

  it('keeps one text per shape, and binds a number where knex wants one (an OFFSET)', async () => {
    const series = compiledOnce(
      (db, v: { offset: number }, shape: { order: 'asc' | 'desc' }) =>
        db.from(db.raw('generate_series(1, 5) AS n')).select('n').orderBy('n', shape.order).offset(v.offset),
      (shape) => shape.order,
    );
    const read = async (offset: number, order: 'asc' | 'desc') =>
      ((await series(api.db, { offset }, { order })) as unknown as { rows: { n: number }[] }).rows.map((r) => r.n);
    expect(await read(1, 'asc')).toEqual([2, 3, 4, 5]);
    expect(await read(3, 'desc')).toEqual([2, 1]);
    expect(await read(0, 'asc')).toEqual([1, 2, 3, 4, 5]);
  });

  it('keeps apart the texts of calls that give different values (an OFFSET knex writes only when not 0)', async () => {
    const series = compiledOnce((db, v: { offset?: number }) =>
      db
        .from(db.raw('generate_series(1, 5) AS n'))
        .select('n')
        .orderBy('n')
        .offset(v.offset ?? 0),
    );
    const read = async (values: { offset?: number }) =>
      ((await series(api.db, values)) as unknown as { rows: { n: number }[] }).rows.map((r) => r.n);
    expect(await read({})).toEqual([1, 2, 3, 4, 5]);
    expect(await read({ offset: 3 })).toEqual([4, 5]);
    expect(await read({})).toEqual([1, 2, 3, 4, 5]);
  });

  it('refuses a statement whose text would depend on a value', () => {
    const written = compiledOnce((db, v: { n: number }) => db('contacts').select('id').limit(v.n, { skipBinding: true }));
    expect(() => written(api.db, { n: 5 })).toThrow(/did not become a binding/);
    const partOf = compiledOnce((db, v: { name: string }) => db('contacts').select('id').where('name', 'like', `%${v.name}%`));
    expect(() => partOf(api.db, { name: 'x' })).toThrow(/part of a binding/);
    const computed = compiledOnce((db, v: { offset: number; limit: number }) =>
      db('contacts')
        .select('id')
        .limit(v.limit)
        .offset(v.offset + 1),
    );
    expect(() => computed(api.db, { offset: 0, limit: 10 })).toThrow(/computed on/);
  });
});

describe('client IPs', () => {
  it('count an IPv4 address as it is, a mapped one as its IPv4 address and an IPv6 one as its /64, however often asked', () => {
    for (let round = 0; round < 3; round++) {
      expect(ipClient('203.0.113.7')).toBe('203.0.113.7');
      expect(ipClient('::ffff:203.0.113.7')).toBe('203.0.113.7');
      expect(ipClient('2001:db8:1:2:aaaa::1')).toBe('2001:db8:1:2::/64');
      expect(ipClient('not an address')).toBe('not an address');
    }
    // Past the remembered addresses' bound, each is still counted as its own /64.
    for (let i = 0; i < 12_000; i++) {
      const net = `2001:db8:${((i >> 8) + 1).toString(16)}:${((i & 255) + 1).toString(16)}`;
      expect(ipClient(`${net}::${i.toString(16)}`)).toBe(`${net}::/64`);
    }
  });
});

describe('a busy key whose cached entry went stale', () => {
  it('is read again by one statement however many requests arrive meanwhile, each still answered and counted', async () => {
    const w = await createWorkspace(api, { scopes: ['leads:read'], rateLimitPerMinute: 1000 });
    expect((await api.request('GET', '/api/v1/leads', { key: w.key })).status).toBe(200);
    await new Promise((resolve) => setTimeout(resolve, 1100));
    let answers: Awaited<ReturnType<typeof api.request>>[] = [];
    const reads = await countQueries(
      api,
      async () => (answers = await Promise.all(Array.from({ length: 24 }, () => api.request('GET', '/api/v1/leads', { key: w.key })))),
      (sql) => sql.includes('FROM api_keys k JOIN workspaces w'),
    );
    expect(answers.map((a) => a.status)).toEqual(Array(24).fill(200));
    // Each one counted: the key's remaining count went down by the 24 (and the warm-up request).
    expect(Math.min(...answers.map((a) => Number(a.headers.get('x-ratelimit-remaining'))))).toBe(1000 - 25);
    expect(reads).toBe(1);
  });
});

describe('provider-call claims and marks of concurrent sends (written together)', () => {
  it('let each reference be claimed once, mark each its own, and share statements', async () => {
    const w = await createWorkspace(api);
    const run = `${process.pid}-${Date.now()}`;
    const references = Array.from({ length: 40 }, (_, i) => `group-${run}-${i}`);
    const twice = `group-${run}-contended`;
    let claims: Array<{ fresh: boolean } | undefined> = [];
    let contended: Array<{ fresh: boolean } | undefined> = [];
    const statements = await countQueries(
      api,
      async () =>
        ([claims, contended] = await Promise.all([
          Promise.all(references.map((r) => claimAttempt(api.db, w.id, r))),
          Promise.all(Array.from({ length: 5 }, () => claimAttempt(api.db, w.id, twice))),
        ])),
      (sql) => sql.includes('send_attempts'),
    );
    expect(claims).toEqual(Array(40).fill({ fresh: true }));
    // Five senders of one reference at once: one of them calls the provider.
    expect(contended.filter((c) => c?.fresh === true)).toHaveLength(1);
    expect(contended.filter((c) => c === undefined)).toHaveLength(4);
    expect(statements).toBeLessThan(10);

    // Each mark records its own provider id (and wa_id when given); a mark waits for its row's write.
    await Promise.all(
      references.map((r, i) =>
        markAttemptSent(api.db, r, { providerMessageId: `wamid.${run}.${i}`, ...(i % 2 ? { waId: `55${i}` } : {}) }),
      ),
    );
    const rows = await Promise.all(references.map((r) => readAttempt(api.db, w.id, r)));
    expect(rows.map((r) => [r?.state, r?.provider_message_id, r?.wa_id])).toEqual(
      references.map((_, i) => ['sent', `wamid.${run}.${i}`, i % 2 ? `55${i}` : null]),
    );
    // Sent: never claimed again. Failed: claimed again, not fresh.
    expect(await claimAttempt(api.db, w.id, references[0])).toBeUndefined();
    expect(await failAttempt(api.db, twice, 'refused')).toBe(1);
    expect(await Promise.all([claimAttempt(api.db, w.id, twice), claimAttempt(api.db, w.id, twice)])).toEqual(
      expect.arrayContaining([{ fresh: false }, undefined]),
    );
  });

  it('fail together when their statement fails, write nothing of it, and the next group is written', async () => {
    const w = await createWorkspace(api);
    const run = `${process.pid}-${Date.now()}`;
    // The first goes at once; the two after it wait for it and go together.
    const first = claimAttempt(api.db, w.id, `first-${run}`);
    // A workspace that does not exist: its row breaks the foreign key, and the whole statement is refused.
    const group = await Promise.allSettled([
      claimAttempt(api.db, '00000000-0000-4000-8000-000000000000', `orphan-${run}`),
      claimAttempt(api.db, w.id, `beside-orphan-${run}`),
    ]);
    expect(group.map((r) => r.status)).toEqual(['rejected', 'rejected']);
    expect(await first).toEqual({ fresh: true });
    // Nothing of the refused group was written: its other claim is still free.
    expect(await claimAttempt(api.db, w.id, `beside-orphan-${run}`)).toEqual({ fresh: true });
  });
});

describe('requests counted in memory', () => {
  it('count on from what an exact statement of this process last counted, never from less', () => {
    const counts = new LocalCounts(api.db);
    const bucket = { name: `key:learned-${process.pid}-${Date.now()}`, limit: 1000, code: 'RATE_LIMITED' };
    const now = Date.now();
    counts.learn([{ ...bucket, count: 7, remaining: 993, resetSeconds: 30 }], now);
    expect(counts.take([bucket], now)[0]).toMatchObject({ count: 8, remaining: 992 });
    counts.learn([{ ...bucket, count: 3, remaining: 997, resetSeconds: 30 }], now);
    expect(counts.take([bucket], now)[0]).toMatchObject({ count: 9, remaining: 991 });
    // A small limit stays exact in PostgreSQL: nothing of it is kept here.
    const small = { name: `key:small-${process.pid}-${Date.now()}`, limit: 100, code: 'RATE_LIMITED' };
    counts.learn([{ ...small, count: 50, remaining: 50, resetSeconds: 30 }], now);
    expect(counts.take([small], now)[0].count).toBe(1);
  });
});

describe('a first search asked by many requests at once', () => {
  it('is counted once, and each request gets the exact total', async () => {
    const w = await createWorkspace(api, { scopes: ['leads:read', 'leads:write'] });
    for (let i = 0; i < 12; i++) {
      const res = await api.request('POST', '/api/v1/leads', {
        key: w.key,
        body: { phone: uniqueMobile('21'), name: i % 3 === 0 ? `Herd Quixote ${i}` : `Other ${i}` },
      });
      expect(res.status).toBe(201);
    }
    // The lead list itself, called together: each reads its page, then needs the search's total.
    const query = leadListQuery.parse({ q: 'quixote', limit: '2' });
    let answers: Awaited<ReturnType<typeof listLeads>>[] = [];
    const counts = await countQueries(
      api,
      async () => (answers = await Promise.all(Array.from({ length: 16 }, () => listLeads(api.db, w.id, query)))),
      // The search's count: a statement reading the search version that counts contacts (a page's statement writes records).
      (sql) => sql.includes('search_changes') && sql.includes('count(*)') && !sql.includes('json_agg'),
    );
    expect(answers.map((a) => [a.total, a.rows.length])).toEqual(Array(16).fill([4, 2]));
    expect(counts).toBe(1);
  });
});

describe("a search's first page, compiled once", () => {
  it('answers each term, sort and page size as the statement built for it does', async () => {
    const w = await createWorkspace(api, { scopes: ['leads:read', 'leads:write'] });
    const names = ['Ana Lopes', 'Bruno Lopes', 'Carla Dias', 'Ana Dias', 'Davi Lopes', 'Lopes Filho'];
    for (let i = 0; i < names.length; i++) {
      const res = await api.request('POST', '/api/v1/leads', {
        key: w.key,
        body: { phone: uniqueMobile('21'), name: names[i] },
      });
      expect(res.status).toBe(201);
    }
    const phone = (await api.db('contacts').where({ workspace_id: w.id, name: 'Carla Dias' }).first('phone')).phone as string;
    // A creation date in the far past changes no answer, but takes the search off the compiled first page.
    const built = { createdAfter: '2000-01-01T00:00:00.000Z' };
    const terms = ['lopes', 'DIAS', 'ana', 'nobody', `+${phone.slice(0, 2)} (${phone.slice(2, 4)}) ${phone.slice(4)}`];
    for (const q of terms) {
      for (const shape of [{}, { limit: '2' }, { sort: 'name', order: 'asc' }]) {
        const compiled = await listLeads(api.db, w.id, leadListQuery.parse({ q, ...shape }));
        const reference = await listLeads(api.db, w.id, leadListQuery.parse({ q, ...shape, ...built }));
        expect({ q, shape, ids: compiled.rows.map((r) => r.id), total: compiled.total }).toEqual({
          q,
          shape,
          ids: reference.rows.map((r) => r.id),
          total: reference.total,
        });
      }
    }
    const byPhone = await listLeads(api.db, w.id, leadListQuery.parse({ q: terms[4] }));
    expect(byPhone.rows.map((r) => r.name)).toEqual(['Carla Dias']);
    expect((await listLeads(api.db, w.id, leadListQuery.parse({ q: 'lopes' }))).total).toBe(4);
  });
});

describe("a repeated search's page", () => {
  it('is read again by key while nothing a search reads has changed, fresh, and searched again after any such change', async () => {
    const w = await createWorkspace(api, { scopes: ['leads:read', 'leads:write'] });
    const ids: string[] = [];
    for (let i = 0; i < 5; i++) {
      const res = await api.request('POST', '/api/v1/leads', {
        key: w.key,
        body: { phone: uniqueMobile('21'), name: i === 4 ? 'Someone Else' : `Repeat Lopes ${i}` },
      });
      expect(res.status).toBe(201);
      ids.push(res.body.data.id);
    }
    const search = async (extra: Record<string, string> = {}) => {
      const { rows, total } = await listLeads(api.db, w.id, leadListQuery.parse({ q: 'lopes', limit: '3', ...extra }));
      return { names: rows.map((r) => r.name), notes: rows.map((r) => r.notes), total };
    };
    // The search, and how many of its statements read contacts by key.
    const searchByKey = async () => {
      let answer: Awaited<ReturnType<typeof search>> | undefined;
      const byKey = await countQueries(
        api,
        async () => (answer = await search()),
        (sql) => sql.includes('= ANY('),
      );
      return { ...answer!, byKey };
    };
    expect(await searchByKey()).toEqual({
      names: ['Repeat Lopes 3', 'Repeat Lopes 2', 'Repeat Lopes 1'],
      notes: ['', '', ''],
      total: 4,
      byKey: 0,
    });
    // A change a search does not read: the same contacts, read again by key, as they are now.
    await api.db('contacts').where({ id: ids[2] }).update({ notes: 'called' });
    expect(await searchByKey()).toEqual({
      names: ['Repeat Lopes 3', 'Repeat Lopes 2', 'Repeat Lopes 1'],
      notes: ['', 'called', ''],
      total: 4,
      byKey: 1,
    });
    // A name that now matches, a contact deleted, a creation instant changed by hand: each is searched again.
    await api.request('PATCH', `/api/v1/leads/${ids[4]}`, { key: w.key, body: { name: 'Newest Lopes' } });
    expect((await search()).names).toEqual(['Newest Lopes', 'Repeat Lopes 3', 'Repeat Lopes 2']);
    await api.request('DELETE', `/api/v1/leads/${ids[3]}`, { key: w.key });
    expect(await search()).toMatchObject({ names: ['Newest Lopes', 'Repeat Lopes 2', 'Repeat Lopes 1'], total: 4 });
    await api
      .db('contacts')
      .where({ id: ids[0] })
      .update({ created_at: new Date(Date.now() + 60_000) });
    expect((await search()).names).toEqual(['Repeat Lopes 0', 'Newest Lopes', 'Repeat Lopes 2']);
    // Each order, size and offset is its own page.
    expect((await search({ order: 'asc' })).names).toEqual(['Repeat Lopes 1', 'Repeat Lopes 2', 'Newest Lopes']);
    expect((await search({ offset: '3' })).names).toEqual(['Repeat Lopes 1']);
  });
});

describe("a page walked in its filter's own index, compiled once", () => {
  it('answers each tag and deal filter, order, page size and offset as the statement built for it does', async () => {
    const w = await createWorkspace(api, { scopes: ['leads:read', 'leads:write', 'tags:write', 'deals:write'] });
    const pipeline = await seedPipeline(api, w.id, { name: 'Walk', stages: ['One', 'Two'] });
    for (let i = 0; i < 7; i++) {
      const body = {
        phone: uniqueMobile('21'),
        name: `Walker ${i}`,
        tags: i % 2 === 0 ? ['Even'] : ['Odd'],
      };
      const created = await api.request('POST', '/api/v1/leads', { key: w.key, body });
      expect(created.status).toBe(201);
      const lead = created.body.data;
      if (i % 3 !== 2) {
        const deal = await api.request('POST', '/api/v1/deals', {
          key: w.key,
          body: { contactId: lead.id, pipeline: pipeline.id, stage: pipeline.stages[i % 2].id },
        });
        expect(deal.status).toBe(201);
        if (i % 3 === 1)
          expect((await api.request('PATCH', `/api/v1/deals/${deal.body.data.id}`, { key: w.key, body: { status: 'won' } })).status).toBe(
            200,
          );
      }
    }
    const even = await api.db('tags').where({ workspace_id: w.id, name: 'Even' }).first('id');
    // A creation date in the far past changes no answer, but takes the page off its own index (it counts).
    const built = { createdAfter: '2000-01-01T00:00:00.000Z' };
    const filters = [
      { tag: 'even' },
      { tag: even.id.toUpperCase() },
      { tag: 'none' },
      { stageId: pipeline.stages[0].id, status: 'open' },
      { status: 'won' },
      { pipelineId: pipeline.id },
    ];
    for (const filter of filters) {
      for (const shape of [{}, { limit: '2' }, { limit: '2', offset: '1', order: 'asc' }, { offset: '50' }]) {
        const compiled = await listLeads(api.db, w.id, leadListQuery.parse({ ...filter, ...shape }));
        const reference = await listLeads(api.db, w.id, leadListQuery.parse({ ...filter, ...shape, ...built }));
        expect({ filter, shape, ids: compiled.rows.map((r) => r.id), total: compiled.total }).toEqual({
          filter,
          shape,
          ids: reference.rows.map((r) => r.id),
          total: reference.total,
        });
      }
    }
    expect((await listLeads(api.db, w.id, leadListQuery.parse({ tag: 'Even' }))).total).toBe(4);
    expect((await listLeads(api.db, w.id, leadListQuery.parse({ status: 'won' }))).rows.map((r) => r.name)).toEqual([
      'Walker 4',
      'Walker 1',
    ]);
  });
});

describe('routing by path group', () => {
  it('still matches paths case-insensitively, as @koa/router does', async () => {
    const w = await createWorkspace(api, { scopes: ['pipelines:read'] });
    const res = await api.request('GET', '/API/V1/Pipelines', { key: w.key });
    expect(res.status).toBe(200);
    expect(res.body.pipelines).toEqual(expect.any(Array));
  });

  it('answers 405 with Allow on a grouped path and 404 for an unknown one, and reaches a route with a parameter among its first segments', async () => {
    const refused = await api.request('DELETE', '/api/v1/pipelines');
    expectError(refused, 405, 'METHOD_NOT_ALLOWED');
    expect(refused.headers.get('allow')).toContain('GET');
    expectError(await api.request('GET', '/api/v1/pipelinez'), 404, 'NOT_FOUND');
    expectError(await api.request('GET', '/api/v2/pipelines'), 404, 'NOT_FOUND');
    // /webhooks/whatsapp/{instanceId}: the verification handshake of an unknown instance.
    const handshake = await api.request(
      'GET',
      '/webhooks/whatsapp/00000000-0000-4000-8000-000000000000?hub.mode=subscribe&hub.verify_token=x&hub.challenge=1',
    );
    expect(handshake.status).not.toBe(405);
    expect(String(handshake.body?.error ?? '')).not.toMatch(/^No route/);
  });
});
