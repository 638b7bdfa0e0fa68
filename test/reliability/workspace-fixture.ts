/**
 * Shared by the reliability suites: a workspace holding one record of every kind (the same shape
 * as the tenant-isolation fixture), a snapshot of every row of a workspace, and the route-table
 * helpers that put real ids into path parameters and give every write a body that would succeed.
 */
import { createHash } from 'node:crypto';
import type { AnyRoute } from '../../api/route';
import { ALL_SCOPES } from '../../domain/access/scopes';
import {
  ApiResponse,
  createWorkspace,
  eventually,
  Receiver,
  seedContact,
  seedMember,
  seedPipeline,
  settleOutbox,
  TestApi,
  Workspace,
} from '../helpers';
import { uniqueMobile } from '../phones';

export interface Fixture {
  ws: Workspace;
  contact: { id: string };
  tag: { id: string };
  list: { id: string };
  note: { id: string };
  pipeline: { id: string; stages: { id: string }[] };
  member: { id: string };
  product: { id: string };
  deal: { id: string };
  task: { id: string };
  instance: { id: string };
  conversation: { id: string };
  /** An inbound image whose file is stored (GET /api/v1/messages/{id}/media). */
  message: { id: string };
  webhook: { id: string };
  delivery: { id: string };
  automation: { id: string };
  broadcast: { id: string };
}

/** A valid Brazilian mobile (area 41) that no other test file uses: the one allocator's (../phones). */
export const uniquePhone = (): string => uniqueMobile('41');

/** A workspace with one record of every kind, created through the API where an endpoint exists. */
/**
 * A new workspace whose subscription to `lead.created` points at `url`, one lead, and the
 * delivery log once it shows the first attempt (the suite's worker makes it): the log's answer and
 * that delivery. The caller deletes the subscription to stop its retries.
 */
export async function firstLeadDelivery(
  api: TestApi,
  url: string,
  name: string,
): Promise<{ ws: Workspace; subscriptionId: string; log: ApiResponse; delivery: any }> {
  const ws = await createWorkspace(api, { scopes: ['webhooks:write', 'webhooks:read', 'leads:write'], name });
  const sub = await api.request('POST', '/api/v1/webhooks', { key: ws.key, body: { url, events: ['lead.created'] } });
  expect(sub.status).toBe(201);
  expect((await api.request('POST', '/api/v1/leads', { key: ws.key, body: { phone: uniquePhone(), name } })).status).toBe(201);
  const log = await eventually('the first delivery attempt', async () => {
    const res = await api.request('GET', `/api/v1/webhooks/${sub.body.data.id}/deliveries`, { key: ws.key });
    return res.body.data.some((d: { attempts: number }) => d.attempts >= 1) ? res : undefined;
  });
  return { ws, subscriptionId: sub.body.data.id, log, delivery: log.body.data.find((d: { attempts: number }) => d.attempts >= 1) };
}

