import {
  countQueries,
  createWorkspace,
  expectError,
  outbox,
  seedContact,
  seedMember,
  seedPipeline,
  startApi,
  TestApi,
  Workspace,
} from './helpers';
import { uniqueMobile } from './phones';

let api: TestApi;
let ws: Workspace;
let pipeline: Awaited<ReturnType<typeof seedPipeline>>;
let contact: { id: string; name: string; phone: string };
const newPhone = (): string => uniqueMobile('21');

beforeAll(async () => {
  api = await startApi();
  ws = await createWorkspace(api, { scopes: ['deals:read', 'deals:write', 'activities:read', 'leads:read'] });
  pipeline = await seedPipeline(api, ws.id, {
    name: 'Sales',
    stages: ['New', 'Qualified', 'Proposal'],
    customFields: [{ key: 'budget', label: 'Budget', type: 'number' }],
  });
  await api.db('custom_fields').insert({ workspace_id: ws.id, pipeline_id: null, key: 'origin', label: 'Origin', type: 'text' });
  contact = await seedContact(api, ws.id, { phone: newPhone(), name: 'Maria Souza' });
});
afterAll(() => api.close());

const create = (body: Record<string, unknown>, key = ws.key) => api.request('POST', '/api/v1/deals', { key, body });
const patch = (id: string, body: Record<string, unknown>) => api.request('PATCH', `/api/v1/deals/${id}`, { key: ws.key, body });

