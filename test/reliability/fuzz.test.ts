/**
 * Property-based fuzzing of every endpoint in ROUTES (fast-check), against the real stack.
 *
 * Each case generates the path parameters, the query string and the body together (plus, now and
 * then, odd Authorization / Content-Type / Idempotency-Key headers) and sends them as raw HTTP, so
 * the server sees exactly the bytes generated (no client-side URL normalisation). Whatever comes
 * back must hold:
 *   - never a 5xx (nor a 3xx);
 *   - every 4xx is the flat error body `{ error, code, hint? }` with a code of the
 *     contract's list (domain/kernel/errors ERROR_CODES) whose status is the one answered;
 *   - every 2xx validates against the route's `response` zod schema when it has one.
 * After the run (once before the destructive endpoints, once after) every record of the fixture
 * workspace is listed back through the API and validated with the routes' response schemas, so
 * nothing the fuzzing managed to store violates them.
 *
 * Generators: (a) random JSON, (b) mutations of a valid example body per route (dropped fields,
 * wrong types, null, empty and very long strings around the schema's bounds, unicode, NUL and
 * control characters, huge / negative / fractional / non-finite numbers written as raw JSON
 * tokens, unknown keys, arrays at and over their bounds, deep nesting), and values derived from
 * the route's zod schema: the valid example with ONE field at an edge its own schema accepts
 * (int32 and safe-integer edges, lengths at the bound counted in code points and in UTF-16 units,
 * formats, far dates), which is what gets past validation into the database; (c) path
 * parameters: the fixture's own records, other records, random UUIDs, malformed and
 * percent-encoded junk, (d) query strings: known keys with good and bad values, a valid query
 * with one pair broken, random keys, repeated keys, raw junk.
 *
 * Reproduce: the base seed is printed (FUZZ_SEED overrides it); each endpoint's seed is derived
 * from it and its route key, so adding an endpoint does not change the others. FUZZ_RUNS changes
 * the number of cases, FUZZ_ONLY=<substring of "METHOD path"> restricts the endpoints,
 * FUZZ_SHRINK=1 lets fast-check shrink a failure (slow against a live server), FUZZ_VERBOSE=1
 * prints every case. Every case is written to <TEST_STACK_DIR>/fuzz-cases.log either way.
 */
import { createHmac } from 'node:crypto';
import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import fc from 'fast-check';
import { ROUTES } from '../../api/app';
import type { AnyRoute } from '../../api/route';
import { ERROR_CODES } from '../../domain/kernel/errors';
import { ALL_SCOPES } from '../../domain/access/scopes';
import { openText } from '../../domain/platform/encryption';
import {
  createKey,
  createWorkspace,
  Receiver,
  seedContact,
  seedMember,
  seedPipeline,
  settleOutbox,
  startApi,
  startReceiver,
  TestApi,
  uniqueIp,
  Workspace,
} from '../helpers';
import { uniqueMobile } from '../phones';

const SEED = Number(process.env.FUZZ_SEED ?? 424242);
const RUNS = Number(process.env.FUZZ_RUNS ?? 200);
const SHRINK = process.env.FUZZ_SHRINK === '1';
const VERBOSE = process.env.FUZZ_VERBOSE === '1';
const ONLY = process.env.FUZZ_ONLY;
const EMULATOR = process.env.EMULATOR_URL!;
const APP_SECRET = 'fuzz-app-secret';
const VERIFY_TOKEN = 'fuzz-verify-token';
const STACK_DIR = process.env.TEST_STACK_DIR
  ? path.resolve(process.env.TEST_STACK_DIR)
  : path.resolve(__dirname, '..', '..', '.data', 'test');
const CASE_LOG = path.join(STACK_DIR, 'fuzz-cases.log');

let api: TestApi;
let receiver: Receiver;
let agent: http.Agent;
let f: Fixture;
let g: AdminFixture;

/* ------------------------------------------------------------------------------------------------
 * Fixture: one workspace with one record of every kind (an API key with every scope), and a
 * separate workspace for the admin endpoints (so a fuzzed plan change never locks the first out).
 * ---------------------------------------------------------------------------------------------- */

interface Fixture {
  ws: Workspace;
  contact: { id: string; phone: string; name: string };
  contact2: { id: string; phone: string };
  tag: { id: string; name: string };
  list: { id: string };
  note: { id: string };
  pipeline: { id: string; name: string; stages: { id: string; name: string }[] };
  member: { id: string; name: string };
  product: { id: string; name: string };
  deal: { id: string };
  task: { id: string };
  instance: { id: string; phoneNumberId: string };
  conversation: { id: string };
  /** The fixture's inbound message (text: its media route answers 404, no file). */
  message: { id: string };
  /** Ping, deliveries and retry aim here (events card.won only, so few deliveries pile up). */
  webhookRead: { id: string };
  /** PATCH and DELETE aim here. */
  webhookEdit: { id: string };
  delivery: { id: string };
  /** The inbound receiver and the run log aim here (its token is re-read before the receiver is fuzzed). */
  automationIn: { id: string; token: string };
  /** PATCH, token regeneration and removal, DELETE aim here. */
  automationEdit: { id: string };
  /** Scheduled far ahead: reads, pause/resume (409) and cancel aim here. */
  broadcast: { id: string };
}

interface AdminFixture {
  wsId: string;
  keyIds: string[];
  instanceId: string;
  contactId: string;
  memberId: string;
  tagId: string;
  /** The panel reply's conversation (the admin instance is a web gateway without a base URL: a send is refused or fails, never reaches anyone). */
  conversationId: string;
}

/** A distinct Brazilian mobile (area 11, ninth digit), from the one allocator (../phones). */
const mobile = (): string => uniqueMobile('11');
/**
 * A mobile derived from a generated number (for example bodies): one of 1,000 of this file's own
 * allocator numbers, the same one for the same `n % 1000`, so a case still reads the same number
 * for the same seed (and n, n + 1 are two numbers).
 */
const generatedMobiles = new Map<number, string>();
const mobileOf = (n: number): string => {
  const slot = ((n % 1000) + 1000) % 1000;
  if (!generatedMobiles.has(slot)) generatedMobiles.set(slot, uniqueMobile('11'));
  return generatedMobiles.get(slot)!;
};

const sign = (raw: string, secret = APP_SECRET): string => `sha256=${createHmac('sha256', secret).update(raw, 'utf8').digest('hex')}`;

/** A Cloud API notification of one inbound text (sent now, so it opens the 24-hour window) and one unknown status. */
function inboundPayload(phoneNumberId: string, from: string, id: string, text: string) {
  return {
    object: 'whatsapp_business_account',
    entry: [
      {
        id: 'WABA-FUZZ',
        changes: [
          {
            field: 'messages',
            value: {
              messaging_product: 'whatsapp',
              metadata: { display_phone_number: '551130000000', phone_number_id: phoneNumberId },
              contacts: [{ profile: { name: 'Fuzz Sender' }, wa_id: from }],
              messages: [{ from, id, timestamp: String(Math.floor(Date.now() / 1000)), type: 'text', text: { body: text } }],
              statuses: [{ id: `wamid.unknown.${id}`, status: 'delivered', recipient_id: from }],
            },
          },
        ],
      },
    ],
  };
}

async function buildFixture(): Promise<Fixture> {
  const ws = await createWorkspace(api, {
    name: 'Fuzz workspace',
    scopes: [...ALL_SCOPES],
    rateLimitPerMinute: 1000,
    // Bounds what valid fuzzed bodies can pile up: subscriptions (each would get deliveries) and inbound URLs.
    plan: { webhookQuota: 4, inboundWebhookQuota: 4 },
  });
  const call = async (method: string, p: string, body?: unknown) => {
    const res = await api.request(method, p, { key: ws.key, body });
    if (res.status >= 300) throw new Error(`fixture ${method} ${p}: ${res.status} ${res.text}`);
    return res.body.data;
  };
  const admin = async (method: string, p: string, body?: unknown) => {
    const res = await api.admin(method, p, body);
    if (res.status >= 300) throw new Error(`fixture ${method} ${p}: ${res.status} ${res.text}`);
    return res.body.data;
  };
  const pipeline = await seedPipeline(api, ws.id, {
    name: 'Sales',
    stages: ['New', 'Proposal', 'Closing'],
    customFields: [
      { key: 'budget', label: 'Budget', type: 'number' },
      { key: 'channel', label: 'Channel', type: 'text' },
    ],
  });
  const member = await seedMember(api, ws.id, 'Fuzz Member');
  const contact = await seedContact(api, ws.id, { phone: mobile(), name: 'Fuzz Lead', email: 'fuzz.lead@example.com' });
  const contact2 = await seedContact(api, ws.id, { phone: mobile(), name: 'Second Lead' });
  const tag = await call('POST', '/api/v1/tags', { name: 'fuzz-tag', color: '#ff8800' });
  await call('POST', `/api/v1/leads/${contact.id}/tags`, { tag: tag.id });
  const list = await call('POST', '/api/v1/lists', { name: 'Fuzz list' });
  await call('POST', `/api/v1/lists/${list.id}/contacts`, { contactIds: [contact.id, contact2.id] });
  const note = await call('POST', `/api/v1/leads/${contact.id}/notes`, { body: 'first note', authorId: member.id });
  const product = await call('POST', '/api/v1/products', { name: 'Fuzz product', price: '10.50', sku: 'FZ-1' });
  const deal = await call('POST', '/api/v1/deals', {
    contactId: contact.id,
    pipeline: pipeline.id,
    product: product.id,
    assignedTo: member.id,
    value: 100,
    customValues: { budget: 5 },
  });
  const task = await call('POST', '/api/v1/tasks', {
    title: 'call back',
    contactId: contact.id,
    cardId: deal.id,
    assignedTo: member.id,
    dueDate: '2030-01-01T10:00:00Z',
  });
  const phoneNumberId = `PN-FUZZ-${ws.id.slice(0, 8)}`;
  const instance = await admin('POST', `/admin/v1/workspaces/${ws.id}/instances`, {
    name: 'WA',
    channel: 'whatsapp',
    provider: 'cloud',
    connected: true,
    config: { baseUrl: EMULATOR, phoneNumberId, accessToken: 'fuzz-access-token', appSecret: APP_SECRET, verifyToken: VERIFY_TOKEN },
  });
  await admin('POST', `/admin/v1/workspaces/${ws.id}/templates`, {
    instanceId: instance.id,
    name: 'welcome',
    language: 'pt_BR',
    variableCount: 1,
    status: 'approved',
  });
  // The conversation comes from real provider traffic (which also opens the 24-hour window).
  const raw = JSON.stringify(inboundPayload(phoneNumberId, contact.phone, 'wamid.fuzz.fixture', 'Oi'));
  const inbound = await api.request('POST', `/webhooks/whatsapp/${instance.id}`, {
    rawBody: raw,
    headers: { 'content-type': 'application/json', 'x-hub-signature-256': sign(raw) },
  });
  if (inbound.status !== 200 || inbound.body.data.received !== 1) throw new Error(`fixture inbound: ${inbound.status} ${inbound.text}`);
  const conversation = await api.db('conversations').where({ workspace_id: ws.id, contact_id: contact.id }).first('id');
  const message = await api.db('messages').where({ workspace_id: ws.id, provider_message_id: 'wamid.fuzz.fixture' }).first('id');
  const webhookRead = await call('POST', '/api/v1/webhooks', { url: `${receiver.url}/ok/fuzz-read`, events: ['card.won'] });
  const webhookEdit = await call('POST', '/api/v1/webhooks', { url: `${receiver.url}/ok/fuzz-edit`, events: ['card.lost'] });
  await call('PATCH', `/api/v1/deals/${deal.id}`, { status: 'won' });
  await settleOutbox(api, ws.id);
  const delivery = await api.db('webhook_deliveries').where({ workspace_id: ws.id, subscription_id: webhookRead.id }).first('id');
  if (!delivery) throw new Error('fixture: no delivery for the card.won subscription');
  const automationIn = await call('POST', '/api/v1/automations', {
    name: 'Paid orders',
    trigger: {
      type: 'webhook_received',
      eventFilter: { path: 'event', op: 'equals', value: 'order.paid' },
      mapping: { externalId: 'order.id', phone: 'customer.phone', name: 'customer.name' },
    },
    actions: [{ type: 'add_tag', tag: 'paid' }],
  });
  const automationEdit = await call('POST', '/api/v1/automations', {
    name: 'Editable',
    trigger: { type: 'webhook_received' },
    actions: [{ type: 'add_note', body: 'hello {{webhook.x}}' }],
  });
  const broadcast = await call('POST', '/api/v1/broadcasts', broadcastBody(contact.id, 0));
  return {
    ws,
    contact: { id: contact.id, phone: contact.phone, name: contact.name },
    contact2: { id: contact2.id, phone: contact2.phone },
    tag: { id: tag.id, name: tag.name },
    list: { id: list.id },
    note: { id: note.id },
    pipeline: { id: pipeline.id, name: pipeline.name, stages: pipeline.stages.map((s) => ({ id: s.id, name: s.name })) },
    member: { id: member.id, name: member.name },
    product: { id: product.id, name: product.name },
    deal: { id: deal.id },
    task: { id: task.id },
    instance: { id: instance.id, phoneNumberId },
    conversation: { id: conversation.id },
    message: { id: message.id },
    webhookRead: { id: webhookRead.id },
    webhookEdit: { id: webhookEdit.id },
    delivery: { id: delivery.id },
    automationIn: { id: automationIn.id, token: String(automationIn.webhookUrl).split('/').pop()! },
    automationEdit: { id: automationEdit.id },
    broadcast: { id: broadcast.id },
  };
}

