import { countQueries, createWorkspace, expectError, seedContact, startApi, TestApi, Workspace } from './helpers';
import { uniqueMobile } from './phones';

/**
 * Conversations and messages. Inbound provider traffic has its own suite (inbound.test.ts), so conversations
 * and messages are seeded as rows; workspaces, keys, instances and contacts go through the admin API.
 */
let api: TestApi;
beforeAll(async () => {
  api = await startApi();
});
afterAll(async () => api.close());

let phoneCounter = 0;
/** A valid, distinct Brazilian mobile (55 + 11 + 9 digits starting with 9). */
const nextPhone = (): string => uniqueMobile('11');

async function seedInstance(
  ws: { id: string },
  input: { name?: string; archived?: boolean; channel?: 'whatsapp' | 'instagram' } = {},
): Promise<string> {
  const res = await api.admin('POST', `/admin/v1/workspaces/${ws.id}/instances`, {
    name: input.name ?? 'Main number',
    channel: input.channel ?? 'whatsapp',
    provider: 'cloud',
    connected: true,
    archived: input.archived ?? false,
    config: { accessToken: 'EAAG-secret-token', appSecret: 'app-secret' },
  });
  expect(res.status).toBe(201);
  return res.body.data.id;
}

async function seedGroupContact(ws: { id: string }, name = 'Family group'): Promise<string> {
  const phone = `1203630${String(++phoneCounter).padStart(11, '0')}@g.us`;
  const [row] = await api.db('contacts').insert({ workspace_id: ws.id, name, phone, phone_key: phone, is_group: true }).returning('id');
  return row.id;
}

async function seedConversation(
  ws: { id: string },
  contactId: string,
  instanceId: string,
  input: { status?: string; lastMessageAt?: string | null; channel?: string } = {},
): Promise<string> {
  const [row] = await api
    .db('conversations')
    .insert({
      workspace_id: ws.id,
      contact_id: contactId,
      instance_id: instanceId,
      channel: input.channel ?? 'whatsapp',
      status: input.status ?? 'open',
      last_message_at: input.lastMessageAt === undefined ? new Date().toISOString() : input.lastMessageAt,
    })
    .returning('id');
  return row.id;
}

async function seedMessages(
  ws: { id: string },
  conversationId: string,
  messages: {
    direction?: string;
    type?: string;
    body?: string;
    status?: string;
    timestamp: string;
    media_url?: string | null;
    media_ref?: string | null;
  }[],
): Promise<string[]> {
  const rows = await api
    .db('messages')
    .insert(
      messages.map((m) => ({
        workspace_id: ws.id,
        conversation_id: conversationId,
        direction: m.direction ?? 'in',
        type: m.type ?? 'text',
        body: m.body ?? '',
        status: m.status ?? 'received',
        timestamp: m.timestamp,
        media_url: m.media_url ?? null,
        media_ref: m.media_ref ?? null,
      })),
    )
    .returning('id');
  return rows.map((r: { id: string }) => r.id);
}

/** A conversation with a fresh canonical contact on `instanceId`. */
async function conversationWithContact(
  ws: Workspace,
  instanceId: string,
  input: { status?: string; lastMessageAt?: string | null; name?: string } = {},
) {
  const contact = await seedContact(api, ws.id, { phone: nextPhone(), name: input.name ?? 'Ana' });
  const id = await seedConversation(ws, contact.id, instanceId, input);
  return { id, contact };
}

/**
 * A workspace with one visible conversation and one hidden conversation for each exclusion:
 * group chat, merged contact, soft-deleted contact, archived instance.
 */
