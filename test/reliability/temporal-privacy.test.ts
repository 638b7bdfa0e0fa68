/**
 * Temporal's history holds no tenant data: workflow inputs and activity arguments and results are
 * ids and flags (the content lives in send_requests and on the run's row), and every payload is
 * encrypted with ENCRYPTION_KEYS (domain/payload-codec.ts); operators decode through the admin
 * codec endpoint, behind the admin token.
 */
import { randomUUID } from 'node:crypto';
import { Client, Connection } from '@temporalio/client';
import { temporal } from '@temporalio/proto';
import { ALL_SCOPES } from '../../domain/scopes';
import { createWorkspace, eventually, expectError, historyPayloads, startApi, TestApi, uniqueIp, Workspace } from '../helpers';

let api: TestApi;
let connection: Connection;
/** A client without the codec: it sees what Temporal stores. */
let raw: Client;
beforeAll(async () => {
  api = await startApi();
  connection = await Connection.connect({ address: api.config.temporalAddress });
  raw = new Client({ connection, namespace: api.config.temporalNamespace });
});
afterAll(async () => {
  await connection?.close();
  await api.close();
});

/**
 * A random mobile of its own: the emulator keeps scripted behaviours per number, and other test
 * files' pid-based numbers (workspace-fixture's uniquePhone) can meet across jest workers.
 */
const uniquePhone = (): string => `55119${String(10_000_000 + Math.floor(Math.random() * 89_999_999))}`;

type Payload = temporal.api.common.v1.IPayload;
type WirePayload = { metadata: Record<string, string>; data: string };

function toWire(p: Payload): WirePayload {
  return {
    metadata: Object.fromEntries(Object.entries(p.metadata ?? {}).map(([k, v]) => [k, Buffer.from(v).toString('base64')])),
    data: Buffer.from(p.data ?? []).toString('base64'),
  };
}

/** A workflow's history as stored, and as the admin codec endpoint decodes it (the text an operator reads). */
async function history(workflowId: string): Promise<{ stored: Buffer; decoded: string; input: WirePayload[] }> {
  const events = await raw.workflow.getHandle(workflowId).fetchHistory();
  const stored = Buffer.from(temporal.api.history.v1.History.encode(events).finish());
  const payloads = historyPayloads(events.events).map(toWire);
  const decoded = await api.admin('POST', '/admin/v1/temporal-codec/decode', { payloads });
  expect(decoded.status).toBe(200);
  const text = (decoded.body.payloads as WirePayload[]).map((p) => Buffer.from(p.data, 'base64').toString('utf8')).join('\n');
  return { stored, decoded: text, input: events.events![0].workflowExecutionStartedEventAttributes!.input!.payloads!.map(toWire) };
}

async function workflowsOf(ws: Workspace, count: number): Promise<string[]> {
  return eventually(`${count} closed workflow(s) of the workspace`, async () => {
    // The service's own listing: the raw client could not decode the (encrypted) memo.
    const { executions } = await connection.workflowService.listWorkflowExecutions({
      namespace: api.config.temporalNamespace,
      query: `WorkspaceId = "${ws.id}" AND ExecutionStatus != "Running"`,
    });
    const found = executions.map((e) => e.execution!.workflowId!);
    return found.length >= count && found;
  });
}

async function workspaceWithTemplate(): Promise<Workspace> {
  const ws = await createWorkspace(api, { scopes: [...ALL_SCOPES] });
  const instance = await api.admin('POST', `/admin/v1/workspaces/${ws.id}/instances`, {
    name: 'Main', channel: 'whatsapp', provider: 'cloud', connected: true, config: { baseUrl: process.env.EMULATOR_URL, phoneNumberId: 'PN', accessToken: 't' },
  });
  expect(instance.status).toBe(201);
  await api.admin('POST', `/admin/v1/workspaces/${ws.id}/templates`, { instanceId: instance.body.data.id, name: 'hello', language: 'pt_BR', variableCount: 1 });
  return ws;
}