/** A broadcast of the approved template to one lead, 30 days ahead (it sends nothing during the run). */
const broadcastBody = (contactId: string, n: number) => ({
  name: `Broadcast ${n}`,
  audience: { leadIds: [contactId] },
  template: { name: 'welcome', language: 'pt_BR', variables: ['{{contact.name}}'] },
  scheduledAt: new Date(Date.now() + 30 * 86_400_000).toISOString(),
  ratePerSecond: 1 + (n % 80),
});

async function buildAdminFixture(): Promise<AdminFixture> {
  const ws = await api.admin('POST', '/admin/v1/workspaces', { name: 'Fuzz admin target' });
  const wsId: string = ws.body.data.id;
  const keyIds: string[] = [];
  for (let i = 0; i < 3; i++) keyIds.push((await createKey(api, wsId, ['deals:read'])).id);
  const tagKey = await createKey(api, wsId, ['tags:write']);
  const tag = await api.request('POST', '/api/v1/tags', { key: tagKey.key, body: { name: 'admin-tag' } });
  const instance = await api.admin('POST', `/admin/v1/workspaces/${wsId}/instances`, {
    name: 'Admin WA',
    channel: 'whatsapp',
    provider: 'web',
    config: { instanceName: 'fuzz-admin' },
  });
  const contact = await seedContact(api, wsId, { phone: mobile(), name: 'Admin Lead' });
  const member = await seedMember(api, wsId, 'Admin Member');
  const [conversation] = await api
    .db('conversations')
    .insert({ workspace_id: wsId, contact_id: contact.id, instance_id: instance.body.data.id, channel: 'whatsapp' })
    .returning('id');
  return {
    wsId,
    keyIds,
    instanceId: instance.body.data.id,
    contactId: contact.id,
    memberId: member.id,
    tagId: tag.body.data.id,
    conversationId: conversation.id,
  };
}

const allFixtureIds = (): string[] => [
  f.contact.id,
  f.contact2.id,
  f.tag.id,
  f.list.id,
  f.note.id,
  f.pipeline.id,
  ...f.pipeline.stages.map((s) => s.id),
  f.member.id,
  f.product.id,
  f.deal.id,
  f.task.id,
  f.instance.id,
  f.conversation.id,
  f.webhookRead.id,
  f.webhookEdit.id,
  f.delivery.id,
  f.automationIn.id,
  f.automationEdit.id,
  f.ws.id,
  g.wsId,
  g.instanceId,
  g.contactId,
];

/* ------------------------------------------------------------------------------------------------
 * Valid example bodies, one per route that takes a body (a test below checks the table is
 * complete and that each example passes the route's own body schema). `n` is generated per case.
 * ---------------------------------------------------------------------------------------------- */

type Example = (n: number) => unknown;

const EXAMPLES: Record<string, Example> = {
  'post /api/v1/deals': (n) => ({
    contactId: n % 5 ? f.contact.id : f.contact2.id,
    pipeline: n % 2 ? f.pipeline.id : 'sales',
    stage: f.pipeline.stages[n % 3].name,
    name: `Deal ${n}`,
    value: (n % 100000) / 100,
    product: n % 3 ? f.product.id : `Product from deal ${n % 7}`,
    source: 'fuzz',
    assignedTo: n % 2 ? f.member.id : f.member.name,
    customValues: { budget: n % 1000, channel: 'web', unknownKey: 'dropped' },
  }),
  'patch /api/v1/deals/{id}': (n) =>
    [
      { status: 'lost', lostReason: 'price' },
      { stageId: f.pipeline.stages[n % 3].id, name: `Deal renamed ${n}` },
      { status: 'open', value: null, assignedTo: null },
      { status: 'won', value: 10.5, assignedTo: f.member.id, customValues: { budget: null, channel: 'phone' } },
    ][n % 4],
  'post /api/v1/leads': (n) => ({
    phone: mobileOf(n),
    name: `Lead ${n}`,
    email: `lead${n}@example.com`,
    notes: 'from the fuzz',
    tags: ['fuzz', `t${n % 5}`],
  }),
  'post /api/v1/leads/batch': (n) => ({
    leads: [
      { phone: mobileOf(n), name: `Batch lead ${n}`, tags: ['fuzz'] },
      { phone: mobileOf(n + 1), email: `batch${n}@example.com`, notes: 'from the fuzz batch' },
    ],
  }),
  'post /api/v1/deals/batch': (n) => ({
    deals: [
      { contactId: f.contact.id, pipeline: f.pipeline.id, name: `Batch deal ${n}`, value: n % 1000 },
      { id: f.deal.id, stageId: f.pipeline.stages[n % 3].id, name: `Batch renamed ${n}` },
    ],
  }),
  'patch /api/v1/leads/{id}': (n) => ({ name: `Renamed ${n}`, notes: `notes ${n}`, email: n % 2 ? null : 'renamed@example.com' }),
  'post /api/v1/leads/{id}/tags': (n) => ({ tag: n % 2 ? f.tag.id : `tag-${n % 7}` }),
  'post /api/v1/leads/{id}/notes': (n) => (n % 2 ? { body: `note ${n}`, authorId: f.member.id } : { body: `note ${n}` }),
  'patch /api/v1/leads/{id}/notes/{noteId}': (n) => ({ body: `edited ${n}` }),
  'post /api/v1/tags': (n) => ({ name: `tag ${n}`, color: '#00aa11' }),
  'patch /api/v1/tags/{id}': (n) => ({ name: `fuzz-tag-${n % 3}`, color: '#123abc' }),
  'post /api/v1/lists': (n) => ({ name: `List ${n}` }),
  'patch /api/v1/lists/{id}': (n) => ({ name: `List renamed ${n}` }),
  'post /api/v1/lists/{id}/contacts': (n) => ({ contactIds: n % 2 ? [f.contact.id, f.contact2.id] : [f.contact2.id] }),
  'post /api/v1/products': (n) => ({
    name: `Product ${n}`,
    description: 'A product',
    sku: `SKU-${n}`,
    price: n % 2 ? '19.90' : 19.9,
    active: true,
  }),
  'patch /api/v1/products/{id}': (n) => ({ price: n % 2 ? '0.01' : null, description: null, active: n % 3 !== 0 }),
  'post /api/v1/tasks': (n) => ({
    title: `Task ${n}`,
    type: 'call',
    dueDate: '2031-05-06T07:08:09Z',
    status: 'pending',
    contactId: f.contact.id,
    cardId: f.deal.id,
    assignedTo: f.member.id,
  }),
  'patch /api/v1/tasks/{id}': (n) => ({ status: n % 2 ? 'done' : 'pending', dueDate: n % 3 ? null : '2032-01-01', title: `updated ${n}` }),
  'patch /api/v1/conversations/{id}': (n) => ({ status: ['open', 'waiting', 'snoozed', 'closed'][n % 4] }),
  'post /api/v1/messages': (n) =>
    [
      {
        phone: f.contact.phone,
        instanceId: f.instance.id,
        type: 'template',
        templateName: 'welcome',
        templateLanguage: 'pt_BR',
        templateVariables: ['Ana'],
      },
      { phone: f.contact.phone, type: 'text', text: `hello ${n}` },
      {
        phone: f.contact.phone,
        instanceId: f.instance.id,
        type: 'image',
        mediaUrl: `${EMULATOR}/__emulator/media/1000/photo.jpg`,
        caption: 'a photo',
      },
    ][n % 3],
  'post /api/v1/conversations/{id}/messages': (n) =>
    n % 2
      ? { type: 'text', text: `hello ${n}` }
      : { type: 'document', mediaUrl: `${EMULATOR}/__emulator/media/2000/file.pdf`, fileName: 'file.pdf', caption: 'doc' },
  'post /api/v1/broadcasts': (n) => broadcastBody(f.contact.id, n),
  'post /api/v1/webhooks': (n) => ({ url: `${receiver.url}/ok/new-${n}`, events: ['card.lost'], active: true }),
  'patch /api/v1/webhooks/{id}': (n) =>
    n % 2 ? { events: ['card.lost', 'card.won'], active: true } : { url: `${receiver.url}/ok/edited-${n}` },
  'post /api/v1/automations': (n) => ({
    name: `Flow ${n}`,
    active: true,
    trigger: { type: 'deal_lost' },
    actions: [
      { type: 'add_tag', tag: 'lost' },
      { type: 'create_task', title: 'follow up', dueInMinutes: 60 },
    ],
  }),
  'patch /api/v1/automations/{id}': (n) => ({
    name: `Edited ${n}`,
    active: n % 3 !== 0,
    actions: [{ type: 'add_note', body: 'note {{webhook.x}}' }],
  }),
  'post /api/automations/webhook-in/{token}': (n) => ({
    event: 'order.paid',
    order: { id: `order-${n % 50}` },
    customer: { phone: f.contact.phone, name: 'Buyer' },
  }),
  'post /webhooks/whatsapp/{instanceId}': (n) => inboundPayload(f.instance.phoneNumberId, mobileOf(n), `wamid.fuzz.${n}`, `message ${n}`),
  'post /admin/v1/temporal-codec/encode': (n) => ({
    payloads: [
      { metadata: { encoding: Buffer.from('json/plain').toString('base64') }, data: Buffer.from(JSON.stringify({ n })).toString('base64') },
    ],
  }),
  'post /admin/v1/temporal-codec/decode': (n) => ({
    payloads: [
      { metadata: { encoding: Buffer.from('json/plain').toString('base64') }, data: Buffer.from(JSON.stringify({ n })).toString('base64') },
    ],
  }),
  'post /admin/v1/workspaces': (n) => ({
    name: `Workspace ${n}`,
    plan: {
      dealLimit: 10,
      dailyMessageQuota: 100,
      broadcastLimit: 1000,
      inboundWebhookQuota: 1,
      webhookQuota: 2,
      apiAccess: true,
      active: true,
    },
  }),
  'patch /admin/v1/workspaces/{id}': (n) => ({ name: `Renamed ${n}`, plan: { dealLimit: null, active: true } }),
  'post /admin/v1/workspaces/{id}/api-keys': (n) => ({
    name: `key ${n}`,
    scopes: ['deals:read', 'tags:write'],
    rateLimitPerMinute: 60,
    expiresAt: '2030-01-01T00:00:00Z',
  }),
  'patch /admin/v1/workspaces/{id}/api-keys/{keyId}': (n) => ({ rateLimitPerMinute: 1 + (n % 1000) }),
  'post /admin/v1/workspaces/{id}/members': (n) => ({ name: `Member ${n}`, email: `member${n}@example.com` }),
  'post /admin/v1/workspaces/{id}/pipelines': (n) => ({
    name: `Pipeline ${n}`,
    stages: [{ name: 'One' }, { name: 'Two' }],
    customFields: [{ key: 'score', label: 'Score', type: 'number' }],
  }),
  'post /admin/v1/workspaces/{id}/custom-fields': (n) => ({ key: `global${n}`, label: `Global ${n}`, type: n % 2 ? 'text' : 'date' }),
  'post /admin/v1/workspaces/{id}/instances': (n) => ({
    name: `Instance ${n}`,
    channel: 'whatsapp',
    provider: 'cloud',
    connected: false,
    archived: false,
    config: {
      baseUrl: EMULATOR,
      phoneNumberId: `PN-${n}`,
      accessToken: 't',
      appSecret: 's',
      verifyToken: 'v',
      apiVersion: 'v21.0',
      instanceName: 'x',
    },
  }),
  'patch /admin/v1/workspaces/{id}/instances/{instanceId}': (n) => ({ connected: n % 2 === 0, config: { accessToken: `token-${n}` } }),
  'post /admin/v1/workspaces/{id}/templates': (n) => ({
    instanceId: g.instanceId,
    name: `tpl_${n}`,
    language: 'pt_BR',
    variableCount: 2,
    status: 'approved',
  }),
  'post /admin/v1/workspaces/{id}/broadcasts': () => ({ tagIds: [g.tagId], status: 'draft' }),
  'put /admin/v1/workspaces/{id}/contacts/{contactId}/insight': () => ({
    interest: 'high',
    products: ['a'],
    objections: { price: true },
    nextStep: 'call',
    qualification: 3,
    summary: 'ok',
  }),
  'post /admin/v1/workspaces/{id}/contacts': (n) => ({
    name: `Panel ${n}`,
    email: 'panel@example.com',
    phone: mobileOf(n),
    notes: 'n',
    tags: ['vip'],
    memberId: g.memberId,
  }),
  'patch /admin/v1/workspaces/{id}/contacts/{contactId}': (n) => ({
    name: `Edited ${n}`,
    notes: 'x',
    tags: ['vip', 'new'],
    memberId: g.memberId,
  }),
  // Into the path's own contact (400): a merge that succeeded would hide the admin fixture's contact from later steps.
  'post /admin/v1/workspaces/{id}/contacts/{contactId}/merge': () => ({ intoId: g.contactId }),
  'post /admin/v1/workspaces/{id}/conversations/{conversationId}/messages': (n) => ({ memberId: g.memberId, text: `panel ${n}` }),
};

