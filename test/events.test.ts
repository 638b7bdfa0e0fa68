/**
 * The events feed (GET /api/v1/events) end to end: events recorded by real requests, dispatched by
 * the suite's worker to a real receiver, read back by cursor; and the two events that tell a
 * synced system a lead left: contact.deleted and contact.merged (the panel's merge).
 */
import { recordEvent } from '../domain/webhooks/outbox';
import { pruneRetention } from '../domain/maintenance/retention';
import { ALL_SCOPES } from '../domain/access/scopes';
import {
  createKey,
  createWorkspace,
  eventually,
  expectError,
  Receiver,
  seedContact,
  seedPipeline,
  settleOutbox,
  startApi,
  startReceiver,
  TestApi,
  Workspace,
} from './helpers';
import { uniqueMobile } from './phones';

let api: TestApi;
let receiver: Receiver;

beforeAll(async () => {
  api = await startApi();
  receiver = await startReceiver();
});
afterAll(async () => {
  await receiver.close();
  await api.close();
});

let seq = 0;
const phone = (): string => uniqueMobile('31');
const unique = (label: string): string => `${label}-${process.pid}-${++seq}`;

interface FeedEvent {
  id: string;
  type: string;
  createdAt: string;
  payload: Record<string, unknown>;
  dispatchedAt: string | null;
  deliveries: {
    subscriptionId: string;
    deliveryId: string;
    status: string;
    attempts: number;
    lastStatusCode: number | null;
    deliveredAt: string | null;
  }[];
}
interface FeedPage {
  data: FeedEvent[];
  pagination: { limit: number; hasMore: boolean; nextCursor: string };
}

async function page(ws: Workspace, query: string): Promise<FeedPage> {
  const res = await api.request<FeedPage>('GET', `/api/v1/events?${query}`, { key: ws.key });
  expect(res.status).toBe(200);
  return res.body;
}

/** Every page from `query` on, following nextCursor; returns the events and the last cursor. */
async function readAll(ws: Workspace, query: string, limit = 100): Promise<{ events: FeedEvent[]; cursor: string }> {
  const events: FeedEvent[] = [];
  let body = await page(ws, `${query}&limit=${limit}`);
  events.push(...body.data);
  while (body.pagination.hasMore) {
    body = await page(ws, `${query}&limit=${limit}&cursor=${body.pagination.nextCursor}`);
    events.push(...body.data);
  }
  return { events, cursor: body.pagination.nextCursor };
}

async function upsert(ws: Workspace, body: Record<string, unknown>) {
  const res = await api.request('POST', '/api/v1/leads', { key: ws.key, body });
  expect(res.status).toBe(201);
  return res.body.data as { id: string; phone: string };
}