export async function buildFixture(api: TestApi, receiver: Receiver, name: string): Promise<Fixture> {
  const ws = await createWorkspace(api, { name, scopes: [...ALL_SCOPES] });
  const call = async (method: string, path: string, body?: unknown) => {
    const res = await api.request(method, path, { key: ws.key, body });
    if (res.status >= 300) throw new Error(`fixture ${method} ${path}: ${res.status} ${res.text}`);
    return res.body.data;
  };
  const pipeline = await seedPipeline(api, ws.id, { name: 'Sales', stages: ['A', 'B'] });
  const member = await seedMember(api, ws.id, `${name} member`);
  const contact = await seedContact(api, ws.id, { phone: uniquePhone(), name: `${name} lead` });
  const tag = await call('POST', '/api/v1/tags', { name: `${name}-tag` });
  await call('POST', `/api/v1/leads/${contact.id}/tags`, { tag: tag.id });
  const list = await call('POST', '/api/v1/lists', { name: `${name} list` });
  await call('POST', `/api/v1/lists/${list.id}/contacts`, { contactIds: [contact.id] });
  const note = await call('POST', `/api/v1/leads/${contact.id}/notes`, { body: 'a note' });
  const product = await call('POST', '/api/v1/products', { name: `${name} product`, price: '10.00' });
  const deal = await call('POST', '/api/v1/deals', {
    contactId: contact.id,
    pipeline: pipeline.id,
    product: product.id,
    assignedTo: member.id,
  });
  await call('PATCH', `/api/v1/deals/${deal.id}`, { stageId: pipeline.stages[1].id });
  const task = await call('POST', '/api/v1/tasks', { title: 'call', contactId: contact.id, cardId: deal.id, assignedTo: member.id });
  const instanceRes = await api.admin('POST', `/admin/v1/workspaces/${ws.id}/instances`, {
    name: 'WA',
    channel: 'whatsapp',
    provider: 'cloud',
    connected: true,
  });
  const instance = instanceRes.body.data;
  const [conversation] = await api
    .db('conversations')
    .insert({ workspace_id: ws.id, contact_id: contact.id, instance_id: instance.id, channel: 'whatsapp', last_message_at: new Date() })
    .returning('id');
  await api
    .db('messages')
    .insert({ workspace_id: ws.id, conversation_id: conversation.id, direction: 'in', type: 'text', body: 'hi', status: 'received' });
  const [message] = await api
    .db('messages')
    .insert({ workspace_id: ws.id, conversation_id: conversation.id, direction: 'in', type: 'image', body: '', status: 'received' })
    .returning('id');
  const file = Buffer.from('fixture image bytes');
  await api.db('message_media').insert({
    message_id: message.id,
    workspace_id: ws.id,
    instance_id: instance.id,
    type: 'image',
    media_ref: 'fixture-media-id',
    status: 'stored',
    mime_type: 'image/jpeg',
    size: file.length,
    sha256: createHash('sha256').update(file).digest('hex'),
  });
  await api.db('message_media_chunks').insert({ message_id: message.id, workspace_id: ws.id, seq: 0, data: file });
  await api.admin('PUT', `/admin/v1/workspaces/${ws.id}/contacts/${contact.id}/insight`, { summary: 'summary' });
  const webhook = await call('POST', '/api/v1/webhooks', { url: `${receiver.url}/ok/reliability-${name}`, events: ['*'] });
  await call('PATCH', `/api/v1/deals/${deal.id}`, { status: 'won' });
  await settleOutbox(api, ws.id);
  const automation = await call('POST', '/api/v1/automations', {
    name: `${name} flow`,
    trigger: { type: 'webhook_received' },
    actions: [{ type: 'add_tag', tag: 'x' }],
  });
  // A broadcast scheduled far ahead (it sends nothing during the tests), to the lead by id so the tag stays deletable.
  await api.admin('POST', `/admin/v1/workspaces/${ws.id}/templates`, {
    instanceId: instance.id,
    name: 'fixture',
    language: 'pt_BR',
    status: 'approved',
  });
  const broadcast = await call('POST', '/api/v1/broadcasts', broadcastBody(instance.id, contact.id, `${name} broadcast`));
  const [delivery] = await api.db('webhook_deliveries').where({ workspace_id: ws.id, subscription_id: webhook.id }).select('id');
  if (!delivery) throw new Error('fixture: no webhook delivery recorded');
  return {
    ws,
    contact,
    tag,
    list,
    note,
    pipeline,
    member,
    product,
    deal,
    task,
    instance,
    conversation,
    message: { id: message.id },
    webhook,
    delivery,
    automation,
    broadcast,
  };
}

/** A broadcast of the fixture's approved template `fixture` to one lead, starting in 30 days. */
const broadcastBody = (instanceId: string, contactId: string, name: string) => ({
  name,
  instanceId,
  audience: { leadIds: [contactId] },
  template: { name: 'fixture', language: 'pt_BR' },
  scheduledAt: new Date(Date.now() + 30 * 86_400_000).toISOString(),
});

