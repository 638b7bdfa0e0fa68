import type { Knex } from 'knex';
import { countQueries, createWorkspace, expectError, outbox, seedContact, seedPipeline, startApi, TestApi, Workspace } from './helpers';
import { ALL_SCOPES, type Scope } from '../domain/access/scopes';
import { signBody } from '../domain/messaging/inbound';
import { uniqueMobile, uniqueSubscriber } from './phones';

let api: TestApi;
let ws: Workspace;
/** A distinct mobile per call (test/phones.ts): 55 + area 31 + 9 + 8 digits. */
const mobile = (): string => uniqueMobile('31');
const withoutNinth = (phone: string): string => phone.slice(0, 4) + phone.slice(5);

const ALL = ['leads:read', 'leads:write', 'tags:write', 'insights:read', 'deals:write'] as const;

beforeAll(async () => {
  api = await startApi();
  ws = await createWorkspace(api, { scopes: [...ALL] });
});
afterAll(() => api.close());

const upsert = (body: Record<string, unknown>, key = ws.key) => api.request('POST', '/api/v1/leads', { key, body });
const list = async (w: Workspace, qs = '') => (await api.request('GET', `/api/v1/leads${qs}`, { key: w.key })).body;

describe('POST /api/v1/leads (upsert by phone)', () => {
  it('creates a lead (201, lead.created) and updates it when the same number arrives without its ninth digit (200)', async () => {
    const phone = mobile();
    const created = await upsert({
      phone: `+${phone.slice(0, 2)} (${phone.slice(2, 4)}) ${phone.slice(4, 9)}-${phone.slice(9)}`,
      name: 'João',
      email: 'joao@example.com',
    });
    expect(created.status).toBe(201);
    expect(created.body.data).toMatchObject({ name: 'João', phone, email: 'joao@example.com', notes: '', tags: [] });
    const events = (await outbox(api, ws.id, 'lead.created')).filter((e) => e.payload.contact_id === created.body.data.id);
    expect(events.map((e) => e.payload)).toEqual([
      {
        event: 'lead.created',
        workspace_id: ws.id,
        timestamp: expect.any(String),
        contact_id: created.body.data.id,
        name: 'João',
        phone,
        email: 'joao@example.com',
      },
    ]);
    // The API is not the CRM panel: no contact.created for this lead.
    expect((await outbox(api, ws.id, 'contact.created')).filter((e) => e.payload.contact_id === created.body.data.id)).toHaveLength(0);

    const updated = await upsert({ phone: withoutNinth(phone), name: 'João Silva', tags: ['VIP'] });
    expect(updated.status).toBe(200);
    expect(updated.body.data).toMatchObject({ id: created.body.data.id, name: 'João Silva', phone, email: 'joao@example.com' });
    expect(updated.body.data.tags).toEqual([{ id: expect.any(String), name: 'VIP', color: '#6b7280' }]);
    const tagAdded = (await outbox(api, ws.id, 'contact.tag_added')).filter((e) => e.payload.contact_id === created.body.data.id);
    expect(tagAdded.map((e) => e.payload)).toEqual([
      {
        event: 'contact.tag_added',
        workspace_id: ws.id,
        timestamp: expect.any(String),
        contact_id: created.body.data.id,
        contact_name: 'João Silva',
        phone,
        tag: { id: updated.body.data.tags[0].id, name: 'VIP' },
        source: 'api',
      },
    ]);
    const triggers = (await outbox(api, ws.id, 'contact_updated')).filter((e) => e.payload.contactId === created.body.data.id);
    expect(triggers.map((t) => t.payload.changedFields)).toEqual(['name,tags']);
    expect((await outbox(api, ws.id, 'contact.updated')).filter((e) => e.payload.contact_id === created.body.data.id)).toHaveLength(0);
  });

  it('answers PHONE_REQUIRED, INVALID_PHONE and VALIDATION', async () => {
    expectError(await upsert({ name: 'No phone' }), 400, 'PHONE_REQUIRED');
    expectError(await upsert({ phone: '11987654321' }), 400, 'INVALID_PHONE');
    expectError(await upsert({ phone: '55 00 98765-4321' }), 400, 'INVALID_PHONE');
    expectError(await upsert({ phone: '5511abc' }), 400, 'INVALID_PHONE');
    const badEmail = await upsert({ phone: mobile(), email: 'not-an-email' });
    expectError(badEmail, 400, 'VALIDATION');
    expect(badEmail.body.error).toContain('body.email');
    expectError(await upsert({ phone: mobile(), name: 'x'.repeat(201) }), 400, 'VALIDATION');
    const readOnly = await createWorkspace(api, { scopes: ['leads:read'] });
    expectError(await upsert({ phone: mobile() }, readOnly.key), 403, 'INSUFFICIENT_SCOPE');
  });

  it('makes one contact from 20 concurrent upserts of one number in both ninth-digit forms', async () => {
    const phone = mobile();
    const results = await Promise.all(
      Array.from({ length: 20 }, (_, i) => upsert({ phone: i % 2 ? phone : withoutNinth(phone), name: `N${i}` })),
    );
    expect(results.every((r) => r.status === 200 || r.status === 201)).toBe(true);
    expect(results.filter((r) => r.status === 201)).toHaveLength(1);
    expect(new Set(results.map((r) => r.body.data.id)).size).toBe(1);
    const id = results[0].body.data.id;
    expect((await outbox(api, ws.id, 'lead.created')).filter((e) => e.payload.contact_id === id)).toHaveLength(1);
  });
});