async function workspaceWithExclusions() {
  const ws = await createWorkspace(api, { scopes: ['conversations:read', 'conversations:write'] });
  const instanceId = await seedInstance(ws);
  const archivedInstanceId = await seedInstance(ws, { name: 'Old number', archived: true });
  const visible = await conversationWithContact(ws, instanceId, { name: 'Visible', lastMessageAt: '2026-01-01T10:00:00.000Z' });

  const groupId = await seedGroupContact(ws);
  const group = await seedConversation(ws, groupId, instanceId, { lastMessageAt: '2026-01-02T10:00:00.000Z' });

  const survivor = await seedContact(api, ws.id, { phone: nextPhone(), name: 'Survivor' });
  const merged = await conversationWithContact(ws, instanceId, { name: 'Merged', lastMessageAt: '2026-01-03T10:00:00.000Z' });
  await api.db('contacts').where({ id: merged.contact.id }).update({ merged_into_id: survivor.id });

  const deleted = await conversationWithContact(ws, instanceId, { name: 'Deleted', lastMessageAt: '2026-01-04T10:00:00.000Z' });
  await api.db('contacts').where({ id: deleted.contact.id }).update({ deleted_at: new Date() });

  const archived = await conversationWithContact(ws, archivedInstanceId, {
    name: 'On archived',
    lastMessageAt: '2026-01-05T10:00:00.000Z',
  });
  // The visible contact also talks on the archived number: that conversation stays hidden too.
  const archivedSameContact = await seedConversation(ws, visible.contact.id, archivedInstanceId, {
    lastMessageAt: '2026-01-06T10:00:00.000Z',
  });

  await seedMessages(ws, group, [{ timestamp: '2026-01-02T10:00:00.000Z', body: 'group chatter' }]);
  return {
    ws,
    instanceId,
    archivedInstanceId,
    visible,
    groupContactId: groupId,
    mergedContactId: merged.contact.id,
    deletedContactId: deleted.contact.id,
    hidden: { group, merged: merged.id, deleted: deleted.id, archived: archived.id, archivedSameContact },
  };
}

