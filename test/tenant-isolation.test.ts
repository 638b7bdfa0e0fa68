/**
 * Tenant isolation, end to end: workspace A's key (every scope) aims every endpoint that takes an
 * id or a reference at workspace B's records. Nothing of B is returned, nothing of B changes.
 * The matrix is built from the route table itself, so a new endpoint with an id cannot be missed.
 */
import { ROUTES } from '../api/app';
import { expectError, Receiver, startApi, startReceiver, TestApi } from './helpers';
// One fixture, one id map and one set of bodies with the reliability suite's matrices.
import { BODIES, buildFixture, Fixture, snapshot, withIds } from './reliability/workspace-fixture';

let receiver: Receiver;

let api: TestApi;

let a: Fixture;
let b: Fixture;

beforeAll(async () => {
  api = await startApi();
  receiver = await startReceiver();
  a = await buildFixture(api, receiver, 'A');
  b = await buildFixture(api, receiver, 'B');
});
afterAll(async () => {
  await receiver.close();
  await api.close();
});

const allBIds = (): string[] =>
  [
    b.contact,
    b.tag,
    b.list,
    b.note,
    b.pipeline,
    b.member,
    b.product,
    b.deal,
    b.task,
    b.instance,
    b.conversation,
    b.webhook,
    b.delivery,
    b.automation,
  ].map((r) => r.id);