describe('GET /api/v1/leads', () => {
  let w: Workspace;
  let pipeline: Awaited<ReturnType<typeof seedPipeline>>;
  const leads: Record<string, any> = {};

  beforeAll(async () => {
    w = await createWorkspace(api, { scopes: [...ALL] });
    pipeline = await seedPipeline(api, w.id, { name: 'P', stages: ['S1', 'S2'] });
    for (const [name, email] of [
      ['Alice Prado', 'alice@acme.com'],
      ['Bruno Reis', null],
      ['Carla Dias', 'carla@corp.io'],
      ['Davi Melo', null],
    ] as const) {
      const res = await api.request('POST', '/api/v1/leads', { key: w.key, body: { phone: mobile(), name, email } });
      leads[name.split(' ')[0]] = res.body.data;
      await new Promise((r) => setTimeout(r, 5)); // distinct createdAt for the ordering assertions
    }
    const deal = async (contactId: string, stage: string, status?: string) => {
      const d = await api.request('POST', '/api/v1/deals', { key: w.key, body: { contactId, pipeline: 'P', stage } });
      if (status)
        await api.request('PATCH', `/api/v1/deals/${d.body.data.id}`, {
          key: w.key,
          body: { status, lostReason: status === 'lost' ? 'x' : undefined },
        });
    };
    // Alice: S1 open + S2 won. Bruno: S1 won.
    await deal(leads.Alice.id, 'S1');
    await deal(leads.Alice.id, 'S2', 'won');
    await deal(leads.Bruno.id, 'S1', 'won');
    await api.request('POST', `/api/v1/leads/${leads.Carla.id}/tags`, { key: w.key, body: { tag: 'Hot' } });
  });

  const names = (body: any) => body.data.map((l: any) => l.name.split(' ')[0]);

  it('lists newest first with tags and an exact total', async () => {
    const body = await list(w);
    expect(names(body)).toEqual(['Davi', 'Carla', 'Bruno', 'Alice']);
    expect(body.pagination).toEqual({ total: 4, limit: 25, offset: 0, hasMore: false });
    expect(body.data[1].tags).toEqual([{ id: expect.any(String), name: 'Hot', color: '#6b7280' }]);
  });

  it('searches name, phone (with separators) and e-mail', async () => {
    expect(names(await list(w, '?q=prado'))).toEqual(['Alice']);
    expect(names(await list(w, '?q=CORP.IO'))).toEqual(['Carla']);
    const p = leads.Bruno.phone as string;
    expect(names(await list(w, `?q=${encodeURIComponent(`(${p.slice(2, 4)}) ${p.slice(4, 9)}-${p.slice(9)}`)}`))).toEqual(['Bruno']);
    expect(names(await list(w, '?q=%25'))).toEqual([]);
  });

  it('filters by tag id or name', async () => {
    expect(names(await list(w, '?tag=hot'))).toEqual(['Carla']);
    const tagId = (await list(w, '?tag=Hot')).data[0].tags[0].id;
    expect(names(await list(w, `?tag=${tagId}`))).toEqual(['Carla']);
    expect((await list(w, '?tag=unknown')).pagination.total).toBe(0);
  });

  it('treats pipelineId, stageId and status as ONE deal satisfying all of them', async () => {
    const [s1, s2] = pipeline.stages;
    expect(names(await list(w, `?stageId=${s1.id}`)).sort()).toEqual(['Alice', 'Bruno']);
    expect(names(await list(w, `?stageId=${s1.id}&status=won`))).toEqual(['Bruno']);
    expect(names(await list(w, `?stageId=${s2.id}&status=won`))).toEqual(['Alice']);
    expect(names(await list(w, `?stageId=${s2.id}&status=open`))).toEqual([]);
    expect(names(await list(w, `?pipelineId=${pipeline.id}&status=open`))).toEqual(['Alice']);
    expect((await list(w, `?pipelineId=00000000-0000-4000-8000-000000000000`)).data).toEqual([]);
  });

  it('filters by dates and sorts by a documented column only', async () => {
    const mid = leads.Bruno.createdAt;
    expect(names(await list(w, `?createdAfter=${mid}`))).toEqual(['Davi', 'Carla', 'Bruno']);
    expect(names(await list(w, `?createdBefore=${mid}`))).toEqual(['Alice']);
    expect(names(await list(w, `?updatedAfter=2999-01-01`))).toEqual([]);
    expect(names(await list(w, '?sort=name&order=asc'))).toEqual(['Alice', 'Bruno', 'Carla', 'Davi']);
    const offsetPage = await list(w, '?sort=name&order=asc&limit=2&offset=1');
    expect(names(offsetPage)).toEqual(['Bruno', 'Carla']);
    // The tags are read after the offset (for the page's rows only), and still belong to their lead.
    expect(offsetPage.data.map((l: any) => l.tags.map((t: any) => t.name))).toEqual([[], ['Hot']]);
    expect(offsetPage.pagination).toEqual({ total: 4, limit: 2, offset: 1, hasMore: true });
    const badSort = await api.request('GET', '/api/v1/leads?sort=phone', { key: w.key });
    expectError(badSort, 400, 'VALIDATION');
    expect(badSort.body.error).toContain('query.sort');
    const badDate = await api.request('GET', '/api/v1/leads?createdAfter=yesterday', { key: w.key });
    expectError(badDate, 400, 'VALIDATION');
    expect(badDate.body.error).toContain('query.createdAfter');
    expectError(await api.request('GET', '/api/v1/leads?order=up', { key: w.key }), 400, 'VALIDATION');
    expectError(await api.request('GET', '/api/v1/leads?status=pending', { key: w.key }), 400, 'VALIDATION');
  });

  it('never shows merged, deleted or group contacts, in lists, filters, counts or lookups', async () => {
    const x = await api.request('POST', '/api/v1/leads', { key: w.key, body: { phone: mobile(), name: 'Merged One' } });
    const y = await api.request('POST', '/api/v1/leads', { key: w.key, body: { phone: mobile(), name: 'Deleted One' } });
    await api.db('contacts').where({ id: x.body.data.id }).update({ merged_into_id: leads.Alice.id });
    expect((await api.request('DELETE', `/api/v1/leads/${y.body.data.id}`, { key: w.key })).body.data).toEqual({
      id: y.body.data.id,
      deleted: true,
    });
    await api.db('contacts').insert({
      workspace_id: w.id,
      name: 'Group One',
      phone: '120363000000000001@g.us',
      phone_key: '120363000000000001@g.us',
      is_group: true,
    });
    expect((await list(w)).pagination.total).toBe(4);
    expect((await list(w, '?q=one')).data).toEqual([]);
    for (const id of [x.body.data.id, y.body.data.id]) {
      expectError(await api.request('GET', `/api/v1/leads/${id}`, { key: w.key }), 404, 'CONTACT_NOT_FOUND');
      expectError(await api.request('PATCH', `/api/v1/leads/${id}`, { key: w.key, body: { name: 'z' } }), 404, 'CONTACT_NOT_FOUND');
    }
    expectError(await api.request('DELETE', `/api/v1/leads/${y.body.data.id}`, { key: w.key }), 404, 'CONTACT_NOT_FOUND');
  });

  it('is a constant number of queries whatever the page size (tags included)', async () => {
    const small = await countQueries(api, () => api.request('GET', '/api/v1/leads?limit=1', { key: w.key }));
    const large = await countQueries(api, () =>
      api
        .request('GET', '/api/v1/leads?limit=100&tag=&q=', { key: w.key })
        .then(() => api.request('GET', '/api/v1/leads?limit=100', { key: w.key })),
    );
    // Two requests in the second run: exactly twice the first (validation failures run no data query).
    expect(large).toBeLessThanOrEqual(small * 2);
    const single = await countQueries(api, () => api.request('GET', '/api/v1/leads?limit=100', { key: w.key }));
    expect(single).toBe(small);
  });
});