describe('GET /api/v1/conversations', () => {
  it('lists conversations with their contact, newest activity first, never-messaged last, id as tiebreak', async () => {
    const ws = await createWorkspace(api, { scopes: ['conversations:read'] });
    const instanceId = await seedInstance(ws);
    const older = await conversationWithContact(ws, instanceId, {
      name: 'Older',
      lastMessageAt: '2026-03-01T08:00:00.000Z',
      status: 'waiting',
    });
    const never = await conversationWithContact(ws, instanceId, { name: 'Never', lastMessageAt: null });
    const newest = await conversationWithContact(ws, instanceId, { name: 'Newest', lastMessageAt: '2026-03-02T08:00:00.000Z' });
    const tieA = await conversationWithContact(ws, instanceId, { name: 'Tie A', lastMessageAt: '2026-03-01T09:00:00.000Z' });
    const tieB = await conversationWithContact(ws, instanceId, { name: 'Tie B', lastMessageAt: '2026-03-01T09:00:00.000Z' });

    const res = await api.request('GET', '/api/v1/conversations', { key: ws.key });
    expect(res.status).toBe(200);
    expect(res.headers.get('x-ratelimit-remaining')).not.toBeNull();
    const ties = [tieA.id, tieB.id].sort();
    expect(res.body.data.map((c: any) => c.id)).toEqual([newest.id, ...ties, older.id, never.id]);
    expect(res.body.pagination).toEqual({ total: 5, limit: 25, offset: 0, hasMore: false });

    const first = res.body.data.find((c: any) => c.id === older.id);
    const created = await api.db('conversations').where({ id: older.id }).first();
    expect(first).toEqual({
      id: older.id,
      contact: { id: older.contact.id, name: 'Older', phone: older.contact.phone },
      instanceId,
      channel: 'whatsapp',
      status: 'waiting',
      lastMessageAt: '2026-03-01T08:00:00.000Z',
      createdAt: created.created_at.toISOString(),
      updatedAt: created.updated_at.toISOString(),
    });
    expect(first).not.toHaveProperty('messages');
    expect(res.body.data.find((c: any) => c.id === never.id).lastMessageAt).toBeNull();

    // Paging keeps the order and the total.
    const page = await api.request('GET', '/api/v1/conversations?limit=2&offset=2', { key: ws.key });
    expect(page.body.data.map((c: any) => c.id)).toEqual([ties[1], older.id]);
    expect(page.body.pagination).toEqual({ total: 5, limit: 2, offset: 2, hasMore: true });
    const past = await api.request('GET', '/api/v1/conversations?offset=50', { key: ws.key });
    expect(past.body).toEqual({ data: [], pagination: { total: 5, limit: 25, offset: 50, hasMore: false } });
  });

  it('defaults to 25 per page and accepts limit 1..100 only', async () => {
    const ws = await createWorkspace(api, { scopes: ['conversations:read'] });
    const instanceId = await seedInstance(ws);
    // Bulk rows: 27 contacts and conversations.
    const contacts = await api
      .db('contacts')
      .insert(
        Array.from({ length: 27 }, (_, i) => ({
          workspace_id: ws.id,
          name: `Bulk ${i}`,
          phone: uniqueMobile('11'),
          phone_key: `bulk-${i}`,
        })),
      )
      .returning('id');
    await api.db('conversations').insert(
      contacts.map((c: { id: string }, i: number) => ({
        workspace_id: ws.id,
        contact_id: c.id,
        instance_id: instanceId,
        channel: 'whatsapp',
        last_message_at: new Date(Date.UTC(2026, 0, 1, 0, i)).toISOString(),
      })),
    );
    const res = await api.request('GET', '/api/v1/conversations', { key: ws.key });
    expect(res.body.data).toHaveLength(25);
    expect(res.body.pagination).toEqual({ total: 27, limit: 25, offset: 0, hasMore: true });
    expect(res.body.data[0].contact.name).toBe('Bulk 26');
    expect((await api.request('GET', '/api/v1/conversations?limit=100', { key: ws.key })).body.data).toHaveLength(27);
    for (const bad of ['limit=0', 'limit=101', 'limit=abc', 'offset=-1', 'status=archived']) {
      expectError(await api.request('GET', `/api/v1/conversations?${bad}`, { key: ws.key }), 400, 'VALIDATION');
    }
  });

  it('filters by instanceId, status and contactId, with exact totals', async () => {
    const ws = await createWorkspace(api, { scopes: ['conversations:read'] });
    const main = await seedInstance(ws, { name: 'Main' });
    const insta = await seedInstance(ws, { name: 'Instagram', channel: 'instagram' });
    const a = await conversationWithContact(ws, main, { status: 'open', lastMessageAt: '2026-02-01T00:00:00.000Z' });
    const b = await conversationWithContact(ws, main, { status: 'closed', lastMessageAt: '2026-02-02T00:00:00.000Z' });
    const c = await seedConversation(ws, a.contact.id, insta, {
      status: 'snoozed',
      channel: 'instagram',
      lastMessageAt: '2026-02-03T00:00:00.000Z',
    });
    const d = await conversationWithContact(ws, insta, { status: 'open', lastMessageAt: '2026-02-04T00:00:00.000Z' });

    const list = async (qs: string) => {
      const res = await api.request('GET', `/api/v1/conversations?${qs}`, { key: ws.key });
      expect(res.status).toBe(200);
      expect(res.body.pagination.total).toBe(res.body.data.length);
      return res.body.data.map((x: any) => x.id);
    };
    expect(await list(`instanceId=${main}`)).toEqual([b.id, a.id]);
    expect(await list(`instanceId=${insta}`)).toEqual([d.id, c]);
    expect(await list('status=open')).toEqual([d.id, a.id]);
    expect(await list('status=waiting')).toEqual([]);
    expect(await list(`contactId=${a.contact.id}`)).toEqual([c, a.id]);
    expect(await list(`contactId=${a.contact.id}&instanceId=${insta}`)).toEqual([c]);
    expect(await list(`contactId=${a.contact.id}&status=open`)).toEqual([a.id]);
    expect(await list(`instanceId=${insta}&status=open&limit=1`)).toEqual([d.id]);
    expect(
      (await api.request('GET', `/api/v1/conversations?instanceId=${insta}&status=open&limit=1`, { key: ws.key })).body.pagination,
    ).toMatchObject({
      total: 1,
      hasMore: false,
    });
    // Ids that name nothing match nothing.
    expect(await list('contactId=00000000-0000-0000-0000-000000000000')).toEqual([]);
    expect(await list('contactId=not-a-uuid')).toEqual([]);
    expect(await list('instanceId=nope')).toEqual([]);
  });

  it('never lists group chats, merged or deleted contacts, or archived connections, and does not count them', async () => {
    const s = await workspaceWithExclusions();
    const res = await api.request('GET', '/api/v1/conversations', { key: s.ws.key });
    expect(res.body.data.map((c: any) => c.id)).toEqual([s.visible.id]);
    expect(res.body.pagination).toEqual({ total: 1, limit: 25, offset: 0, hasMore: false });
    expect(res.text).not.toContain('@g.us');

    const total = async (qs: string) => (await api.request('GET', `/api/v1/conversations?${qs}`, { key: s.ws.key })).body.pagination.total;
    expect(await total(`instanceId=${s.archivedInstanceId}`)).toBe(0);
    expect(await total(`instanceId=${s.instanceId}`)).toBe(1);
    expect(await total(`contactId=${s.groupContactId}`)).toBe(0);
    expect(await total(`contactId=${s.mergedContactId}`)).toBe(0);
    expect(await total(`contactId=${s.deletedContactId}`)).toBe(0);
    expect(await total(`contactId=${s.visible.contact.id}`)).toBe(1);
    expect(await total('status=open')).toBe(1);
    expect(await total('limit=1&offset=1')).toBe(1);
  });

  it('runs a constant number of SQL queries whatever the page size', async () => {
    const ws = await createWorkspace(api, { scopes: ['conversations:read'] });
    const instanceId = await seedInstance(ws);
    for (let i = 0; i < 12; i += 1)
      await conversationWithContact(ws, instanceId, { name: `C${i}`, lastMessageAt: new Date(Date.UTC(2026, 1, 1, i)).toISOString() });
    const small = await countQueries(api, async () =>
      expect((await api.request('GET', '/api/v1/conversations?limit=1', { key: ws.key })).body.data).toHaveLength(1),
    );
    const large = await countQueries(api, async () =>
      expect((await api.request('GET', '/api/v1/conversations?limit=12', { key: ws.key })).body.data).toHaveLength(12),
    );
    expect(small).toBeGreaterThan(0);
    expect(large).toBe(small);

    const [conversation] = await api.db('conversations').where({ workspace_id: ws.id }).select('id');
    await seedMessages(
      ws,
      conversation.id,
      Array.from({ length: 30 }, (_, i) => ({ timestamp: new Date(Date.UTC(2026, 1, 2, 0, i)).toISOString(), body: `m${i}` })),
    );
    const oneMessage = await countQueries(api, () =>
      api.request('GET', `/api/v1/conversations/${conversation.id}?limit=1`, { key: ws.key }),
    );
    const allMessages = await countQueries(api, () => api.request('GET', `/api/v1/conversations/${conversation.id}`, { key: ws.key }));
    expect(allMessages).toBe(oneMessage);
  });
});

