/**
 * Temporal's history holds no tenant data: workflow inputs and activity arguments and results are
 * ids and flags (the content lives in send_requests and on the run's row), and every payload is
 * encrypted with ENCRYPTION_KEYS (domain/platform/payload-codec.ts); operators decode through the admin
 * codec endpoint, behind the admin token.
 */
import { createHmac, randomUUID } from 'node:crypto';
import http from 'node:http';
import { Client, Connection } from '@temporalio/client';
import { temporal } from '@temporalio/proto';
import { ALL_SCOPES } from '../../domain/access/scopes';
import { seal } from '../../domain/platform/encryption';
import { EncryptionCodec } from '../../domain/platform/payload-codec';
import { saveSendRequest } from '../../domain/messaging/send-requests';
import { searchHash, withoutPhoneNumbers } from '../../domain/platform/temporal';
import { searchQuery } from '../../scripts/search-hash';
import { createWorkspace, eventually, expectError, historyPayloads, startApi, TestApi, uniqueIp, Workspace } from '../helpers';
import { uniqueMobile } from '../phones';

let api: TestApi;
let connection: Connection;
/** A client without the codec: it sees what Temporal stores. */
let raw: Client;
beforeAll(async () => {
  // Every send a workflow from the start (SEND_FIRST_ATTEMPT=workflow): each leaves a history to read.
  api = await startApi({ config: { sendFirstAttempt: 'workflow' } });
  connection = await Connection.connect({ address: api.config.temporalAddress });
  raw = new Client({ connection, namespace: api.config.temporalNamespace });
});
afterAll(async () => {
  await connection?.close();
  await api.close();
});