describe('single lead endpoints', () => {
  it('gets, patches and deletes a lead; PATCH fires contact_updated but never the contact.updated webhook', async () => {
    const lead = (await upsert({ phone: mobile(), name: 'Edit Me' })).body.data;
    expect((await api.request('GET', `/api/v1/leads/${lead.id}`, { key: ws.key })).body.data).toEqual(lead);
    const other = mobile();
    const patched = await api.request('PATCH', `/api/v1/leads/${lead.id}`, {
      key: ws.key,
      body: { name: 'Edited', notes: 'likes coffee', phone: other },
    });
    expect(patched.body.data).toMatchObject({ name: 'Edited', notes: 'likes coffee', phone: other });
    expect(Date.parse(patched.body.data.updatedAt)).toBeGreaterThanOrEqual(Date.parse(lead.updatedAt));
    const triggers = (await outbox(api, ws.id, 'contact_updated')).filter((e) => e.payload.contactId === lead.id);
    expect(triggers.map((t) => t.payload.changedFields)).toEqual(['name,notes,phone']);
    expect((await outbox(api, ws.id, 'contact.updated')).filter((e) => e.payload.contact_id === lead.id)).toHaveLength(0);
    // Nothing changed: nothing recorded.
    await api.request('PATCH', `/api/v1/leads/${lead.id}`, { key: ws.key, body: { name: 'Edited' } });
    expect((await outbox(api, ws.id, 'contact_updated')).filter((e) => e.payload.contactId === lead.id)).toHaveLength(1);

    const clash = (await upsert({ phone: mobile() })).body.data;
    expectError(await api.request('PATCH', `/api/v1/leads/${lead.id}`, { key: ws.key, body: { phone: clash.phone } }), 409, 'CONFLICT');
    expectError(await api.request('PATCH', `/api/v1/leads/${lead.id}`, { key: ws.key, body: {} }), 400, 'VALIDATION');
    expectError(await api.request('PATCH', `/api/v1/leads/${lead.id}`, { key: ws.key, body: { phone: '123' } }), 400, 'INVALID_PHONE');
    expectError(await api.request('GET', '/api/v1/leads/not-a-uuid', { key: ws.key }), 404, 'NOT_FOUND');
  });

  it('adds a tag by name (created) or id and removes it, recording tag events with source api only on change', async () => {
    const lead = (await upsert({ phone: mobile(), name: 'Tagged' })).body.data;
    const add = await api.request('POST', `/api/v1/leads/${lead.id}/tags`, { key: ws.key, body: { tag: 'Newsletter' } });
    expect(add.status).toBe(200);
    expect(add.body.data).toEqual({
      contactId: lead.id,
      tag: { id: expect.any(String), name: 'Newsletter', color: '#6b7280' },
      added: true,
    });
    const tagId = add.body.data.tag.id;
    const again = await api.request('POST', `/api/v1/leads/${lead.id}/tags`, { key: ws.key, body: { tag: tagId } });
    expect(again.body.data.added).toBe(false);
    expect((await outbox(api, ws.id, 'contact.tag_added')).filter((e) => e.payload.contact_id === lead.id)).toHaveLength(1);

    const removed = await api.request('DELETE', `/api/v1/leads/${lead.id}/tags/${tagId}`, { key: ws.key });
    expect(removed.body.data).toEqual({ contactId: lead.id, tagId, removed: true });
    const events = (await outbox(api, ws.id, 'contact.tag_removed')).filter((e) => e.payload.contact_id === lead.id);
    expect(events.map((e) => e.payload)).toEqual([
      {
        event: 'contact.tag_removed',
        workspace_id: ws.id,
        timestamp: expect.any(String),
        contact_id: lead.id,
        contact_name: 'Tagged',
        phone: lead.phone,
        tag: { id: tagId, name: 'Newsletter' },
        source: 'api',
      },
    ]);
    const twice = await api.request('DELETE', `/api/v1/leads/${lead.id}/tags/${tagId}`, { key: ws.key });
    expect(twice.body.data.removed).toBe(false);
    expect((await outbox(api, ws.id, 'contact.tag_removed')).filter((e) => e.payload.contact_id === lead.id)).toHaveLength(1);
    expect(
      (await outbox(api, ws.id, 'contact_updated')).filter((e) => e.payload.contactId === lead.id).map((e) => e.payload.changedFields),
    ).toEqual(['tags', 'tags']);

    expectError(
      await api.request('POST', `/api/v1/leads/${lead.id}/tags`, { key: ws.key, body: { tag: '00000000-0000-4000-8000-000000000000' } }),
      404,
      'NOT_FOUND',
    );
    expectError(
      await api.request('DELETE', `/api/v1/leads/${lead.id}/tags/00000000-0000-4000-8000-000000000000`, { key: ws.key }),
      404,
      'NOT_FOUND',
    );
    expectError(await api.request('POST', `/api/v1/leads/${lead.id}/tags`, { key: ws.key, body: {} }), 400, 'VALIDATION');
  });

  it('returns the insight, or data null when none exists yet', async () => {
    const lead = await seedContact(api, ws.id, { phone: mobile() });
    const none = await api.request('GET', `/api/v1/leads/${lead.id}/insight`, { key: ws.key });
    expect(none.status).toBe(200);
    expect(none.body).toEqual({ data: null });
    await api.admin('PUT', `/admin/v1/workspaces/${ws.id}/contacts/${lead.id}/insight`, {
      interest: 'CRM',
      products: ['Pro'],
      objections: ['price'],
      nextStep: 'demo',
      qualification: { score: 80, temperature: 'hot' },
      summary: 'Good fit',
    });
    const res = await api.request('GET', `/api/v1/leads/${lead.id}/insight`, { key: ws.key });
    expect(res.body.data).toEqual({
      interest: 'CRM',
      products: ['Pro'],
      objections: ['price'],
      nextStep: 'demo',
      qualification: { score: 80, temperature: 'hot' },
      summary: 'Good fit',
      source: null,
      updatedAt: expect.stringMatching(/\.\d{3}Z$/),
    });
    const noScope = await createWorkspace(api, { scopes: ['leads:read'] });
    expectError(await api.request('GET', `/api/v1/leads/${lead.id}/insight`, { key: noScope.key }), 403, 'INSUFFICIENT_SCOPE');
  });
});

