/**
 * The message sync (issue 37, part 5): `GET /api/v1/messages` lists every message of a workspace's
 * conversations in offset pages, or syncs them by cursor in (updatedAt, id) order, filters
 * `conversationId` and `direction` in both modes. Through the real stack: the API, the worker (sends,
 * media fetches), PostgreSQL, Temporal and the provider emulator, which writes in as a contact,
 * reports statuses and serves media at the providers' wire formats.
 */
import { settledHorizon } from '../domain/platform/cursor';
import { ApiResponse, createKey, createWorkspace, eventually, expectError, startApi, TestApi, Workspace } from './helpers';
import { cloudInstance, emulator } from './stack-fixtures';
import { uniqueMobile } from './phones';

let api: TestApi;
beforeAll(async () => {
  api = await startApi();
});
afterAll(async () => {
  await api.close();
});

const SCOPES = ['conversations:read', 'conversations:send'] as const;
const workspace = () => createWorkspace(api, { scopes: [...SCOPES] });
const get = (ws: Workspace, path: string): Promise<ApiResponse> => api.request('GET', path, { key: ws.key });

type Page = { data: any[]; pagination: { limit: number; hasMore: boolean; nextCursor: string } };

let seq = 0;
const uniqueId = (label: string): string => `wamid.${label}-${Date.now().toString(36)}-${++seq}-${Math.random().toString(36).slice(2, 8)}`;

/** A contact writes to the Cloud API number (text, or `media`); answers our message id and conversation id. */
async function inbound(
  ws: Workspace,
  phoneNumberId: string,
  from: string,
  extra: Record<string, unknown> = {},
): Promise<{ id: string; conversationId: string; answer: any }> {
  const providerId = uniqueId('in');
  const answer = await emulator('/__emulator/inbound', { phoneNumberId, from, id: providerId, text: 'Oi', ...extra });
  expect(answer.delivered).toBe(200);
  const row = await api.db('messages').where({ workspace_id: ws.id, provider_message_id: providerId }).first('id', 'conversation_id');
  expect(row).toBeDefined();
  return { id: row.id, conversationId: row.conversation_id, answer };
}

/**
 * Waits until every transaction open on the database when called has ended (the settled horizon,
 * domain/platform/cursor.ts): rows written before it are then readable by a sync. Other test files
 * hold transactions open for seconds on purpose, so this may take a while under the full suite.
 */
async function settled(): Promise<void> {
  const since = BigInt(Date.now()) * 1000n;
  await eventually('transactions open elsewhere to end', async () => BigInt(await settledHorizon(api.db)) >= since, 45_000, 100);
}

/** One cursor page (the first with `paging=cursor`, or the one after `cursor`), read once settled. */
async function page(ws: Workspace, from: { cursor?: string }, extra = ''): Promise<Page> {
  await settled();
  const qs = from.cursor ? `cursor=${encodeURIComponent(from.cursor)}` : 'paging=cursor';
  const res = await get(ws, `/api/v1/messages?${qs}${extra}`);
  expect({ status: res.status, error: res.body.error }).toEqual({ status: 200, error: undefined });
  expect(Object.keys(res.body.pagination).sort()).toEqual(['hasMore', 'limit', 'nextCursor']);
  return res.body;
}

/** Pages until hasMore is false: every row read (repeats kept) and the cursor to resume from. */
async function readToEnd(ws: Workspace, from: { cursor?: string }, extra = ''): Promise<{ rows: any[]; cursor: string }> {
  const rows: any[] = [];
  let current = from;
  for (;;) {
    const body = await page(ws, current, extra);
    rows.push(...body.data);
    if (!body.pagination.hasMore) return { rows, cursor: body.pagination.nextCursor };
    current = { cursor: body.pagination.nextCursor };
  }
}

/** The first page of the offset list with this query. */
async function offsetPage(ws: Workspace, qs = ''): Promise<{ data: any[]; pagination: any }> {
  const res = await get(ws, `/api/v1/messages${qs}`);
  expect({ status: res.status, error: res.body.error }).toEqual({ status: 200, error: undefined });
  return res.body;
}