describe('tenant isolation', () => {
  const idRoutes = ROUTES.filter((r) => r.auth === 'apiKey' && r.path.includes('{'));

  it('covers every endpoint that takes an id', () => {
    expect(idRoutes.length).toBeGreaterThan(20);
    for (const r of idRoutes) expect(() => withIds(r.path, b)).not.toThrow();
    for (const r of idRoutes.filter((r) => r.method === 'patch' || (r.method === 'post' && r.body))) {
      expect([`${r.method} ${r.path}`, !!BODIES[`${r.method} ${r.path}`]]).toEqual([`${r.method} ${r.path}`, true]);
    }
  });

  it("answers 404 to every id endpoint aimed at another workspace's records and changes nothing there", async () => {
    const before = await snapshot(api, b.ws.id);
    for (const r of idRoutes) {
      const path = withIds(r.path, b);
      const body = BODIES[`${r.method} ${r.path}`]?.(b, receiver.url);
      const res = await api.request(r.method.toUpperCase(), path, { key: a.ws.key, body });
      expect({ route: `${r.method} ${r.path}`, status: res.status }).toEqual({ route: `${r.method} ${r.path}`, status: 404 });
      for (const id of allBIds()) expect(res.text).not.toContain(id);
    }
    // Mixed paths: A's own record with B's record as the second id.
    expectError(await api.request('DELETE', `/api/v1/leads/${a.contact.id}/tags/${b.tag.id}`, { key: a.ws.key }), 404, 'NOT_FOUND');
    expectError(await api.request('DELETE', `/api/v1/leads/${a.contact.id}/notes/${b.note.id}`, { key: a.ws.key }), 404, 'NOT_FOUND');
    expectError(
      await api.request('DELETE', `/api/v1/lists/${a.list.id}/contacts/${b.contact.id}`, { key: a.ws.key }),
      404,
      'CONTACT_NOT_FOUND',
    );
    expectError(
      await api.request('POST', `/api/v1/webhooks/${a.webhook.id}/deliveries/${b.delivery.id}/retry`, { key: a.ws.key }),
      404,
      'NOT_FOUND',
    );
    expect(await snapshot(api, b.ws.id)).toEqual(before);
  });

  it("rejects another workspace's records used as references in writes", async () => {
    const before = await snapshot(api, b.ws.id);
    const key = a.ws.key;
    const post = (path: string, body: unknown) => api.request('POST', path, { key, body });
    const patch = (path: string, body: unknown) => api.request('PATCH', path, { key, body });
    expectError(await post('/api/v1/deals', { contactId: b.contact.id, pipeline: a.pipeline.id }), 404, 'CONTACT_NOT_FOUND');
    expectError(await post('/api/v1/deals', { contactId: a.contact.id, pipeline: b.pipeline.id }), 404, 'PIPELINE_NOT_FOUND');
    expectError(
      await post('/api/v1/deals', { contactId: a.contact.id, pipeline: a.pipeline.id, stage: b.pipeline.stages[0].id }),
      404,
      'STAGE_NOT_FOUND',
    );
    expectError(
      await post('/api/v1/deals', { contactId: a.contact.id, pipeline: a.pipeline.id, assignedTo: b.member.id }),
      400,
      'ASSIGNEE_NOT_FOUND',
    );
    expectError(await patch(`/api/v1/deals/${a.deal.id}`, { stageId: b.pipeline.stages[0].id }), 404, 'STAGE_NOT_FOUND');
    expectError(await patch(`/api/v1/deals/${a.deal.id}`, { assignedTo: b.member.id }), 400, 'ASSIGNEE_NOT_FOUND');
    expectError(await post(`/api/v1/leads/${a.contact.id}/tags`, { tag: b.tag.id }), 404, 'NOT_FOUND');
    expectError(await post(`/api/v1/lists/${a.list.id}/contacts`, { contactIds: [b.contact.id] }), 404, 'CONTACT_NOT_FOUND');
    expectError(await post(`/api/v1/leads/${a.contact.id}/notes`, { body: 'x', authorId: b.member.id }), 400, 'ASSIGNEE_NOT_FOUND');
    expectError(await post('/api/v1/tasks', { title: 't', contactId: b.contact.id }), 404, 'CONTACT_NOT_FOUND');
    expectError(await post('/api/v1/tasks', { title: 't', cardId: b.deal.id }), 404, 'NOT_FOUND');
    expectError(await post('/api/v1/tasks', { title: 't', assignedTo: b.member.id }), 400, 'ASSIGNEE_NOT_FOUND');
    expectError(await patch(`/api/v1/tasks/${a.task.id}`, { contactId: b.contact.id }), 404, 'CONTACT_NOT_FOUND');
    expectError(await post('/api/v1/deals', { contactId: a.contact.id, pipeline: a.pipeline.id, product: b.product.id }), 404, 'NOT_FOUND');
    expect(await snapshot(api, b.ws.id)).toEqual(before);
  });

  it("gives an empty list for another workspace's records used as filters, and never lists them", async () => {
    const key = a.ws.key;
    const empty = async (path: string) => {
      const res = await api.request('GET', path, { key });
      expect({ path, status: res.status, total: res.body.pagination?.total, data: res.body.data }).toEqual({
        path,
        status: 200,
        total: 0,
        data: [],
      });
    };
    await empty(`/api/v1/deals?contactId=${b.contact.id}`);
    await empty(`/api/v1/deals?pipelineId=${b.pipeline.id}`);
    await empty(`/api/v1/deals?stageId=${b.pipeline.stages[1].id}`);
    await empty(`/api/v1/deals?assignedTo=${b.member.id}`);
    await empty(`/api/v1/leads?tag=${b.tag.id}`);
    await empty(`/api/v1/leads?pipelineId=${b.pipeline.id}`);
    await empty(`/api/v1/leads?stageId=${b.pipeline.stages[1].id}`);
    await empty(`/api/v1/leads?stageId=${b.pipeline.stages[1].id}&status=won`);
    // A status facet is named alike in every workspace ('status:won'; both fixtures' deals are won):
    // the walk of it lists A's lead, never B's.
    const byStatus = await api.request('GET', '/api/v1/leads?status=won&limit=100', { key });
    expect({
      status: byStatus.status,
      ids: byStatus.body.data.map((l: { id: string }) => l.id),
      total: byStatus.body.pagination.total,
    }).toEqual({ status: 200, ids: [a.contact.id], total: 1 });
    await empty(`/api/v1/tasks?contactId=${b.contact.id}`);
    await empty(`/api/v1/tasks?cardId=${b.deal.id}`);
    await empty(`/api/v1/tasks?assignedTo=${b.member.id}`);
    await empty(`/api/v1/conversations?contactId=${b.contact.id}`);
    await empty(`/api/v1/conversations?instanceId=${b.instance.id}`);

    // Every list endpoint: A's records are there, B's never.
    for (const r of ROUTES.filter((r) => r.auth === 'apiKey' && r.method === 'get' && !r.path.includes('{'))) {
      const res = await api.request('GET', r.path, { key });
      expect({ path: r.path, status: res.status }).toEqual({ path: r.path, status: 200 });
      for (const id of allBIds()) expect(res.text).not.toContain(id);
    }
  });
});