describe('POST /api/v1/deals', () => {
  it('creates an open deal in the first stage, named after the contact, source api, and records card.created and card_created', async () => {
    const res = await create({ contactId: contact.id, pipeline: 'sales' });
    expect(res.status).toBe(201);
    const deal = res.body.data;
    expect(deal).toMatchObject({
      name: 'Maria Souza',
      status: 'open',
      lostReason: null,
      closedAt: null,
      value: null,
      pipelineId: pipeline.id,
      stageId: pipeline.stages[0].id,
      contactId: contact.id,
      productId: null,
      source: 'api',
      assignedTo: null,
      customValues: {},
    });
    expect(deal.createdAt).toMatch(/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/);
    const [event] = (await outbox(api, ws.id, 'card.created')).filter((e) => e.payload.card_id === deal.id);
    expect(event.payload).toEqual({
      event: 'card.created',
      workspace_id: ws.id,
      timestamp: expect.stringMatching(/Z$/),
      card_id: deal.id,
      stage_id: pipeline.stages[0].id,
      pipeline_id: pipeline.id,
      contact_id: contact.id,
      name: 'Maria Souza',
    });
    const [trigger] = (await outbox(api, ws.id, 'card_created')).filter((e) => e.payload.dealId === deal.id);
    expect(trigger).toMatchObject({
      kind: 'trigger',
      payload: { trigger: 'card_created', pipelineId: pipeline.id, contactId: contact.id },
    });
  });

  it('resolves stage, product and assignee by name and keeps only defined custom fields', async () => {
    const member = await seedMember(api, ws.id, 'Ana Lima');
    const res = await create({
      contactId: contact.id,
      pipeline: pipeline.id,
      stage: 'PROPOSAL',
      name: 'Big deal',
      value: 1500.5,
      product: 'Consulting Pack',
      assignedTo: 'ana lima',
      source: 'landing-page',
      customValues: { budget: 2000, origin: 'ads', unknownKey: 'dropped', tagsList: ['a'] },
    });
    expect(res.status).toBe(201);
    expect(res.body.data).toMatchObject({
      stageId: pipeline.stages[2].id,
      name: 'Big deal',
      value: 1500.5,
      source: 'landing-page',
      assignedTo: { id: member.id, name: 'Ana Lima' },
      customValues: { budget: 2000, origin: 'ads' },
    });
    const product = await api.db('products').where({ workspace_id: ws.id, id: res.body.data.productId }).first();
    expect(product.name).toBe('Consulting Pack');
    // The same name again reuses the product.
    const again = await create({ contactId: contact.id, pipeline: 'Sales', product: 'consulting pack' });
    expect(again.body.data.productId).toBe(product.id);
  });

  it('defaults the name to the phone when the contact has no name', async () => {
    const nameless = await seedContact(api, ws.id, { phone: newPhone() });
    const res = await create({ contactId: nameless.id, pipeline: 'Sales' });
    expect(res.body.data.name).toBe(nameless.phone);
  });

  it('answers each documented error code', async () => {
    expectError(await create({ pipeline: 'Sales' }), 400, 'VALIDATION');
    const nested = await create({ contactId: contact.id, pipeline: 'Sales', customValues: { budget: { nested: true } } });
    expectError(nested, 400, 'VALIDATION');
    expect(nested.body.error).toContain('body.customValues.budget');
    expectError(await create({ contactId: contact.id, pipeline: 'Sales', value: -1 }), 400, 'VALIDATION');
    expectError(await create({ contactId: contact.id, pipeline: 'Sales', name: 'x'.repeat(201) }), 400, 'VALIDATION');
    expectError(await create({ contactId: contact.id, pipeline: 'Sales', source: 's'.repeat(65) }), 400, 'VALIDATION');
    expectError(await create({ contactId: '00000000-0000-4000-8000-000000000000', pipeline: 'Sales' }), 404, 'CONTACT_NOT_FOUND');
    expectError(await create({ contactId: 'not-an-id', pipeline: 'Sales' }), 404, 'CONTACT_NOT_FOUND');
    expectError(await create({ contactId: contact.id, pipeline: 'Nope' }), 404, 'PIPELINE_NOT_FOUND');
    expectError(await create({ contactId: contact.id, pipeline: 'Sales', stage: 'Nope' }), 404, 'STAGE_NOT_FOUND');
    await seedPipeline(api, ws.id, { name: 'Empty' });
    expectError(await create({ contactId: contact.id, pipeline: 'empty' }), 422, 'PIPELINE_EMPTY');
    expectError(await create({ contactId: contact.id, pipeline: 'Sales', assignedTo: 'Nobody' }), 400, 'ASSIGNEE_NOT_FOUND');

    const deleted = await seedContact(api, ws.id, { phone: newPhone() });
    await api.db('contacts').where({ id: deleted.id }).update({ deleted_at: new Date() });
    expectError(await create({ contactId: deleted.id, pipeline: 'Sales' }), 404, 'CONTACT_NOT_FOUND');

    const readOnly = await createWorkspace(api, { scopes: ['deals:read'] });
    expectError(await create({ contactId: contact.id, pipeline: 'Sales' }, readOnly.key), 403, 'INSUFFICIENT_SCOPE');
  });

  it('stops at the plan quota with 402 DEAL_LIMIT_REACHED while existing deals stay readable', async () => {
    const small = await createWorkspace(api, { scopes: ['deals:read', 'deals:write'], plan: { dealLimit: 2 } });
    await seedPipeline(api, small.id, { name: 'P', stages: ['S'] });
    const c = await seedContact(api, small.id, { phone: newPhone() });
    const results = await Promise.all(
      Array.from({ length: 5 }, () => api.request('POST', '/api/v1/deals', { key: small.key, body: { contactId: c.id, pipeline: 'P' } })),
    );
    expect(results.filter((r) => r.status === 201)).toHaveLength(2);
    for (const r of results.filter((r) => r.status !== 201)) expectError(r, 402, 'DEAL_LIMIT_REACHED');
    const list = await api.request('GET', '/api/v1/deals', { key: small.key });
    expect(list.body.pagination.total).toBe(2);
  });
});