describe('GET /api/v1/conversations/{id}', () => {
  it('returns the conversation with its messages newest first, and pagination describing the messages', async () => {
    const ws = await createWorkspace(api, { scopes: ['conversations:read'] });
    const instanceId = await seedInstance(ws);
    const { id, contact } = await conversationWithContact(ws, instanceId, { name: 'Bia', lastMessageAt: '2026-04-01T12:02:00.000Z' });
    const [m1, m2, m3] = await seedMessages(ws, id, [
      { direction: 'in', body: 'Oi', timestamp: '2026-04-01T12:00:00.000Z', status: 'received' },
      { direction: 'out', body: 'Olá! Como posso ajudar?', timestamp: '2026-04-01T12:01:00.000Z', status: 'delivered' },
      {
        direction: 'in',
        type: 'image',
        body: 'foto',
        timestamp: '2026-04-01T12:02:00.000Z',
        status: 'received',
        media_url: 'https://cdn.example.com/a.jpg',
      },
    ]);
    const res = await api.request('GET', `/api/v1/conversations/${id}`, { key: ws.key });
    expect(res.status).toBe(200);
    expect(Object.keys(res.body).sort()).toEqual(['data', 'pagination']);
    expect(res.body.pagination).toEqual({ total: 3, limit: 100, offset: 0, hasMore: false });
    expect(res.body.data).toMatchObject({
      id,
      contact: { id: contact.id, name: 'Bia', phone: contact.phone },
      instanceId,
      channel: 'whatsapp',
      status: 'open',
    });
    expect(res.body.data.messages).toEqual([
      {
        id: m3,
        direction: 'in',
        type: 'image',
        body: 'foto',
        timestamp: '2026-04-01T12:02:00.000Z',
        status: 'received',
        mediaUrl: 'https://cdn.example.com/a.jpg',
        // No stored file: an external URL is not fetched.
        media: null,
      },
      {
        id: m2,
        direction: 'out',
        type: 'text',
        body: 'Olá! Como posso ajudar?',
        timestamp: '2026-04-01T12:01:00.000Z',
        status: 'delivered',
        media: null,
      },
      { id: m1, direction: 'in', type: 'text', body: 'Oi', timestamp: '2026-04-01T12:00:00.000Z', status: 'received', media: null },
    ]);

    // A conversation of the same workspace without messages.
    const empty = await conversationWithContact(ws, instanceId, { lastMessageAt: null });
    const none = await api.request('GET', `/api/v1/conversations/${empty.id}`, { key: ws.key });
    expect(none.body.data.messages).toEqual([]);
    expect(none.body.pagination).toEqual({ total: 0, limit: 100, offset: 0, hasMore: false });
  });

  it('pages messages: default and maximum 100, offset, 101 is 400 VALIDATION', async () => {
    const ws = await createWorkspace(api, { scopes: ['conversations:read'] });
    const instanceId = await seedInstance(ws);
    const { id } = await conversationWithContact(ws, instanceId);
    const base = Date.UTC(2026, 4, 1);
    await seedMessages(
      ws,
      id,
      Array.from({ length: 105 }, (_, i) => ({
        body: `m${i}`,
        timestamp: new Date(base + i * 1000).toISOString(),
        direction: i % 2 ? 'out' : 'in',
        status: i % 2 ? 'sent' : 'received',
      })),
    );
    const first = await api.request('GET', `/api/v1/conversations/${id}`, { key: ws.key });
    expect(first.body.data.messages).toHaveLength(100);
    expect(first.body.data.messages[0].body).toBe('m104');
    expect(first.body.data.messages[99].body).toBe('m5');
    expect(first.body.pagination).toEqual({ total: 105, limit: 100, offset: 0, hasMore: true });

    const rest = await api.request('GET', `/api/v1/conversations/${id}?offset=100`, { key: ws.key });
    expect(rest.body.data.messages.map((m: any) => m.body)).toEqual(['m4', 'm3', 'm2', 'm1', 'm0']);
    expect(rest.body.pagination).toEqual({ total: 105, limit: 100, offset: 100, hasMore: false });

    const middle = await api.request('GET', `/api/v1/conversations/${id}?limit=3&offset=10`, { key: ws.key });
    expect(middle.body.data.messages.map((m: any) => m.body)).toEqual(['m94', 'm93', 'm92']);
    expect(middle.body.pagination).toEqual({ total: 105, limit: 3, offset: 10, hasMore: true });

    expect((await api.request('GET', `/api/v1/conversations/${id}?limit=100`, { key: ws.key })).status).toBe(200);
    for (const bad of ['limit=101', 'limit=0', 'limit=x', 'offset=-5']) {
      expectError(await api.request('GET', `/api/v1/conversations/${id}?${bad}`, { key: ws.key }), 400, 'VALIDATION');
    }
  });

  it('exposes mediaUrl only for external https URLs, never internal storage references', async () => {
    const ws = await createWorkspace(api, { scopes: ['conversations:read'] });
    const instanceId = await seedInstance(ws);
    const { id } = await conversationWithContact(ws, instanceId);
    const cases: { media_url?: string | null; media_ref?: string | null; expected?: string }[] = [
      { media_url: 'https://media.example.com/photo.jpg?sig=abc', expected: 'https://media.example.com/photo.jpg?sig=abc' },
      { media_url: 'https://cdn.example.com/a.jpg', media_ref: 'storage/ws/abc.jpg', expected: 'https://cdn.example.com/a.jpg' },
      { media_ref: 'storage/ws/internal-only.jpg' },
      { media_url: 'http://media.example.com/plain-http.jpg' },
      { media_url: 's3://bucket/internal/key.jpg' },
      { media_url: 'storage/ws/relative-key.jpg' },
      { media_url: 'https://user:pass@media.example.com/with-credentials.jpg' },
      { media_url: 'https://localhost/x.jpg' },
      { media_url: 'https://127.0.0.1/x.jpg' },
      { media_url: 'https://10.0.0.5/x.jpg' },
      { media_url: 'https://[::1]/x.jpg' },
      { media_url: 'https://minio/internal.jpg' },
      { media_url: '' },
    ];
    const ids = await seedMessages(
      ws,
      id,
      cases.map((c, i) => ({
        type: 'image',
        timestamp: new Date(Date.UTC(2026, 5, 1, 0, 0, i)).toISOString(),
        media_url: c.media_url,
        media_ref: c.media_ref,
      })),
    );
    const res = await api.request('GET', `/api/v1/conversations/${id}`, { key: ws.key });
    const byId = new Map(res.body.data.messages.map((m: any) => [m.id, m]));
    cases.forEach((c, i) => {
      const message: any = byId.get(ids[i]);
      if (c.expected) expect({ i, mediaUrl: message.mediaUrl }).toEqual({ i, mediaUrl: c.expected });
      else expect({ i, has: Object.prototype.hasOwnProperty.call(message, 'mediaUrl') }).toEqual({ i, has: false });
    });
    for (const secret of ['internal-only', 'relative-key', 's3://', 'storage/ws', 'pass@', 'minio', 'plain-http'])
      expect(res.text).not.toContain(secret);
  });

  it('answers 404 NOT_FOUND for group chats, merged or deleted contacts, archived connections, unknown and malformed ids', async () => {
    const s = await workspaceWithExclusions();
    expect((await api.request('GET', `/api/v1/conversations/${s.visible.id}`, { key: s.ws.key })).status).toBe(200);
    for (const [why, id] of Object.entries(s.hidden)) {
      const res = await api.request('GET', `/api/v1/conversations/${id}`, { key: s.ws.key });
      expect({ why, status: res.status, code: res.body?.code }).toEqual({ why, status: 404, code: 'NOT_FOUND' });
    }
    expectError(
      await api.request('GET', '/api/v1/conversations/00000000-0000-0000-0000-000000000000', { key: s.ws.key }),
      404,
      'NOT_FOUND',
    );
    expectError(await api.request('GET', '/api/v1/conversations/not-an-id', { key: s.ws.key }), 404, 'NOT_FOUND');
  });
});