/** A mobile of this file's own (the emulator keeps scripted behaviours per number): the one allocator's. */
const uniquePhone = (): string => uniqueMobile('11');

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
    name: 'Main',
    channel: 'whatsapp',
    provider: 'cloud',
    connected: true,
    config: { baseUrl: process.env.EMULATOR_URL, phoneNumberId: 'PN', accessToken: 't' },
  });
  expect(instance.status).toBe(201);
  await api.admin('POST', `/admin/v1/workspaces/${ws.id}/templates`, {
    instanceId: instance.body.data.id,
    name: 'hello',
    language: 'pt_BR',
    variableCount: 1,
  });
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
        {
          type: 'send_message',
          messageType: 'template',
          templateName: 'hello',
          templateLanguage: 'pt_BR',
          templateVariables: ['{{webhook.customer.document}}'],
        },
        { type: 'add_note', body: 'Sent {{message.id}}' },
      ],
    },
  });
  expect(automation.status).toBe(201);
  expect(
    (await api.request('POST', new URL(automation.body.data.webhookUrl).pathname, { body: { customer: { document: marker, phone } } }))
      .status,
  ).toBe(202);

  // The data did flow: the note and the provider got the marker, the later note the send's message id.
  const run = await eventually('the finished run', async () => {
    const row = await api
      .db('automation_runs')
      .where({ workspace_id: ws.id })
      .first('status', 'error', 'webhook_body', 'actions', 'context');
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

it("keeps a send's content out of its history; the codec endpoint is behind the admin token", async () => {
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
  const preflight = await fetch(`${api.url}/admin/v1/temporal-codec/decode`, {
    method: 'OPTIONS',
    headers: { origin: 'http://localhost:8233', 'access-control-request-method': 'POST' },
  });
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
  expect(setCookie).toMatch(
    /^crm_codec_session=v1\.\d+\.[\w-]+; Path=\/admin\/v1\/temporal-codec; Max-Age=28800; HttpOnly; SameSite=Strict$/,
  );
  const cookie = setCookie.split(';')[0];

  // The UI's call: the cookie alone decodes, and the answer names the origin with credentials allowed.
  const ok = await decode(cookie);
  expect(ok.status).toBe(200);
  expect(ok.headers.get('access-control-allow-origin')).toBe('http://localhost:8233');
  expect(ok.headers.get('access-control-allow-credentials')).toBe('true');
  expect(
    JSON.parse(Buffer.from(((await ok.json()) as { payloads: WirePayload[] }).payloads[0].data, 'base64').toString('utf8')),
  ).toMatchObject({ workspaceId: ws.id });

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

it("shows the recipient in Temporal's visible fields only as a keyed hash an operator can compute, and keeps numbers out of failure messages", async () => {
  const ws = await workspaceWithTemplate();
  const phone = uniquePhone();
  const sent = await api.request('POST', '/api/v1/messages', {
    key: ws.key,
    body: {
      phone: `+${phone.slice(0, 2)} (${phone.slice(2, 4)}) ${phone.slice(4, 9)}-${phone.slice(9)}`,
      type: 'template',
      templateName: 'hello',
      templateLanguage: 'pt_BR',
      templateVariables: ['x'],
    },
  });
  expect(sent.status).toBe(201);
  await workflowsOf(ws, 1);
  // What an operator runs for the number, in any form, gives the query that finds the send.
  const query = searchQuery(
    [...api.config.encryptionKeys!.byId].map(([id, key]) => `${id}:${key.toString('base64')}`).join(','),
    ws.id,
    `+55 ${phone.slice(2)}`,
  );
  expect(query).toBe(`WorkspaceId = "${ws.id}" AND PhoneHash IN ("${searchHash(api.config.encryptionKeys!, 'phone', ws.id, phone)}")`);
  const { executions } = await connection.workflowService.listWorkflowExecutions({ namespace: api.config.temporalNamespace, query });
  expect(executions).toHaveLength(1);
  // Every visible field of the execution: no number in it, no Phone attribute.
  const visible = Buffer.from(temporal.api.workflow.v1.WorkflowExecutionInfo.encode(executions[0]).finish());
  const attributes = Object.fromEntries(
    Object.entries(executions[0].searchAttributes?.indexedFields ?? {}).map(([k, v]) => [
      k,
      JSON.parse(Buffer.from(v.data ?? []).toString()),
    ]),
  );
  // Ours (Temporal adds its own: BuildIds, TemporalChangeVersion): no Phone.
  expect(
    Object.keys(attributes)
      .filter((k) => !/^(BuildIds|Temporal)/.test(k))
      .sort(),
  ).toEqual(['IdempotencyKey', 'InstanceId', 'PhoneHash', 'WorkspaceId']);
  expect(JSON.stringify(attributes)).not.toContain(phone.slice(-8));
  expect(visible.includes(Buffer.from(phone.slice(-8)))).toBe(false);
  // The same number in another workspace hashes differently: Temporal cannot correlate tenants' contacts.
  expect(searchHash(api.config.encryptionKeys!, 'phone', randomUUID(), phone)).not.toBe(attributes.PhoneHash[0]);

  // A provider's failure quoting the number reaches Temporal without it (the attempt's row keeps the words).
  expect(withoutPhoneNumbers(`(#131026) Message Undeliverable: +55 11 98765-4321 / 5511987654321 is not on WhatsApp (HTTP 400)`)).toBe(
    '(#131026) Message Undeliverable: [number] / [number] is not on WhatsApp (HTTP 400)',
  );
});

it("binds each encrypted payload to the workspace it names: relabelled or moved into another workspace's workflow, it does not decode; older payloads still do", async () => {
  const ws = await workspaceWithTemplate();
  const sent = await api.request('POST', '/api/v1/messages', {
    key: ws.key,
    body: { phone: uniquePhone(), type: 'template', templateName: 'hello', templateLanguage: 'pt_BR', templateVariables: ['x'] },
  });
  expect(sent.status).toBe(201);
  const [workflowId] = await workflowsOf(ws, 1);
  const { input } = await history(workflowId);
  const meta = (p: WirePayload, k: string) => Buffer.from(p.metadata[k] ?? '', 'base64').toString();
  expect([meta(input[0], 'encryption-format'), meta(input[0], 'workspace-id')]).toEqual(['v2', ws.id]);

  const ring = api.config.encryptionKeys!;
  const codec = new EncryptionCodec(ring);
  const asPayload = (p: WirePayload) => ({
    metadata: Object.fromEntries(Object.entries(p.metadata).map(([k, v]) => [k, Buffer.from(v, 'base64')])),
    data: Buffer.from(p.data, 'base64'),
  });
  const stored = asPayload(input[0]);
  const own = { type: 'workflow' as const, namespace: api.config.temporalNamespace, workflowId };
  expect(JSON.parse(Buffer.from((await codec.decode([stored], own))[0].data!).toString())).toMatchObject({ workspaceId: ws.id });
  // Copied into another tenant's workflow: refused where the worker and clients decode.
  const other = randomUUID();
  await expect(codec.decode([stored], { ...own, workflowId: `send/${other}/key/copied` })).rejects.toThrow(/another workspace/);
  // Relabelled to match it: the associated data no longer matches, it does not decode anywhere.
  const relabelled = { ...stored, metadata: { ...stored.metadata, 'workspace-id': Buffer.from(other) } };
  await expect(codec.decode([relabelled])).rejects.toThrow();
  const downgraded = {
    ...stored,
    metadata: { encoding: stored.metadata.encoding, 'encryption-key-id': stored.metadata['encryption-key-id'] },
  };
  await expect(codec.decode([downgraded])).rejects.toThrow();
  // A payload encrypted before the binding (no format, no associated data) still decodes.
  const inner = temporal.api.common.v1.Payload.encode({
    metadata: { encoding: Buffer.from('json/plain') },
    data: Buffer.from(JSON.stringify({ workspaceId: ws.id, legacy: true })),
  }).finish();
  const { keyId, data } = seal(ring, Buffer.from(inner));
  const legacy = { metadata: { encoding: Buffer.from('binary/encrypted'), 'encryption-key-id': Buffer.from(keyId) }, data };
  expect(JSON.parse(Buffer.from((await codec.decode([legacy], own))[0].data!).toString())).toEqual({ workspaceId: ws.id, legacy: true });
});

it('refuses a plain workflow input in a shape only encrypting clients write: a send forged without the keys never runs', async () => {
  const ws = await workspaceWithTemplate();
  const phone = uniquePhone();
  const requestId = randomUUID();
  await saveSendRequest(api.db, ws.id, requestId, {
    phone,
    message: { type: 'template', templateName: 'hello', templateLanguage: 'pt_BR', templateVariables: ['forged'] },
  });
  // Someone who can reach Temporal but holds no ENCRYPTION_KEYS starts a send in plain JSON.
  const workflowId = `send/${ws.id}/key/forged-${randomUUID()}`;
  const handle = await raw.workflow.start('sendMessageWorkflow', {
    taskQueue: api.config.taskQueue,
    workflowId,
    args: [{ workspaceId: ws.id, requestId, kind: 'cold', hasMedia: false }],
  });
  try {
    const refused = await eventually(
      'the workflow task refused',
      async () => {
        const events = (await handle.fetchHistory()).events ?? [];
        return events.find((e) => e.workflowTaskFailedEventAttributes)?.workflowTaskFailedEventAttributes?.failure?.message;
      },
      30_000,
      200,
    );
    expect(refused).toMatch(/plain \(unencrypted\) payload/);
    const calls = (await (await fetch(`${process.env.EMULATOR_URL}/__emulator/calls?to=${phone}`)).json()) as { calls: unknown[] };
    expect(calls.calls).toHaveLength(0);
    expect(await api.db('contacts').where({ workspace_id: ws.id }).count('* as n').first()).toEqual({ n: 0 });
    // The codec endpoint refuses it too; a legacy (inline) plain input is still read as it is.
    const plain = (value: unknown) => ({
      metadata: { encoding: Buffer.from('json/plain').toString('base64') },
      data: Buffer.from(JSON.stringify(value)).toString('base64'),
    });
    const codec = new EncryptionCodec(api.config.encryptionKeys!);
    await expect(
      codec.decode([
        { metadata: { encoding: Buffer.from('json/plain') }, data: Buffer.from(JSON.stringify({ workspaceId: ws.id, requestId })) },
      ]),
    ).rejects.toThrow(/plain \(unencrypted\)/);
    expect(
      (await api.admin('POST', '/admin/v1/temporal-codec/decode', { payloads: [plain({ workspaceId: ws.id, requestId })] })).status,
    ).toBeGreaterThanOrEqual(400);
    const legacy = await api.admin('POST', '/admin/v1/temporal-codec/decode', {
      payloads: [plain({ workspaceId: ws.id, phone, message: { type: 'text', text: 'old' } })],
    });
    expect(legacy.status).toBe(200);
  } finally {
    await handle.terminate('test: forged plain input').catch(() => undefined);
  }
});

it('answers the codec endpoint with credentials only to TEMPORAL_UI_ORIGIN, keys the session MAC by a key derived from the admin token, and marks the cookie Secure off loopback', async () => {
  const ip = { 'x-forwarded-for': uniqueIp() };
  const uiOrigin = api.config.temporalUiOrigin;
  expect(uiOrigin).toBe('http://localhost:8233');
  const preflight = (origin: string) =>
    fetch(`${api.url}/admin/v1/temporal-codec/decode`, {
      method: 'OPTIONS',
      headers: { ...ip, origin, 'access-control-request-method': 'POST' },
    });
  const fromUi = await preflight(uiOrigin);
  expect(fromUi.headers.get('access-control-allow-origin')).toBe(uiOrigin);
  expect(fromUi.headers.get('access-control-allow-credentials')).toBe('true');
  // Any other page the operator's browser opens is not allowed to read the answers.
  for (const origin of ['https://evil.example', 'http://localhost:8234', 'null']) {
    const other = await preflight(origin);
    expect(other.headers.get('access-control-allow-origin')).toBeNull();
    expect(other.headers.get('access-control-allow-credentials')).toBeNull();
  }
  const opened = await api.admin('POST', '/admin/v1/temporal-codec/session');
  const cookie = opened.headers.get('set-cookie')!.split(';')[0];
  const decode = (origin: string, sessionCookie: string) =>
    fetch(`${api.url}/admin/v1/temporal-codec/decode`, {
      method: 'POST',
      headers: { ...ip, 'content-type': 'application/json', origin, cookie: sessionCookie },
      body: JSON.stringify({ payloads: [] }),
    });
  const evil = await decode('https://evil.example', cookie);
  expect(evil.headers.get('access-control-allow-origin')).toBeNull();
  expect(evil.headers.get('access-control-allow-credentials')).toBeNull();
  expect((await decode(uiOrigin, cookie)).headers.get('access-control-allow-origin')).toBe(uiOrigin);

  // A session MACed with the admin token itself (the token as the HMAC key) opens nothing.
  const expires = Date.now() + 3600_000;
  const keyedByToken = createHmac('sha256', api.config.adminToken).update(`temporal-codec-session:v1:${expires}`).digest('base64url');
  expect(cookie).not.toContain(keyedByToken);
  expect((await decode(uiOrigin, `crm_codec_session=v1.${expires}.${keyedByToken}`)).status).toBe(401);

  // Secure: an API whose PUBLIC_BASE_URL is not loopback, or a request to a host that is not.
  const remote = await startApi({ config: { publicBaseUrl: 'https://crm.example.com' } });
  try {
    const remoteCookie = (await remote.admin('POST', '/admin/v1/temporal-codec/session')).headers.get('set-cookie')!;
    expect(remoteCookie).toMatch(/; Secure$/);
  } finally {
    await remote.close();
  }
  const byHost = await new Promise<string>((resolve, reject) => {
    const url = new URL(`${api.url}/admin/v1/temporal-codec/session`);
    const req = http.request(
      {
        host: url.hostname,
        port: url.port,
        path: url.pathname,
        method: 'POST',
        headers: { ...ip, host: 'crm.example.com', authorization: `Bearer ${api.config.adminToken}` },
      },
      (res) => {
        res.resume();
        resolve(String(res.headers['set-cookie'] ?? ''));
      },
    );
    req.on('error', reject);
    req.end();
  });
  expect(byHost).toMatch(/^crm_codec_session=.*; Secure$/);
  // The local stack's own session (API and request on loopback, plain http) stays usable without https.
  expect(opened.headers.get('set-cookie')).not.toMatch(/Secure/);
});
