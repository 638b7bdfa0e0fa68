/**
 * Batch upserts through the real stack: POST /api/v1/leads/batch and /api/v1/deals/batch answer
 * each item as its single call would, emit events and take quotas per record, hold at most one
 * chunk's locks at a time, and do a batch once per Idempotency-Key.
 */
import { Client, Connection } from '@temporalio/client';
import { ALL_SCOPES } from '../domain/access/scopes';
import { BATCH_CHUNK } from '../domain/platform/batch';
import { fingerprint, STORED_ANSWER_HOURS } from '../domain/platform/idempotency';
import { pruneRetention } from '../domain/maintenance/retention';
import { dataConverterFor } from '../domain/platform/temporal';
import {
  createKey,
  createWorkspace,
  eventually,
  expectError,
  outbox,
  Receiver,
  seedContact,
  seedPipeline,
  settleOutbox,
  startApi,
  startReceiver,
  TestApi,
  Workspace,
} from './helpers';
import { deliveredOnce } from './deliveries';
import { uniqueMobile } from './phones';

jest.setTimeout(60_000);

let api: TestApi;
let receiver: Receiver;
let ws: Workspace;
let connection: Connection;
let temporal: Client;

beforeAll(async () => {
  api = await startApi();
  receiver = await startReceiver();
  connection = await Connection.connect({ address: api.config.temporalAddress });
  temporal = new Client({ connection, namespace: api.config.temporalNamespace, dataConverter: dataConverterFor(api.config) });
  ws = await createWorkspace(api, { scopes: [...ALL_SCOPES] });
});
afterAll(async () => {
  await connection.close();
  await receiver.close();
  await api.close();
});

let seq = 0;
/** A distinct mobile per call: 55 + area 41 + 9 + 8 digits. */
const mobile = (): string => uniqueMobile('41');
const withoutNinth = (phone: string): string => phone.slice(0, 4) + phone.slice(5);
const unknownId = '3f1c2a9e-8b7d-4c6e-9a10-5d2b7e4f8c01';

const leadBatch = (leads: unknown[], options: { key?: string; idempotencyKey?: string } = {}) =>
  api.request('POST', '/api/v1/leads/batch', {
    key: options.key ?? ws.key,
    body: { leads },
    headers: options.idempotencyKey ? { 'idempotency-key': options.idempotencyKey } : {},
  });
const dealBatch = (w: Workspace, deals: unknown[], idempotencyKey?: string) =>
  api.request('POST', '/api/v1/deals/batch', {
    key: w.key,
    body: { deals },
    headers: idempotencyKey ? { 'idempotency-key': idempotencyKey } : {},
  });

/** Each item's `status` and, for a refusal, its code: what a client reads first. */
const outcomes = (body: { data: { index: number; status: number; error?: { code: string } }[] }) =>
  body.data.map((item) => (item.error ? `${item.index}:${item.status} ${item.error.code}` : `${item.index}:${item.status}`));

const contactsWithPhones = async (workspaceId: string, phones: string[]) =>
  api.db('contacts').where({ workspace_id: workspaceId }).whereIn('phone', phones).count<{ count: number }[]>('* as count').first();