/* ------------------------------------------------------------------------------------------------
 * Path parameters: which fixture record a parameter names, per route (default by segment).
 * ---------------------------------------------------------------------------------------------- */

const routeKey = (r: AnyRoute): string => `${r.method} ${r.path}`;
const paramNames = (r: AnyRoute): string[] => [...r.path.matchAll(/\{(\w+)\}/g)].map((m) => m[1]);

function ownIds(r: AnyRoute, param: string): string[] {
  const key = routeKey(r);
  if (r.auth === 'admin') {
    if (param === 'id') return [g.wsId];
    if (param === 'keyId') return g.keyIds;
    if (param === 'instanceId') return [g.instanceId];
    if (param === 'contactId') return [g.contactId];
    if (param === 'conversationId') return [g.conversationId];
  }
  if (param === 'token') return [f.automationIn.token];
  if (param === 'instanceId') return [f.instance.id];
  if (param === 'noteId') return [f.note.id];
  if (param === 'tagId') return [f.tag.id];
  if (param === 'deliveryId') return [f.delivery.id];
  if (param === 'contactId') return [f.contact.id, f.contact2.id];
  const segment = /\/([a-z-]+)\/\{id\}/.exec(r.path)?.[1];
  switch (segment) {
    case 'deals':
      return [f.deal.id];
    case 'leads':
      return [f.contact.id];
    case 'tags':
      return [f.tag.id];
    case 'lists':
      return [f.list.id];
    case 'products':
      return [f.product.id];
    case 'tasks':
      return [f.task.id];
    case 'conversations':
      return [f.conversation.id];
    case 'webhooks':
      return r.method === 'patch' || r.method === 'delete' ? [f.webhookEdit.id] : [f.webhookRead.id];
    case 'automations':
      return r.method === 'get' && !key.endsWith('/runs')
        ? [f.automationIn.id, f.automationEdit.id]
        : key.endsWith('/runs')
          ? [f.automationIn.id]
          : [f.automationEdit.id];
    case 'broadcasts':
      return [f.broadcast.id];
    case 'messages':
      return [f.message.id];
    case 'instances':
      return [f.instance.id];
    default:
      throw new Error(`fuzz: no fixture record for {${param}} of ${key}; add it to ownIds`);
  }
}

/* ------------------------------------------------------------------------------------------------
 * Schema introspection (zod 4 internals, read-only): numeric bounds and enum values.
 * ---------------------------------------------------------------------------------------------- */

type ZodDef = Record<string, unknown>;

function walkZod(schema: unknown, visit: (def: ZodDef) => void, seen = new Set<unknown>()): void {
  const def = (schema as { _zod?: { def?: ZodDef } } | undefined)?._zod?.def;
  if (!def || seen.has(schema)) return;
  seen.add(schema);
  visit(def);
  for (const value of Object.values(def)) {
    if (Array.isArray(value)) value.forEach((v) => walkZod(v, visit, seen));
    else if (value && typeof value === 'object') {
      if ((value as { _zod?: unknown })._zod) walkZod(value, visit, seen);
      else for (const v of Object.values(value)) walkZod(v, visit, seen);
    }
  }
}

function boundsOf(schema: unknown): number[] {
  const out = new Set<number>();
  walkZod(schema, (def) => {
    for (const k of ['minimum', 'maximum', 'value']) {
      const v = def[k];
      if (typeof v === 'number' && Number.isFinite(v)) out.add(v);
    }
  });
  return [...out];
}

function enumValuesOf(schema: unknown): string[] {
  const out = new Set<string>();
  walkZod(schema, (def) => {
    if (def.type === 'enum' && def.entries && typeof def.entries === 'object')
      for (const v of Object.values(def.entries as object)) out.add(String(v));
    if (def.type === 'literal' && Array.isArray(def.values)) for (const v of def.values) out.add(String(v));
  });
  return [...out];
}

function shapeKeys(schema: unknown): string[] {
  const keys = new Set<string>();
  walkZod(schema, (def) => {
    if (def.type === 'object' && def.shape && typeof def.shape === 'object') for (const k of Object.keys(def.shape as object)) keys.add(k);
  });
  return [...keys];
}

/* ------------------------------------------------------------------------------------------------
 * Value generators
 * ---------------------------------------------------------------------------------------------- */

/** A JSON token written verbatim into the body (numbers JSON.stringify cannot produce). */
class RawToken {
  constructor(readonly token: string) {}
  toString(): string {
    return this.token.length > 40 ? `raw(${this.token.slice(0, 20)}…${this.token.length} chars)` : `raw(${this.token})`;
  }
  [fc.toStringMethod](): string {
    return this.toString();
  }
}

const LENGTHS = [
  0, 1, 2, 15, 16, 32, 33, 63, 64, 65, 100, 101, 120, 121, 200, 201, 255, 256, 320, 321, 500, 501, 512, 513, 1000, 1001, 1024, 1025, 2048,
  2049, 4096, 4097, 5000, 5001, 10_000, 10_001, 20_001,
];

function interestingLengths(bounds: number[]): number[] {
  const out = new Set<number>(LENGTHS);
  for (const b of bounds)
    if (Number.isInteger(b) && b >= 0 && b <= 30_000) [b - 1, b, b + 1].filter((x) => x >= 0).forEach((x) => out.add(x));
  return [...out].sort((a, b) => a - b);
}

const WEIRD_STRINGS = [
  '',
  ' ',
  '   ',
  '\t\n\r',
  '\u0000',
  'a\u0000b',
  '\u0001\u001f\u007f',
  '\u202e\u200b\ufeff',
  '\u2028\u2029',
  '😀',
  '👩‍👩‍👧‍👦',
  'e\u0301',
  'Ωмир中文العربية',
  '\ud800',
  'x\udfffy',
  '\\',
  '"',
  "'",
  '%',
  '_',
  '%s%n%x',
  '{{contact.name}}',
  '{{webhook.__proto__}}',
  "'; DROP TABLE contacts;--",
  '<script>alert(1)</script>',
  '../../etc/passwd',
  'null',
  'true',
  '0',
  '-1',
  '1e999',
  'NaN',
  'Infinity',
  'undefined',
  '__proto__',
  'constructor',
  'toString',
  '#FFFFFF',
  '#fff',
  'https://',
  'http://127.0.0.1:1/x',
  'http://[::1]:1/x',
  'https://user:pass@example.invalid/x',
  'ftp://example.invalid/x',
  'javascript:alert(1)',
  'file:///etc/passwd',
  '2026-02-30',
  '2026-13-01T00:00:00Z',
  '0000-01-01',
  '9999-12-31T23:59:59.999999+14:00',
  '1970-01-01T00:00:00-23:59',
  '2026-01-01T24:00',
  '+55 (11) 98765-4321',
  '5511987654321',
  '55 11 8765 4321',
  '551100000000',
  '00000000-0000-0000-0000-000000000000',
  'ffffffff-ffff-ffff-ffff-ffffffffffff',
  'Sales',
  'sales',
  'New',
  'Fuzz Member',
  'fuzz-tag',
  'Fuzz product',
  '*',
  'card.won',
  'open',
  'won',
  'lost',
  'text',
  'template',
  'image',
  'webhook_received',
  'contact_updated',
  'add_tag',
  'send_message',
];

const RAW_NUMBERS = [
  '1e999',
  '-1e999',
  '123456789012345678901234567890',
  '1.0000000000000000000001',
  '-0',
  '1E2',
  '0.1e-400',
  '-0.0',
  '1e-7',
  '99999999999999.999',
];

const NUMBERS = [
  0,
  -0,
  1,
  -1,
  0.5,
  0.001,
  0.005,
  1.005,
  10.999,
  2 ** 31 - 1,
  2 ** 31,
  -(2 ** 31) - 1,
  2 ** 53,
  2 ** 53 + 2,
  1e12,
  999_999_999_999.99,
  999_999_999_999.995,
  1e15,
  1e21,
  1e308,
  -1e308,
  5e-324,
  12_345_678_901_234.56,
];