describe('PATCH /api/v1/conversations/{id}', () => {
  it('changes the status and returns the conversation', async () => {
    const ws = await createWorkspace(api, { scopes: ['conversations:read', 'conversations:write'] });
    const instanceId = await seedInstance(ws);
    const { id, contact } = await conversationWithContact(ws, instanceId, { name: 'Caio', lastMessageAt: '2026-01-10T00:00:00.000Z' });
    for (const status of ['waiting', 'snoozed', 'closed', 'open', 'closed']) {
      const res = await api.request('PATCH', `/api/v1/conversations/${id}`, { key: ws.key, body: { status } });
      expect(res.status).toBe(200);
      expect(Object.keys(res.body)).toEqual(['data']);
      expect(res.body.data).toMatchObject({
        id,
        status,
        contact: { id: contact.id, name: 'Caio', phone: contact.phone },
        instanceId,
        lastMessageAt: '2026-01-10T00:00:00.000Z',
      });
      expect(res.body.data).not.toHaveProperty('messages');
    }
    expect((await api.db('conversations').where({ id }).first()).status).toBe('closed');
    expect((await api.request('GET', '/api/v1/conversations?status=closed', { key: ws.key })).body.data.map((c: any) => c.id)).toEqual([
      id,
    ]);
    // An unknown body field is ignored.
    expect(
      (await api.request('PATCH', `/api/v1/conversations/${id}`, { key: ws.key, body: { status: 'open', channel: 'instagram' } })).body
        .data,
    ).toMatchObject({
      status: 'open',
      channel: 'whatsapp',
    });
  });

  it('rejects an invalid or missing status with 400 VALIDATION naming body.status', async () => {
    const ws = await createWorkspace(api, { scopes: ['conversations:write'] });
    const instanceId = await seedInstance(ws);
    const { id } = await conversationWithContact(ws, instanceId, { status: 'waiting' });
    for (const body of [{ status: 'archived' }, { status: 'OPEN' }, { status: 1 }, {}]) {
      const res = await api.request('PATCH', `/api/v1/conversations/${id}`, { key: ws.key, body });
      expectError(res, 400, 'VALIDATION');
      expect(res.body.error).toContain('body.status');
    }
    expectError(
      await api.request('PATCH', `/api/v1/conversations/${id}`, {
        key: ws.key,
        rawBody: '{"status":',
        headers: { 'content-type': 'application/json' },
      }),
      400,
      'VALIDATION',
    );
    expect((await api.db('conversations').where({ id }).first()).status).toBe('waiting');
  });

  it('answers 404 for excluded conversations and leaves them untouched', async () => {
    const s = await workspaceWithExclusions();
    for (const [why, id] of Object.entries(s.hidden)) {
      const res = await api.request('PATCH', `/api/v1/conversations/${id}`, { key: s.ws.key, body: { status: 'closed' } });
      expect({ why, status: res.status, code: res.body?.code }).toEqual({ why, status: 404, code: 'NOT_FOUND' });
    }
    const statuses = await api.db('conversations').whereIn('id', Object.values(s.hidden)).pluck('status');
    expect(statuses).toEqual(Object.values(s.hidden).map(() => 'open'));
    expectError(
      await api.request('PATCH', '/api/v1/conversations/00000000-0000-0000-0000-000000000000', {
        key: s.ws.key,
        body: { status: 'closed' },
      }),
      404,
      'NOT_FOUND',
    );
  });
});