describe('POST /api/v1/leads/batch', () => {
  it('answers every item as the single upsert would, in request order, and an invalid item fails alone', async () => {
    const [a, b, c] = [mobile(), mobile(), mobile()];
    const res = await leadBatch([
      { phone: a, name: 'Ana' },
      { phone: '11987654321' },
      { name: 'no phone' },
      { phone: b, email: 'not-an-email' },
      { phone: c, tags: ['Batch ok', unknownId] },
      { phone: `+${b.slice(0, 2)} (${b.slice(2, 4)}) ${b.slice(4, 9)}-${b.slice(9)}`, name: 'Bia', notes: 'second try, valid' },
      'not an object',
    ]);
    expect(res.status).toBe(200);
    expect(outcomes(res.body)).toEqual([
      '0:201',
      '1:400 INVALID_PHONE',
      '2:400 PHONE_REQUIRED',
      '3:400 VALIDATION',
      '4:404 NOT_FOUND',
      '5:201',
      '6:400 VALIDATION',
    ]);
    expect(res.body.data[0].data).toMatchObject({ name: 'Ana', phone: a, tags: [] });
    expect(res.body.data[5].data).toMatchObject({ name: 'Bia', phone: b, notes: 'second try, valid' });
    // The single call's errors, with their messages and hints.
    const single = await api.request('POST', '/api/v1/leads', { key: ws.key, body: { phone: '11987654321' } });
    expect(res.body.data[1].error).toEqual({ code: single.body.code, message: single.body.error, hint: single.body.hint });
    expect(res.body.data[3].error.message).toContain('body.leads.3.email');
    expect(res.body.data[4].error.message).toBe(`Tag "${unknownId}" not found`);
    expect(res.body.data[6].error.message).toContain('body.leads.6');
    // The refused items wrote nothing: no contact for c, no "Batch ok" tag.
    expect(await contactsWithPhones(ws.id, [a, b, c])).toEqual({ count: 2 });
    expect(await api.db('tags').where({ workspace_id: ws.id, name: 'Batch ok' }).first()).toBeUndefined();
  });

  it('makes one lead of a mobile given with and without its ninth digit: the first item creates it, the next update it', async () => {
    const phone = mobile();
    const known = mobile();
    await api.request('POST', '/api/v1/leads', { key: ws.key, body: { phone: known, name: 'Known', tags: ['Old'] } });
    const res = await leadBatch([
      { phone, name: 'Carla' },
      { phone: withoutNinth(phone), email: 'carla@example.com', tags: ['Repeat'] },
      { phone: withoutNinth(known), tags: ['Old', 'Repeat'] },
      { phone: Number(withoutNinth(phone)), notes: 'as a number', tags: ['Repeat'] },
    ]);
    expect(outcomes(res.body)).toEqual(['0:201', '1:200', '2:200', '3:200']);
    const ids = new Set([0, 1, 3].map((i) => res.body.data[i].data.id));
    expect(ids.size).toBe(1);
    expect(res.body.data[3].data).toMatchObject({
      name: 'Carla',
      phone,
      email: 'carla@example.com',
      notes: 'as a number',
      tags: [{ name: 'Repeat' }],
    });
    expect(res.body.data[2].data.tags.map((t: any) => t.name)).toEqual(['Old', 'Repeat']);
    const [id] = ids;
    expect((await outbox(api, ws.id, 'lead.created')).filter((e) => e.payload.contact_id === id)).toHaveLength(1);
    // Each update records what a single upsert would: the contact_updated trigger with its own
    // changed fields, a tag event only for a tag the lead did not have.
    expect(
      (await outbox(api, ws.id, 'contact_updated')).filter((e) => e.payload.contactId === id).map((e) => e.payload.changedFields),
    ).toEqual(['email,tags', 'notes']);
    expect(
      (await outbox(api, ws.id, 'contact.tag_added')).filter((e) => e.payload.contact_id === id).map((e) => e.payload.tag.name),
    ).toEqual(['Repeat']);
    const knownId = res.body.data[2].data.id;
    expect(
      (await outbox(api, ws.id, 'contact.tag_added')).filter((e) => e.payload.contact_id === knownId).map((e) => e.payload.tag.name),
    ).toEqual(['Old', 'Repeat']);
  });

  it('creates a new tag once for all the items that name it, and records contact.tag_added per lead', async () => {
    const tag = `Fair ${process.pid}-${++seq}`;
    const phones = [mobile(), mobile(), mobile()];
    const res = await leadBatch(phones.map((phone, i) => ({ phone, tags: [i === 1 ? tag.toUpperCase() : tag] })));
    expect(outcomes(res.body)).toEqual(['0:201', '1:201', '2:201']);
    const tags = await api.db('tags').where({ workspace_id: ws.id }).whereRaw('lower(name) = lower(?)', [tag]).select('id', 'name');
    expect(tags).toEqual([{ id: expect.any(String), name: tag }]);
    for (const item of res.body.data) expect(item.data.tags).toEqual([{ id: tags[0].id, name: tag, color: '#6b7280' }]);
    const added = (await outbox(api, ws.id, 'contact.tag_added')).filter((e) => e.payload.tag.id === tags[0].id);
    expect(added.map((e) => e.payload.contact_id).sort()).toEqual(res.body.data.map((item: any) => item.data.id).sort());
    expect(added.every((e) => e.payload.source === 'api')).toBe(true);
  });

  it('delivers one lead.created webhook per new lead', async () => {
    const w = await createWorkspace(api, { scopes: [...ALL_SCOPES] });
    const path = `/ok/batch-leads-${process.pid}-${++seq}`;
    expect(
      (await api.request('POST', '/api/v1/webhooks', { key: w.key, body: { url: `${receiver.url}${path}`, events: ['lead.created'] } }))
        .status,
    ).toBe(201);
    const phones = [mobile(), mobile(), mobile()];
    const res = await leadBatch([...phones.map((phone) => ({ phone })), { phone: phones[0], name: 'again' }], { key: w.key });
    expect(outcomes(res.body)).toEqual(['0:201', '1:201', '2:201', '3:200']);
    // One event per new lead (none for the repeat), each delivered once.
    expect((await outbox(api, w.id, 'lead.created')).map((e) => e.payload.contact_id).sort()).toEqual(
      res.body.data
        .slice(0, 3)
        .map((item: any) => item.data.id)
        .sort(),
    );
    const { requests } = await deliveredOnce(api, temporal, receiver, w.id, path);
    expect(requests.map((d) => d.json.phone).sort()).toEqual([...phones].sort());
  });

  it('refuses a malformed envelope as a whole with 400 VALIDATION: not an object, no array, 0 or 101 items', async () => {
    const raw = (body: unknown) => api.request('POST', '/api/v1/leads/batch', { key: ws.key, body });
    for (const body of [
      [{ phone: mobile() }],
      {},
      { leads: {} },
      { leads: [] },
      { leads: Array.from({ length: 101 }, () => ({ phone: mobile() })) },
    ]) {
      const res = await raw(body);
      expectError(res, 400, 'VALIDATION');
      expect(res.body.error).toMatch(/^Invalid body/);
    }
    expect((await raw({ leads: Array.from({ length: 100 }, () => ({ phone: mobile() })) })).status).toBe(200);
  });

  it("takes the single upsert's scope: leads:write, 403 INSUFFICIENT_SCOPE without it", async () => {
    const readOnly = await createKey(api, ws.id, ['leads:read']);
    expectError(await leadBatch([{ phone: mobile() }], { key: readOnly.key }), 403, 'INSUFFICIENT_SCOPE');
    const writer = await createKey(api, ws.id, ['leads:write']);
    expect((await leadBatch([{ phone: mobile() }], { key: writer.key })).status).toBe(200);
  });

  it('answers a method the path does not take with 405 and Allow: POST (the path is not a lead id)', async () => {
    for (const method of ['GET', 'PATCH', 'DELETE']) {
      const res = await api.request(method, '/api/v1/leads/batch', { key: ws.key, body: method === 'GET' ? undefined : {} });
      expectError(res, 405, 'METHOD_NOT_ALLOWED');
      expect(res.headers.get('allow')).toBe('POST');
    }
  });
});