describe('GET /api/v1/events', () => {
  it('lists every webhook event with the body subscribers received and its delivery state per subscription', async () => {
    const ws = await createWorkspace(api, { scopes: [...ALL_SCOPES] });
    const everything = `/ok/${unique('feed-all')}`;
    const flaky = `/fail/1/${unique('feed-leads')}`;
    const subAll = (await api.request('POST', '/api/v1/webhooks', { key: ws.key, body: { url: receiver.url + everything, events: ['*'] } }))
      .body.data;
    const subLeads = (
      await api.request('POST', '/api/v1/webhooks', { key: ws.key, body: { url: receiver.url + flaky, events: ['lead.created'] } })
    ).body.data;

    const lead = await upsert(ws, { phone: phone(), name: 'Ana', tags: ['VIP'] });
    expect((await api.request('DELETE', `/api/v1/leads/${lead.id}`, { key: ws.key })).status).toBe(200);
    // The flaky receiver's retry runs as a workflow: on a loaded CI machine, more than the default 30 s.
    await settleOutbox(api, ws.id, 90_000);

    const { events } = await eventually('three settled events', async () => {
      const all = await readAll(ws, 'order=asc');
      return all.events.length === 3 && all;
    });
    expect(events.map((e) => e.type)).toEqual(['lead.created', 'contact.tag_added', 'contact.deleted']);
    // Internal automation triggers (contact_updated ...) are never listed.
    expect(events.every((e) => e.payload.event === e.type && e.payload.workspace_id === ws.id)).toBe(true);
    expect(events[2].payload).toMatchObject({ contact_id: lead.id, contact_name: 'Ana', phone: lead.phone });

    // Field for field the body the receiver got, matched by the X-Service-Event-Id header.
    const pushed = receiver.to(everything);
    expect(pushed).toHaveLength(3);
    for (const event of events) {
      const delivery = pushed.find((r) => r.headers['x-service-event-id'] === event.id);
      expect(delivery?.raw).toBe(JSON.stringify(event.payload));
    }

    const created = events[0];
    expect(created.dispatchedAt).not.toBeNull();
    expect(created.deliveries).toHaveLength(2);
    expect(created.deliveries.find((d) => d.subscriptionId === subAll.id)).toMatchObject({
      status: 'succeeded',
      attempts: 1,
      lastStatusCode: 200,
    });
    // The flaky receiver failed once and took the retry.
    expect(created.deliveries.find((d) => d.subscriptionId === subLeads.id)).toMatchObject({
      status: 'succeeded',
      attempts: 2,
      lastStatusCode: 200,
    });
    expect(events[1].deliveries.map((d) => d.subscriptionId)).toEqual([subAll.id]);

    // Newest first by default.
    expect((await page(ws, 'limit=100')).data.map((e) => e.id)).toEqual(events.map((e) => e.id).reverse());
  }, 120_000);

  it('pages by cursor in both orders without a gap or a repeat, filters by type and time, and resumes from the last cursor', async () => {
    const ws = await createWorkspace(api, { scopes: ['events:read', 'leads:write', 'tags:write'] });
    const leads = [];
    for (let i = 0; i < 7; i += 1) leads.push(await upsert(ws, { phone: phone(), name: `Lead ${i}` }));
    await api.request('POST', `/api/v1/leads/${leads[0].id}/tags`, { key: ws.key, body: { tag: 'Hot' } });

    const all = await eventually('eight events', async () => {
      const r = await readAll(ws, 'order=asc');
      return r.events.length === 8 && r;
    });
    const asc = await readAll(ws, 'order=asc', 3);
    expect(asc.events.map((e) => e.id)).toEqual(all.events.map((e) => e.id));
    const desc = await readAll(ws, 'order=desc', 3);
    expect(desc.events.map((e) => e.id)).toEqual(all.events.map((e) => e.id).reverse());
    expect(new Set(asc.events.map((e) => e.id)).size).toBe(8);

    const onlyLeads = await readAll(ws, 'order=asc&type=lead.created', 2);
    expect(onlyLeads.events.map((e) => e.payload.contact_id)).toEqual(leads.map((l) => l.id));
    expect((await readAll(ws, 'type=contact.tag_added,card.won')).events.map((e) => e.type)).toEqual(['contact.tag_added']);

    const third = all.events[2].createdAt;
    const fifth = all.events[4].createdAt;
    const window = await readAll(ws, `order=asc&createdAfter=${third}&createdBefore=${fifth}`);
    expect(window.events.every((e) => e.createdAt >= third && e.createdAt < fifth)).toBe(true);
    expect(window.events.map((e) => e.id)).toContain(all.events[2].id);
    expect(window.events.map((e) => e.id)).not.toContain(all.events[4].id);

    // The last page's cursor is where the next run starts: only what happened since.
    expect((await page(ws, `order=asc&cursor=${asc.cursor}`)).data).toEqual([]);
    const later = await upsert(ws, { phone: phone(), name: 'Later' });
    const resumed = await eventually('the new event after the stored cursor', async () => {
      const body = await page(ws, `order=asc&cursor=${asc.cursor}`);
      return body.data.length > 0 && body;
    });
    expect(resumed.data.map((e) => [e.type, e.payload.contact_id])).toEqual([['lead.created', later.id]]);
  });

  it('never passes an event that a transaction open during the read commits later', async () => {
    const ws = await createWorkspace(api, { scopes: ['events:read', 'leads:write'] });
    await upsert(ws, { phone: phone(), name: 'Before' });
    const before = await eventually('the first event', async () => {
      const r = await readAll(ws, 'order=asc');
      return r.events.length === 1 && r;
    });

    // A slow writer: its event is stamped with its transaction's start, before the next one.
    let commit!: () => void;
    const released = new Promise<void>((resolve) => (commit = resolve));
    let recorded!: () => void;
    const isRecorded = new Promise<void>((resolve) => (recorded = resolve));
    const slow = api.db.transaction(async (trx) => {
      await recordEvent(trx, ws.id, 'contact.updated', { contact_id: null, contact_name: 'slow writer', phone: null, email: null });
      recorded();
      await released;
    });
    await isRecorded;
    const quick = await upsert(ws, { phone: phone(), name: 'Quick' });
    // The quick event is committed (its request answered), but a reader must not hand out a cursor
    // past it while the slow writer's transaction, which started before it, is open: no wait makes
    // a difference, the horizon is that transaction's start for as long as it stays open.
    const during = await readAll(ws, `order=asc&cursor=${before.cursor}`);
    expect(during.events).toEqual([]);

    commit();
    await slow;
    const after = await eventually('both events after the commit', async () => {
      const r = await readAll(ws, `order=asc&cursor=${during.cursor}`);
      return r.events.length === 2 && r;
    });
    expect(after.events.map((e) => e.payload.contact_name ?? e.payload.name)).toEqual(['slow writer', 'Quick']);
    expect(after.events[1].payload.contact_id).toBe(quick.id);
  });

  it('shows a workspace only its own events, in cursors that reveal no outbox sequence and open in no other workspace, and needs events:read', async () => {
    const a = await createWorkspace(api, { scopes: ['events:read', 'leads:write'] });
    const b = await createWorkspace(api, { scopes: ['events:read', 'leads:write'] });
    const leadA = await upsert(a, { phone: phone(), name: 'A' });
    await upsert(b, { phone: phone(), name: 'B' });
    const fromA = await eventually("A's event", async () => {
      const body = await page(a, 'order=asc');
      return body.data.length === 1 && body;
    });
    expect(fromA.data[0].payload.contact_id).toBe(leadA.id);
    // The cursor shows nothing of the outbox every tenant writes to (its sequence counts all of
    // their events), and opens only in the workspace it was given to.
    const start = fromA.pagination.nextCursor;
    const [{ seq: outboxSeq, micros }] = (
      await api.db.raw(
        `SELECT seq::text AS seq, (floor(extract(epoch FROM created_at) * 1000000))::bigint::text AS micros FROM outbox_events WHERE id = ?`,
        [fromA.data[0].id],
      )
    ).rows;
    expect(start).not.toContain(`${micros}_${outboxSeq}`);
    expect(start).not.toContain(micros);
    await eventually("B's event", async () => (await page(b, 'order=asc')).data.length === 1);
    expectError(await api.request('GET', `/api/v1/events?order=asc&cursor=${start}`, { key: b.key }), 400, 'VALIDATION');
    expect((await page(a, `order=asc&cursor=${start}`)).data).toEqual([]);
    expect(JSON.stringify((await page(b, 'limit=100')).data)).not.toContain(leadA.id);

    const noScope = await createKey(api, a.id, ['leads:read', 'webhooks:read']);
    expectError(await api.request('GET', '/api/v1/events', { key: noScope.key }), 403, 'INSUFFICIENT_SCOPE');
    expectError(await api.request('GET', '/api/v1/events?cursor=garbage', { key: a.key }), 400, 'VALIDATION');
    // A cursor of the former format (a plain position) is refused, as is one tampered with.
    expectError(await api.request('GET', `/api/v1/events?cursor=events_${micros}_${outboxSeq}`, { key: a.key }), 400, 'VALIDATION');
    expectError(await api.request('GET', `/api/v1/events?order=asc&cursor=events_-99999999999999999_0`, { key: a.key }), 400, 'VALIDATION');
    const tampered = `${start.slice(0, -2)}${start.endsWith('AA') ? 'BB' : 'AA'}`;
    expectError(await api.request('GET', `/api/v1/events?cursor=${tampered}`, { key: a.key }), 400, 'VALIDATION');
    expectError(await api.request('GET', '/api/v1/events?type=lead.exploded', { key: a.key }), 400, 'VALIDATION');
    expectError(await api.request('GET', '/api/v1/events?order=sideways', { key: a.key }), 400, 'VALIDATION');
    // The feed pages by cursor: an offset would return the first page again and again.
    expectError(await api.request('GET', '/api/v1/events?offset=100', { key: a.key }), 400, 'VALIDATION');
  });

  it('keeps events for the retention period and no longer', async () => {
    const ws = await createWorkspace(api, { scopes: ['events:read', 'leads:write'] });
    const old = await upsert(ws, { phone: phone(), name: 'Old' });
    const recent = await upsert(ws, { phone: phone(), name: 'Recent' });
    await settleOutbox(api, ws.id);
    const age = async (contactId: string, days: number) =>
      api.db.raw(
        `UPDATE outbox_events SET created_at = now() - make_interval(days => ?) WHERE workspace_id = ? AND payload->>'contact_id' = ?`,
        [days, ws.id, contactId],
      );
    // Another workspace's event as old: the pass is scoped to this test's workspace (other files'
    // rows are not this test's to delete), so it stays.
    const other = await createWorkspace(api, { scopes: ['events:read', 'leads:write'] });
    const elsewhere = await upsert(other, { phone: phone(), name: 'Elsewhere' });
    await settleOutbox(api, other.id);
    await api.db.raw(`UPDATE outbox_events SET created_at = now() - make_interval(days => 31) WHERE workspace_id = ?`, [other.id]);
    await age(old.id, 31);
    await age(recent.id, 29);
    await pruneRetention(api.db, 30, { workspaceId: ws.id });
    const left = await readAll(ws, 'order=asc');
    expect(left.events.map((e) => e.payload.contact_id)).toEqual([recent.id]);
    expect((await readAll(other, 'order=asc')).events.map((e) => e.payload.contact_id)).toEqual([elsewhere.id]);
  });
});