function valueArb(ctx: { lengths: number[]; bounds: number[]; refs: () => string[] }): fc.Arbitrary<unknown> {
  const longString = fc
    .record({ len: fc.constantFrom(...ctx.lengths), ch: fc.constantFrom('a', 'é', '😀', ' ', '\u0000', '9', 'ab ', 'ü\u0301') })
    .map(({ len, ch }) => ch.repeat(Math.ceil(len / ch.length) || 0).slice(0, len));
  const strings = fc.oneof(
    { weight: 4, arbitrary: fc.constantFrom(...WEIRD_STRINGS) },
    { weight: 3, arbitrary: fc.string({ maxLength: 40 }) },
    { weight: 2, arbitrary: fc.string({ unit: 'binary', maxLength: 40 }) },
    { weight: 2, arbitrary: fc.string({ unit: 'grapheme', maxLength: 20 }) },
    { weight: 3, arbitrary: longString },
  );
  const boundNumbers = ctx.bounds.flatMap((b) => [b - 1, b, b + 1, b + 0.5, -b]);
  const numbers = fc.oneof(
    { weight: 3, arbitrary: fc.constantFrom(...NUMBERS, ...boundNumbers) },
    { weight: 2, arbitrary: fc.integer() },
    { weight: 2, arbitrary: fc.double({ noNaN: true, noDefaultInfinity: true }) },
    { weight: 2, arbitrary: fc.constantFrom(...RAW_NUMBERS).map((t) => new RawToken(t)) },
  );
  const refs = fc.oneof(
    {
      weight: 3,
      arbitrary: fc.nat().map((i) => {
        const ids = ctx.refs();
        return ids[i % ids.length];
      }),
    },
    {
      weight: 1,
      arbitrary: fc.nat().map((i) => {
        const ids = ctx.refs();
        return ids[i % ids.length].toUpperCase();
      }),
    },
    {
      weight: 1,
      arbitrary: fc.nat().map((i) => {
        const ids = ctx.refs();
        return `${ids[i % ids.length]}x`;
      }),
    },
    { weight: 2, arbitrary: fc.uuid() },
  );
  const leaf = fc.oneof(
    { weight: 6, arbitrary: strings },
    { weight: 4, arbitrary: numbers },
    { weight: 3, arbitrary: refs },
    { weight: 1, arbitrary: fc.boolean() },
    { weight: 2, arbitrary: fc.constant(null) },
  );
  const structures = fc.oneof(
    fc.constant([]),
    fc.constant({}),
    leaf.map((v) => [v]),
    fc
      .tuple(fc.constantFrom('value', 'id', 'name', 'type', '__proto__', 'constructor', ''), leaf)
      .map(([k, v]) => JSON.parse(`{${JSON.stringify(k)}: ${JSON.stringify(v instanceof RawToken ? 1 : v) ?? 'null'}}`)),
    fc.array(leaf, { maxLength: 5 }),
    fc
      .record({ len: fc.constantFrom(...ctx.lengths.filter((l) => l <= 1001)), v: leaf })
      .map(({ len, v }) => Array.from({ length: len }, () => v)),
    fc.nat({ max: 60 }).map((depth) => {
      let v: unknown = 'deep';
      for (let i = 0; i < depth; i++) v = i % 2 ? [v] : { a: v };
      return v;
    }),
    fc.jsonValue({ maxDepth: 2 }),
    // Nesting far beyond anything real, written as raw JSON (parsers and serialisers recurse).
    fc.constantFrom(1000, 100_000).map((depth) => new RawToken('['.repeat(depth) + ']'.repeat(depth))),
    fc.constantFrom(1000, 20_000).map((depth) => new RawToken('{"a":'.repeat(depth) + '1' + '}'.repeat(depth))),
  );
  return fc.oneof({ weight: 8, arbitrary: leaf }, { weight: 2, arbitrary: structures });
}

/* ------------------------------------------------------------------------------------------------
 * Schema-derived values: for the field at a path, the edges of its zod type (lengths at and past
 * its bounds, int32 / safe-integer / numeric edges, formats, enum look-alikes, arrays at and over
 * their bounds). These pass validation more often than random values, so they reach the handler
 * and the database, where the interesting failures are.
 * ---------------------------------------------------------------------------------------------- */

const zdef = (s: unknown): ZodDef | undefined => (s as { _zod?: { def?: ZodDef } } | undefined)?._zod?.def;
const WRAPPERS = new Set(['optional', 'nullable', 'default', 'prefault', 'catch', 'readonly', 'nonoptional', 'success']);

function unwrap(s: unknown): unknown {
  for (let i = 0; i < 20; i++) {
    const def = zdef(s);
    if (!def) return s;
    if (WRAPPERS.has(def.type as string)) s = def.innerType;
    else if (def.type === 'pipe') s = def.in;
    else if (def.type === 'lazy') s = (def.getter as () => unknown)();
    else return s;
  }
  return s;
}

function objectShape(s: unknown): Record<string, unknown> | undefined {
  const def = zdef(unwrap(s));
  return def?.type === 'object' ? (def.shape as Record<string, unknown>) : undefined;
}

/** The option of a union that the value (or the next key) belongs to. */
function unionOption(def: ZodDef, value: unknown, key: string | number | undefined): unknown {
  const options = def.options as unknown[];
  const disc = def.discriminator as string | undefined;
  if (disc && value && typeof value === 'object') {
    const want = (value as Record<string, unknown>)[disc];
    const hit = options.find((o) => enumValuesOf(objectShape(o)?.[disc]).includes(String(want)));
    if (hit) return hit;
  }
  if (typeof key === 'number') return options.find((o) => zdef(unwrap(o))?.type === 'array') ?? options[0];
  if (key !== undefined) return options.find((o) => objectShape(o)?.[key] !== undefined) ?? options[0];
  return options[0];
}

/** The zod schema of the field at `path` of `doc`, or undefined. */
function schemaAt(root: unknown, path: Path, doc: unknown): unknown {
  let s: unknown = root;
  let value: unknown = doc;
  for (const key of path) {
    s = unwrap(s);
    let def = zdef(s);
    if (def?.type === 'union') {
      s = unwrap(unionOption(def, value, key));
      def = zdef(s);
    }
    if (!def) return undefined;
    if (def.type === 'object') s = (def.shape as Record<string, unknown>)[key];
    else if (def.type === 'array') s = def.element;
    else if (def.type === 'record') s = def.valueType;
    else return undefined;
    value = value && typeof value === 'object' ? (value as Record<string | number, unknown>)[key] : undefined;
    if (s === undefined) return undefined;
  }
  return s;
}

function checksOf(def: ZodDef): ZodDef[] {
  return ((def.checks as { _zod: { def: ZodDef } }[] | undefined) ?? []).map((c) => c._zod.def);
}

const DATES = [
  '0000-01-01',
  '0001-01-01',
  '1969-12-31T23:59:59Z',
  '2024-02-29',
  '2026-02-29',
  '9999-12-31T23:59:59.999999Z',
  '2026-01-01T00:00:00+14:00',
  '2026-01-01T00:00:00-23:59',
  '2026-01-01T23:59:60Z',
  '2026-01-01T12:00',
  '2026-01-01T12:00:00.1234567Z',
];
const NUMBER_EDGES = [
  0,
  -1,
  1,
  0.5,
  -0.5,
  0.001,
  0.005,
  1.005,
  99.999,
  2 ** 31 - 1,
  2 ** 31,
  -(2 ** 31) - 1,
  2 ** 32,
  2 ** 53 - 1,
  2 ** 53,
  -(2 ** 53),
  1e12,
  1e15 + 0.5,
  1e20,
  999_999_999_999.99,
  1_000_000_000_000,
];

const candidateMemo = new WeakMap<object, unknown[]>();

function candidatesFor(schema: unknown, depth = 0): unknown[] {
  if (schema && typeof schema === 'object' && candidateMemo.has(schema)) return candidateMemo.get(schema)!;
  const list = computeCandidates(schema, depth);
  const out = list.length ? list : WEIRD_STRINGS;
  if (schema && typeof schema === 'object') candidateMemo.set(schema, out);
  return out;
}

function computeCandidates(schema: unknown, depth: number): unknown[] {
  const s = unwrap(schema);
  const def = zdef(s);
  if (!def || depth > 3) return [];
  const checks = checksOf(def);
  const num = (name: string) => checks.find((c) => c.check === name);
  switch (def.type) {
    case 'number': {
      const bounds = checks.filter((c) => c.check === 'greater_than' || c.check === 'less_than').map((c) => c.value as number);
      const edges = bounds.flatMap((b) => [b - 1, b, b + 1, b - 0.01, b + 0.01, b + 0.5]);
      return [
        ...edges,
        ...NUMBER_EDGES,
        ...['1e999', '-0', '1.0000000000000000001', '123456789012345678901234567890'].map((t) => new RawToken(t)),
      ];
    }
    case 'string': {
      const min = (num('min_length')?.minimum as number | undefined) ?? 0;
      const max = (num('max_length')?.maximum as number | undefined) ?? (def.format ? undefined : 300);
      const lengths = [
        ...new Set(
          [max, max === undefined ? undefined : max + 1, min, Math.max(0, min - 1)].filter(
            (l): l is number => l !== undefined && l <= 30_000,
          ),
        ),
      ];
      const out: unknown[] = [];
      for (const len of lengths) {
        out.push(
          'a'.repeat(len),
          '😀'.repeat(Math.ceil(len / 2)),
          'é'.repeat(len),
          ' '.repeat(len),
          ` ${'b'.repeat(Math.max(0, len - 1))} `,
        );
        if (len > 0) out.push(`${'c'.repeat(len - 1)}😀`);
      }
      const patterns = [def.pattern, ...checks.map((c) => c.pattern)].filter(Boolean).map((p) => String((p as RegExp).source ?? p));
      if (def.format === 'uuid')
        out.push(
          ...allFixtureIds(),
          ...allFixtureIds().map((id) => id.toUpperCase()),
          '00000000-0000-0000-0000-000000000000',
          'ffffffff-ffff-ffff-ffff-ffffffffffff',
          '12345678-1234-1234-1234-123456789012',
        );
      if (def.format === 'email')
        out.push(
          'a@b.co',
          `${'a'.repeat(64)}@example.com`,
          `${'a'.repeat(65)}@example.com`,
          `${'a'.repeat(300)}@example.com`,
          `${'a'.repeat(308)}@example.com`,
          'ü@example.com',
          'a@b',
          ' a@b.co ',
          'A@EXAMPLE.COM',
        );
      if (def.format === 'url')
        out.push(
          'http://127.0.0.1:1/',
          'https://[::1]/x',
          'http://localhost/x',
          'https://10.0.0.1/x',
          `${EMULATOR}/__emulator/media/1000000000/big.jpg`,
          `${receiver.url}/status/410/gone`,
          `${receiver.url}/redirect/x`,
          `https://example.invalid/${'p'.repeat(2030)}`,
        );
      if (def.format === 'datetime' || patterns.some((p) => p.includes('\\d{4}')))
        out.push(...DATES, '2020-01-01T00:00:00Z', '2030-01-01T00:00:00+01:00');
      if (patterns.some((p) => p.includes('#') || p.includes('[0-9a-f'))) out.push('#ABCDEF', '#abcdeg', '#abc', '#0000000');
      out.push(...WEIRD_STRINGS.slice(0, 20));
      return out;
    }
    case 'enum':
    case 'literal': {
      const values = enumValuesOf(s);
      return [...values, ...values.map((v) => v.toUpperCase()), ...values.map((v) => ` ${v}`), ...values.map((v) => `${v}\u0000`), ''];
    }
    case 'boolean':
      return [true, false, 'true', 0, 1, null];
    case 'array': {
      const max = checks.find((c) => c.check === 'max_length')?.maximum as number | undefined;
      const min = checks.find((c) => c.check === 'min_length')?.minimum as number | undefined;
      const items = candidatesFor(def.element, depth + 1).slice(0, 12);
      const first = items[0] ?? 'x';
      const out: unknown[] = [[], ...items.map((i) => [i]), [first, first]];
      for (const len of [max, max === undefined ? undefined : max + 1, min === undefined ? undefined : Math.max(0, min - 1)])
        if (len !== undefined && len <= 2000)
          out.push(Array.from({ length: len }, (_, i) => items[i % Math.max(1, items.length)] ?? first));
      return out;
    }
    case 'record': {
      const values = candidatesFor(def.valueType, depth + 1).slice(0, 30);
      const out: unknown[] = [{}];
      values.forEach((v, i) => out.push({ [['budget', 'channel', 'k', 'x'.repeat(64), 'x'.repeat(65), ''][i % 6]]: v }));
      return out;
    }
    case 'object': {
      const shape = def.shape as Record<string, unknown>;
      const keys = Object.keys(shape);
      // The object with one field at a time set to an edge value (the others left out).
      const out: unknown[] = [{}];
      for (const k of keys) for (const v of candidatesFor(shape[k], depth + 1).slice(0, 6)) out.push({ [k]: v });
      return out;
    }
    case 'union': {
      const options = def.options as unknown[];
      return options.flatMap((o) => candidatesFor(o, depth + 1).slice(0, 40));
    }
    case 'unknown':
    case 'any':
      return [
        null,
        0,
        1e308,
        -1e308,
        '😀',
        'a'.repeat(20_001),
        [],
        {},
        [[[[[]]]]],
        { a: { b: { c: [1, 'x', null] } } },
        Array.from({ length: 1000 }, (_, i) => i),
        new RawToken('['.repeat(5000) + ']'.repeat(5000)),
        new RawToken('1e999'),
      ];
    default:
      return [];
  }
}

