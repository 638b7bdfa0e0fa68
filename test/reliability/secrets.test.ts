/**
 * Secrets, end to end: every response of a session that creates and then uses API keys, webhook
 * subscriptions, instances with provider credentials and inbound automation URLs is recorded, and
 * each secret may appear only where the API contract shows it:
 * - an API key (`vg_live_...`): only in the response of the admin call that created it;
 * - a webhook secret (`whsec_...`): only in the response of `POST /api/v1/webhooks`;
 * - instance credentials (accessToken, appSecret, verifyToken): never (the admin API says `...Set: true`);
 * - an automation's inbound token: it is part of the record's `webhookUrl` (the contract: "the record
 *   carries webhookUrl"), so it shows in the automation's own create/get/list/patch/token answers and
 *   nowhere else; after regeneration the old token shows nowhere any more;
 * - the admin token: never.
 * None of them may appear in the OpenAPI document, an error body, a line the API logged, or a line
 * of the worker's log (TEST_STACK_DIR/logs/worker.log), which handles deliveries, sends and runs.
 */
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { ROOT } from '../../scripts/stack';
import { signBody } from '../../domain/messaging/inbound';
import { ALL_SCOPES } from '../../domain/access/scopes';
import {
  ApiResponse,
  createWorkspace,
  eventually,
  expectError,
  Receiver,
  RequestOptions,
  settleOutbox,
  startApi,
  startReceiver,
  TestApi,
  Workspace,
} from '../helpers';
import { uniquePhone } from './workspace-fixture';

jest.setTimeout(120_000);

const EMULATOR = process.env.EMULATOR_URL!;
const STACK_DIR = process.env.TEST_STACK_DIR ? path.resolve(process.env.TEST_STACK_DIR) : path.join(ROOT, '.data', 'test');
const WORKER_LOG = path.join(STACK_DIR, 'logs', 'worker.log');

let api: TestApi;
let receiver: Receiver;
let ws: Workspace;

/** Every answer of the session: which call, and everything it sent back (status line aside). */
const answers: { call: string; text: string }[] = [];

function headerText(res: ApiResponse): string {
  return [...res.headers.entries()].map(([k, v]) => `${k}: ${v}`).join('\n');
}

async function req(call: string, method: string, p: string, opts: RequestOptions = {}): Promise<ApiResponse> {
  const res = await api.request(method, p, opts);
  answers.push({ call, text: `${headerText(res)}\n\n${res.text}` });
  return res;
}
const asKey = (call: string, method: string, p: string, body?: unknown) => req(call, method, p, { key: ws.key, body });
const asAdmin = (call: string, method: string, p: string, body?: unknown) =>
  req(call, method, p, { body, headers: { authorization: `Bearer ${api.config.adminToken}` } });

/** The calls whose answer contains `secret`, each named once. */
const callsShowing = (secret: string): string[] => [...new Set(answers.filter((a) => a.text.includes(secret)).map((a) => a.call))].sort();

const unique = (label: string): string => `${label}-${randomBytes(12).toString('base64url')}`;

beforeAll(async () => {
  api = await startApi({ config: { rateLimitScale: 1000 } });
  receiver = await startReceiver();
  ws = await createWorkspace(api, { scopes: [...ALL_SCOPES], name: 'secrets' });
});
afterAll(async () => {
  await receiver?.close();
  await api?.close();
});