describe('merging two leads (the panel merge)', () => {
  const APP_SECRET = 'merge-secret';

  /** A workspace with every scope, a pipeline and two Cloud API instances that take signed inbound traffic. */
  async function mergeSetup() {
    const w = await createWorkspace(api, { scopes: [...ALL_SCOPES] });
    const pipeline = await seedPipeline(api, w.id, { name: 'Sales', stages: ['New'] });
    const instance = async (name: string) => {
      const res = await api.admin('POST', `/admin/v1/workspaces/${w.id}/instances`, {
        name,
        channel: 'whatsapp',
        provider: 'cloud',
        connected: true,
        config: { appSecret: APP_SECRET, phoneNumberId: `PN-${name}`, accessToken: 't', baseUrl: process.env.EMULATOR_URL },
      });
      expect(res.status).toBe(201);
      return res.body.data.id as string;
    };
    const call = async (method: string, path: string, body?: unknown, status = method === 'POST' ? 201 : 200) => {
      const res = await api.request(method, path, { key: w.key, body });
      expect({ method, path, status: res.status }).toEqual({ method, path, status });
      return res.body;
    };
    /** A text from `phone` through the instance's provider webhook: its conversation (found or created) gets the message. */
    const inbound = async (instanceId: string, name: string, phone: string, text: string) => {
      const raw = JSON.stringify({
        object: 'whatsapp_business_account',
        entry: [
          {
            id: '1',
            changes: [
              {
                field: 'messages',
                value: {
                  messaging_product: 'whatsapp',
                  metadata: { phone_number_id: `PN-${name}` },
                  contacts: [{ profile: { name: 'Profile' }, wa_id: phone }],
                  messages: [
                    {
                      from: phone,
                      id: `wamid.merge.${phone}.${name}.${text.length}`,
                      timestamp: String(Math.floor(Date.now() / 1000) - 60),
                      type: 'text',
                      text: { body: text },
                    },
                  ],
                },
              },
            ],
          },
        ],
      });
      const res = await api.request('POST', `/webhooks/whatsapp/${instanceId}`, {
        rawBody: raw,
        headers: { 'content-type': 'application/json', 'x-hub-signature-256': signBody(APP_SECRET, raw) },
      });
      expect({ status: res.status, received: res.body?.data?.received }).toEqual({ status: 200, received: 1 });
    };
    const merge = (loser: string, winner: string) =>
      api.admin('POST', `/admin/v1/workspaces/${w.id}/contacts/${loser}/merge`, { intoId: winner });
    const insight = async (contactId: string, summary: string) =>
      expect(
        (await api.admin('PUT', `/admin/v1/workspaces/${w.id}/contacts/${contactId}/insight`, { interest: 'CRM', summary })).status,
      ).toBe(200);
    return { w, pipeline, instance, call, inbound, merge, insight };
  }

  it("moves the loser's tasks, list memberships, insight, deals, notes, tags and conversation messages to the winner; the loser is gone", async () => {
    const { w, pipeline, instance, call, inbound, merge, insight } = await mergeSetup();
    const [first, second] = [await instance('first'), await instance('second')];
    const winnerPhone = mobile();
    const loserPhone = mobile();
    const winner = (await call('POST', '/api/v1/leads', { phone: winnerPhone, name: 'Winner' })).data;
    const loser = (await call('POST', '/api/v1/leads', { phone: loserPhone, name: 'Loser', tags: ['Hot'] })).data;

    // Everything hangs on the loser; the winner has a conversation of its own on the first instance only.
    const task = (await call('POST', '/api/v1/tasks', { title: 'Call back', contactId: loser.id })).data;
    const onlyLoser = (await call('POST', '/api/v1/lists', { name: 'Only the loser' })).data;
    const both = (await call('POST', '/api/v1/lists', { name: 'Both' })).data;
    await call('POST', `/api/v1/lists/${onlyLoser.id}/contacts`, { contactIds: [loser.id] }, 200);
    await call('POST', `/api/v1/lists/${both.id}/contacts`, { contactIds: [loser.id, winner.id] }, 200);
    await insight(loser.id, "The loser's insight");
    const deal = (await call('POST', '/api/v1/deals', { contactId: loser.id, pipeline: pipeline.id, name: 'Deal of the loser' })).data;
    await call('POST', `/api/v1/leads/${loser.id}/notes`, { body: 'Called the loser' });
    await inbound(first, 'first', winnerPhone, 'winner on the first instance');
    await inbound(first, 'first', loserPhone, 'loser on the first instance');
    await inbound(second, 'second', loserPhone, 'loser on the second instance');
    expect((await call('GET', `/api/v1/leads/${winner.id}/insight`)).data).toBeNull();

    const merged = await merge(loser.id, winner.id);
    expect(merged.status).toBe(200);
    expect(merged.body.data).toMatchObject({ id: winner.id, phone: winnerPhone, name: 'Winner' });

    // The loser is gone: not found, not listed, nothing of its own left.
    expectError(await api.request('GET', `/api/v1/leads/${loser.id}`, { key: w.key }), 404, 'CONTACT_NOT_FOUND');
    expect((await call('GET', '/api/v1/leads')).data.map((l: { id: string }) => l.id)).toEqual([winner.id]);
    expect((await call('GET', `/api/v1/conversations?contactId=${loser.id}`)).data).toEqual([]);
    expect((await call('GET', `/api/v1/tasks?contactId=${loser.id}`)).data).toEqual([]);
    expect((await call('GET', `/api/v1/deals?contactId=${loser.id}`)).data).toEqual([]);

    // The winner has all of it.
    expect((await call('GET', `/api/v1/tasks?contactId=${winner.id}`)).data.map((t: { id: string }) => t.id)).toEqual([task.id]);
    const members = async (listId: string) => (await call('GET', `/api/v1/lists/${listId}/contacts`)).data.map((l: { id: string }) => l.id);
    expect({ onlyLoser: await members(onlyLoser.id), both: await members(both.id) }).toEqual({
      onlyLoser: [winner.id],
      both: [winner.id],
    });
    expect((await call('GET', `/api/v1/leads/${winner.id}/insight`)).data).toMatchObject({
      interest: 'CRM',
      summary: "The loser's insight",
    });
    expect((await call('GET', `/api/v1/deals?contactId=${winner.id}`)).data.map((d: { id: string }) => d.id)).toEqual([deal.id]);
    expect((await call('GET', `/api/v1/leads/${winner.id}/notes`)).data.map((n: { body: string }) => n.body)).toEqual(['Called the loser']);
    expect((await call('GET', `/api/v1/leads/${winner.id}`)).data.tags.map((t: { name: string }) => t.name)).toEqual(['Hot']);
    // Its conversation on the first instance took the loser's message there; the loser's conversation on the second is its own now.
    const conversations: { id: string; instanceId: string; contact: { id: string } }[] = (
      await call('GET', `/api/v1/conversations?contactId=${winner.id}`)
    ).data;
    expect(conversations.map((c) => [c.instanceId, c.contact.id]).sort()).toEqual(
      [
        [first, winner.id],
        [second, winner.id],
      ].sort(),
    );
    const bodies = async (instanceId: string) =>
      (await call('GET', `/api/v1/conversations/${conversations.find((c) => c.instanceId === instanceId)!.id}`)).data.messages
        .map((m: { body: string }) => m.body)
        .sort();
    expect({ first: await bodies(first), second: await bodies(second) }).toEqual({
      first: ['loser on the first instance', 'winner on the first instance'],
      second: ['loser on the second instance'],
    });
  });

  it("keeps the winner's insight when both have one (the loser's is not carried over)", async () => {
    const { call, merge, insight } = await mergeSetup();
    const winner = (await call('POST', '/api/v1/leads', { phone: mobile(), name: 'Winner' })).data;
    const loser = (await call('POST', '/api/v1/leads', { phone: mobile(), name: 'Loser' })).data;
    await insight(winner.id, "The winner's insight");
    await insight(loser.id, "The loser's insight");
    expect((await merge(loser.id, winner.id)).status).toBe(200);
    expect((await call('GET', `/api/v1/leads/${winner.id}/insight`)).data).toMatchObject({ summary: "The winner's insight" });
  });
});