/** Every row of a workspace, in every table that carries workspace_id (rate-limit counters and keys' last_used_at aside). */
export async function snapshot(api: TestApi, workspaceId: string): Promise<Record<string, unknown[]>> {
  const tables: string[] = (
    await api.db.raw(
      `SELECT DISTINCT table_name FROM information_schema.columns WHERE column_name = 'workspace_id' AND table_schema = 'public' AND table_name <> 'rate_limit_counters' ORDER BY 1`,
    )
  ).rows.map((r: { table_name: string }) => r.table_name);
  const out: Record<string, unknown[]> = {};
  // Ordered by the whole row: by the first column alone (workspace_id in most tables) the order of
  // equal keys followed the plan, which changes when autovacuum analyses the table mid-test.
  for (const t of tables) out[t] = await api.db(t).where({ workspace_id: workspaceId }).orderByRaw('??::text', [t]).select('*');
  // Authentication's own bookkeeping (a key was used), not a change a request made.
  for (const key of out.api_keys as { last_used_at?: unknown }[]) delete key.last_used_at;
  out.workspace = await api.db('workspaces').where({ id: workspaceId }).select('*');
  return out;
}

/** Which fixture record a path parameter names, by the collection segment before it. */
const BY_SEGMENT: Record<string, (f: Fixture) => string> = {
  deals: (f) => f.deal.id,
  leads: (f) => f.contact.id,
  contacts: (f) => f.contact.id,
  notes: (f) => f.note.id,
  tags: (f) => f.tag.id,
  lists: (f) => f.list.id,
  products: (f) => f.product.id,
  tasks: (f) => f.task.id,
  conversations: (f) => f.conversation.id,
  messages: (f) => f.message.id,
  webhooks: (f) => f.webhook.id,
  deliveries: (f) => f.delivery.id,
  automations: (f) => f.automation.id,
  workspaces: (f) => f.ws.id,
  'api-keys': (f) => f.ws.keyId,
  instances: (f) => f.instance.id,
  broadcasts: (f) => f.broadcast.id,
};

/** `/api/v1/deals/{id}` with the fixture's deal id; throws for a collection it does not know. */
export function withIds(path: string, f: Fixture): string {
  return path.replace(/\/([a-z-]+)\/\{(\w+)\}/g, (_m, segment: string) => {
    const pick = BY_SEGMENT[segment];
    if (!pick) throw new Error(`reliability fixture: no record for /${segment}/{…}; add it to BY_SEGMENT`);
    return `/${segment}/${pick(f)}`;
  });
}