const ids = (rows: { id: string }[]): string[] => rows.map((r) => r.id);

describe('offset pages', () => {
  it('answer the list shape with exact totals, newest first, and the filters conversationId, direction and updatedAfter', async () => {
    const ws = await workspace();
    const { phoneNumberId } = await cloudInstance(api, ws.id, { label: 'ml' });
    const ana = uniqueMobile();
    const bia = uniqueMobile();
    const a1 = await inbound(ws, phoneNumberId, ana, { text: 'a1' });
    const a2 = await inbound(ws, phoneNumberId, ana, { text: 'a2' });
    const b1 = await inbound(ws, phoneNumberId, bia, { text: 'b1' });
    const b2 = await inbound(ws, phoneNumberId, bia, { text: 'b2' });
    const b3 = await inbound(ws, phoneNumberId, bia, { text: 'b3' });
    // A reply in Ana's conversation (its window is open): the outbound message.
    const sent = await api.request('POST', `/api/v1/conversations/${a1.conversationId}/messages`, {
      key: ws.key,
      body: { type: 'text', text: 'Olá' },
    });
    expect(sent.status).toBe(201);
    const out = sent.body.data.id as string;

    const first = await offsetPage(ws, '?limit=2');
    expect(first.pagination).toEqual({ total: 6, limit: 2, offset: 0, hasMore: true });
    const last = await offsetPage(ws, '?limit=2&offset=4');
    expect(last.pagination).toEqual({ total: 6, limit: 2, offset: 4, hasMore: false });

    // The record: the conversation's message plus conversationId and updatedAt.
    const all = await offsetPage(ws, '?limit=100');
    expect(all.pagination).toEqual({ total: 6, limit: 100, offset: 0, hasMore: false });
    const reply = all.data.find((m) => m.id === out);
    expect(reply).toEqual({
      id: out,
      direction: 'out',
      type: 'text',
      body: 'Olá',
      timestamp: expect.any(String),
      status: 'sent',
      media: null,
      conversationId: a1.conversationId,
      updatedAt: expect.any(String),
    });
    const conversation = await get(ws, `/api/v1/conversations/${b1.conversationId}`);
    for (const m of conversation.body.data.messages) {
      expect(all.data.find((r) => r.id === m.id)).toEqual({ ...m, conversationId: b1.conversationId, updatedAt: expect.any(String) });
    }
    // Newest first: timestamp descending, then id descending.
    const order = [...all.data].sort((x, y) => y.timestamp.localeCompare(x.timestamp) || y.id.localeCompare(x.id));
    expect(ids(all.data)).toEqual(ids(order));
    expect(ids([...first.data, ...(await offsetPage(ws, '?limit=2&offset=2')).data, ...last.data])).toEqual(ids(all.data));

    // Filters, alone and together; totals follow them.
    const filtered = async (qs: string) => {
      const body = await offsetPage(ws, `?limit=100&${qs}`);
      expect(body.pagination.total).toBe(body.data.length);
      return ids(body.data).sort();
    };
    expect(await filtered(`conversationId=${a1.conversationId}`)).toEqual([a1.id, a2.id, out].sort());
    expect(await filtered(`conversationId=${b1.conversationId}`)).toEqual([b1.id, b2.id, b3.id].sort());
    expect(await filtered('direction=out')).toEqual([out]);
    expect(await filtered('direction=in')).toEqual([a1.id, a2.id, b1.id, b2.id, b3.id].sort());
    expect(await filtered(`conversationId=${a1.conversationId}&direction=in`)).toEqual([a1.id, a2.id].sort());
    expect(await filtered(`conversationId=${b1.conversationId}&direction=out`)).toEqual([]);
    // A conversation id that names nothing: an empty page, not 404.
    expect(await filtered('conversationId=7d4f3c2a-1b0e-4f6a-9c8d-2e1f0a9b8c7d')).toEqual([]);

    // updatedAfter (inclusive): the reply's own instant keeps it; a later one keeps nothing.
    const at = reply.updatedAt as string;
    expect(await filtered(`updatedAfter=${encodeURIComponent(at)}`)).toContain(out);
    expect(await filtered(`updatedAfter=${encodeURIComponent(new Date(Date.now() + 60_000).toISOString())}`)).toEqual([]);

    // Validation: 400 VALIDATION naming the parameter.
    for (const [qs, name] of [
      ['conversationId=not-a-uuid', 'query.conversationId'],
      ['direction=inbound', 'query.direction'],
      ['limit=101', 'query.limit'],
      ['updatedAfter=yesterday', 'query.updatedAfter'],
    ]) {
      const res = await get(ws, `/api/v1/messages?${qs}`);
      expectError(res, 400, 'VALIDATION');
      expect(res.body.error).toContain(name);
    }
  });

  it("totals come from the conversations' counts and stay exact as messages are written, moved, hidden and removed", async () => {
    const ws = await workspace();
    const { instanceId, phoneNumberId } = await cloudInstance(api, ws.id, { label: 'mt' });
    const ana = await inbound(ws, phoneNumberId, uniqueMobile());
    await inbound(ws, phoneNumberId, uniqueMobile());
    const bia = await inbound(ws, phoneNumberId, uniqueMobile());
    await inbound(ws, phoneNumberId, uniqueMobile());
    expect(
      (
        await api.request('POST', `/api/v1/conversations/${ana.conversationId}/messages`, {
          key: ws.key,
          body: { type: 'text', text: 'Olá' },
        })
      ).status,
    ).toBe(201);

    /** Every total the list answers, against the messages counted in SQL under the same visibility. */
    const expectExactTotals = async () => {
      const visible = await api
        .db('messages as m')
        .join('conversations as c', 'c.id', 'm.conversation_id')
        .join('contacts as ct', 'ct.id', 'c.contact_id')
        .join('instances as i', 'i.id', 'c.instance_id')
        .where({ 'm.workspace_id': ws.id, 'i.archived': false, 'ct.is_group': false })
        .whereNull('ct.merged_into_id')
        .whereNull('ct.deleted_at')
        .select('m.id', 'm.direction', 'm.conversation_id');
      const conversations = [...new Set([ana.conversationId, bia.conversationId, ...visible.map((m) => m.conversation_id)])];
      const cases: Array<[string, (m: { direction: string; conversation_id: string }) => boolean]> = [
        ['', () => true],
        ['direction=in', (m) => m.direction === 'in'],
        ['direction=out', (m) => m.direction === 'out'],
        ...conversations.flatMap((id): Array<[string, (m: { direction: string; conversation_id: string }) => boolean]> => [
          [`conversationId=${id}`, (m) => m.conversation_id === id],
          [`conversationId=${id}&direction=out`, (m) => m.conversation_id === id && m.direction === 'out'],
        ]),
      ];
      for (const [qs, keep] of cases) {
        expect({ qs, total: (await offsetPage(ws, `?limit=1&${qs}`)).pagination.total }).toEqual({
          qs,
          total: visible.filter(keep).length,
        });
      }
      return visible.length;
    };
    expect(await expectExactTotals()).toBe(5);

    // One statement writing several conversations' messages at once, as a broadcast page records them.
    await api.db.raw(
      `INSERT INTO messages (workspace_id, conversation_id, direction, type, body, status)
       VALUES (?, ?, 'out', 'text', 'x', 'sent'), (?, ?, 'out', 'text', 'y', 'sent'), (?, ?, 'in', 'text', 'z', 'received')`,
      [ws.id, ana.conversationId, ws.id, bia.conversationId, ws.id, bia.conversationId],
    );
    expect(await expectExactTotals()).toBe(8);

    // A lead merge moves the duplicate's messages into the survivor's conversation.
    const contactOf = async (conversationId: string) =>
      (await api.db('conversations').where({ id: conversationId }).first('contact_id')).contact_id as string;
    const merged = await api.admin('POST', `/admin/v1/workspaces/${ws.id}/contacts/${await contactOf(bia.conversationId)}/merge`, {
      intoId: await contactOf(ana.conversationId),
    });
    expect(merged.status).toBe(200);
    expect(await expectExactTotals()).toBe(8);

    // A deleted lead's conversation leaves the list with its messages.
    const others = await api.db('conversations').where({ workspace_id: ws.id }).whereNotIn('id', [ana.conversationId, bia.conversationId]);
    const leadsKey = (await createKey(api, ws.id, ['leads:write'])).key;
    expect((await api.request('DELETE', `/api/v1/leads/${others[0].contact_id}`, { key: leadsKey })).status).toBe(200);
    expect(await expectExactTotals()).toBe(7);

    // A message removed (an operator's delete) leaves the totals.
    const oneOut = await api
      .db('messages')
      .where({ workspace_id: ws.id, conversation_id: ana.conversationId, direction: 'out' })
      .first('id');
    await api.db('messages').where({ id: oneOut.id }).del();
    expect(await expectExactTotals()).toBe(6);

    // An archived connection hides every conversation it carries.
    expect((await api.admin('PATCH', `/admin/v1/workspaces/${ws.id}/instances/${instanceId}`, { archived: true })).status).toBe(200);
    expect(await expectExactTotals()).toBe(0);
  });

  it('needs conversations:read', async () => {
    const ws = await createWorkspace(api, { scopes: ['conversations:send'] });
    expectError(await get(ws, '/api/v1/messages'), 403, 'INSUFFICIENT_SCOPE');
  });
});