describe('merging contacts (panel)', () => {
  it("moves the duplicate's deals, tags and notes to the survivor, hides the duplicate and records contact.merged", async () => {
    const ws = await createWorkspace(api, { scopes: [...ALL_SCOPES] });
    const pipeline = await seedPipeline(api, ws.id, { name: 'Sales', stages: ['New'] });
    const survivor = await seedContact(api, ws.id, { phone: phone(), name: '' });
    const duplicate = await seedContact(api, ws.id, { phone: phone(), name: 'Maria Souza', email: 'maria@example.com', tags: [] });
    await api.request('POST', `/api/v1/leads/${duplicate.id}/tags`, { key: ws.key, body: { tag: 'VIP' } });
    const deal = (
      await api.request('POST', '/api/v1/deals', { key: ws.key, body: { contactId: duplicate.id, pipeline: pipeline.id, name: 'Deal' } })
    ).body.data;
    expect((await api.request('POST', `/api/v1/leads/${duplicate.id}/notes`, { key: ws.key, body: { body: 'Called' } })).status).toBe(201);
    const totalBefore = (await api.request('GET', '/api/v1/leads', { key: ws.key })).body.pagination.total;

    expectError(
      await api.admin('POST', `/admin/v1/workspaces/${ws.id}/contacts/${duplicate.id}/merge`, { intoId: duplicate.id }),
      400,
      'VALIDATION',
    );
    expectError(
      await api.admin('POST', `/admin/v1/workspaces/${ws.id}/contacts/${duplicate.id.toUpperCase()}/merge`, { intoId: duplicate.id }),
      400,
      'VALIDATION',
    );
    const other = await createWorkspace(api);
    const foreign = await seedContact(api, other.id, { phone: phone(), name: 'Elsewhere' });
    expectError(
      await api.admin('POST', `/admin/v1/workspaces/${ws.id}/contacts/${duplicate.id}/merge`, { intoId: foreign.id }),
      404,
      'CONTACT_NOT_FOUND',
    );

    const merged = await api.admin('POST', `/admin/v1/workspaces/${ws.id}/contacts/${duplicate.id}/merge`, { intoId: survivor.id });
    expect(merged.status).toBe(200);
    // The survivor keeps its phone, fills its empty name and e-mail, and gains the tag.
    expect(merged.body.data).toMatchObject({
      id: survivor.id,
      phone: survivor.phone,
      name: 'Maria Souza',
      email: 'maria@example.com',
      tags: [expect.objectContaining({ name: 'VIP' })],
    });

    expectError(await api.request('GET', `/api/v1/leads/${duplicate.id}`, { key: ws.key }), 404, 'CONTACT_NOT_FOUND');
    expect((await api.request('GET', '/api/v1/leads', { key: ws.key })).body.pagination.total).toBe(totalBefore - 1);
    expect((await api.request('GET', `/api/v1/deals/${deal.id}`, { key: ws.key })).body.data.contactId).toBe(survivor.id);
    expect(
      (await api.request('GET', `/api/v1/leads/${survivor.id}/notes`, { key: ws.key })).body.data.map((n: { body: string }) => n.body),
    ).toEqual(['Called']);
    expect((await api.request('GET', '/api/v1/leads?tag=VIP', { key: ws.key })).body.data.map((l: { id: string }) => l.id)).toEqual([
      survivor.id,
    ]);
    // Merging the same pair again: the duplicate is gone.
    expectError(
      await api.admin('POST', `/admin/v1/workspaces/${ws.id}/contacts/${duplicate.id}/merge`, { intoId: survivor.id }),
      404,
      'CONTACT_NOT_FOUND',
    );

    const events = await eventually('contact.merged in the feed', async () => {
      const r = await readAll(ws, 'order=asc&type=contact.merged');
      return r.events.length === 1 && r.events;
    });
    expect(events[0].payload).toMatchObject({
      contact_id: duplicate.id,
      contact_name: 'Maria Souza',
      phone: duplicate.phone,
      merged_into_id: survivor.id,
    });
  });
});