const validMemo = new WeakMap<object, unknown[]>();

/** The candidates the field's own schema accepts (edges that pass validation). */
function validCandidatesFor(schema: unknown): unknown[] {
  if (!schema || typeof schema !== 'object') return [];
  if (validMemo.has(schema)) return validMemo.get(schema)!;
  const parser = schema as { safeParse?: (v: unknown) => { success: boolean } };
  const valid = candidatesFor(schema).filter((c) => {
    try {
      return parser.safeParse?.(JSON.parse(serialize(c))).success === true;
    } catch {
      return false;
    }
  });
  validMemo.set(schema, valid);
  return valid;
}

/** The value as text PostgreSQL cannot store (U+0000, unpaired surrogates), keeping the rest of it. */
function hostileVariants(value: unknown): string[] {
  const text = typeof value === 'string' ? value : String(value ?? '');
  return [`${text}\u0000`, '\u0000', `${text.slice(0, 1)}\u0000${text.slice(1)}`, `${text}\ud800`, `\udfff${text}`];
}

/** Edge values for a field known only by its value in the example. */
function looseCandidates(value: unknown): unknown[] {
  if (typeof value === 'number')
    return [...NUMBER_EDGES, -1e308, 1e308, ...['1e999', '-0', '123456789012345678901234567890'].map((t) => new RawToken(t))];
  if (typeof value === 'boolean') return [!value, 'true', 0, 1];
  const text = typeof value === 'string' ? value : 'x';
  return [
    '',
    '\u0000',
    `${text}\u0000`,
    `\u0000${text}`,
    `${text}\ud800`,
    `\udfff${text}`,
    `${text}😀`,
    text.toUpperCase(),
    ` ${text} `,
    text.repeat(Math.ceil(5000 / Math.max(1, text.length))),
    'x'.repeat(300 * 1024),
    ...WEIRD_STRINGS.slice(0, 16),
    2 ** 31,
    -1,
    1e308,
  ];
}

/** The leaf fields of a valid example, and the schema's top-level fields it leaves out, with their schemas. */
function edgeTargets(root: unknown, doc: unknown): { path: Path; schema: unknown }[] {
  const out: { path: Path; schema: unknown }[] = [];
  for (const p of pathsOf(doc)) {
    if (p.length === 0) continue;
    const v = getAt(doc, p);
    if (v !== null && typeof v === 'object' && Object.keys(v).length > 0) continue;
    // Without a schema (provider and inbound webhooks read any JSON) the example's own value says what to try.
    const schema = root ? schemaAt(root, p, doc) : undefined;
    if (schema || !root) out.push({ path: p, schema });
  }
  for (const [key, schema] of Object.entries(objectShape(root) ?? {}))
    if (doc && typeof doc === 'object' && !(key in doc)) out.push({ path: [key], schema });
  return out;
}

/* ------------------------------------------------------------------------------------------------
 * Bodies: a spec generated by fast-check, applied to the route's example at run time.
 * ---------------------------------------------------------------------------------------------- */

type Op =
  | { kind: 'delete'; at: number }
  | { kind: 'set'; at: number; value: unknown }
  | { kind: 'add'; at: number; key: string; value: unknown }
  | { kind: 'grow'; at: number; length: number }
  | { kind: 'wrap'; at: number; asArray: boolean }
  /** A value derived from the zod schema of the field at that path (edges of its type and bounds). */
  | { kind: 'typed'; at: number; pick: number };

type BodySpec =
  | { mode: 'none' }
  | { mode: 'example' }
  | { mode: 'mutate'; ops: Op[] }
  | { mode: 'json'; value: unknown }
  | { mode: 'raw'; text: string; contentType?: string }
  | { mode: 'relabel'; contentType: string | null }
  | { mode: 'huge'; bytes: number }
  /** Every field of the body schema filled with a schema-derived edge value (or left out). */
  | { mode: 'typed-fill'; picks: number[] }
  /** The valid example with ONE field set to an edge value its own schema accepts (so the request gets to the database). */
  | { mode: 'edge'; at: number; pick: number };

type Path = (string | number)[];

function pathsOf(value: unknown, prefix: Path = [], out: Path[] = []): Path[] {
  out.push(prefix);
  if (Array.isArray(value)) value.forEach((v, i) => pathsOf(v, [...prefix, i], out));
  else if (value && typeof value === 'object' && !(value instanceof RawToken))
    for (const [k, v] of Object.entries(value)) pathsOf(v, [...prefix, k], out);
  return out;
}

function getAt(root: unknown, p: Path): unknown {
  return p.reduce<unknown>((v, k) => (v as Record<string | number, unknown>)[k], root);
}

/** An own property even for `__proto__` (what JSON.parse of such a body gives the server). */
function define(target: object, key: string | number, value: unknown): void {
  Object.defineProperty(target, key, { value, enumerable: true, writable: true, configurable: true });
}

/** A deep copy (generated values are fast-check's and must not be mutated); raw tokens are kept. */
function clone(v: unknown): unknown {
  if (v instanceof RawToken || v === null || typeof v !== 'object') return v;
  if (Array.isArray(v)) return v.map(clone);
  const o = {};
  for (const [k, x] of Object.entries(v)) define(o, k, clone(x));
  return o;
}

/** Returns the new root (a root-level op can replace it; `undefined` means no body). */
function setAt(root: unknown, p: Path, value: unknown, remove = false): unknown {
  if (p.length === 0) return remove ? undefined : value;
  const parent = getAt(root, p.slice(0, -1)) as Record<string | number, unknown>;
  const last = p[p.length - 1];
  if (remove) {
    if (Array.isArray(parent)) parent.splice(last as number, 1);
    else delete parent[last];
  } else if (Array.isArray(parent)) {
    parent[last as number] = value;
  } else {
    define(parent, last, value);
  }
  return root;
}

function applyOps(example: unknown, ops: Op[], schema: unknown): unknown {
  let doc: unknown = clone(example);
  for (const op of ops) {
    if (doc === undefined) doc = {};
    const paths = pathsOf(doc);
    const p = paths[op.at % paths.length];
    const target = getAt(doc, p);
    switch (op.kind) {
      case 'delete':
        doc = setAt(doc, p, undefined, true);
        break;
      case 'set':
        doc = setAt(doc, p, clone(op.value));
        break;
      case 'add':
        if (Array.isArray(target)) target.push(clone(op.value));
        else if (target && typeof target === 'object' && !(target instanceof RawToken)) define(target, op.key, clone(op.value));
        else doc = setAt(doc, p, clone(op.value));
        break;
      case 'grow':
        if (typeof target === 'string') {
          doc = setAt(doc, p, (target || 'x').repeat(Math.ceil(op.length / Math.max(1, target.length))).slice(0, op.length));
        } else {
          // Arrays at and over their bounds, but no body much over the 1 MiB limit (a body of 1 MiB+ is its own case).
          const items = Array.isArray(target) ? target : [target];
          const seed = items.length ? items[0] : 'x';
          const count = Math.min(op.length, 2000, Math.max(1, Math.floor(1_200_000 / Math.max(1, serialize(seed).length))));
          // Copies, not one shared object: a later op on one element must not grow all of them.
          doc = setAt(
            doc,
            p,
            Array.from({ length: count }, (_, i) => (i < items.length ? items[i] : clone(seed))),
          );
        }
        break;
      case 'wrap':
        doc = setAt(doc, p, op.asArray ? [target] : { value: target });
        break;
      case 'typed': {
        const candidates = candidatesFor(schemaAt(schema, p, doc));
        doc = setAt(doc, p, clone(candidates[op.pick % candidates.length]));
        break;
      }
    }
  }
  return doc;
}

const MALFORMED_JSON = [
  '{',
  '{"a":',
  '[1,2',
  'nul',
  '{"a":1}x',
  "{'a':1}",
  '\ufeff{}',
  '{"a":1,}',
  ' ',
  '{"a":"\\x41"}',
  '{"a":"\\ud800"}',
  '{"a":"\\u0000"}',
  '"just a string"',
  '42',
  'true',
  'null',
  '[]',
  '[{}]',
  '{"name":"a","name":{"x":1}}',
  '{"__proto__":{"polluted":true}}',
  '{"constructor":{"prototype":{"x":1}}}',
];