describe('cursor sync', () => {
  it('returns each message once across pages while new messages arrive, in (updatedAt, id) order', async () => {
    const ws = await workspace();
    const { phoneNumberId } = await cloudInstance(api, ws.id, { label: 'mc' });
    const from = [uniqueMobile(), uniqueMobile(), uniqueMobile()];
    const written: string[] = [];
    for (let i = 0; i < 5; i++) written.push((await inbound(ws, phoneNumberId, from[i % 3])).id);

    const rows: any[] = [];
    let body = await page(ws, {}, '&limit=2');
    rows.push(...body.data);
    // Messages arrive between the pages: each lands after the position, and is read once.
    for (let i = 0; body.pagination.hasMore || i < 4; i++) {
      if (i < 4) written.push((await inbound(ws, phoneNumberId, from[i % 3])).id);
      body = await page(ws, { cursor: body.pagination.nextCursor }, '&limit=2');
      rows.push(...body.data);
    }
    const end = await readToEnd(ws, { cursor: body.pagination.nextCursor }, '&limit=2');
    rows.push(...end.rows);

    expect(ids(rows).sort()).toEqual([...written].sort());
    expect(new Set(ids(rows)).size).toBe(rows.length);
    const stored = await api
      .db('messages')
      .where({ workspace_id: ws.id })
      .orderBy([{ column: 'updated_at' }, { column: 'id' }])
      .pluck('id');
    expect(ids(rows)).toEqual(stored);

    // Read again from the end: nothing new, the same position.
    expect(await page(ws, { cursor: end.cursor })).toEqual({ data: [], pagination: { limit: 25, hasMore: false, nextCursor: end.cursor } });
    // The same records as the offset list.
    const byId = (list: any[]) => [...list].sort((x, y) => x.id.localeCompare(y.id));
    expect(byId(rows)).toEqual(byId((await offsetPage(ws, '?limit=100')).data));
  });

  it('takes the filters conversationId and direction on every page; refuses the rest', async () => {
    const ws = await workspace();
    const { phoneNumberId } = await cloudInstance(api, ws.id, { label: 'mf' });
    const ana = uniqueMobile();
    const a = [await inbound(ws, phoneNumberId, ana), await inbound(ws, phoneNumberId, ana), await inbound(ws, phoneNumberId, ana)];
    const b = await inbound(ws, phoneNumberId, uniqueMobile());
    const sent = await api.request('POST', `/api/v1/conversations/${a[0].conversationId}/messages`, {
      key: ws.key,
      body: { type: 'text', text: 'Olá' },
    });
    expect(sent.status).toBe(201);

    const ofAna = await readToEnd(ws, {}, `&limit=1&conversationId=${a[0].conversationId}`);
    expect(ids(ofAna.rows).sort()).toEqual([...ids(a), sent.body.data.id].sort());
    const inOfAna = await readToEnd(ws, {}, `&limit=2&conversationId=${a[0].conversationId}&direction=in`);
    expect(ids(inOfAna.rows).sort()).toEqual(ids(a).sort());
    const outbound = await readToEnd(ws, {}, '&direction=out');
    expect(ids(outbound.rows)).toEqual([sent.body.data.id]);
    const ofB = await readToEnd(ws, {}, `&conversationId=${b.conversationId}`);
    expect(ids(ofB.rows)).toEqual([b.id]);
    // The first page may start at an instant too.
    const future = encodeURIComponent(new Date(Date.now() + 60_000).toISOString());
    expect((await page(ws, {}, `&updatedAfter=${future}&direction=in`)).data).toEqual([]);

    // Not with cursor paging: offset, and any filter but these two (none other exists: updatedAfter beside a cursor).
    for (const [qs, name] of [
      ['paging=cursor&offset=2', 'query.offset'],
      [`cursor=${encodeURIComponent(ofAna.cursor)}&updatedAfter=2026-01-01`, 'query.updatedAfter'],
      ['paging=cursor&direction=sideways', 'query.direction'],
      ['paging=cursor&conversationId=nope', 'query.conversationId'],
    ]) {
      const res = await get(ws, `/api/v1/messages?${qs}`);
      expectError(res, 400, 'VALIDATION');
      expect(res.body.error).toContain(name);
    }
  });

  it("refuses another list's cursor, and its own on another list", async () => {
    const ws = await workspace();
    const micros = String(BigInt(Date.now()) * 1000n);
    const uuid = '7d4f3c2a-1b0e-4f6a-9c8d-2e1f0a9b8c7d';
    for (const cursor of [`conversations_${micros}_${uuid}`, `leads_${micros}_${uuid}`, `messages_${micros}`]) {
      const res = await get(ws, `/api/v1/messages?cursor=${encodeURIComponent(cursor)}`);
      expectError(res, 400, 'VALIDATION');
      expect(res.body.error).toContain('query.cursor');
    }
    const own = await get(ws, `/api/v1/messages?cursor=messages_${micros}_${uuid}`);
    expect(own.status).toBe(200);
    const elsewhere = await get(ws, `/api/v1/conversations?cursor=messages_${micros}_${uuid}`);
    expectError(elsewhere, 400, 'VALIDATION');
  });
});