describe('bounded work per transaction', () => {
  it(`commits every ${BATCH_CHUNK} items: while a later chunk waits on a lock, the earlier leads are visible and their phones free`, async () => {
    const w = await createWorkspace(api, { scopes: [...ALL_SCOPES] });
    const held = mobile();
    const heldLead = (await leadBatch([{ phone: held, name: 'held' }], { key: w.key })).body.data[0].data;
    const first = Array.from({ length: BATCH_CHUNK }, () => mobile());
    const later = [held, mobile()];
    // Another writer holds the lead of the second chunk.
    const blocker = await api.db.transaction();
    try {
      await blocker('contacts').where({ id: heldLead.id }).forUpdate().first();
      let answered = false;
      const batch = leadBatch(
        [...first, ...later].map((phone) => ({ phone, name: 'from the batch' })),
        { key: w.key },
      ).then((res) => {
        answered = true;
        return res;
      });
      await eventually('the first chunk to commit', async () => Number((await contactsWithPhones(w.id, first))?.count) === BATCH_CHUNK);
      expect(answered).toBe(false);
      const listed = await api.request('GET', `/api/v1/leads?q=from the batch&limit=100`, { key: w.key });
      expect(listed.body.pagination.total).toBe(BATCH_CHUNK);
      // A single upsert of a phone of the committed chunk is not held up by the waiting batch: it is
      // answered while the batch still waits, and never waits on a lock of the blocker or the batch
      // (pg_blocking_pids), which only the commit below would release.
      const [{ pid: blockerPid }] = (await blocker.raw('SELECT pg_backend_pid() AS pid')).rows;
      const heldUpBehind = async (): Promise<number> =>
        (
          await api.db.raw(
            `WITH batch AS (SELECT pid FROM pg_stat_activity WHERE ?::int = ANY(pg_blocking_pids(pid)))
             SELECT count(*)::int AS n FROM pg_stat_activity
              WHERE pid NOT IN (SELECT pid FROM batch) AND pg_blocking_pids(pid) && (ARRAY(SELECT pid FROM batch) || ?::int)`,
            [blockerPid, blockerPid],
          )
        ).rows[0].n;
      let singleAnswered = false;
      const single = api
        .request('POST', '/api/v1/leads', { key: w.key, body: { phone: first[3], name: 'updated meanwhile' } })
        .finally(() => (singleAnswered = true));
      let heldUp = false;
      while (!singleAnswered && !heldUp) heldUp = (await heldUpBehind()) > 0;
      expect({ heldUp, answered }).toEqual({ heldUp: false, answered: false });
      expect((await single).status).toBe(200);
      await blocker.commit();
      const res = await batch;
      expect(outcomes(res.body)).toEqual([...first.map((_, i) => `${i}:201`), `${BATCH_CHUNK}:200`, `${BATCH_CHUNK + 1}:201`]);
    } finally {
      if (!blocker.isCompleted()) await blocker.rollback();
    }
  });
});