function bodyArb(r: AnyRoute, ctx: Parameters<typeof valueArb>[0]): fc.Arbitrary<BodySpec> {
  const takesBody = r.method !== 'get';
  if (!takesBody) return fc.constant({ mode: 'none' } as BodySpec);
  const hasExample = EXAMPLES[routeKey(r)] !== undefined;
  const value = valueArb(ctx);
  const keys = [...shapeKeys(r.body), 'type', 'id', 'unknownField', '__proto__'];
  const op: fc.Arbitrary<Op> = fc.oneof(
    { weight: 3, arbitrary: fc.record({ kind: fc.constant('delete' as const), at: fc.nat() }) },
    { weight: 8, arbitrary: fc.record({ kind: fc.constant('set' as const), at: fc.nat(), value }) },
    {
      weight: 2,
      arbitrary: fc.record({
        kind: fc.constant('add' as const),
        at: fc.nat(),
        key: fc.oneof(fc.constantFrom(...keys), fc.string({ maxLength: 10 })),
        value,
      }),
    },
    { weight: 3, arbitrary: fc.record({ kind: fc.constant('grow' as const), at: fc.nat(), length: fc.constantFrom(...ctx.lengths) }) },
    { weight: 1, arbitrary: fc.record({ kind: fc.constant('wrap' as const), at: fc.nat(), asArray: fc.boolean() }) },
    { weight: r.body ? 10 : 0, arbitrary: fc.record({ kind: fc.constant('typed' as const), at: fc.nat(), pick: fc.nat() }) },
  );
  const special: fc.Arbitrary<BodySpec> = fc.oneof(
    fc.constant({ mode: 'none' } as BodySpec),
    fc.constantFrom(...MALFORMED_JSON).map((text) => ({ mode: 'raw', text }) as BodySpec),
    fc
      .constantFrom(
        'text/plain',
        'application/x-www-form-urlencoded',
        'multipart/form-data; boundary=x',
        'application/xml',
        'application/json; charset=utf-16',
        'application/json; charset=latin1',
        'application/merge-patch+json',
        'APPLICATION/JSON',
        'application/json; charset=utf-8',
        null,
      )
      .map((contentType) => ({ mode: 'relabel', contentType }) as BodySpec),
    fc.constantFrom(300 * 1024, 1024 * 1024 + 1).map((bytes) => ({ mode: 'huge', bytes }) as BodySpec),
    fc.constantFrom(1000, 100_000).map((depth) => ({ mode: 'raw', text: '['.repeat(depth) + ']'.repeat(depth) }) as BodySpec),
  );
  const schemaKeyed = fc.dictionary(fc.constantFrom(...keys), value, { maxKeys: 6 }).map((v) => ({ mode: 'json', value: v }) as BodySpec);
  if (!hasExample) {
    // Routes that read no body (ping, retry, token, deletes): mostly none, sometimes junk.
    return fc.oneof(
      { weight: 6, arbitrary: fc.constant({ mode: 'none' } as BodySpec) },
      { weight: 2, arbitrary: fc.jsonValue({ maxDepth: 3 }).map((v) => ({ mode: 'json', value: v }) as BodySpec) },
      { weight: 1, arbitrary: special },
    );
  }
  return fc.oneof(
    { weight: 15, arbitrary: fc.constant({ mode: 'example' } as BodySpec) },
    { weight: 45, arbitrary: fc.array(op, { minLength: 1, maxLength: 3 }).map((ops) => ({ mode: 'mutate', ops }) as BodySpec) },
    { weight: 6, arbitrary: schemaKeyed },
    {
      weight: r.body ? 6 : 0,
      arbitrary: fc.array(fc.nat(), { minLength: 12, maxLength: 12 }).map((picks) => ({ mode: 'typed-fill', picks }) as BodySpec),
    },
    // Without a body schema (webhook receivers) the body is the whole input: edges get more of the cases.
    {
      weight: r.body ? 25 : 60,
      arbitrary: fc.record({ at: fc.nat(), pick: fc.nat() }).map(({ at, pick }) => ({ mode: 'edge', at, pick }) as BodySpec),
    },
    { weight: 12, arbitrary: fc.jsonValue({ maxDepth: 3 }).map((v) => ({ mode: 'json', value: v }) as BodySpec) },
    { weight: 10, arbitrary: special },
  );
}

/** JSON text with RawToken values written verbatim. */
function serialize(value: unknown): string {
  const raws: string[] = [];
  const text = JSON.stringify(value, (_k, v) => {
    if (v instanceof RawToken) {
      raws.push(v.token);
      return `__FUZZ_RAW_${raws.length - 1}__`;
    }
    return v;
  });
  return (text ?? 'null').replace(/"__FUZZ_RAW_(\d+)__"/g, (_m, i: string) => raws[Number(i)]);
}

/* ------------------------------------------------------------------------------------------------
 * Path segments and query strings
 * ---------------------------------------------------------------------------------------------- */

const JUNK_SEGMENTS = [
  '%',
  '%%',
  '%zz',
  '%E0%A4%A',
  '%00',
  '%2F',
  '%2e%2e',
  '..',
  '.',
  '~',
  "'",
  '"',
  '<>',
  '%C0%AF',
  '%ff',
  '%uD800',
  'null',
  'undefined',
  '0',
  '-1',
  '1e3',
  'true',
  '{}',
  '[]',
  ';',
  ',',
  '=',
  '&',
  '*',
  '$',
  '@',
  ':',
  '!',
  '(',
  ')',
  '+',
  '%20',
  '%0A',
  '%0d%0a',
  'a'.repeat(300),
  '1'.repeat(5000),
];

function segmentArb(r: AnyRoute, param: string): fc.Arbitrary<string> {
  return fc.oneof(
    {
      weight: 16,
      arbitrary: fc.nat().map((i) => {
        const ids = ownIds(r, param);
        return ids[i % ids.length];
      }),
    },
    // Other records (for the admin routes, never the fuzzed workspace itself: a fuzzed plan could switch it off).
    {
      weight: 2,
      arbitrary: fc.nat().map((i) => {
        const ids = allFixtureIds().filter((id) => r.auth !== 'admin' || id !== f.ws.id);
        return ids[i % ids.length];
      }),
    },
    { weight: 2, arbitrary: fc.uuid() },
    {
      weight: 1,
      arbitrary: fc.nat().map((i) => {
        const ids = ownIds(r, param);
        return ids[i % ids.length].toUpperCase();
      }),
    },
    {
      weight: 1,
      arbitrary: fc.tuple(fc.nat(), fc.constantFrom('x', '%00', '%20', '0', '-', '.json', '%2F..')).map(([i, s]) => {
        const ids = ownIds(r, param);
        return ids[i % ids.length] + s;
      }),
    },
    { weight: 2, arbitrary: fc.string({ unit: 'grapheme', minLength: 1, maxLength: 40 }).map(encodeURIComponent) },
    { weight: 2, arbitrary: fc.constantFrom(...JUNK_SEGMENTS) },
  );
}

const QUERY_WEIRD_KEYS = [
  '',
  'limit[]',
  'limit[0]',
  'offset[a]',
  '__proto__',
  'constructor',
  'toString',
  'hasOwnProperty',
  'sort[]',
  'q[]',
  ' limit',
  'LIMIT',
  '&',
  '=',
];
const QUERY_BAD_VALUES = [
  '',
  ' ',
  '-1',
  '0',
  '1.5',
  '1e2',
  '0x10',
  '101',
  '1000',
  '10000000',
  '10000001',
  '1000000000000000000000',
  'NaN',
  'Infinity',
  '-0',
  ' 5 ',
  '5abc',
  'null',
  'true',
  '[]',
  '{}',
  'asc',
  'desc',
  'ASC',
  'name',
  'price',
  'dueAt',
  'createdAt',
  '2026-02-30',
  '2026-01-01T25:61',
  '0000-01-01',
  '9999-12-31',
  '2026-01-01T00:00:00+14:00',
  '%',
  '_',
  '\\',
  '\u0000',
  '😀',
  'a'.repeat(201),
  'a'.repeat(1025),
];

function goodQueryValues(key: string, schema: unknown): string[] {
  const enums = enumValuesOf(schema);
  if (enums.length) return enums;
  if (key === 'limit') return ['1', '25', '100'];
  if (key === 'offset') return ['0', '1', '3'];
  if (/Id$|^assignedTo$/.test(key)) return allFixtureIds();
  if (/After$|Before$/.test(key)) return ['2026-01-01', '2020-01-01T00:00:00Z', '2099-12-31T23:59:59.999Z', '2026-06-01T12:00', ...DATES];
  if (key === 'q') return ['fuzz', 'Lead', '+55 (11)', '5511', '%', '_', 'é'];
  if (key === 'tag') return ['fuzz-tag', 'paid', 'fuzz'];
  if (key === 'hub.mode') return ['subscribe'];
  if (key === 'hub.verify_token') return [VERIFY_TOKEN];
  if (key === 'hub.challenge') return ['1158201444', 'challenge'];
  return ['x'];
}

/** A valid query per route where one matters to get past the first check (the rest get their pairs from the schema). */
const QUERY_EXAMPLES: Record<string, () => [string, string][]> = {
  'get /webhooks/whatsapp/{instanceId}': () => [
    ['hub.mode', 'subscribe'],
    ['hub.verify_token', VERIFY_TOKEN],
    ['hub.challenge', '1158201444'],
  ],
  'get /api/v1/leads': () => [
    ['q', 'lead'],
    ['tag', 'fuzz'],
    ['status', 'won'],
    ['createdAfter', '2020-01-01'],
    ['sort', 'name'],
    ['order', 'asc'],
    ['limit', '5'],
  ],
  'get /api/v1/tasks': () => [
    ['contactId', f.contact.id],
    ['status', 'pending'],
    ['dueAfter', '2020-01-01'],
    ['dueBefore', '2099-01-01'],
    ['sort', 'dueAt'],
    ['order', 'desc'],
  ],
  'get /api/v1/products': () => [
    ['q', 'prod'],
    ['active', 'true'],
    ['sort', 'price'],
    ['order', 'desc'],
    ['offset', '1'],
  ],
  'get /api/v1/messages': () => [
    ['conversationId', f.conversation.id],
    ['direction', 'in'],
    ['updatedAfter', '2020-01-01'],
    ['limit', '5'],
  ],
};

function queryArb(r: AnyRoute): fc.Arbitrary<string> {
  const shape = ((r.query as { shape?: Record<string, unknown> } | undefined)?.shape ?? {}) as Record<string, unknown>;
  const known = Object.keys(shape);
  const bounds = boundsOf(r.query).map(String);
  const keyArb = known.length
    ? fc.oneof(
        { weight: 8, arbitrary: fc.constantFrom(...known) },
        { weight: 1, arbitrary: fc.constantFrom(...QUERY_WEIRD_KEYS) },
        { weight: 1, arbitrary: fc.string({ maxLength: 8 }) },
      )
    : fc.oneof(fc.constantFrom('limit', 'offset', 'q', ...QUERY_WEIRD_KEYS), fc.string({ maxLength: 8 }));
  const pair = keyArb.chain((key) => {
    const good = goodQueryValues(key, shape[key]);
    const valueArb = fc.oneof(
      { weight: 5, arbitrary: fc.constantFrom(...good) },
      { weight: 4, arbitrary: fc.constantFrom(...QUERY_BAD_VALUES, ...bounds) },
      { weight: 1, arbitrary: fc.string({ unit: 'grapheme', maxLength: 20 }) },
    );
    return fc.tuple(fc.constant(key), valueArb, fc.nat({ max: 19 }));
  });
  const pairs = fc.array(pair, { maxLength: 5 }).map((list) =>
    list
      .map(([k, v, style]) => {
        if (style === 0) return encodeURIComponent(k); // key without "="
        if (style === 1) return `${encodeURIComponent(k)}=${encodeURIComponent(v)}&${encodeURIComponent(k)}=${encodeURIComponent(v)}1`; // repeated
        // Raw-ish: only what HTTP cannot carry (and the separators) is encoded, so `%zz`, `+` and `%00` reach the parser as typed.
        if (style === 2) return `${encodeURIComponent(k)}=${v.replace(/[^\x21-\x7e]|[#&]/gu, encodeURIComponent)}`;
        return `${encodeURIComponent(k)}=${encodeURIComponent(v)}`;
      })
      .join('&'),
  );
  const junk = fc.constantFrom(
    '&&',
    '=',
    '%',
    '%zz=1',
    'a[b]=c',
    '=x',
    '&=&',
    'limit=%',
    'limit=%00',
    'offset=%2B1',
    'limit=1%2C2',
    '?',
    '??limit=1',
  );
  const example = routeKey(r) in QUERY_EXAMPLES ? QUERY_EXAMPLES[routeKey(r)] : undefined;
  // The valid query with one pair dropped or its value replaced, plus generated pairs.
  const fromExample = example
    ? fc.tuple(fc.nat(), fc.nat({ max: 2 }), fc.constantFrom(...QUERY_BAD_VALUES, ...DATES), pairs).map(([at, how, bad, extra]) => {
        const list = example();
        const i = at % list.length;
        if (how === 1) list.splice(i, 1);
        if (how === 2) list[i] = [list[i][0], bad];
        const text = list.map(([k, v]) => `${encodeURIComponent(k)}=${encodeURIComponent(v)}`).join('&');
        return extra ? `${text}&${extra}` : text;
      })
    : pairs;
  return fc.oneof(
    { weight: 2, arbitrary: fc.constant('') },
    { weight: 7, arbitrary: pairs },
    { weight: example ? 5 : 0, arbitrary: fromExample },
    { weight: 1, arbitrary: fc.tuple(pairs, junk).map(([p, j]) => (p ? `${p}&${j}` : j)) },
  );
}