describe('PATCH /api/v1/deals/{id}', () => {
  let dealId: string;
  beforeEach(async () => {
    dealId = (await create({ contactId: contact.id, pipeline: 'Sales', value: 900, name: 'Patch me' })).body.data.id;
  });

  it('marks a deal won: closedAt set, card.won with value as a number and closed_at, deal_won fired', async () => {
    const res = await patch(dealId, { status: 'won' });
    expect(res.status).toBe(200);
    expect(res.body.data).toMatchObject({ id: dealId, status: 'won', lostReason: null });
    expect(res.body.data.closedAt).toMatch(/\.\d{3}Z$/);
    const events = (await outbox(api, ws.id, 'card.won')).filter((e) => e.payload.card_id === dealId);
    expect(events.map((e) => e.payload)).toEqual([
      {
        event: 'card.won',
        workspace_id: ws.id,
        timestamp: expect.any(String),
        card_id: dealId,
        stage_id: pipeline.stages[0].id,
        pipeline_id: pipeline.id,
        contact_id: contact.id,
        name: 'Patch me',
        value: 900,
        closed_at: res.body.data.closedAt,
      },
    ]);
    expect((await outbox(api, ws.id, 'deal_won')).filter((e) => e.payload.dealId === dealId)).toHaveLength(1);
  });

  it('needs lostReason for lost, records card.lost with lost_reason, and reopening clears closedAt', async () => {
    const missing = await patch(dealId, { status: 'lost' });
    expectError(missing, 400, 'VALIDATION');
    expect(missing.body.error).toContain('body.lostReason');
    const lost = await patch(dealId, { status: 'lost', lostReason: 'Too expensive' });
    expect(lost.body.data).toMatchObject({ status: 'lost', lostReason: 'Too expensive' });
    const [event] = (await outbox(api, ws.id, 'card.lost')).filter((e) => e.payload.card_id === dealId);
    expect(event.payload).toMatchObject({
      lost_reason: 'Too expensive',
      closed_at: lost.body.data.closedAt,
      stage_id: pipeline.stages[0].id,
    });
    expect(Object.keys(event.payload).sort()).toEqual(
      ['event', 'workspace_id', 'timestamp', 'card_id', 'stage_id', 'pipeline_id', 'contact_id', 'name', 'lost_reason', 'closed_at'].sort(),
    );
    expect((await outbox(api, ws.id, 'deal_lost')).filter((e) => e.payload.dealId === dealId)).toHaveLength(1);

    const reopened = await patch(dealId, { status: 'open' });
    expect(reopened.body.data).toMatchObject({ status: 'open', closedAt: null, lostReason: null });
    // won straight from lost is allowed ("any" source state)
    await patch(dealId, { status: 'lost', lostReason: 'again' });
    expect((await patch(dealId, { status: 'won' })).body.data.status).toBe('won');
    expectError(await patch(dealId, { lostReason: 'only a reason' }), 400, 'VALIDATION');
  });

  it('moves stages: history activity with from/to by name, card.moved and stage_changed', async () => {
    const res = await patch(dealId, { stageId: pipeline.stages[1].id });
    expect(res.body.data.stageId).toBe(pipeline.stages[1].id);
    const [moved] = (await outbox(api, ws.id, 'card.moved')).filter((e) => e.payload.card_id === dealId);
    expect(moved.payload).toEqual({
      event: 'card.moved',
      workspace_id: ws.id,
      timestamp: expect.any(String),
      card_id: dealId,
      from_stage_id: pipeline.stages[0].id,
      to_stage_id: pipeline.stages[1].id,
      contact_id: contact.id,
      name: 'Patch me',
    });
    expect((await outbox(api, ws.id, 'stage_changed')).filter((e) => e.payload.dealId === dealId)).toHaveLength(1);
    const activities = await api.request('GET', `/api/v1/deals/${dealId}/activities`, { key: ws.key });
    expect(activities.status).toBe(200);
    expect(activities.body.data).toEqual([
      {
        id: expect.any(String),
        type: 'stage_changed',
        actorName: 'test key',
        meta: { from: 'New', to: 'Qualified' },
        createdAt: expect.any(String),
      },
    ]);
    expect(activities.body.pagination).toEqual({ total: 1, limit: 25, offset: 0, hasMore: false });
  });

  it('moves to a stage named by its id in capitals, recording card.moved before stage_changed', async () => {
    const deal = (await create({ contactId: contact.id, pipeline: 'sales' })).body.data;
    const res = await patch(deal.id, { stageId: pipeline.stages[2].id.toUpperCase() });
    expect(res.status).toBe(200);
    expect(res.body.data.stageId).toBe(pipeline.stages[2].id);
    const records = await api
      .db('outbox_events')
      .where({ workspace_id: ws.id })
      .whereIn('name', ['card.moved', 'stage_changed'])
      .whereRaw(`coalesce(payload->>'card_id', payload->>'dealId') = ?`, [deal.id])
      .orderBy('seq')
      .select('name', 'payload');
    expect(records.map((r: { name: string }) => r.name)).toEqual(['card.moved', 'stage_changed']);
    expect(records[0].payload).toMatchObject({ from_stage_id: pipeline.stages[0].id, to_stage_id: pipeline.stages[2].id });
  });

  it('changes nothing and records nothing for the current stage named in capitals', async () => {
    const before = (await api.request('GET', `/api/v1/deals/${dealId}`, { key: ws.key })).body.data;
    const res = await patch(dealId, { stageId: pipeline.stages[0].id.toUpperCase() });
    expect(res.status).toBe(200);
    expect(res.body.data).toEqual(before);
    expect((await outbox(api, ws.id, 'card.moved')).filter((e) => e.payload.card_id === dealId)).toHaveLength(0);
    expect(await api.db('deal_activities').where({ deal_id: dealId }).count('* as n').first()).toEqual({ n: 0 });
  });

  it('writes a stage move in four statements and a move that also wins in five, each record as the answer shows the deal', async () => {
    // Begin, the deal locked with both stages, one write with its history and records, commit.
    let moved: any;
    expect(await countQueries(api, async () => (moved = await patch(dealId, { stageId: pipeline.stages[1].id })))).toBe(4);
    expect(moved.body.data.stageId).toBe(pipeline.stages[1].id);
    // card.won reads what PostgreSQL wrote: closedAt, and the value as numeric(14, 2) keeps it.
    let won: any;
    expect(
      await countQueries(api, async () => (won = await patch(dealId, { stageId: pipeline.stages[2].id, status: 'won', value: 10.005 }))),
    ).toBe(5);
    expect(won.body.data).toMatchObject({ stageId: pipeline.stages[2].id, status: 'won', value: 10.01 });
    const records = await api
      .db('outbox_events')
      .where({ workspace_id: ws.id })
      .whereRaw(`coalesce(payload->>'card_id', payload->>'dealId') = ?`, [dealId])
      .orderBy('seq')
      .select('name', 'payload');
    expect(records.map((r: { name: string }) => r.name)).toEqual([
      'card.created',
      'card_created',
      'card.moved',
      'stage_changed',
      'card.moved',
      'stage_changed',
      'card.won',
      'deal_won',
    ]);
    expect(records[6].payload).toMatchObject({ stage_id: pipeline.stages[2].id, value: 10.01, closed_at: won.body.data.closedAt });
    const history = await api.request('GET', `/api/v1/deals/${dealId}/activities`, { key: ws.key });
    expect(history.body.data.map((a: { meta: unknown }) => a.meta)).toEqual([
      { from: 'Qualified', to: 'Proposal' },
      { from: 'New', to: 'Qualified' },
    ]);
  });

  it('exposes only outcome, attemptNo, from and to in activity meta, null when none remain', async () => {
    await api.db('deal_activities').insert([
      {
        workspace_id: ws.id,
        deal_id: dealId,
        type: 'call_logged',
        actor_name: 'Ana',
        meta: JSON.stringify({ outcome: 'no_answer', attemptNo: 2, memberId: 'secret', phone: '55' }),
        created_at: new Date(Date.now() - 2000),
      },
      {
        workspace_id: ws.id,
        deal_id: dealId,
        type: 'call_logged',
        actor_name: 'Ana',
        meta: JSON.stringify({ internal: 1 }),
        created_at: new Date(Date.now() - 1000),
      },
    ]);
    const res = await api.request('GET', `/api/v1/deals/${dealId}/activities?limit=1&offset=1`, { key: ws.key });
    expect(res.body.data[0].meta).toEqual({ outcome: 'no_answer', attemptNo: 2 });
    const first = await api.request('GET', `/api/v1/deals/${dealId}/activities?limit=1`, { key: ws.key });
    expect(first.body.data[0].meta).toBeNull();
    expect(first.body.pagination).toEqual({ total: 2, limit: 1, offset: 0, hasMore: true });
    // A page past the end still carries the exact total; a deal whose lead was deleted is not found.
    const past = await api.request('GET', `/api/v1/deals/${dealId}/activities?offset=50`, { key: ws.key });
    expect(past.body).toEqual({ data: [], pagination: { total: 2, limit: 25, offset: 50, hasMore: false } });
    const hidden = await api.db('deals').where({ id: dealId }).first('contact_id');
    await api.db('contacts').where({ id: hidden.contact_id }).update({ deleted_at: new Date() });
    try {
      expectError(await api.request('GET', `/api/v1/deals/${dealId}/activities`, { key: ws.key }), 404, 'NOT_FOUND');
    } finally {
      await api.db('contacts').where({ id: hidden.contact_id }).update({ deleted_at: null });
    }
  });

  it('changes name, value, assignee and custom values, and answers its error codes', async () => {
    const member = await seedMember(api, ws.id, 'Bruno');
    const res = await patch(dealId, { name: 'Renamed', value: null, assignedTo: member.id, customValues: { budget: 5, nope: 1 } });
    expect(res.body.data).toMatchObject({
      name: 'Renamed',
      value: null,
      assignedTo: { id: member.id, name: 'Bruno' },
      customValues: { budget: 5 },
    });
    const cleared = await patch(dealId, { assignedTo: null, customValues: { budget: null } });
    expect(cleared.body.data).toMatchObject({ assignedTo: null, customValues: {} });
    expectError(await patch(dealId, { stageId: '00000000-0000-4000-8000-000000000000' }), 404, 'STAGE_NOT_FOUND');
    expectError(await patch(dealId, { assignedTo: '00000000-0000-4000-8000-000000000000' }), 400, 'ASSIGNEE_NOT_FOUND');
    expectError(await patch(dealId, { status: 'closed' }), 400, 'VALIDATION');
    expectError(await patch(dealId, { value: -5 }), 400, 'VALIDATION');
    expectError(await patch('00000000-0000-4000-8000-000000000000', { name: 'x' }), 404, 'NOT_FOUND');
  });

  it('applies 20 identical concurrent status changes and stage moves once: one event, one trigger, one history row', async () => {
    const won = await Promise.all(Array.from({ length: 20 }, () => patch(dealId, { status: 'won' })));
    expect(won.every((r) => r.status === 200 && r.body.data.status === 'won')).toBe(true);
    expect((await outbox(api, ws.id, 'card.won')).filter((e) => e.payload.card_id === dealId)).toHaveLength(1);
    expect((await outbox(api, ws.id, 'deal_won')).filter((e) => e.payload.dealId === dealId)).toHaveLength(1);

    const moves = await Promise.all(Array.from({ length: 20 }, () => patch(dealId, { stageId: pipeline.stages[2].id })));
    expect(moves.every((r) => r.status === 200)).toBe(true);
    expect((await outbox(api, ws.id, 'card.moved')).filter((e) => e.payload.card_id === dealId)).toHaveLength(1);
    expect((await outbox(api, ws.id, 'stage_changed')).filter((e) => e.payload.dealId === dealId)).toHaveLength(1);
    expect(await api.db('deal_activities').where({ deal_id: dealId, type: 'stage_changed' }).count('* as n').first()).toEqual({ n: 1 });
  });
});