describe('concurrent batches', () => {
  it('over the same leads in opposite orders, both answer every item', async () => {
    const w = await createWorkspace(api, { scopes: [...ALL_SCOPES] });
    // One chunk each, the same leads: in request order their locks would cross.
    const phones = Array.from({ length: BATCH_CHUNK }, () => mobile());
    expect(
      outcomes(
        (
          await leadBatch(
            phones.map((phone) => ({ phone })),
            { key: w.key },
          )
        ).body,
      ).every((o) => o.endsWith(':201')),
    ).toBe(true);
    const forward = phones.map((phone, i) => ({ phone, name: `forward ${i}`, tags: ['Up', 'Down'] }));
    const backward = [...phones].reverse().map((phone, i) => ({ phone, notes: `backward ${i}`, tags: ['Down', 'Up'] }));
    const [a, b] = await Promise.all([leadBatch(forward, { key: w.key }), leadBatch(backward, { key: w.key })]);
    expect([a.status, b.status]).toEqual([200, 200]);
    expect([...outcomes(a.body), ...outcomes(b.body)].every((o) => o.endsWith(':200'))).toBe(true);
    const leads = await api.db('contacts').where({ workspace_id: w.id }).whereIn('phone', phones).select('name', 'notes');
    expect(leads.every((l) => l.name.startsWith('forward') && l.notes.startsWith('backward'))).toBe(true);
  });
});

