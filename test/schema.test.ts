import { createWorkspace, startApi, TestApi } from './helpers';

/** The schema itself refuses illegal states, whatever code writes to it. */
let api: TestApi;
beforeAll(async () => {
  api = await startApi();
});
afterAll(async () => api.close());

async function fails(promise: Promise<unknown>, pgCode: string): Promise<void> {
  await expect(promise).rejects.toMatchObject({ code: pgCode });
}

describe('schema constraints', () => {
  it('allows one canonical contact per phone key per workspace, but a deleted or merged one does not count', async () => {
    const ws = await createWorkspace(api);
    const other = await createWorkspace(api);
    const row = { workspace_id: ws.id, name: 'A', phone: '5511987654321', phone_key: '5511987654321' };
    const [first] = await api.db('contacts').insert(row).returning('id');
    await fails(api.db('contacts').insert({ ...row, phone: '551187654321' }), '23505');
    await api.db('contacts').insert({ ...row, workspace_id: other.id });
    await api.db('contacts').where({ id: first.id }).update({ deleted_at: api.db.fn.now() });
    await api.db('contacts').insert(row);
  });

  it('marks group chats by their @g.us identifier and nothing else', async () => {
    const ws = await createWorkspace(api);
    await fails(api.db('contacts').insert({ workspace_id: ws.id, phone: '12036304@g.us', phone_key: 'g1', is_group: false }), '23514');
    await fails(api.db('contacts').insert({ workspace_id: ws.id, phone: '5511987654321', phone_key: 'x', is_group: true }), '23514');
    await api.db('contacts').insert({ workspace_id: ws.id, phone: '12036304@g.us', phone_key: 'g1', is_group: true });
  });

  it('refuses a link to another workspace: a deal on a foreign contact, a tag on a foreign contact', async () => {
    const a = await createWorkspace(api);
    const b = await createWorkspace(api);
    const pipelineId = (await api.admin('POST', `/admin/v1/workspaces/${a.id}/pipelines`, { name: 'P', stages: [{ name: 'S' }] })).body.data
      .id;
    const stage = await api.db('stages').where({ pipeline_id: pipelineId }).first('id');
    const [foreign] = await api.db('contacts').insert({ workspace_id: b.id, phone: '5511900000001', phone_key: 'k1' }).returning('id');
    await fails(
      api.db('deals').insert({ workspace_id: a.id, contact_id: foreign.id, pipeline_id: pipelineId, stage_id: stage.id, name: 'D' }),
      '23503',
    );
    const [tag] = await api.db('tags').insert({ workspace_id: a.id, name: 't' }).returning('id');
    await fails(api.db('contact_tags').insert({ workspace_id: a.id, contact_id: foreign.id, tag_id: tag.id }), '23503');
  });

  it('keeps a deal stage inside its pipeline and closedAt consistent with the status', async () => {
    const ws = await createWorkspace(api);
    const p1 = (await api.admin('POST', `/admin/v1/workspaces/${ws.id}/pipelines`, { name: 'P1', stages: [{ name: 'S' }] })).body.data;
    const p2 = (await api.admin('POST', `/admin/v1/workspaces/${ws.id}/pipelines`, { name: 'P2', stages: [{ name: 'S' }] })).body.data;
    const [contact] = await api.db('contacts').insert({ workspace_id: ws.id, phone: '5511900000002', phone_key: 'k2' }).returning('id');
    const base = { workspace_id: ws.id, contact_id: contact.id, pipeline_id: p1.id, name: 'D' };
    await fails(api.db('deals').insert({ ...base, stage_id: p2.stages[0].id }), '23503');
    await fails(api.db('deals').insert({ ...base, stage_id: p1.stages[0].id, status: 'won' }), '23514');
    await fails(api.db('deals').insert({ ...base, stage_id: p1.stages[0].id, status: 'lost', closed_at: new Date() }), '23514');
    await fails(api.db('deals').insert({ ...base, stage_id: p1.stages[0].id, value: -1 }), '23514');
    await api.db('deals').insert({ ...base, stage_id: p1.stages[0].id, status: 'lost', closed_at: new Date(), lost_reason: 'price' });
  });

  it('bounds product fields and prices', async () => {
    const ws = await createWorkspace(api);
    await fails(api.db('products').insert({ workspace_id: ws.id, name: 'x'.repeat(201) }), '23514');
    await fails(api.db('products').insert({ workspace_id: ws.id, name: 'p', price: -0.01 }), '23514');
    const [row] = await api.db('products').insert({ workspace_id: ws.id, name: 'p', price: '10.5' }).returning('price');
    expect(row.price).toBe('10.50');
  });
});