describe('GET /api/v1/deals', () => {
  it('filters by pipeline, stage, status, contact and assignee, newest first, with an exact total', async () => {
    const w = await createWorkspace(api, { scopes: ['deals:read', 'deals:write'] });
    const p = await seedPipeline(api, w.id, { name: 'P', stages: ['A', 'B'] });
    const m = await seedMember(api, w.id, 'Carla');
    const c1 = await seedContact(api, w.id, { phone: newPhone(), name: 'One' });
    const c2 = await seedContact(api, w.id, { phone: newPhone(), name: 'Two' });
    const mk = async (body: Record<string, unknown>) =>
      (await api.request('POST', '/api/v1/deals', { key: w.key, body: { pipeline: 'P', ...body } })).body.data;
    const d1 = await mk({ contactId: c1.id });
    const d2 = await mk({ contactId: c1.id, stage: 'B', assignedTo: m.id });
    const d3 = await mk({ contactId: c2.id });
    await api.request('PATCH', `/api/v1/deals/${d3.id}`, { key: w.key, body: { status: 'won' } });
    const ids = async (qs: string) => (await api.request('GET', `/api/v1/deals${qs}`, { key: w.key })).body.data.map((d: any) => d.id);
    expect(await ids('')).toEqual([d3.id, d2.id, d1.id]);
    expect(await ids(`?stageId=${p.stages[1].id}`)).toEqual([d2.id]);
    expect(await ids(`?status=won`)).toEqual([d3.id]);
    expect(await ids(`?contactId=${c1.id}&status=open`)).toEqual([d2.id, d1.id]);
    expect(await ids(`?assignedTo=${m.id}`)).toEqual([d2.id]);
    expect(await ids(`?pipelineId=${p.id}&limit=1&offset=1`)).toEqual([d2.id]);
    // Another workspace's contact as a filter: an empty list.
    expect(await ids(`?contactId=${contact.id}`)).toEqual([]);
    // A deal of a deleted lead disappears with it.
    await api.db('contacts').where({ id: c2.id }).update({ deleted_at: new Date() });
    const after = await api.request('GET', '/api/v1/deals', { key: w.key });
    expect(after.body.pagination.total).toBe(2);
    expectError(await api.request('GET', `/api/v1/deals/${d3.id}`, { key: w.key }), 404, 'NOT_FOUND');
    expectError(await api.request('GET', '/api/v1/deals?status=closed', { key: w.key }), 400, 'VALIDATION');
  });

  it('runs a constant number of queries whatever the page size', async () => {
    const w = await createWorkspace(api, { scopes: ['deals:read', 'deals:write'] });
    await seedPipeline(api, w.id, { name: 'P', stages: ['A'] });
    const members = await Promise.all(['M1', 'M2', 'M3'].map((n) => seedMember(api, w.id, n)));
    for (let i = 0; i < 12; i++) {
      const c = await seedContact(api, w.id, { phone: newPhone() });
      await api.request('POST', '/api/v1/deals', { key: w.key, body: { contactId: c.id, pipeline: 'P', assignedTo: members[i % 3].id } });
    }
    const small = await countQueries(api, () => api.request('GET', '/api/v1/deals?limit=2', { key: w.key }));
    const large = await countQueries(api, () => api.request('GET', '/api/v1/deals?limit=12', { key: w.key }));
    expect(large).toBe(small);
  });
});