describe('lead list totals at scale', () => {
  it('the unfiltered total (a maintained count) always equals a real count: creates, upserts, deletes, merges, groups, bulk inserts', async () => {
    const ws = await createWorkspace(api, { scopes: ['leads:read', 'leads:write'] });
    const totals = async () => {
      const unfiltered = await api.request('GET', '/api/v1/leads?limit=1', { key: ws.key });
      // A filter that keeps every lead takes the counting path.
      const counted = await api.request('GET', '/api/v1/leads?limit=1&createdAfter=2000-01-01', { key: ws.key });
      const real = await api
        .db('contacts')
        .where({ workspace_id: ws.id, is_group: false })
        .whereNull('merged_into_id')
        .whereNull('deleted_at')
        .count('* as n')
        .first();
      return { unfiltered: unfiltered.body.pagination.total, counted: counted.body.pagination.total, real: Number(real!.n) };
    };
    const subscribers = [uniqueSubscriber(), uniqueSubscriber(), uniqueSubscriber(), uniqueSubscriber()];
    const created = [];
    for (const [i, subscriber] of subscribers.entries())
      created.push(
        (await api.request('POST', '/api/v1/leads', { key: ws.key, body: { phone: `55319${subscriber}`, name: `L${i}` } })).body.data,
      );
    await api.request('POST', '/api/v1/leads', {
      key: ws.key,
      body: { phone: `5531${subscribers[0]}`, name: 'same lead, no ninth digit' },
    });
    expect(await totals()).toEqual({ unfiltered: 4, counted: 4, real: 4 });
    expect((await api.request('DELETE', `/api/v1/leads/${created[0].id}`, { key: ws.key })).status).toBe(200);
    await api.db('contacts').where({ id: created[1].id }).update({ merged_into_id: created[2].id });
    await api
      .db('contacts')
      .insert({ workspace_id: ws.id, phone: '120363000000000001@g.us', phone_key: '120363000000000001@g.us', is_group: true });
    expect(await totals()).toEqual({ unfiltered: 2, counted: 2, real: 2 });
    await api.db.raw(
      `INSERT INTO contacts (workspace_id, phone, phone_key) SELECT ?, '55119' || (80000000 + g), '55119' || (80000000 + g) FROM generate_series(1, 50) g`,
      [ws.id],
    );
    await api.db('contacts').where({ id: created[1].id }).update({ merged_into_id: null });
    expect(await totals()).toEqual({ unfiltered: 53, counted: 53, real: 53 });
    // Another workspace's changes never move this one's count.
    const other = await createWorkspace(api, { scopes: ['leads:write'] });
    await api.request('POST', '/api/v1/leads', { key: other.key, body: { phone: `55319${subscribers[0]}` } });
    expect((await totals()).unfiltered).toBe(53);
  });
});