/** A body that would succeed on the fixture's own records, so only auth can make a write fail. */
export const BODIES: Record<string, (f: Fixture, receiverUrl: string) => unknown> = {
  'post /api/v1/deals': (f) => ({ contactId: f.contact.id, pipeline: f.pipeline.id, name: 'sneaked in' }),
  'patch /api/v1/deals/{id}': () => ({ name: 'hijacked', status: 'won' }),
  'post /api/v1/leads': () => ({ phone: uniquePhone(), name: 'sneaked in' }),
  'post /api/v1/leads/batch': () => ({ leads: [{ phone: uniquePhone(), name: 'sneaked in' }] }),
  'post /api/v1/deals/batch': (f) => ({
    deals: [
      { contactId: f.contact.id, pipeline: f.pipeline.id, name: 'sneaked in' },
      { id: f.deal.id, name: 'hijacked' },
    ],
  }),
  'patch /api/v1/leads/{id}': () => ({ name: 'hijacked' }),
  'post /api/v1/leads/{id}/tags': () => ({ tag: 'hijacked' }),
  'post /api/v1/leads/{id}/notes': () => ({ body: 'hijacked' }),
  'patch /api/v1/leads/{id}/notes/{noteId}': () => ({ body: 'hijacked' }),
  'post /api/v1/tags': () => ({ name: 'sneaked-in' }),
  'patch /api/v1/tags/{id}': () => ({ name: 'hijacked' }),
  'post /api/v1/lists': () => ({ name: 'sneaked in' }),
  'patch /api/v1/lists/{id}': () => ({ name: 'hijacked' }),
  'post /api/v1/lists/{id}/contacts': (f) => ({ contactIds: [f.contact.id] }),
  'post /api/v1/products': () => ({ name: 'sneaked in', price: '1.00' }),
  'patch /api/v1/products/{id}': () => ({ name: 'hijacked' }),
  'post /api/v1/tasks': () => ({ title: 'sneaked in' }),
  'patch /api/v1/tasks/{id}': () => ({ title: 'hijacked' }),
  'patch /api/v1/conversations/{id}': () => ({ status: 'closed' }),
  'post /api/v1/messages': (f) => ({ phone: uniquePhone(), instanceId: f.instance.id, type: 'text', text: 'hello' }),
  'post /api/v1/conversations/{id}/messages': () => ({ type: 'text', text: 'hello' }),
  'post /api/v1/webhooks': (_f, url) => ({ url: `${url}/ok/sneaked`, events: ['*'] }),
  'patch /api/v1/webhooks/{id}': () => ({ active: false }),
  'post /api/v1/automations': () => ({ name: 'sneaked in', trigger: { type: 'deal_won' }, actions: [{ type: 'add_tag', tag: 'x' }] }),
  'patch /api/v1/automations/{id}': () => ({ name: 'hijacked', active: false }),
  'post /api/v1/broadcasts': (f) => broadcastBody(f.instance.id, f.contact.id, 'sneaked in'),
  // Admin
  'post /admin/v1/workspaces': () => ({ name: 'sneaked in' }),
  'post /admin/v1/temporal-codec/decode': () => ({ payloads: [] }),
  'post /admin/v1/temporal-codec/encode': () => ({ payloads: [] }),
  'patch /admin/v1/workspaces/{id}': () => ({ name: 'hijacked', plan: { active: false } }),
  'post /admin/v1/workspaces/{id}/api-keys': () => ({ name: 'sneaked in', scopes: [...ALL_SCOPES] }),
  'patch /admin/v1/workspaces/{id}/api-keys/{keyId}': () => ({ rateLimitPerMinute: 1 }),
  'post /admin/v1/workspaces/{id}/members': () => ({ name: 'sneaked in', email: `sneak.${Date.now()}@example.com` }),
  'post /admin/v1/workspaces/{id}/pipelines': () => ({ name: 'sneaked in', stages: [{ name: 'S' }] }),
  'post /admin/v1/workspaces/{id}/custom-fields': () => ({ key: `sneaked_${Date.now()}`, label: 'Sneaked in', type: 'text' }),
  'post /admin/v1/workspaces/{id}/instances': () => ({ name: 'sneaked in', channel: 'whatsapp', provider: 'cloud' }),
  'patch /admin/v1/workspaces/{id}/instances/{instanceId}': () => ({ connected: false, archived: true }),
  'post /admin/v1/workspaces/{id}/templates': (f) => ({ instanceId: f.instance.id, name: 'sneaked_in', language: 'pt_BR' }),
  'post /admin/v1/workspaces/{id}/broadcasts': (f) => ({ tagIds: [f.tag.id], status: 'in_progress' }),
  'put /admin/v1/workspaces/{id}/contacts/{contactId}/insight': () => ({ summary: 'hijacked' }),
  'post /admin/v1/workspaces/{id}/contacts': (f) => ({ phone: uniquePhone(), name: 'sneaked in', memberId: f.member.id }),
  'patch /admin/v1/workspaces/{id}/contacts/{contactId}': (f) => ({ name: 'hijacked', memberId: f.member.id }),
  // The fixture has one contact, so with valid credentials this is 400 (a contact into itself):
  // the matrix only sends admin bodies with bad credentials, where the shape is what counts.
  'post /admin/v1/workspaces/{id}/contacts/{contactId}/merge': (f) => ({ intoId: f.contact.id }),
  'post /admin/v1/workspaces/{id}/conversations/{conversationId}/messages': (f) => ({ memberId: f.member.id, text: 'from the panel' }),
};

export const routeKey = (r: AnyRoute): string => `${r.method} ${r.path}`;

/** Runs `fn` over `items` with at most `width` in flight (the machine is small and shared). */
export async function inBatches<T, R>(items: T[], width: number, fn: (item: T, index: number) => Promise<R>): Promise<R[]> {
  const out: R[] = new Array(items.length);
  let next = 0;
  const workers = Array.from({ length: Math.min(width, items.length) }, async () => {
    for (;;) {
      const i = next++;
      if (i >= items.length) return;
      out[i] = await fn(items[i], i);
    }
  });
  await Promise.all(workers);
  return out;
}