describe('conversation scopes', () => {
  it('requires conversations:read to read and conversations:write to change; conversations:send grants neither', async () => {
    const ws = await createWorkspace(api, { scopes: ['conversations:read'] });
    const instanceId = await seedInstance(ws);
    const { id } = await conversationWithContact(ws, instanceId);
    const sendOnly = await createWorkspaceKey(ws.id, ['conversations:send']);
    const writeOnly = await createWorkspaceKey(ws.id, ['conversations:write']);
    const unrelated = await createWorkspaceKey(ws.id, ['leads:read', 'instances:read']);

    for (const key of [sendOnly, writeOnly, unrelated]) {
      expectError(await api.request('GET', '/api/v1/conversations', { key }), 403, 'INSUFFICIENT_SCOPE');
      expectError(await api.request('GET', `/api/v1/conversations/${id}`, { key }), 403, 'INSUFFICIENT_SCOPE');
    }
    for (const key of [sendOnly, ws.key, unrelated]) {
      expectError(
        await api.request('PATCH', `/api/v1/conversations/${id}`, { key, body: { status: 'closed' } }),
        403,
        'INSUFFICIENT_SCOPE',
      );
    }
    expect((await api.request('PATCH', `/api/v1/conversations/${id}`, { key: writeOnly, body: { status: 'closed' } })).status).toBe(200);
    expectError(await api.request('GET', '/api/v1/conversations'), 401, 'UNAUTHORIZED');
  });
});