describe('search totals (counted once per change of what searches read)', () => {
  it('follow each single change at once: a rename in or out, a new or removed e-mail, a deletion, a merge', async () => {
    const w = await createWorkspace(api, { scopes: ['leads:read', 'leads:write'] });
    const call = (method: string, path: string, body?: unknown) => api.request(method, path, { key: w.key, body });
    const lead = async (name: string) => (await call('POST', '/api/v1/leads', { phone: mobile(), name })).body.data.id as string;
    const [one, two, other, spare] = [await lead('Zeta One'), await lead('Zeta Two'), await lead('Other'), await lead('Spare')];
    // Both paths of a page: the sort prefix (limit 1) and every match (limit 100); each asked twice,
    // the second answer coming from the remembered total.
    const totals = async () => {
      const answers = [];
      for (const limit of [1, 100, 1, 100]) answers.push((await list(w, `?q=zeta&limit=${limit}`)).pagination.total);
      return answers;
    };
    expect(await totals()).toEqual([2, 2, 2, 2]);
    await call('PATCH', `/api/v1/leads/${other}`, { name: 'Zeta Three' });
    expect(await totals()).toEqual([3, 3, 3, 3]);
    await call('PATCH', `/api/v1/leads/${one}`, { name: 'Alpha' });
    expect(await totals()).toEqual([2, 2, 2, 2]);
    await call('PATCH', `/api/v1/leads/${one}`, { email: 'zeta@shop.io' });
    expect(await totals()).toEqual([3, 3, 3, 3]);
    await call('PATCH', `/api/v1/leads/${one}`, { email: null });
    expect(await totals()).toEqual([2, 2, 2, 2]);
    expect((await call('DELETE', `/api/v1/leads/${two}`)).status).toBe(200);
    expect(await totals()).toEqual([1, 1, 1, 1]);
    await api.db('contacts').where({ id: other }).update({ merged_into_id: spare });
    expect(await totals()).toEqual([0, 0, 0, 0]);
  });
});