describe('changes a mirror must see', () => {
  it('a status move makes the message come back in the next page with its new status; a stale one does not', async () => {
    const ws = await workspace();
    const { phoneNumberId } = await cloudInstance(api, ws.id, { label: 'ms' });
    const res = await api.request('POST', '/api/v1/messages', {
      key: ws.key,
      body: { phone: uniqueMobile(), type: 'template', templateName: 'welcome', templateLanguage: 'pt_BR', templateVariables: ['Ana'] },
    });
    expect(res.status).toBe(201);
    const message = res.body.data;
    const wamid = (await api.db('messages').where({ id: message.id }).first('provider_message_id')).provider_message_id as string;
    // The emulator's own `sent` notification has come and gone (it moves nothing).
    await eventually('the sent notification delivered', async () => {
      const log = await emulator(`/__emulator/webhook?phoneNumberId=${phoneNumberId}`);
      return log.deliveries.some((d: any) => d.messageId === wamid && d.httpStatus === 200);
    });

    const before = await readToEnd(ws, {});
    expect(before.rows).toEqual([expect.objectContaining({ id: message.id, status: 'sent', conversationId: message.conversationId })]);

    let cursor = before.cursor;
    for (const status of ['delivered', 'read']) {
      expect((await emulator('/__emulator/status', { messageId: wamid, status })).delivered).toBe(200);
      const next = await readToEnd(ws, { cursor });
      expect(next.rows).toEqual([expect.objectContaining({ id: message.id, status })]);
      expect(next.rows[0].updatedAt > before.rows[0].updatedAt).toBe(true);
      cursor = next.cursor;
    }
    // A late `delivered` after `read` moves nothing: nothing to read again.
    expect((await emulator('/__emulator/status', { messageId: wamid, status: 'delivered' })).delivered).toBe(200);
    expect((await readToEnd(ws, { cursor })).rows).toEqual([]);
  });

  it('the media stored makes the message come back with its file', async () => {
    const ws = await workspace();
    const { phoneNumberId } = await cloudInstance(api, ws.id, { label: 'mm' });
    // Four failed fetches first (retried after 1, 2, 4 and 8 s): the message is read while pending.
    const { id, conversationId, answer } = await inbound(ws, phoneNumberId, uniqueMobile(), {
      media: { type: 'image', bytes: 40_000, mimeType: 'image/png', mediaId: uniqueId('media'), failTimes: 4, caption: 'foto' },
    });
    const filter = `&conversationId=${conversationId}`;
    const first = await readToEnd(ws, {}, filter);
    expect(first.rows).toEqual([
      expect.objectContaining({ id, type: 'image', body: 'foto', media: expect.objectContaining({ status: 'pending', sha256: null }) }),
    ]);

    const again = await eventually(
      'the stored media in a later page',
      async () => {
        const next = await readToEnd(ws, { cursor: first.cursor }, filter);
        return next.rows.length > 0 ? next.rows : undefined;
      },
      60_000,
      500,
    );
    expect(again).toEqual([
      expect.objectContaining({
        id,
        media: { status: 'stored', mimeType: 'image/png', size: 40_000, fileName: null, sha256: answer.sha256, reason: null },
      }),
    ]);
    expect(again[0].updatedAt > first.rows[0].updatedAt).toBe(true);
  });

  it("a lead merge moving messages into the survivor's conversation makes them come back with it", async () => {
    const ws = await workspace();
    const { phoneNumberId } = await cloudInstance(api, ws.id, { label: 'mg' });
    const survivor = await inbound(ws, phoneNumberId, uniqueMobile());
    const duplicate = await inbound(ws, phoneNumberId, uniqueMobile());
    const contactOf = async (conversationId: string) =>
      (await api.db('conversations').where({ id: conversationId }).first('contact_id')).contact_id as string;
    const { cursor } = await readToEnd(ws, {});

    const merged = await api.admin('POST', `/admin/v1/workspaces/${ws.id}/contacts/${await contactOf(duplicate.conversationId)}/merge`, {
      intoId: await contactOf(survivor.conversationId),
    });
    expect(merged.status).toBe(200);
    const next = await readToEnd(ws, { cursor });
    expect(next.rows).toEqual([expect.objectContaining({ id: duplicate.id, conversationId: survivor.conversationId })]);
  });
});