describe('POST /api/v1/deals/batch', () => {
  let w: Workspace;
  let pipeline: Awaited<ReturnType<typeof seedPipeline>>;
  let contact: { id: string };

  beforeAll(async () => {
    w = await createWorkspace(api, { scopes: [...ALL_SCOPES] });
    pipeline = await seedPipeline(api, w.id, { name: 'Sales', stages: ['New', 'Qualified', 'Won'] });
    contact = await seedContact(api, w.id, { phone: mobile(), name: 'Dora' });
  });

  const createOne = async (name: string) => {
    const res = await api.request('POST', '/api/v1/deals', { key: w.key, body: { contactId: contact.id, pipeline: pipeline.id, name } });
    expect(res.status).toBe(201);
    return res.body.data as { id: string };
  };

  it('creates and changes deals in one batch, each answered and evented as its single call', async () => {
    const [moved, won, untouched] = [await createOne('to move'), await createOne('to win'), await createOne('same stage')];
    // Their card.created events reach only the subscriptions of their dispatch: let them go first.
    await settleOutbox(api, w.id);
    const path = `/ok/batch-deals-${process.pid}-${++seq}`;
    expect(
      (
        await api.request('POST', '/api/v1/webhooks', {
          key: w.key,
          body: { url: `${receiver.url}${path}`, events: ['card.created', 'card.moved', 'card.won'] },
        })
      ).status,
    ).toBe(201);
    const res = await dealBatch(w, [
      { contactId: contact.id, pipeline: 'sales', name: 'new one', value: 100 },
      { id: moved.id, stageId: pipeline.stages[1].id },
      { id: won.id, status: 'won', value: 900 },
      { id: untouched.id, stageId: pipeline.stages[0].id },
      { id: won.id, status: 'lost' },
      { contactId: contact.id, pipeline: 'No such pipeline' },
      { id: unknownId, name: 'x' },
      { id: 'not-a-uuid', name: 'x' },
    ]);
    expect(res.status).toBe(200);
    expect(outcomes(res.body)).toEqual([
      '0:201',
      '1:200',
      '2:200',
      '3:200',
      '4:400 VALIDATION',
      '5:404 PIPELINE_NOT_FOUND',
      '6:404 NOT_FOUND',
      '7:404 NOT_FOUND',
    ]);
    expect(res.body.data[0].data).toMatchObject({ name: 'new one', value: 100, stageId: pipeline.stages[0].id, status: 'open' });
    expect(res.body.data[1].data.stageId).toBe(pipeline.stages[1].id);
    expect(res.body.data[2].data).toMatchObject({ status: 'won', value: 900, closedAt: expect.any(String) });
    expect(res.body.data[4].error.message).toContain('body.deals.4.lostReason');

    // One webhook per record: the create, the move, the win; nothing for the deal already in its stage.
    const { requests } = await deliveredOnce(api, temporal, receiver, w.id, path);
    const events = requests.map((d) => `${d.json.event} ${d.json.card_id}`).sort();
    expect(events).toEqual([`card.created ${res.body.data[0].data.id}`, `card.moved ${moved.id}`, `card.won ${won.id}`].sort());
    const activities = await api.request('GET', `/api/v1/deals/${moved.id}/activities`, { key: w.key });
    expect(activities.body.data.map((a: any) => a.type)).toEqual(['stage_changed']);
  });

  it('takes the deal quota per created deal: the creates past it answer 402 DEAL_LIMIT_REACHED, the changes still apply', async () => {
    const limited = await createWorkspace(api, { scopes: [...ALL_SCOPES], plan: { dealLimit: 2 } });
    await seedPipeline(api, limited.id, { name: 'Sales', stages: ['New', 'Won'] });
    const owner = await seedContact(api, limited.id, { phone: mobile() });
    const [existing] = (await dealBatch(limited, [{ contactId: owner.id, pipeline: 'Sales' }])).body.data;
    const res = await dealBatch(limited, [
      { contactId: owner.id, pipeline: 'Sales', name: 'fits' },
      { contactId: owner.id, pipeline: 'Sales', name: 'over' },
      { id: existing.data.id, status: 'won' },
      { contactId: owner.id, pipeline: 'Sales', name: 'over too' },
    ]);
    expect(outcomes(res.body)).toEqual(['0:201', '1:402 DEAL_LIMIT_REACHED', '2:200', '3:402 DEAL_LIMIT_REACHED']);
    expect(res.body.data[1].error).toMatchObject({
      message: 'The plan allows 2 deals',
      hint: 'Existing deals stay readable; upgrade the plan to create more.',
    });
    expect((await api.request('GET', '/api/v1/deals', { key: limited.key })).body.pagination.total).toBe(2);
  });

  it("answers another workspace's deal and contact per item as not found, and changes nothing there", async () => {
    const other = await createWorkspace(api, { scopes: [...ALL_SCOPES] });
    await seedPipeline(api, other.id, { name: 'Sales', stages: ['New', 'Won'] });
    const theirs = await seedContact(api, other.id, { phone: mobile(), name: 'Theirs' });
    const theirDeal = (await dealBatch(other, [{ contactId: theirs.id, pipeline: 'Sales', name: 'their deal' }])).body.data[0].data;
    const before = (await api.request('GET', `/api/v1/deals/${theirDeal.id}`, { key: other.key })).body.data;
    const res = await dealBatch(w, [
      { id: theirDeal.id, status: 'won', name: 'hijacked' },
      { contactId: theirs.id, pipeline: pipeline.id },
      { contactId: contact.id, pipeline: pipeline.id, name: 'mine' },
    ]);
    expect(outcomes(res.body)).toEqual(['0:404 NOT_FOUND', '1:404 CONTACT_NOT_FOUND', '2:201']);
    expect(res.text).not.toContain(theirs.id);
    expect(res.text).not.toContain(theirDeal.id);
    expect((await api.request('GET', `/api/v1/deals/${theirDeal.id}`, { key: other.key })).body.data).toEqual(before);
    expect((await api.request('GET', '/api/v1/deals', { key: other.key })).body.pagination.total).toBe(1);
  });

  it("takes the single calls' scope: deals:write, 403 INSUFFICIENT_SCOPE without it", async () => {
    const reader = await createKey(api, w.id, ['deals:read', 'leads:write']);
    expectError(await dealBatch({ ...w, key: reader.key }, [{ contactId: contact.id, pipeline: 'Sales' }]), 403, 'INSUFFICIENT_SCOPE');
    const writer = await createKey(api, w.id, ['deals:write']);
    expect((await dealBatch({ ...w, key: writer.key }, [{ contactId: contact.id, pipeline: 'Sales' }])).status).toBe(200);
  });
});