/* ------------------------------------------------------------------------------------------------
 * One case: generation, the raw request, and the verdict
 * ---------------------------------------------------------------------------------------------- */

interface Case {
  n: number;
  params: Record<string, string>;
  query: string;
  body: BodySpec;
  /** undefined: the route's normal credentials; null: none; a string: that Authorization header. */
  auth: string | null | undefined;
  idempotencyKey: string | undefined;
  signature: 'valid' | 'none' | 'wrong' | 'other-secret';
}

const AUTH_VARIANTS = [
  null,
  'Bearer',
  'Bearer junk',
  'Bearer vg_live_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA',
  'Basic Zm9vOmJhcg==',
  'bearer   <CRED>  ',
  'Bearer <CRED> extra',
  'Bearer <CRED>x',
  'Bearer test-admin-token',
  'Bearer ' + 'x'.repeat(5000),
];
const IDEMPOTENCY_KEYS = ['fuzz-key-1', 'fuzz-key-2', 'x'.repeat(255), 'x'.repeat(256), 'bad key', 'ñ', '', '\t'];

function caseArb(r: AnyRoute): fc.Arbitrary<Case> {
  const bounds = boundsOf(r.body);
  const ctx = { lengths: interestingLengths(bounds), bounds, refs: allFixtureIds };
  const params = paramNames(r);
  const isSend = routeKey(r).includes('messages');
  return fc.record({
    n: fc.nat({ max: 999_999 }),
    params: fc.record(Object.fromEntries(params.map((p) => [p, segmentArb(r, p)]))) as fc.Arbitrary<Record<string, string>>,
    query: queryArb(r),
    body: bodyArb(r, ctx),
    auth: fc.oneof({ weight: 30, arbitrary: fc.constant(undefined) }, { weight: 1, arbitrary: fc.constantFrom(...AUTH_VARIANTS) }),
    idempotencyKey: isSend
      ? fc.oneof({ weight: 8, arbitrary: fc.constant(undefined) }, { weight: 2, arbitrary: fc.constantFrom(...IDEMPOTENCY_KEYS) })
      : fc.constant(undefined),
    signature: r.path.startsWith('/webhooks/')
      ? fc.constantFrom<Case['signature']>('valid', 'valid', 'valid', 'valid', 'valid', 'valid', 'none', 'wrong', 'other-secret')
      : fc.constant<Case['signature']>('valid'),
  });
}

interface Sent {
  method: string;
  path: string;
  headers: Record<string, string>;
  body?: string;
}

interface Received {
  status: number;
  headers: http.IncomingHttpHeaders;
  text: string;
  json: unknown;
  ms: number;
}

function credentialFor(r: AnyRoute): string | undefined {
  if (r.auth === 'apiKey') return f.ws.key;
  if (r.auth === 'admin') return api.config.adminToken;
  return undefined;
}

function buildRequest(r: AnyRoute, c: Case): Sent {
  const p = r.path.replace(/\{(\w+)\}/g, (_m, name: string) => c.params[name]);
  const headers: Record<string, string> = { 'x-forwarded-for': uniqueIp() };
  const cred = credentialFor(r);
  if (c.auth === undefined) {
    if (cred) headers.authorization = `Bearer ${cred}`;
  } else if (c.auth !== null) {
    headers.authorization = c.auth.replace('<CRED>', cred ?? 'none');
  }
  if (c.idempotencyKey !== undefined) headers['idempotency-key'] = c.idempotencyKey;
  let body: string | undefined;
  let contentType: string | null = 'application/json';
  const example = EXAMPLES[routeKey(r)];
  switch (c.body.mode) {
    case 'none':
      break;
    case 'example':
      body = serialize(example(c.n));
      break;
    case 'mutate': {
      const doc = applyOps(example(c.n), c.body.ops, r.body);
      if (doc !== undefined) body = serialize(doc);
      break;
    }
    case 'json':
      body = serialize(c.body.value);
      break;
    case 'edge': {
      const doc = clone(example(c.n)) as Record<string, unknown>;
      const targets = edgeTargets(r.body, doc);
      if (targets.length) {
        const { path: p, schema } = targets[c.body.at % targets.length];
        // Now and then the field's own value made unstorable (NUL, a lone surrogate): most often where no schema guards it.
        const useHostile = c.body.pick % (schema ? 4 : 2) === 0;
        const hostile = hostileVariants(getAt(doc, p)).filter(
          (v) => !schema || (schema as { safeParse: (x: unknown) => { success: boolean } }).safeParse(v).success,
        );
        const candidates = useHostile && hostile.length ? hostile : schema ? validCandidatesFor(schema) : looseCandidates(getAt(doc, p));
        if (candidates.length) setAt(doc, p, clone(candidates[c.body.pick % candidates.length]));
      }
      body = serialize(doc);
      break;
    }
    case 'typed-fill': {
      const shape = objectShape(r.body) ?? {};
      const doc: Record<string, unknown> = {};
      Object.entries(shape).forEach(([key, schema], i) => {
        const candidates = candidatesFor(schema);
        const pick = c.body.mode === 'typed-fill' ? (c.body.picks[i] ?? 0) : 0;
        if (pick % (candidates.length + 1) < candidates.length) define(doc, key, clone(candidates[pick % (candidates.length + 1)]));
      });
      body = serialize(doc);
      break;
    }
    case 'raw':
      body = c.body.text;
      if (c.body.contentType) contentType = c.body.contentType;
      break;
    case 'relabel':
      body = example ? serialize(example(c.n)) : '{}';
      contentType = c.body.contentType;
      break;
    case 'huge':
      body = `{"name":"${'a'.repeat(c.body.bytes)}"}`;
      break;
  }
  // Ops compounding (a long string grown inside a grown array) can build far past the 1 MiB limit: such a body is the 1 MiB+ case.
  if (body !== undefined && body.length > 2 * 1024 * 1024) body = `{"name":"${'a'.repeat(1024 * 1024 + 1)}"}`;
  if (body !== undefined) {
    if (contentType) headers['content-type'] = contentType;
    headers['content-length'] = String(Buffer.byteLength(body));
    if (r.path.startsWith('/webhooks/')) {
      if (c.signature === 'valid') headers['x-hub-signature-256'] = sign(body);
      if (c.signature === 'wrong') headers['x-hub-signature-256'] = 'sha256=' + '0'.repeat(64);
      if (c.signature === 'other-secret') headers['x-hub-signature-256'] = sign(body, 'another secret');
    }
  }
  const url = `${p}${c.query ? `?${c.query}` : ''}`;
  return { method: r.method.toUpperCase(), path: url, headers, body };
}

function send(req: Sent): Promise<Received> {
  const base = new URL(api.url);
  const started = Date.now();
  return new Promise((resolve, reject) => {
    const out = http.request(
      { host: base.hostname, port: base.port, method: req.method, path: req.path, headers: req.headers, agent },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('error', reject);
        res.on('end', () => {
          const text = Buffer.concat(chunks).toString('utf8');
          let json: unknown;
          try {
            json = text ? JSON.parse(text) : undefined;
          } catch {
            json = undefined;
          }
          resolve({ status: res.statusCode ?? 0, headers: res.headers, text, json, ms: Date.now() - started });
        });
      },
    );
    out.on('error', reject);
    out.setTimeout(60_000, () => out.destroy(new Error('no answer in 60 s')));
    out.end(req.body);
  });
}

const FLAT_KEYS = new Set(['error', 'code', 'hint']);

/** What is wrong with an answer, or undefined. */
function verdict(r: AnyRoute | undefined, res: Received): string | undefined {
  // Readiness answers 503 with its own document when PostgreSQL or Temporal does not answer in
  // 2 s (a loaded machine can do that): that is the endpoint working, not a failure of it.
  if (r?.path === '/ready' && res.status === 503 && r.response?.safeParse(res.json).success) return undefined;
  if (res.status >= 500) return `server error ${res.status}`;
  if (res.status < 200 || (res.status >= 300 && res.status < 400)) return `unexpected status ${res.status}`;
  if (res.status >= 400) {
    const body = res.json as Record<string, unknown> | undefined;
    if (!body || typeof body !== 'object' || Array.isArray(body)) return `error body is not a JSON object: ${res.text.slice(0, 200)}`;
    const extra = Object.keys(body).filter((k) => !FLAT_KEYS.has(k));
    if (extra.length) return `error body has keys beyond error/code/hint: ${extra.join(', ')}`;
    if (typeof body.error !== 'string' || body.error === '') return 'error body without a string `error`';
    if (typeof body.code !== 'string' || !(body.code in ERROR_CODES))
      return `error code ${JSON.stringify(body.code)} is not one of the contract's codes`;
    const expected = ERROR_CODES[body.code as keyof typeof ERROR_CODES];
    if (expected !== res.status) return `code ${body.code} is status ${expected} in the contract, answered ${res.status}`;
    if ('hint' in body && typeof body.hint !== 'string') return 'error body with a non-string `hint`';
    return undefined;
  }
  // 2xx
  if (!r) return undefined;
  const expected = r.status ?? 200;
  if (res.status !== expected && res.status !== 200) return `success status ${res.status}, the route answers ${expected}`;
  if (r.response) {
    const parsed = r.response.safeParse(res.json);
    if (!parsed.success) {
      const issues = parsed.error.issues.slice(0, 5).map((i) => `${i.path.join('.')}: ${i.message}`);
      return `2xx body does not match the response schema: ${issues.join('; ')}`;
    }
  }
  return undefined;
}

const clip = (s: string | undefined, n: number): string =>
  s === undefined ? '' : s.length > n ? `${s.slice(0, n)}…(${s.length} chars)` : s;
const printable = (s: string): string =>
  s.replace(/[\u0000-\u001f\u007f-\u009f\u2028\u2029]/g, (ch) => `\\u${ch.charCodeAt(0).toString(16).padStart(4, '0')}`);

function describeCase(req: Sent, res: Received): string {
  const headers = Object.entries(req.headers)
    .filter(([k]) => k !== 'authorization' && k !== 'x-forwarded-for')
    .map(([k, v]) => `${k}: ${clip(v, 80)}`)
    .join('; ');
  return [
    `  request:  ${req.method} ${clip(printable(req.path), 600)}`,
    `  headers:  ${printable(headers)}${req.headers.authorization === undefined ? ' (no Authorization)' : ''}`,
    `  body:     ${clip(printable(req.body ?? '(none)'), 1500)}`,
    `  response: ${res.status} ${clip(printable(res.text), 1500)}`,
  ].join('\n');
}