async function createWorkspaceKey(workspaceId: string, scopes: string[]): Promise<string> {
  const res = await api.admin('POST', `/admin/v1/workspaces/${workspaceId}/api-keys`, { name: 'scoped', scopes, rateLimitPerMinute: 1000 });
  expect(res.status).toBe(201);
  return res.body.data.key;
}

describe('conversations across tenants', () => {
  it("never shows or changes another workspace's conversations", async () => {
    const mine = await createWorkspace(api, { scopes: ['conversations:read', 'conversations:write'] });
    const theirs = await createWorkspace(api, { scopes: ['conversations:read', 'conversations:write'] });
    const myInstance = await seedInstance(mine);
    const theirInstance = await seedInstance(theirs);
    const my = await conversationWithContact(mine, myInstance, { lastMessageAt: '2026-01-01T00:00:00.000Z' });
    const their = await conversationWithContact(theirs, theirInstance, { status: 'waiting', lastMessageAt: '2026-01-02T00:00:00.000Z' });
    await seedMessages(theirs, their.id, [{ body: 'their secret message', timestamp: '2026-01-02T00:00:00.000Z' }]);

    const list = await api.request('GET', '/api/v1/conversations', { key: mine.key });
    expect(list.body.data.map((c: any) => c.id)).toEqual([my.id]);
    expect(list.body.pagination.total).toBe(1);
    for (const qs of [
      `contactId=${their.contact.id}`,
      `instanceId=${theirInstance}`,
      `contactId=${their.contact.id}&instanceId=${theirInstance}`,
    ]) {
      const res = await api.request('GET', `/api/v1/conversations?${qs}`, { key: mine.key });
      expect(res.status).toBe(200);
      expect(res.body).toEqual({ data: [], pagination: { total: 0, limit: 25, offset: 0, hasMore: false } });
    }
    const read = await api.request('GET', `/api/v1/conversations/${their.id}`, { key: mine.key });
    expectError(read, 404, 'NOT_FOUND');
    expect(read.text).not.toContain('their secret message');
    expectError(
      await api.request('PATCH', `/api/v1/conversations/${their.id}`, { key: mine.key, body: { status: 'closed' } }),
      404,
      'NOT_FOUND',
    );
    const stored = await api.db('conversations').where({ id: their.id }).first();
    expect(stored.status).toBe('waiting');

    // The owner still sees it unchanged.
    const own = await api.request('GET', `/api/v1/conversations/${their.id}`, { key: theirs.key });
    expect(own.body.data).toMatchObject({ id: their.id, status: 'waiting' });
    expect(own.body.data.messages.map((m: any) => m.body)).toEqual(['their secret message']);
  });
});

describe('conversations in the OpenAPI document', () => {
  it('documents the three endpoints with their scopes, errors and the Conversation and Message schemas', async () => {
    const doc = (await api.request('GET', '/api/v1/openapi.json')).body;
    expect(doc.paths['/api/v1/conversations'].get['x-scopes']).toEqual(['conversations:read']);
    expect(doc.paths['/api/v1/conversations/{id}'].get['x-scopes']).toEqual(['conversations:read']);
    expect(doc.paths['/api/v1/conversations/{id}'].patch['x-scopes']).toEqual(['conversations:write']);
    expect(Object.keys(doc.paths['/api/v1/conversations/{id}'].get.responses)).toEqual(
      expect.arrayContaining(['200', '400', '401', '403', '404', '429']),
    );
    expect(doc.components.schemas.Conversation.properties).toHaveProperty('contact');
    expect(doc.components.schemas.Message.properties).toHaveProperty('mediaUrl');
    expect(doc.components.schemas.Message.required).not.toContain('mediaUrl');
    const limit = doc.paths['/api/v1/conversations/{id}'].get.parameters.find((p: any) => p.name === 'limit');
    expect(limit.schema).toMatchObject({ minimum: 1, maximum: 100, default: 100 });
  });
});