describe('Idempotency-Key on a batch', () => {
  it('replays the first answer with Idempotent-Replayed: true and writes nothing twice', async () => {
    const key = `leads-${process.pid}-${++seq}`;
    const phones = [mobile(), mobile()];
    const body = [{ phone: phones[0], name: 'Once', tags: ['Replayed'] }, { phone: phones[1] }, { phone: 'bad' }];
    const first = await leadBatch(body, { idempotencyKey: key });
    expect(first.status).toBe(200);
    expect(first.headers.get('idempotency-key')).toBe(key);
    expect(first.headers.get('idempotent-replayed')).toBeNull();
    const events = (await outbox(api, ws.id)).length;
    const again = await leadBatch(body, { idempotencyKey: key });
    expect(again.status).toBe(200);
    expect(again.headers.get('idempotent-replayed')).toBe('true');
    expect(again.text).toBe(first.text);
    expect((await outbox(api, ws.id)).length).toBe(events);
    // The same key on another body or another endpoint is refused.
    expectError(await leadBatch([{ phone: phones[0], name: 'Twice' }], { idempotencyKey: key }), 422, 'IDEMPOTENCY_KEY_REUSED');
    const d = await api.request('POST', '/api/v1/deals/batch', {
      key: ws.key,
      body: { deals: [{ contactId: unknownId, pipeline: 'x' }] },
      headers: { 'idempotency-key': key },
    });
    expectError(d, 422, 'IDEMPOTENCY_KEY_REUSED');
    // A key over 255 characters is the header's 400, an empty one too (it is not a missing key).
    for (const bad of [`k${'x'.repeat(255)}`, '']) {
      const malformed = await api.request('POST', '/api/v1/leads/batch', {
        key: ws.key,
        body: { leads: body },
        headers: { 'idempotency-key': bad },
      });
      expectError(malformed, 400, 'VALIDATION');
      expect(malformed.body.error).toContain('Idempotency-Key');
    }
  });

  it('lets exactly one of concurrent duplicates do the work; the others answer 409 IN_PROGRESS or the replay', async () => {
    const key = `concurrent-${process.pid}-${++seq}`;
    const phones = Array.from({ length: 60 }, () => mobile());
    const body = phones.map((phone) => ({ phone, tags: ['Concurrent'] }));
    const answers = await Promise.all(Array.from({ length: 6 }, () => leadBatch(body, { idempotencyKey: key })));
    const worked = answers.filter((r) => r.status === 200 && r.headers.get('idempotent-replayed') === null);
    expect(worked).toHaveLength(1);
    for (const res of answers.filter((r) => r !== worked[0])) {
      if (res.status === 409) expectError(res, 409, 'IN_PROGRESS');
      else
        expect({ status: res.status, replayed: res.headers.get('idempotent-replayed'), same: res.text === worked[0].text }).toEqual({
          status: 200,
          replayed: 'true',
          same: true,
        });
    }
    expect(await contactsWithPhones(ws.id, phones)).toEqual({ count: phones.length });
    const ids = new Set(worked[0].body.data.map((item: any) => item.data.id));
    expect((await outbox(api, ws.id, 'lead.created')).filter((e) => ids.has(e.payload.contact_id))).toHaveLength(phones.length);
  });

  it('lets a repeat take over a claim whose request died, keeping the items that request committed', async () => {
    const key = `dead-${process.pid}-${++seq}`;
    const phones = [mobile(), mobile()];
    const body = phones.map((phone) => ({ phone, name: 'resumed' }));
    // What a request that died after committing its first item left: its claim, and that item's answer.
    const committed = { index: 0, status: 201, data: { id: 'committed before the crash' } };
    const hash = fingerprint('upsertLeadBatch', body);
    const [row] = await api
      .db('idempotent_requests')
      .insert({
        workspace_id: ws.id,
        key,
        operation: 'upsertLeadBatch',
        request_hash: hash,
        claim: unknownId,
        results: [JSON.stringify(committed)],
        locked_until: api.db.raw(`now() + interval '1 hour'`),
      })
      .returning('id');
    // Its lease still runs: the request may be alive.
    expectError(await leadBatch(body, { idempotencyKey: key }), 409, 'IN_PROGRESS');
    await api
      .db('idempotent_requests')
      .where({ id: row.id })
      .update({ locked_until: api.db.raw(`now() - interval '1 second'`) });
    const res = await leadBatch(body, { idempotencyKey: key });
    expect(res.status).toBe(200);
    expect(res.body.data[0]).toEqual(committed);
    expect(res.body.data[1]).toMatchObject({ index: 1, status: 201, data: { phone: phones[1], name: 'resumed' } });
    expect(await contactsWithPhones(ws.id, phones)).toEqual({ count: 1 });
    expect((await leadBatch(body, { idempotencyKey: key })).text).toBe(res.text);
  });

  it(`forgets an answer after ${STORED_ANSWER_HOURS} hours: the key is free again and the retention job removes it`, async () => {
    const key = `old-${process.pid}-${++seq}`;
    const phone = mobile();
    expect((await leadBatch([{ phone }], { idempotencyKey: key })).status).toBe(200);
    const stored = () => api.db('idempotent_requests').where({ workspace_id: ws.id, key });
    await stored().update({ created_at: api.db.raw(`now() - make_interval(hours => ?)`, [STORED_ANSWER_HOURS + 1]) });
    const reused = await leadBatch([{ phone: mobile() }], { idempotencyKey: key });
    expect({ status: reused.status, replayed: reused.headers.get('idempotent-replayed') }).toEqual({ status: 200, replayed: null });

    // Retention: a finished answer past the window goes; a recent one, and an old claim whose request still runs, stay.
    const other = `running-${process.pid}-${++seq}`;
    await api.db('idempotent_requests').insert({
      workspace_id: ws.id,
      key: other,
      operation: 'upsertLeadBatch',
      request_hash: 'x',
      claim: unknownId,
      locked_until: api.db.raw(`now() + interval '1 minute'`),
      created_at: api.db.raw(`now() - interval '2 days'`),
    });
    await stored().update({ created_at: api.db.raw(`now() - interval '2 days'`) });
    const recent = `recent-${process.pid}-${++seq}`;
    expect((await leadBatch([{ phone: mobile() }], { idempotencyKey: recent })).status).toBe(200);
    await pruneRetention(api.db, 30, { workspaceId: ws.id });
    const left = await api.db('idempotent_requests').where({ workspace_id: ws.id }).whereIn('key', [key, other, recent]).pluck('key');
    expect(left.sort()).toEqual([other, recent].sort());
  });

  it('works the same on the deal batch', async () => {
    const w = await createWorkspace(api, { scopes: [...ALL_SCOPES] });
    await seedPipeline(api, w.id, { name: 'Sales', stages: ['New'] });
    const owner = await seedContact(api, w.id, { phone: mobile() });
    const key = `deals-${process.pid}-${++seq}`;
    const body = [{ contactId: owner.id, pipeline: 'Sales', name: 'once' }];
    const first = await dealBatch(w, body, key);
    const again = await dealBatch(w, body, key);
    expect(outcomes(first.body)).toEqual(['0:201']);
    expect({ replayed: again.headers.get('idempotent-replayed'), same: again.text === first.text }).toEqual({
      replayed: 'true',
      same: true,
    });
    expect((await api.request('GET', '/api/v1/deals', { key: w.key })).body.pagination.total).toBe(1);
  });
});
