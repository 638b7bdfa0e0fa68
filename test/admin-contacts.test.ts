import { createWorkspace, expectError, startApi, TestApi } from './helpers';

let api: TestApi;
beforeAll(async () => {
  api = await startApi();
});
afterAll(async () => api.close());

const outbox = (api: TestApi, workspaceId: string) =>
  api.db('outbox_events').where({ workspace_id: workspaceId }).orderBy('seq').select('kind', 'name', 'payload');

describe('admin contacts: the panel path', () => {
  it('creates a contact, canonicalising the phone, and records contact.created with the documented fields', async () => {
    const ws = await createWorkspace(api);
    await api.db('tags').insert({ workspace_id: ws.id, name: 'VIP', color: '#ff0000' });
    const res = await api.admin('POST', `/admin/v1/workspaces/${ws.id}/contacts`, {
      name: 'Rita',
      phone: '+55 (11) 98765-4321',
      tags: ['vip'],
    });
    expect(res.status).toBe(201);
    expect(res.body.data).toMatchObject({
      name: 'Rita',
      phone: '5511987654321',
      email: null,
      notes: '',
      tags: [{ name: 'VIP', color: '#ff0000' }],
    });
    const events = await outbox(api, ws.id);
    expect(events.map((e) => e.name)).toEqual(['contact.created', 'contact.tag_added']);
    expect(events[0].payload).toEqual({
      event: 'contact.created',
      workspace_id: ws.id,
      timestamp: expect.stringMatching(/\.\d{3}Z$/),
      contact_id: res.body.data.id,
      name: 'Rita',
      phone: '5511987654321',
      email: null,
    });
    expect(events[1].payload).toMatchObject({ contact_name: 'Rita', tag: { name: 'VIP' }, source: 'manual' });
    // The same number without its ninth digit is the same contact.
    expectError(await api.admin('POST', `/admin/v1/workspaces/${ws.id}/contacts`, { phone: '551187654321' }), 409, 'CONFLICT');
    expectError(await api.admin('POST', `/admin/v1/workspaces/${ws.id}/contacts`, { phone: '11987654321' }), 400, 'INVALID_PHONE');
    expectError(await api.admin('POST', `/admin/v1/workspaces/${ws.id}/contacts`, { name: 'no phone' }), 400, 'PHONE_REQUIRED');
    expectError(
      await api.admin('POST', `/admin/v1/workspaces/${ws.id}/contacts`, { phone: '5511912345678', tags: ['nope'] }),
      404,
      'NOT_FOUND',
    );
    expect(await api.db('contacts').where({ workspace_id: ws.id }).count('* as n').first()).toEqual({ n: 1 });
  });

  it('records contact.updated and the contact_updated trigger with exactly the changed fields', async () => {
    const ws = await createWorkspace(api);
    await api.db('tags').insert({ workspace_id: ws.id, name: 'hot' });
    const created = await api.admin('POST', `/admin/v1/workspaces/${ws.id}/contacts`, { name: 'Rui', phone: '5521987654321' });
    const id = created.body.data.id;
    await api.db('outbox_events').where({ workspace_id: ws.id }).delete();

    const res = await api.admin('PATCH', `/admin/v1/workspaces/${ws.id}/contacts/${id}`, {
      name: 'Rui Costa',
      email: 'rui@example.com',
      notes: '',
      tags: ['hot'],
    });
    expect(res.status).toBe(200);
    expect(res.body.data).toMatchObject({ name: 'Rui Costa', email: 'rui@example.com', tags: [{ name: 'hot' }] });
    const events = await outbox(api, ws.id);
    expect(events.map((e) => `${e.kind}:${e.name}`)).toEqual([
      'webhook:contact.tag_added',
      'webhook:contact.updated',
      'trigger:contact_updated',
    ]);
    expect(events[1].payload).toEqual({
      event: 'contact.updated',
      workspace_id: ws.id,
      timestamp: expect.any(String),
      contact_id: id,
      contact_name: 'Rui Costa',
      phone: '5521987654321',
      email: 'rui@example.com',
    });
    expect(events[2].payload).toEqual({ trigger: 'contact_updated', contactId: id, changedFields: 'name,email,tags' });

    // Nothing changed: no event, no trigger.
    await api.db('outbox_events').where({ workspace_id: ws.id }).delete();
    await api.admin('PATCH', `/admin/v1/workspaces/${ws.id}/contacts/${id}`, { name: 'Rui Costa', tags: ['HOT'] });
    expect(await outbox(api, ws.id)).toEqual([]);

    // Removing the tag: tag_removed with source manual, changedFields "tags".
    await api.admin('PATCH', `/admin/v1/workspaces/${ws.id}/contacts/${id}`, { tags: [] });
    const after = await outbox(api, ws.id);
    expect(after.map((e) => e.name)).toEqual(['contact.tag_removed', 'contact.updated', 'contact_updated']);
    expect(after[0].payload.source).toBe('manual');
    expect(after[2].payload.changedFields).toBe('tags');

    // A person records the contact's opt-out: contact.updated, but not the contact_updated trigger
    // (opt-out is none of its fields).
    await api.db('outbox_events').where({ workspace_id: ws.id }).delete();
    const opted = await api.admin('PATCH', `/admin/v1/workspaces/${ws.id}/contacts/${id}`, { optedOut: true });
    expect(opted.body.data.optedOut).toBe(true);
    expect((await outbox(api, ws.id)).map((e) => e.name)).toEqual(['contact.updated']);
  });

  it("refuses another workspace's contact and a phone that belongs to another contact", async () => {
    const ws = await createWorkspace(api);
    const other = await createWorkspace(api);
    const a = await api.admin('POST', `/admin/v1/workspaces/${ws.id}/contacts`, { phone: '5531987654321' });
    await api.admin('POST', `/admin/v1/workspaces/${ws.id}/contacts`, { phone: '5531987650000' });
    expectError(
      await api.admin('PATCH', `/admin/v1/workspaces/${other.id}/contacts/${a.body.data.id}`, { name: 'x' }),
      404,
      'CONTACT_NOT_FOUND',
    );
    expectError(
      await api.admin('PATCH', `/admin/v1/workspaces/${ws.id}/contacts/${a.body.data.id}`, { phone: '553187650000' }),
      409,
      'CONFLICT',
    );
    const member = await api.admin('POST', `/admin/v1/workspaces/${other.id}/members`, { name: 'M', email: 'm@example.com' });
    expectError(
      await api.admin('PATCH', `/admin/v1/workspaces/${ws.id}/contacts/${a.body.data.id}`, { name: 'x', memberId: member.body.data.id }),
      400,
      'VALIDATION',
    );
  });
});