describe('global custom fields', () => {
  it('POST /admin/v1/workspaces/{id}/custom-fields: every pipeline lists the field and every deal takes it; a key already used is 409 CONFLICT', async () => {
    const own = await createWorkspace(api, { scopes: ['deals:read', 'deals:write', 'pipelines:read'] });
    const before = await seedPipeline(api, own.id, {
      name: 'Before',
      stages: ['A'],
      customFields: [{ key: 'budget', label: 'Budget', type: 'number' }],
    });
    const created = await api.admin('POST', `/admin/v1/workspaces/${own.id}/custom-fields`, {
      key: 'source',
      label: 'Source',
      type: 'text',
    });
    expect(created.status).toBe(201);
    expect(created.body.data).toEqual({ id: expect.any(String), key: 'source', label: 'Source', type: 'text' });
    const after = await seedPipeline(api, own.id, { name: 'After', stages: ['B'] });
    const listed = (await api.request('GET', '/api/v1/pipelines', { key: own.key })).body.pipelines as {
      id: string;
      customFields: unknown[];
    }[];
    expect(listed.map((p) => p.id)).toEqual([before.id, after.id]);
    for (const p of listed) expect(p.customFields).toContainEqual(created.body.data);
    const buyer = await seedContact(api, own.id, { phone: newPhone(), name: 'Global' });
    for (const p of [before, after]) {
      const deal = await api.request('POST', '/api/v1/deals', {
        key: own.key,
        body: { contactId: buyer.id, pipeline: p.id, customValues: { source: 'ads', budget: 3 } },
      });
      expect(deal.status).toBe(201);
      // budget is Before's own field: After drops it.
      expect(deal.body.data.customValues).toEqual(p.id === before.id ? { source: 'ads', budget: 3 } : { source: 'ads' });
    }
    const path = `/admin/v1/workspaces/${own.id}/custom-fields`;
    // One key, one field wherever it applies: another global, a pipeline's own key, a new pipeline reusing a global key.
    expectError(await api.admin('POST', path, { key: 'source', label: 'Again', type: 'text' }), 409, 'CONFLICT');
    expectError(await api.admin('POST', path, { key: 'budget', label: 'Budget', type: 'number' }), 409, 'CONFLICT');
    expectError(
      await api.admin('POST', `/admin/v1/workspaces/${own.id}/pipelines`, {
        name: 'Clash',
        stages: [],
        customFields: [{ key: 'source', label: 'S', type: 'text' }],
      }),
      409,
      'CONFLICT',
    );
    expectError(await api.admin('POST', path, { key: '1source', label: 'Bad key', type: 'text' }), 400, 'VALIDATION');
    expectError(await api.admin('POST', path, { key: 'money', label: 'Money', type: 'currency' }), 400, 'VALIDATION');
    expectError(await api.admin('POST', path, { key: 'nolabel', label: '', type: 'text' }), 400, 'VALIDATION');
    expectError(
      await api.admin('POST', '/admin/v1/workspaces/00000000-0000-4000-8000-000000000000/custom-fields', {
        key: 'x',
        label: 'X',
        type: 'text',
      }),
      404,
      'NOT_FOUND',
    );
    expect((await api.request('GET', '/api/v1/pipelines', { key: own.key })).body.pipelines.map((p: { name: string }) => p.name)).toEqual([
      'Before',
      'After',
    ]);
  });
});