it("keeps an inbound webhook's body, the run's variables and its message out of the run's and the send's history, even decoded", async () => {
  const ws = await workspaceWithTemplate();
  const marker = `cpf-${randomUUID()}`;
  const phone = uniquePhone();
  const automation = await api.request('POST', '/api/v1/automations', {
    key: ws.key,
    body: {
      name: 'private',
      trigger: { type: 'webhook_received', mapping: { phone: 'customer.phone' } },
      actions: [
        { type: 'add_note', body: 'Document {{webhook.customer.document}}' },
        { type: 'wait', seconds: 1 },
        { type: 'send_message', messageType: 'template', templateName: 'hello', templateLanguage: 'pt_BR', templateVariables: ['{{webhook.customer.document}}'] },
        { type: 'add_note', body: 'Sent {{message.id}}' },
      ],
    },
  });
  expect(automation.status).toBe(201);
  expect((await api.request('POST', new URL(automation.body.data.webhookUrl).pathname, { body: { customer: { document: marker, phone } } })).status).toBe(202);

  // The data did flow: the note and the provider got the marker, the later note the send's message id.
  const run = await eventually('the finished run', async () => {
    const row = await api.db('automation_runs').where({ workspace_id: ws.id }).first('status', 'error', 'webhook_body', 'actions', 'context');
    return row && row.status !== 'running' && row;
  });
  expect(run).toMatchObject({ status: 'completed', error: null });
  const notes = await api.db('notes').where({ workspace_id: ws.id }).orderBy('created_at').pluck('body');
  const message = await api.db('messages').where({ workspace_id: ws.id }).first('id');
  expect(notes).toEqual([`Document ${marker}`, `Sent ${message.id}`]);
  // What the run needed only while it ran is gone from its row.
  expect(run).toMatchObject({ webhook_body: null, actions: null, context: null });

  const [runWorkflow, sendWorkflow] = (await workflowsOf(ws, 2)).sort();
  expect(sendWorkflow).toBe(`${runWorkflow}/send/3`);
  for (const id of [runWorkflow, sendWorkflow]) {
    const { stored, decoded } = await history(id);
    expect(stored.includes(Buffer.from(marker))).toBe(false);
    expect(decoded).toContain(ws.id); // decoding works: the ids are there
    expect(decoded).not.toContain(marker);
  }
  // The number shows only where operators search by it: the send's Phone search attribute (and the
  // send's own steps, which carry it to set that attribute), never in the run.
  expect((await history(runWorkflow)).decoded).not.toContain(phone);
});

it('keeps a send\'s content out of its history; the codec endpoint is behind the admin token', async () => {
  const ws = await workspaceWithTemplate();
  const marker = `secret-${randomUUID()}`;
  const phone = uniquePhone();
  const sent = await api.request('POST', '/api/v1/messages', {
    key: ws.key,
    headers: { 'Idempotency-Key': `privacy-${randomUUID()}` },
    body: { phone, type: 'template', templateName: 'hello', templateLanguage: 'pt_BR', templateVariables: [marker] },
  });
  expect(sent.status).toBe(201);
  const [workflowId] = await workflowsOf(ws, 1);
  const { stored, decoded, input } = await history(workflowId);
  expect(stored.includes(Buffer.from(marker))).toBe(false);
  expect(decoded).not.toContain(marker);

  // The input as stored is encrypted; decoded, it names the stored request and nothing else.
  expect(Buffer.from(input[0].metadata.encoding, 'base64').toString()).toBe('binary/encrypted');
  expectError(await api.request('POST', '/admin/v1/temporal-codec/decode', { body: { payloads: input } }), 401, 'UNAUTHORIZED');
  const decodedInput = await api.admin('POST', '/admin/v1/temporal-codec/decode', { payloads: input });
  expect(decodedInput.headers.get('cache-control')).toBe('no-store');
  expect(JSON.parse(Buffer.from(decodedInput.body.payloads[0].data, 'base64').toString('utf8'))).toEqual({
    workspaceId: ws.id,
    requestId: expect.any(String),
    kind: 'cold',
    hasMedia: false,
    reconcileWindowMs: expect.any(Number),
  });
  // The UI calls it from its own origin: the preflight is answered.
  const preflight = await fetch(`${api.url}/admin/v1/temporal-codec/decode`, { method: 'OPTIONS', headers: { origin: 'http://localhost:8233', 'access-control-request-method': 'POST' } });
  expect(preflight.status).toBe(204);
  expect(preflight.headers.get('access-control-allow-origin')).toBe('http://localhost:8233');
});