/* ------------------------------------------------------------------------------------------------
 * Bookkeeping: per-endpoint tallies, the case log
 * ---------------------------------------------------------------------------------------------- */

interface Tally {
  cases: number;
  statuses: Map<string, number>;
  codes: Map<string, number>;
  ms: number;
}

const bump = (m: Map<string, number>, k: string): void => {
  m.set(k, (m.get(k) ?? 0) + 1);
};

function summary(label: string, t: Tally, seed: number, seconds: number): string {
  const statuses = [...t.statuses.entries()]
    .sort(([a], [b]) => a.localeCompare(b))
    .map(([k, v]) => `${k}: ${v}`)
    .join(', ');
  const codes = [...t.codes.entries()]
    .sort((a, b) => b[1] - a[1])
    .slice(0, 6)
    .map(([k, v]) => `${k}: ${v}`)
    .join(', ');
  return `${label}: ${t.cases} cases, statuses {${statuses}}${codes ? `, codes {${codes}}` : ''} (seed ${seed}, ${seconds.toFixed(1)} s)`;
}

function seedFor(label: string): number {
  let h = SEED | 0;
  for (const ch of label) h = (Math.imul(h, 31) + ch.charCodeAt(0)) | 0;
  return h;
}

function out(line: string): void {
  process.stdout.write(`${line}\n`);
}

async function fuzzRoute(r: AnyRoute): Promise<void> {
  const label = `${r.method.toUpperCase()} ${r.path}`;
  const seed = seedFor(label);
  const tally: Tally = { cases: 0, statuses: new Map(), codes: new Map(), ms: 0 };
  const log: string[] = [];
  const started = Date.now();
  try {
    await fc.assert(
      fc.asyncProperty(caseArb(r), async (c) => {
        const req = buildRequest(r, c);
        const res = await send(req).catch((err: Error) => {
          throw new Error(
            `${label}: no answer (${err.message})\n${describeCase(req, { status: 0, headers: {}, text: '', json: undefined, ms: 0 })}`,
          );
        });
        tally.cases += 1;
        tally.ms += res.ms;
        bump(tally.statuses, res.status >= 200 && res.status < 300 ? '2xx' : String(res.status));
        const code = (res.json as { code?: unknown } | undefined)?.code;
        if (res.status >= 400 && typeof code === 'string') bump(tally.codes, code);
        const line = `${label} #${tally.cases}: ${req.method} ${clip(printable(req.path), 200)} body=${clip(printable(req.body ?? '-'), 200)} -> ${res.status}${typeof code === 'string' ? ` ${code}` : ''} (${res.ms} ms)`;
        log.push(line);
        if (VERBOSE) out(line);
        const problem = verdict(r, res);
        if (problem) throw new Error(`${label}: ${problem}\n${describeCase(req, res)}`);
      }),
      { seed, numRuns: RUNS, endOnFailure: !SHRINK },
    );
  } finally {
    fs.appendFileSync(CASE_LOG, `${log.join('\n')}\n`);
    out(summary(label, tally, seed, (Date.now() - started) / 1000));
  }
}

/* ------------------------------------------------------------------------------------------------
 * Listing back what is stored
 * ---------------------------------------------------------------------------------------------- */

const byKey = (key: string): AnyRoute | undefined => ROUTES.find((r) => routeKey(r) === key);

async function getValid(r: AnyRoute, p: string): Promise<unknown> {
  const req: Sent = { method: 'GET', path: p, headers: { authorization: `Bearer ${f.ws.key}`, 'x-forwarded-for': uniqueIp() } };
  const res = await send(req);
  const problem = res.status === 200 ? verdict(r, res) : `listing back answered ${res.status}`;
  if (problem) throw new Error(`${routeKey(r)}: ${problem}\n${describeCase(req, res)}`);
  return res.json;
}

/** Every page of a list endpoint, validated with its response schema; the items. */
async function allPages(r: AnyRoute, p: string): Promise<{ id: string }[]> {
  const items: { id: string }[] = [];
  // A cursor-paged list (the events feed) is followed by its nextCursor; the others by offset.
  let next = `${p}?limit=100`;
  for (let offset = 100; ; offset += 100) {
    const page = (await getValid(r, next)) as { data: { id: string }[]; pagination: { hasMore: boolean; nextCursor?: string } };
    items.push(...page.data);
    if (!page.pagination.hasMore) return items;
    next = page.pagination.nextCursor ? `${p}?limit=100&cursor=${page.pagination.nextCursor}` : `${p}?limit=100&offset=${offset}`;
  }
}

/**
 * Every list endpoint of the fixture workspace (leads, deals, tasks, products, tags, lists,
 * conversations, messages, webhooks, automations, instances; pipelines), each item read by id, and
 * each item's sub-lists (a lead's notes and insight, a deal's activities, a list's contacts, ...).
 */
async function listBack(): Promise<string> {
  const counts: string[] = [];
  const lists = ROUTES.filter((r) => r.auth === 'apiKey' && r.method === 'get' && !r.path.includes('{'));
  for (const list of lists) {
    if (!list.query) {
      await getValid(list, list.path); // pipelines: one document
      counts.push(`${list.path.split('/').pop()}: 1 document`);
      continue;
    }
    const items = await allPages(list, list.path);
    const single = byKey(`get ${list.path}/{id}`);
    // A download (a message's media file) is no sub-record every item has: only media messages answer one.
    const subs = ROUTES.filter(
      (r) =>
        r.auth === 'apiKey' &&
        r.method === 'get' &&
        r.path.startsWith(`${list.path}/{id}/`) &&
        paramNames(r).length === 1 &&
        !r.responseContentType,
    );
    let subItems = 0;
    for (const item of items) {
      if (single) await getValid(single, `${list.path}/${item.id}`);
      for (const sub of subs) {
        const p = sub.path.replace('{id}', item.id);
        if (sub.query) subItems += (await allPages(sub, p)).length;
        else await getValid(sub, p);
      }
    }
    counts.push(
      `${list.path.split('/').pop()}: ${items.length}${subs.length ? ` (+${subItems} in ${subs.map((s) => s.path.split('/').pop()).join(', ')})` : ''}`,
    );
  }
  return counts.join(', ');
}

/* ------------------------------------------------------------------------------------------------
 * The run
 * ---------------------------------------------------------------------------------------------- */

/** Destructive endpoints run last: sub-record deletes first, then whole records. */
function phase(r: AnyRoute): number {
  if (r.method !== 'delete') return 0;
  return paramNames(r).length > 1 || r.path.endsWith('/token') ? 1 : 2;
}

const selected = ROUTES.filter((r) => !ONLY || `${r.method.toUpperCase()} ${r.path}`.includes(ONLY));
const ordered = selected
  .map((r, i) => ({ r, i }))
  .sort((a, b) => phase(a.r) - phase(b.r) || a.i - b.i)
  .map(({ r }) => r);
const constructive = ordered.filter((r) => phase(r) === 0);
const destructive = ordered.filter((r) => phase(r) > 0);
const ROUTE_TIMEOUT_MS = 240_000;

beforeAll(async () => {
  const started = Date.now();
  api = await startApi({ config: { rateLimitScale: 100_000, inboundTokenLimit: 1_000_000 } });
  receiver = await startReceiver();
  agent = new http.Agent({ keepAlive: true, maxSockets: 4 });
  f = await buildFixture();
  g = await buildAdminFixture();
  fs.mkdirSync(path.dirname(CASE_LOG), { recursive: true });
  fs.writeFileSync(CASE_LOG, '');
  out(
    `\n[fuzz] seed ${SEED} (FUZZ_SEED), ${RUNS} cases per endpoint, ${selected.length} endpoints; fixture ready in ${((Date.now() - started) / 1000).toFixed(1)} s; every case is logged to ${CASE_LOG}`,
  );
}, 120_000);

afterAll(async () => {
  agent?.destroy();
  await receiver?.close();
  await api?.close();
});

describe('fuzz: the fixture and the example bodies', () => {
  it('has a valid example body for every endpoint that reads one, and a fixture record for every path parameter', () => {
    for (const r of ROUTES) {
      const key = routeKey(r);
      for (const p of paramNames(r)) expect({ key, p, ids: ownIds(r, p).length > 0 }).toEqual({ key, p, ids: true });
      if (!r.body) continue;
      const example = EXAMPLES[key];
      expect({ key, example: typeof example }).toEqual({ key, example: 'function' });
      for (const n of [0, 1, 2, 3, 4, 5]) {
        const parsed = r.body.safeParse(JSON.parse(serialize(example(n))));
        expect({ key, n, issues: parsed.success ? [] : parsed.error.issues }).toEqual({ key, n, issues: [] });
      }
    }
  });
});

describe('fuzz: every endpoint', () => {
  for (const r of constructive) {
    it(
      `${r.method.toUpperCase()} ${r.path}`,
      async () => {
        if (r.path === '/api/automations/webhook-in/{token}') {
          // Earlier endpoints may have replaced the token: fuzz the current one.
          const row = await api.db('automations').where({ id: f.automationIn.id }).first('webhook_token');
          if (row?.webhook_token) f.automationIn.token = openText(api.config.encryptionKeys!, row.webhook_token);
        }
        await fuzzRoute(r);
      },
      ROUTE_TIMEOUT_MS,
    );
  }

  it(
    'stored records validate against the response schemas (before the deletes)',
    async () => {
      out(`[fuzz] listed back before the deletes: ${await listBack()}`);
    },
    ROUTE_TIMEOUT_MS,
  );

  for (const r of destructive) {
    it(`${r.method.toUpperCase()} ${r.path}`, () => fuzzRoute(r), ROUTE_TIMEOUT_MS);
  }

  it(
    'unknown routes answer the flat 404 body',
    async () => {
      const seed = seedFor('unknown routes');
      const tally: Tally = { cases: 0, statuses: new Map(), codes: new Map(), ms: 0 };
      const prefix = fc.constantFrom('/api/v1/', '/api/v1/deals/', '/admin/v1/', '/api/', '/', '/webhooks/whatsapp/', '/api/automations/');
      const started = Date.now();
      await fc.assert(
        fc.asyncProperty(
          prefix,
          fc.array(
            fc.oneof(
              fc.string({ unit: 'grapheme', minLength: 1, maxLength: 12 }).map(encodeURIComponent),
              fc.constantFrom(...JUNK_SEGMENTS),
            ),
            { minLength: 1, maxLength: 4 },
          ),
          fc.constantFrom('GET', 'POST', 'PATCH', 'DELETE', 'PUT'),
          async (pre, segments, method) => {
            const req: Sent = {
              method,
              path: `${pre}${segments.join('/')}`,
              headers: { 'x-forwarded-for': uniqueIp(), authorization: `Bearer ${f.ws.key}` },
            };
            const res = await send(req);
            tally.cases += 1;
            bump(tally.statuses, res.status >= 200 && res.status < 300 ? '2xx' : String(res.status));
            // A random path may name a real route: only the error shape and the absence of 5xx are checked.
            const problem = verdict(undefined, res);
            if (problem) throw new Error(`unknown route: ${problem}\n${describeCase(req, res)}`);
          },
        ),
        { seed, numRuns: RUNS, endOnFailure: !SHRINK },
      );
      out(summary('ANY <unknown path>', tally, seed, (Date.now() - started) / 1000));
    },
    ROUTE_TIMEOUT_MS,
  );

  it(
    'stored records validate against the response schemas (after everything)',
    async () => {
      out(`[fuzz] listed back at the end: ${await listBack()}`);
    },
    ROUTE_TIMEOUT_MS,
  );
});