describe('secrets appear only where the contract shows them', () => {
  const secrets: Record<string, string> = {};
  let oldInboundToken = '';

  /**
   * The session every case below reads (its answers, the secrets it made): run once, by whichever
   * case comes first, so each case also runs alone (-t) and none relies on another having run.
   */
  let session: Promise<void> | undefined;
  const runSession = (): Promise<void> => (session ??= recordSession());

  it('runs a session that creates, uses, changes and breaks every kind of secret', () => runSession());

  async function recordSession(): Promise<void> {
    // --- API keys (admin) -------------------------------------------------------------------
    const created = await asAdmin('create api key', 'POST', `/admin/v1/workspaces/${ws.id}/api-keys`, {
      name: 'integration',
      scopes: ['deals:read', 'webhooks:read'],
    });
    expect(created.status).toBe(201);
    const key: string = created.body.data.key;
    expect(key).toMatch(/^vg_live_[A-Za-z0-9_-]{43}$/);
    secrets.apiKey = key;
    // What the admin API shows besides the key: its prefix, never more of it.
    expect(created.body.data.prefix).toBe(key.slice(0, 12));
    secrets.apiKeyHiddenPart = key.slice(12);
    const keyId = created.body.data.id;
    expect(
      (await asAdmin('patch api key', 'PATCH', `/admin/v1/workspaces/${ws.id}/api-keys/${keyId}`, { rateLimitPerMinute: 500 })).status,
    ).toBe(200);
    expect((await asAdmin('get workspace', 'GET', `/admin/v1/workspaces/${ws.id}`)).status).toBe(200);
    expect((await req('use api key', 'GET', '/api/v1/deals', { key })).status).toBe(200);
    expectError(await req('use api key without scope', 'GET', '/api/v1/leads', { key }), 403, 'INSUFFICIENT_SCOPE');
    expectError(await req('api key + junk', 'GET', '/api/v1/deals', { headers: { authorization: `Bearer ${key}x` } }), 401, 'UNAUTHORIZED');
    expectError(
      await req('api key + word', 'GET', '/api/v1/deals', { headers: { authorization: `Bearer ${key} extra` } }),
      401,
      'UNAUTHORIZED',
    );
    expectError(await req('api key as admin token', 'GET', `/admin/v1/workspaces/${ws.id}`, { key }), 401, 'UNAUTHORIZED');
    expectError(await req('api key in a body', 'POST', '/api/v1/tags', { key: ws.key, body: { name: key.repeat(3) } }), 400, 'VALIDATION');
    const revoked = await asAdmin('revoke api key', 'DELETE', `/admin/v1/workspaces/${ws.id}/api-keys/${keyId}`);
    expect(revoked.body).toEqual({ data: { id: keyId, deleted: true } });
    expectError(await req('use revoked api key', 'GET', '/api/v1/deals', { key }), 401, 'UNAUTHORIZED');

    // --- Instance credentials (admin) ---------------------------------------------------------
    secrets.accessToken = unique('EAAG');
    secrets.appSecret = unique('appsecret');
    secrets.verifyToken = unique('verify');
    const phoneNumberId = `PN-${randomBytes(4).toString('hex')}`;
    const instance = await asAdmin('create instance', 'POST', `/admin/v1/workspaces/${ws.id}/instances`, {
      name: 'Main',
      channel: 'whatsapp',
      provider: 'cloud',
      connected: true,
      config: {
        baseUrl: EMULATOR,
        phoneNumberId,
        accessToken: secrets.accessToken,
        appSecret: secrets.appSecret,
        verifyToken: secrets.verifyToken,
      },
    });
    expect(instance.status).toBe(201);
    expect(instance.body.data.config).toMatchObject({ accessTokenSet: true, appSecretSet: true, verifyTokenSet: true });
    const instanceId = instance.body.data.id;
    await asAdmin('create template', 'POST', `/admin/v1/workspaces/${ws.id}/templates`, {
      instanceId,
      name: 'welcome',
      language: 'pt_BR',
      status: 'approved',
    });
    expect(
      (await asAdmin('patch instance', 'PATCH', `/admin/v1/workspaces/${ws.id}/instances/${instanceId}`, { config: { phoneNumberId } }))
        .status,
    ).toBe(200);
    expect((await asKey('list instances', 'GET', '/api/v1/instances')).status).toBe(200);
    // The worker uses the access token: a send that succeeds, and one the provider refuses.
    const phone = uniquePhone();
    const sent = await asKey('send template', 'POST', '/api/v1/messages', {
      phone,
      instanceId,
      type: 'template',
      templateName: 'welcome',
      templateLanguage: 'pt_BR',
    });
    expect(sent.status).toBe(201);
    const refusedPhone = uniquePhone();
    await fetch(`${EMULATOR}/__emulator/script`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ to: refusedPhone, behaviour: 'error', code: 131026 }),
    });
    const refused = await asKey('send refused by the provider', 'POST', '/api/v1/messages', {
      phone: refusedPhone,
      instanceId,
      type: 'template',
      templateName: 'welcome',
      templateLanguage: 'pt_BR',
    });
    expect(refused.status).toBeGreaterThanOrEqual(400);
    expect((await asKey('get conversation', 'GET', `/api/v1/conversations/${sent.body.data.conversationId}`)).status).toBe(200);
    // The API uses the app secret and the verify token: Meta's verification GET and signed deliveries.
    const challenge = unique('challenge');
    const verified = await req(
      'verify webhook',
      'GET',
      `/webhooks/whatsapp/${instanceId}?hub.mode=subscribe&hub.verify_token=${secrets.verifyToken}&hub.challenge=${challenge}`,
    );
    expect([verified.status, verified.text]).toEqual([200, challenge]);
    expectError(
      await req(
        'verify webhook, wrong token',
        'GET',
        `/webhooks/whatsapp/${instanceId}?hub.mode=subscribe&hub.verify_token=${secrets.appSecret}x&hub.challenge=c`,
      ),
      401,
      'UNAUTHORIZED',
    );
    const notification = JSON.stringify({
      object: 'whatsapp_business_account',
      entry: [
        {
          id: '1',
          changes: [
            { field: 'messages', value: { messaging_product: 'whatsapp', metadata: { phone_number_id: phoneNumberId }, statuses: [] } },
          ],
        },
      ],
    });
    const signed = await req('signed inbound delivery', 'POST', `/webhooks/whatsapp/${instanceId}`, {
      rawBody: notification,
      headers: { 'content-type': 'application/json', 'x-hub-signature-256': signBody(secrets.appSecret, notification) },
    });
    expect(signed.status).toBe(200);
    expectError(
      await req('badly signed inbound delivery', 'POST', `/webhooks/whatsapp/${instanceId}`, {
        rawBody: notification,
        headers: { 'content-type': 'application/json', 'x-hub-signature-256': `sha256=${secrets.appSecret}` },
      }),
      401,
      'UNAUTHORIZED',
    );

    // --- Webhook subscription secrets ------------------------------------------------------------
    const sub = await asKey('create webhook', 'POST', '/api/v1/webhooks', { url: `${receiver.url}/ok/secrets`, events: ['*'] });
    expect(sub.status).toBe(201);
    secrets.webhookSecret = sub.body.data.secret;
    expect(secrets.webhookSecret).toMatch(/^whsec_[A-Za-z0-9_-]{20,}$/);
    const subId = sub.body.data.id;
    expect((await asKey('create lead (an event to deliver)', 'POST', '/api/v1/leads', { phone: uniquePhone(), name: 'Ana' })).status).toBe(
      201,
    );
    await settleOutbox(api, ws.id);
    expect((await asKey('list webhooks', 'GET', '/api/v1/webhooks')).status).toBe(200);
    expect((await asKey('get webhook', 'GET', `/api/v1/webhooks/${subId}`)).status).toBe(200);
    expect((await asKey('ping webhook', 'POST', `/api/v1/webhooks/${subId}/ping`)).body.data.delivered).toBe(true);
    const deliveries = await asKey('list deliveries', 'GET', `/api/v1/webhooks/${subId}/deliveries`);
    expect(deliveries.body.data.length).toBeGreaterThan(0);
    expect((await asKey('retry delivery', 'POST', `/api/v1/webhooks/${subId}/deliveries/${deliveries.body.data[0].id}/retry`)).status).toBe(
      200,
    );
    // A failing receiver: the attempt's error is recorded and shown.
    expect(
      (await asKey('patch webhook url', 'PATCH', `/api/v1/webhooks/${subId}`, { url: `${receiver.url}/status/500/secrets` })).status,
    ).toBe(200);
    expect((await asKey('ping failing webhook', 'POST', `/api/v1/webhooks/${subId}/ping`)).body.data.delivered).toBe(false);
    expectError(
      await asKey('patch webhook, bad url', 'PATCH', `/api/v1/webhooks/${subId}`, { url: 'ftp://example.com/x' }),
      400,
      'INVALID_URL',
    );
    expect((await asKey('disable webhook', 'PATCH', `/api/v1/webhooks/${subId}`, { active: false })).status).toBe(200);
    // The receiver got signatures, never the secret itself.
    const got = receiver.to('/ok/secrets');
    expect(got.length).toBeGreaterThan(0);
    for (const r of got) expect(JSON.stringify(r.headers) + r.raw).not.toContain(secrets.webhookSecret);

    // --- Automation inbound tokens ---------------------------------------------------------------
    const flow = await asKey('create automation', 'POST', '/api/v1/automations', {
      name: 'intake',
      trigger: { type: 'webhook_received', mapping: { phone: 'phone', name: 'name' } },
      actions: [{ type: 'add_tag', tag: 'from-webhook' }],
    });
    expect(flow.status).toBe(201);
    oldInboundToken = String(flow.body.data.webhookUrl).split('/').pop()!;
    expect(oldInboundToken.length).toBeGreaterThanOrEqual(32);
    const flowId = flow.body.data.id;
    const hook = (call: string, token: string, body: unknown) => req(call, 'POST', `/api/automations/webhook-in/${token}`, { body });
    expect((await hook('inbound webhook', oldInboundToken, { phone: uniquePhone(), name: 'Bia' })).status).toBe(202);
    expectError(
      await req('inbound webhook, not an object', 'POST', `/api/automations/webhook-in/${oldInboundToken}`, {
        rawBody: '[1]',
        headers: { 'content-type': 'application/json' },
      }),
      400,
      'VALIDATION',
    );
    expect((await asKey('get automation', 'GET', `/api/v1/automations/${flowId}`)).status).toBe(200);
    expect((await asKey('list automations', 'GET', '/api/v1/automations')).status).toBe(200);
    expect((await asKey('patch automation', 'PATCH', `/api/v1/automations/${flowId}`, { name: 'intake 2' })).status).toBe(200);
    await eventually('the run to finish', async () => {
      const runs = await asKey('list runs', 'GET', `/api/v1/automations/${flowId}/runs`);
      return runs.body.data.length > 0 && runs.body.data.every((r: { status: string }) => r.status !== 'running');
    });
    const regenerated = await asKey('regenerate token', 'POST', `/api/v1/automations/${flowId}/token`);
    secrets.inboundToken = String(regenerated.body.data.webhookUrl).split('/').pop()!;
    expect(secrets.inboundToken).not.toBe(oldInboundToken);
    expectError(await hook('inbound webhook, old token', oldInboundToken, { phone: uniquePhone() }), 404, 'NOT_FOUND');
    expect((await asKey('get automation after regeneration', 'GET', `/api/v1/automations/${flowId}`)).status).toBe(200);
    expect((await asKey('list automations after regeneration', 'GET', '/api/v1/automations')).status).toBe(200);
    expectError(await asKey('patch automation, bad body', 'PATCH', `/api/v1/automations/${flowId}`, { name: '' }), 400, 'VALIDATION');
    const removed = await asKey('remove token', 'DELETE', `/api/v1/automations/${flowId}/token`);
    expect(removed.body.data.webhookUrl).toBeNull();
    expectError(await hook('inbound webhook, removed token', secrets.inboundToken, { phone: uniquePhone() }), 404, 'NOT_FOUND');
    expect((await asKey('get automation after removal', 'GET', `/api/v1/automations/${flowId}`)).status).toBe(200);

    // --- The documentation -------------------------------------------------------------------------
    expect((await req('openapi', 'GET', '/api/v1/openapi.json')).status).toBe(200);
    expect((await req('docs', 'GET', '/docs')).status).toBe(200);
    await settleOutbox(api, ws.id);
  }

  it('shows each secret only in the answers the contract allows', async () => {
    await runSession();
    expect(callsShowing(secrets.apiKey)).toEqual(['create api key']);
    expect(callsShowing(secrets.apiKeyHiddenPart)).toEqual(['create api key']);
    expect(callsShowing(secrets.webhookSecret)).toEqual(['create webhook']);
    expect(callsShowing(secrets.accessToken)).toEqual([]);
    expect(callsShowing(secrets.appSecret)).toEqual([]);
    expect(callsShowing(secrets.verifyToken)).toEqual([]);
    expect(callsShowing(api.config.adminToken)).toEqual([]);
    // The inbound token is the record's webhookUrl: shown by the automation's own answers while it is valid.
    expect(callsShowing(oldInboundToken)).toEqual(['create automation', 'get automation', 'list automations', 'patch automation'].sort());
    expect(callsShowing(secrets.inboundToken)).toEqual(
      ['get automation after regeneration', 'list automations after regeneration', 'regenerate token'].sort(),
    );
  });

  it('logs none of them (API log lines and the worker log)', async () => {
    await runSession();
    const apiLog = api.logs.join('\n');
    expect(api.logs.length).toBeGreaterThan(30);
    expect(apiLog).toContain('/webhook-in/[redacted]');
    // Give the worker's log stream a moment to reach the file.
    await new Promise((resolve) => setTimeout(resolve, 1000));
    const workerLog = fs.existsSync(WORKER_LOG) ? fs.readFileSync(WORKER_LOG, 'utf8') : '';
    expect(workerLog).toContain('worker ready');
    const all = { ...secrets, oldInboundToken, adminToken: api.config.adminToken };
    const leaks: string[] = [];
    for (const [name, value] of Object.entries(all)) {
      if (apiLog.includes(value)) leaks.push(`${name} in the API log`);
      if (workerLog.includes(value)) leaks.push(`${name} in ${path.relative(ROOT, WORKER_LOG)}`);
    }
    expect(leaks).toEqual([]);
    console.log(
      `secrets: ${answers.length} answers recorded; api log ${api.logs.length} lines, worker log ${workerLog.split('\n').length} lines; ` +
        `checked ${Object.keys(all).join(', ')}`,
    );
  });
});