it('opens a codec session for the Temporal UI: a cookie, issued for the admin token, that decodes and does nothing else', async () => {
  const ws = await workspaceWithTemplate();
  const sent = await api.request('POST', '/api/v1/messages', {
    key: ws.key,
    body: { phone: uniquePhone(), type: 'template', templateName: 'hello', templateLanguage: 'pt_BR', templateVariables: ['x'] },
  });
  expect(sent.status).toBe(201);
  const [workflowId] = await workflowsOf(ws, 1);
  const { input } = await history(workflowId);
  // The raw calls come from one client address of their own (the suite's other tests share 127.0.0.1's limits).
  const ip = { 'x-forwarded-for': uniqueIp() };
  const decode = (cookie?: string) =>
    fetch(`${api.url}/admin/v1/temporal-codec/decode`, {
      method: 'POST',
      headers: { ...ip, 'content-type': 'application/json', origin: 'http://localhost:8233', ...(cookie ? { cookie } : {}) },
      body: JSON.stringify({ payloads: input }),
    });

  // The page an operator opens on the API's origin, and the call it makes.
  const page = await fetch(`${api.url}/admin/temporal-codec`, { headers: ip });
  expect(page.status).toBe(200);
  expect(page.headers.get('content-type')).toMatch(/text\/html/);
  expect(await page.text()).toContain('Include cross-origin credentials');
  expectError(await api.request('POST', '/admin/v1/temporal-codec/session'), 401, 'UNAUTHORIZED');
  const opened = await api.admin('POST', '/admin/v1/temporal-codec/session');
  expect(opened.status).toBe(200);
  expect(new Date(opened.body.data.expiresAt).getTime()).toBeGreaterThan(Date.now() + 7 * 3600_000);
  const setCookie = opened.headers.get('set-cookie')!;
  expect(setCookie).toMatch(/^crm_codec_session=v1\.\d+\.[\w-]+; Path=\/admin\/v1\/temporal-codec; Max-Age=28800; HttpOnly; SameSite=Strict$/);
  const cookie = setCookie.split(';')[0];

  // The UI's call: the cookie alone decodes, and the answer names the origin with credentials allowed.
  const ok = await decode(cookie);
  expect(ok.status).toBe(200);
  expect(ok.headers.get('access-control-allow-origin')).toBe('http://localhost:8233');
  expect(ok.headers.get('access-control-allow-credentials')).toBe('true');
  expect(JSON.parse(Buffer.from(((await ok.json()) as { payloads: WirePayload[] }).payloads[0].data, 'base64').toString('utf8'))).toMatchObject({ workspaceId: ws.id });

  // No cookie, a forged or tampered one: refused. The cookie opens nothing but the codec.
  expect((await decode()).status).toBe(401);
  const [name, value] = cookie.split('=');
  const [version, expires, mac] = value.split('.');
  expect((await decode(`${name}=${version}.${Number(expires) + 1000}.${mac}`)).status).toBe(401);
  expect((await decode(`${name}=${version}.${expires}.${mac.slice(0, -1)}${mac.endsWith('A') ? 'B' : 'A'}`)).status).toBe(401);
  const other = await fetch(`${api.url}/admin/v1/workspaces/${ws.id}`, { headers: { ...ip, cookie } });
  expect(other.status).toBe(401);
  const another = await fetch(`${api.url}/admin/v1/temporal-codec/session`, { method: 'POST', headers: { ...ip, cookie } });
  expect(another.status).toBe(401);
});