describe('filtered lead list totals (maintained per tag and per deal facet)', () => {
  it('finds the page whether its matches lie in the first thousand leads of the sort order or beyond them', async () => {
    const wsx = await createWorkspace(api, { scopes: ['leads:read'] });
    await api.db.raw(
      `INSERT INTO contacts (workspace_id, name, phone, phone_key, created_at)
       SELECT ?, 'Bulk ' || g, '55219' || (70000000 + g), '55219' || (70000000 + g), now() - g * interval '1 minute' FROM generate_series(1, 1500) g`,
      [wsx.id],
    );
    const [rare, common] = await api
      .db('tags')
      .insert([
        { workspace_id: wsx.id, name: 'rare' },
        { workspace_id: wsx.id, name: 'common' },
      ])
      .returning('id');
    const ordered = (
      await api
        .db('contacts')
        .where({ workspace_id: wsx.id })
        .orderBy([
          { column: 'created_at', order: 'desc' },
          { column: 'id', order: 'desc' },
        ])
        .select('id')
    ).map((r: { id: string }) => r.id);
    const oldest = ordered.slice(-5);
    const everyTenth = ordered.filter((_, i) => i % 10 === 0);
    await api
      .db('contact_tags')
      .insert([
        ...oldest.map((id) => ({ workspace_id: wsx.id, contact_id: id, tag_id: rare.id })),
        ...everyTenth.map((id) => ({ workspace_id: wsx.id, contact_id: id, tag_id: common.id })),
      ]);
    const page = async (qs: string) => {
      const body = (await api.request('GET', `/api/v1/leads?${qs}`, { key: wsx.key })).body;
      return { total: body.pagination.total, ids: body.data.map((l: { id: string }) => l.id) };
    };
    expect(await page('tag=rare')).toEqual({ total: 5, ids: oldest });
    expect(await page('tag=common&limit=10&offset=20')).toEqual({ total: 150, ids: everyTenth.slice(20, 30) });
    expect(await page('tag=common&limit=10&offset=140')).toEqual({ total: 150, ids: everyTenth.slice(140) });
    expect(await page('tag=common&sort=createdAt&order=asc&limit=3')).toEqual({ total: 150, ids: [...everyTenth].reverse().slice(0, 3) });
    expect(await page('q=bulk 1499')).toEqual({ total: 1, ids: [ordered[1498]] });
  });

  // 1,300 leads, the newest thousand never matching: a walk of the sort order would pass them all.
  const walkWorkspace = async (scopes: Scope[]) => {
    const wsx = await createWorkspace(api, { scopes: ['leads:read', ...scopes] });
    await api.db.raw(
      `INSERT INTO contacts (workspace_id, name, phone, phone_key, created_at)
       SELECT ?, 'Walk ' || g, '55419' || (70000000 + g), '55419' || (70000000 + g), now() - g * interval '1 minute' FROM generate_series(1, 1300) g`,
      [wsx.id],
    );
    const all = (await api.db('contacts').where({ workspace_id: wsx.id }).orderBy('created_at', 'desc').select('id')).map(
      (r: { id: string }) => r.id as string,
    );
    return { wsx, all, oldest: all.slice(1000) };
  };
  /** Every page of `qs` in both orders, at several offsets, against `direct` (the matching ids, newest first): one statement each. */
  const expectWalkedPages = async (wsx: Workspace, qs: string, direct: () => Promise<string[]>) => {
    const newestFirst = await direct();
    for (const order of ['desc', 'asc'] as const) {
      const expected = order === 'desc' ? newestFirst : [...newestFirst].reverse();
      for (const [limit, offset] of [
        [25, 0],
        [7, 3],
        [50, 60],
        [10, Math.max(0, expected.length - 4)],
        [10, expected.length + 5],
      ]) {
        let body: { data: { id: string }[]; pagination: { total: number } } | undefined;
        const statements = await countQueries(api, async () => {
          body = (await api.request('GET', `/api/v1/leads?${qs}&order=${order}&limit=${limit}&offset=${offset}`, { key: wsx.key })).body;
        });
        expect({ qs, order, limit, offset, ids: body!.data.map((l) => l.id), total: body!.pagination.total }).toEqual({
          qs,
          order,
          limit,
          offset,
          ids: expected.slice(offset, offset + limit),
          total: expected.length,
        });
        // The page and its maintained total in one statement (a page past the end reads its total apart).
        expect(statements).toBe(offset < expected.length ? 1 : 2);
      }
    }
    return newestFirst;
  };
  const canonicalNewestFirst = (wsx: Workspace, q: Knex.QueryBuilder) =>
    q
      .where({ 'c.workspace_id': wsx.id, 'c.is_group': false })
      .whereNull('c.merged_into_id')
      .whereNull('c.deleted_at')
      .orderBy([
        { column: 'c.created_at', order: 'desc' },
        { column: 'c.id', order: 'desc' },
      ])
      .select('c.id')
      .then((rows: { id: string }[]) => rows.map((r) => r.id));

  it('reads a tag in creation order from the tag itself: one statement per page, either order, any offset, through tagging, deletion, merge and a rewritten creation instant', async () => {
    const { wsx, all, oldest } = await walkWorkspace(['leads:write', 'tags:write']);
    // Every third of the 300 oldest, through the API (the tag is created by name on first use).
    for (const id of oldest.filter((_, i) => i % 3 === 0))
      expect((await api.request('POST', `/api/v1/leads/${id}/tags`, { key: wsx.key, body: { tag: 'Walked' } })).status).toBe(200);
    const direct = () =>
      canonicalNewestFirst(
        wsx,
        api
          .db('contacts as c')
          .whereExists(
            api.db('contact_tags as ct').join('tags as t', 't.id', 'ct.tag_id').whereRaw('ct.contact_id = c.id').where('t.name', 'Walked'),
          ),
      );
    const tagged = await expectWalkedPages(wsx, 'tag=walked', direct);
    expect(tagged).toHaveLength(100);
    // Removed: a deleted lead, a lead merged into an untagged one (its tags move to the survivor).
    expect((await api.request('DELETE', `/api/v1/leads/${tagged[5]}`, { key: wsx.key })).status).toBe(200);
    const untagged = all.find((id) => !tagged.includes(id))!;
    expect((await api.admin('POST', `/admin/v1/workspaces/${wsx.id}/contacts/${tagged[40]}/merge`, { intoId: untagged })).status).toBe(200);
    // A creation instant rewritten in the database moves the lead in the tag's order too.
    await api
      .db('contacts')
      .where({ id: tagged[90] })
      .update({ created_at: api.db.raw("now() + interval '1 day'") });
    await api
      .db('contacts')
      .where({ id: tagged[0] })
      .update({ created_at: api.db.raw("now() - interval '10 days'") });
    const after = await expectWalkedPages(wsx, 'tag=walked', direct);
    expect([after[0], after[after.length - 1], after.includes(untagged), after.includes(tagged[5])]).toEqual([
      tagged[90],
      tagged[0],
      true,
      false,
    ]);
  });

  it('reads deal filters in creation order from their facet: each lead once however many of its deals match, through moves, closing, merge and a rewritten creation instant', async () => {
    const { wsx, all, oldest } = await walkWorkspace(['deals:read', 'deals:write', 'leads:write']);
    const sales = await seedPipeline(api, wsx.id, { name: 'Sales', stages: ['New', 'Won'] });
    const [fresh, won] = sales.stages.map((st) => st.id);
    const deal = async (contactId: string) => {
      const res = await api.request('POST', '/api/v1/deals', { key: wsx.key, body: { contactId, pipeline: sales.id } });
      expect(res.status).toBe(201);
      return res.body.data.id as string;
    };
    const dealOf = new Map<string, string>();
    for (const id of oldest.filter((_, i) => i % 3 === 0)) dealOf.set(id, await deal(id));
    // Two deals in the stage: still one lead.
    for (const id of oldest.slice(0, 12).filter((_, i) => i % 3 === 0)) await deal(id);
    const direct = (deals: Record<string, string>) => () =>
      canonicalNewestFirst(wsx, api.db('contacts as c').whereExists(api.db('deals as d').whereRaw('d.contact_id = c.id').where(deals)));
    const matching = await expectWalkedPages(wsx, `stageId=${fresh}&status=open`, direct({ 'd.stage_id': fresh, 'd.status': 'open' }));
    expect(matching).toHaveLength(100);
    // A deal moved out (its lead leaves the facet), one lost (leaves status=open), a merge (deals move to the survivor).
    const [movedLead, lostLead, mergedLead] = [matching[50], matching[60], matching[70]];
    expect((await api.request('PATCH', `/api/v1/deals/${dealOf.get(movedLead)}`, { key: wsx.key, body: { stageId: won } })).status).toBe(
      200,
    );
    expect(
      (await api.request('PATCH', `/api/v1/deals/${dealOf.get(lostLead)}`, { key: wsx.key, body: { status: 'lost', lostReason: 'price' } }))
        .status,
    ).toBe(200);
    const survivor = all[3];
    expect((await api.admin('POST', `/admin/v1/workspaces/${wsx.id}/contacts/${mergedLead}/merge`, { intoId: survivor })).status).toBe(200);
    await api
      .db('contacts')
      .where({ id: matching[99] })
      .update({ created_at: api.db.raw("now() + interval '1 day'") });
    const after = await expectWalkedPages(wsx, `stageId=${fresh}&status=open`, direct({ 'd.stage_id': fresh, 'd.status': 'open' }));
    expect([
      after[0],
      after.includes(movedLead),
      after.includes(lostLead),
      after.includes(mergedLead),
      after.includes(survivor),
      after.length,
    ]).toEqual([matching[99], false, false, false, true, 98]);
    expect(await expectWalkedPages(wsx, `stageId=${won}`, direct({ 'd.stage_id': won }))).toEqual([movedLead]);
    expect(await expectWalkedPages(wsx, 'status=lost', direct({ 'd.status': 'lost' }))).toEqual([lostLead]);
    expect(
      await expectWalkedPages(wsx, `pipelineId=${sales.id}&status=open`, direct({ 'd.pipeline_id': sales.id, 'd.status': 'open' })),
    ).toHaveLength(99);
  });

  it('always equal a real count and the pages equal a direct query, through random tagging, deal moves, renames, deletions and merges', async () => {
    const wsx = await createWorkspace(api, {
      scopes: ['leads:read', 'leads:write', 'tags:read', 'tags:write', 'deals:read', 'deals:write'],
    });
    const sales = await seedPipeline(api, wsx.id, { name: 'Sales', stages: ['New', 'Won'] });
    const support = await seedPipeline(api, wsx.id, { name: 'Support', stages: ['Open'] });
    const stages = [...sales.stages.map((s) => ({ pipeline: sales, stage: s })), { pipeline: support, stage: support.stages[0] }];
    const TAGS = ['vip', 'cold', 'Lojista'];
    const call = (method: string, path: string, body?: unknown) => api.request(method, path, { key: wsx.key, body });
    const leads: string[] = [];
    const deals: string[] = [];
    // A small deterministic generator: the same sequence every run, so a failure reproduces.
    let state = 42;
    const pick = (n: number) => (state = (state * 1103515245 + 12345) % 2 ** 31) % n;

    type Filter = { tag?: string; pipelineId?: string; stageId?: string; status?: string; q?: string; createdAfter?: string };
    const real = async (filter: Filter) => {
      const q = api
        .db('contacts as c')
        .where({ 'c.workspace_id': wsx.id, 'c.is_group': false })
        .whereNull('c.merged_into_id')
        .whereNull('c.deleted_at');
      if (filter.q) q.whereRaw(`(lower(c.name) || ' ' || c.phone || ' ' || coalesce(lower(c.email), '')) LIKE ?`, [`%${filter.q}%`]);
      if (filter.createdAfter) q.where('c.created_at', '>=', filter.createdAfter);
      if (filter.tag)
        q.whereExists(
          api
            .db('contact_tags as ct')
            .join('tags as t', 't.id', 'ct.tag_id')
            .whereRaw('ct.contact_id = c.id')
            .whereRaw('lower(t.name) = lower(?)', [filter.tag]),
        );
      if (filter.pipelineId || filter.stageId || filter.status) {
        const d = api.db('deals as d').whereRaw('d.contact_id = c.id');
        if (filter.pipelineId) d.where('d.pipeline_id', filter.pipelineId);
        if (filter.stageId) d.where('d.stage_id', filter.stageId);
        if (filter.status) d.where('d.status', filter.status);
        q.whereExists(d);
      }
      const ids = (
        await q
          .orderBy([
            { column: 'c.created_at', order: 'desc' },
            { column: 'c.id', order: 'desc' },
          ])
          .select('c.id')
      ).map((r: { id: string }) => r.id);
      return ids;
    };
    const check = async () => {
      // Searches count their matches, and a total counted at an unchanged search version is reused:
      // each is asked twice per check (limit 2, then 100), and again after the next changes.
      const filters: Filter[] = [
        { q: 'f1' },
        { q: 'f2' },
        { q: 'shop.io' },
        { q: 'f1', createdAfter: '2000-01-01T00:00:00.000Z' },
        ...TAGS.map((tag) => ({ tag })),
        ...stages.flatMap(({ pipeline, stage }) => [
          { stageId: stage.id },
          { stageId: stage.id, status: 'open' },
          { pipelineId: pipeline.id, stageId: stage.id },
        ]),
        { pipelineId: sales.id },
        { pipelineId: sales.id, status: 'won' },
        { status: 'lost' },
      ];
      for (const filter of filters) {
        const expected = await real(filter);
        for (const limit of [2, 100]) {
          const res = await call(
            'GET',
            `/api/v1/leads?${new URLSearchParams({ ...(filter as Record<string, string>), limit: String(limit) })}`,
          );
          expect({ filter, limit, total: res.body.pagination.total, ids: res.body.data.map((l: { id: string }) => l.id) }).toEqual({
            filter,
            limit,
            total: expected.length,
            ids: expected.slice(0, limit),
          });
        }
      }
    };

    for (let step = 0; step < 120; step++) {
      const op = leads.length < 4 ? 0 : pick(10);
      const lead = leads[pick(leads.length || 1)];
      if (op === 0) {
        const res = await call('POST', '/api/v1/leads', {
          phone: mobile(),
          name: `F${step}`,
          tags: TAGS.filter(() => pick(3) === 0),
        });
        leads.push(res.body.data.id);
      } else if (op === 1) await call('POST', `/api/v1/leads/${lead}/tags`, { tag: TAGS[pick(TAGS.length)] });
      else if (op === 2) {
        const tags = (await call('GET', `/api/v1/leads/${lead}`)).body.data?.tags ?? [];
        if (tags.length > 0) await call('DELETE', `/api/v1/leads/${lead}/tags/${tags[pick(tags.length)].id}`);
      } else if (op === 3 || op === 4) {
        const { pipeline, stage } = stages[pick(stages.length)];
        const res = await call('POST', '/api/v1/deals', { contactId: lead, pipeline: pipeline.name, stage: stage.name });
        if (res.status === 201) deals.push(res.body.data.id);
      } else if (op === 5 && deals.length > 0) {
        // A deal of a deleted lead answers 404 through the API and stays as it is.
        const deal = await api
          .db('deals')
          .where({ id: deals[pick(deals.length)] })
          .first('id', 'pipeline_id');
        const same = stages.filter((s) => s.pipeline.id === deal.pipeline_id);
        await call('PATCH', `/api/v1/deals/${deal.id}`, { stageId: same[pick(same.length)].stage.id });
      } else if (op === 6 && deals.length > 0) {
        const status = ['open', 'won', 'lost'][pick(3)];
        await call('PATCH', `/api/v1/deals/${deals[pick(deals.length)]}`, {
          status,
          ...(status === 'lost' ? { lostReason: 'price' } : {}),
        });
      } else if (op === 7 && pick(3) === 0) {
        await call('DELETE', `/api/v1/leads/${lead}`);
      } else if (op === 8) {
        // A merge (no API yet): the loser stops being canonical, its deals move to the survivor.
        const survivor = leads[pick(leads.length)];
        if (survivor !== lead) {
          await api.db('contacts').where({ id: lead }).update({ merged_into_id: survivor });
          await api.db('deals').where({ contact_id: lead }).update({ contact_id: survivor });
        }
      } else if (op === 9) {
        // A rename or a new e-mail moves a lead into or out of a search.
        await call(
          'PATCH',
          `/api/v1/leads/${lead}`,
          pick(2) === 0 ? { name: `F${pick(150)}` } : { email: pick(2) === 0 ? `f${pick(50)}@shop.io` : null },
        );
      }
      if (step % 30 === 29) await check();
    }
    // Deleting a tag removes it from every lead, and un-merging restores a contact's tags and deals.
    const tagId = (await call('GET', '/api/v1/tags')).body.data.find((t: { name: string }) => t.name === 'cold')?.id;
    if (tagId) expect((await call('DELETE', `/api/v1/tags/${tagId}`)).status).toBe(200);
    await api.db('contacts').where({ workspace_id: wsx.id }).whereNotNull('merged_into_id').update({ merged_into_id: null });
    await check();
  });
});