describe('tenant isolation', () => {
  it("another workspace's messages never appear, not even filtered by its conversation id", async () => {
    const a = await workspace();
    const b = await workspace();
    const instanceA = await cloudInstance(api, a.id, { label: 'ta' });
    const instanceB = await cloudInstance(api, b.id, { label: 'tb' });
    const mine = await inbound(a, instanceA.phoneNumberId, uniqueMobile());
    const theirs = [
      await inbound(b, instanceB.phoneNumberId, uniqueMobile()),
      await inbound(b, instanceB.phoneNumberId, uniqueMobile(), { text: 'segredo' }),
    ];
    const foreign = theirs[0].conversationId;

    const list = await offsetPage(a, '?limit=100');
    expect(ids(list.data)).toEqual([mine.id]);
    expect(list.pagination.total).toBe(1);
    const filtered = await offsetPage(a, `?conversationId=${foreign}`);
    expect(filtered).toEqual({ data: [], pagination: { total: 0, limit: 25, offset: 0, hasMore: false } });
    expect((await offsetPage(a, `?conversationId=${foreign}&direction=in`)).data).toEqual([]);

    const synced = await readToEnd(a, {});
    expect(ids(synced.rows)).toEqual([mine.id]);
    expect((await readToEnd(a, {}, `&conversationId=${foreign}`)).rows).toEqual([]);
    // B's own view has them (the filter works there).
    expect(ids((await readToEnd(b, {}, `&conversationId=${foreign}`)).rows)).toEqual([theirs[0].id]);
    // A cursor holds a position, never a workspace: A's, read with B's key, reads B's rows only.
    expect(ids((await readToEnd(b, { cursor: synced.cursor })).rows)).not.toContain(mine.id);
  });
});
