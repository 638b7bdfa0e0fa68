/**
 * The anti-SSRF check at the API (and, where the check runs there, at the worker's activity level):
 * every endpoint that takes a URL a customer gave us, with ALLOW_PRIVATE_URLS off, refuses a corpus
 * of internal-address forms with 400 INVALID_URL and stores nothing. Redirects are never followed.
 *
 * Endpoints that take a URL (grep of the route schemas for url/Url fields):
 * - POST /api/v1/webhooks, PATCH /api/v1/webhooks/{id}: `url` (check with DNS, api side);
 * - POST /api/v1/messages, POST /api/v1/conversations/{id}/messages: `mediaUrl` (syntax and
 *   address-literal check at the API; the DNS check and the pinned HEAD run in the send saga's
 *   media activity, proven below by calling that activity with the strict policy);
 * - POST/PATCH /api/v1/automations: `actions[].mediaUrl` and `actions[].templateHeader.mediaUrl` of
 *   send_message (literal URLs checked on save); the sends' `templateHeader.mediaUrl` like `mediaUrl`;
 * - POST /api/v1/broadcasts: `template.header.mediaUrl` (syntax and address literals, like a send's);
 * - admin instance `config.baseUrl`: operator configuration, not subject to the check (docs/api-conventions.md).
 *
 * A media URL must serve the file itself: a redirect is 400 INVALID_URL for every provider, and a
 * web gateway (which would fetch a URL from its own network) is given the file's bytes, downloaded
 * by the worker through the pinned, size-capped client, never the URL (last section).
 *
 * This machine has no public DNS: the API's resolver (node:dns promises.lookup, in this process) is
 * replaced by a table for a few names; everything else goes to the system resolver (/etc/hosts).
 */
import { createHash, randomBytes } from 'node:crypto';
import dns from 'node:dns';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { z } from 'zod';
import { createMediaActivities } from '../../activities/media';
import { ROUTES } from '../../api/app';
import { requirePhone } from '../../domain/leads/contacts';
import { postWebhook } from '../../domain/webhooks/webhooks';
import { createKey, createWorkspace, expectError, seedContact, settleOutbox, startApi, TestApi, Workspace } from '../helpers';
import { firstLeadDelivery, uniquePhone } from './workspace-fixture';

jest.setTimeout(120_000);

/** Names the fake resolver answers (the rest: the system resolver, i.e. /etc/hosts or NXDOMAIN). */
const FAKE_DNS: Record<string, string[]> = {
  'hooks.example.com': ['93.184.216.34'],
  'internal.example.com': ['10.0.0.5'],
  'rebind.example.com': ['93.184.216.34', '127.0.0.1'],
  'metadata.example.com': ['169.254.169.254'],
  'v6private.example.com': ['fd00::1'],
  'mapped.example.com': ['::ffff:127.0.0.1'],
  'cgnat.example.com': ['100.64.0.1'],
  '127.0.0.1.nip.io': ['127.0.0.1'],
  'v6metadata.example.com': ['fd00:ec2::254'],
  'mixed-metadata.example.com': ['10.0.0.5', '169.254.169.254'],
  'private.example.com': ['10.0.0.5'],
  // Not found at its first lookup (the check's), the metadata address at the next (the connect's).
  'late-metadata.example.com': ['169.254.169.254'],
};
/** Names that answer ENOTFOUND to their first lookup, then their FAKE_DNS entry. */
const LATE_NAMES = new Set(['late-metadata.example.com']);
const realLookup = dns.promises.lookup;

interface Form {
  url: string;
  why: string;
  /** Only a DNS lookup can tell (the API's mediaUrl check is syntax-only; the media activity resolves). */
  dns?: boolean;
}

const CORPUS: Form[] = [
  { url: 'https://127.0.0.1/a.png', why: 'loopback' },
  { url: 'http://2130706433/a.png', why: 'decimal IPv4 over http' },
  { url: 'https://2130706433/a.png', why: 'decimal IPv4' },
  { url: 'https://0x7f.1/a.png', why: 'hex + short IPv4' },
  { url: 'https://0x7f000001/a.png', why: 'hex IPv4' },
  { url: 'https://0177.0.0.1/a.png', why: 'octal IPv4' },
  { url: 'https://0177.0.0.0x1/a.png', why: 'mixed octal/hex IPv4' },
  { url: 'https://127.1/a.png', why: 'short IPv4' },
  { url: 'https://%31%32%37.0.0.1/a.png', why: 'percent-encoded IPv4' },
  { url: 'https://0300.0250.0.1/a.png', why: 'octal 192.168.0.1' },
  { url: 'https://10.0.0.1/a.png', why: 'private 10/8' },
  { url: 'https://172.16.0.1/a.png', why: 'private 172.16/12' },
  { url: 'https://192.168.1.1/a.png', why: 'private 192.168/16' },
  { url: 'https://169.254.169.254/latest/meta-data/', why: 'cloud metadata (link-local)' },
  { url: 'https://100.100.100.200/latest/meta-data/', why: 'Alibaba metadata (CGNAT)' },
  { url: 'https://100.64.0.1/a.png', why: 'CGNAT' },
  { url: 'https://0.0.0.0/a.png', why: 'unspecified' },
  { url: 'https://0/a.png', why: 'unspecified, short' },
  { url: 'https://255.255.255.255/a.png', why: 'broadcast' },
  { url: 'https://198.18.0.1/a.png', why: 'benchmarking 198.18/15' },
  { url: 'https://192.0.2.1/a.png', why: 'documentation' },
  { url: 'https://224.0.0.1/a.png', why: 'multicast' },
  { url: 'https://240.0.0.1/a.png', why: 'reserved' },
  { url: 'https://[::1]/a.png', why: 'IPv6 loopback' },
  { url: 'https://[::]/a.png', why: 'IPv6 unspecified' },
  { url: 'https://[fe80::1]/a.png', why: 'IPv6 link-local' },
  { url: 'https://[fd00::1]/a.png', why: 'IPv6 ULA fd00::/8' },
  { url: 'https://[fc00::1]/a.png', why: 'IPv6 ULA fc00::/8' },
  { url: 'https://[::ffff:127.0.0.1]/a.png', why: 'IPv4-mapped loopback' },
  { url: 'https://[::ffff:7f00:1]/a.png', why: 'IPv4-mapped loopback (hex)' },
  { url: 'https://[::ffff:a9fe:a9fe]/a.png', why: 'IPv4-mapped metadata (hex)' },
  { url: 'https://[::127.0.0.1]/a.png', why: 'IPv4-compatible' },
  { url: 'https://[64:ff9b::7f00:1]/a.png', why: 'NAT64 of loopback' },
  { url: 'https://[2002:7f00:1::]/a.png', why: '6to4 of loopback' },
  { url: 'https://localhost/a.png', why: 'localhost' },
  { url: 'https://LOCALHOST./a.png', why: 'localhost, upper case, trailing dot' },
  { url: 'https://localhost:8443/a.png', why: 'localhost with port' },
  { url: 'https://foo.localhost/a.png', why: 'subdomain of localhost' },
  { url: 'https://vm/a.png', why: 'single label in /etc/hosts (127.0.0.1)' },
  { url: 'https://runsc/a.png', why: 'single label in /etc/hosts (127.0.0.1)' },
  { url: 'https://metadata.google.internal/computeMetadata/v1/', why: '.internal' },
  { url: 'https://printer.local/a.png', why: '.local' },
  { url: 'https://user:pass@example.com/a.png', why: 'credentials' },
  { url: 'https://user@93.184.216.34/a.png', why: 'user only' },
  { url: 'https://example.com@127.0.0.1/a.png', why: 'credentials hiding the host' },
  { url: 'https://example.com\\@127.0.0.1/a.png', why: 'backslash parser differential' },
  { url: 'http://93.184.216.34/a.png', why: 'http (public host)' },
  { url: 'ftp://93.184.216.34/a.png', why: 'ftp' },
  { url: 'file:///etc/passwd', why: 'file' },
  { url: 'gopher://127.0.0.1:6379/_INFO', why: 'gopher' },
  { url: 'dict://127.0.0.1:11211/stat', why: 'dict' },
  { url: 'data:image/png;base64,iVBORw0KGgo=', why: 'data' },
  { url: 'javascript:alert(1)', why: 'javascript' },
  { url: '//127.0.0.1/a.png', why: 'scheme-relative' },
  { url: ' https://93.184.216.34/a.png', why: 'leading space' },
  { url: 'https://93.184.216.34/a.png\n', why: 'trailing newline' },
  { url: 'https://internal.example.com/a.png', why: 'name → 10.0.0.5', dns: true },
  { url: 'https://rebind.example.com/a.png', why: 'name → public + 127.0.0.1 (rebinding shape)', dns: true },
  { url: 'https://metadata.example.com/a.png', why: 'name → 169.254.169.254', dns: true },
  { url: 'https://v6private.example.com/a.png', why: 'name → fd00::1', dns: true },
  { url: 'https://mapped.example.com/a.png', why: 'name → ::ffff:127.0.0.1', dns: true },
  { url: 'https://cgnat.example.com/a.png', why: 'name → 100.64.0.1', dns: true },
  { url: 'https://127.0.0.1.nip.io/a.png', why: 'name → 127.0.0.1', dns: true },
];

let api: TestApi;
let ws: Workspace;
let instanceId: string;
let conversationId: string;
let subscriptionId: string;
let automationId: string;
const table: string[] = [];

/** Rows of the workspace that a refused request must not have created or changed. */
async function stored(): Promise<unknown> {
  const rows = async (t: string) => api.db(t).where({ workspace_id: ws.id }).orderByRaw('1').select('*');
  return {
    contacts: await rows('contacts'),
    conversations: await rows('conversations'),
    messages: await rows('messages'),
    subscriptions: await rows('webhook_subscriptions'),
    broadcasts: await rows('broadcasts'),
    automations: await rows('automations'),
    outbox: await rows('outbox_events'),
  };
}

beforeAll(async () => {
  (dns.promises as { lookup: unknown }).lookup = async (host: string, options?: unknown) => {
    if (LATE_NAMES.delete(host.toLowerCase())) throw Object.assign(new Error(`getaddrinfo ENOTFOUND ${host}`), { code: 'ENOTFOUND' });
    const found = FAKE_DNS[host.toLowerCase()];
    if (found) return found.map((address) => ({ address, family: address.includes(':') ? 6 : 4 }));
    return (realLookup as (h: string, o?: unknown) => Promise<unknown>)(host, options);
  };
  api = await startApi({ config: { allowPrivateUrls: false, rateLimitScale: 100_000 } });
  ws = await createWorkspace(api, {
    scopes: ['webhooks:write', 'webhooks:read', 'conversations:send', 'automations:write', 'automations:read', 'broadcasts:write'],
    name: 'ssrf',
  });
  const instance = await api.admin('POST', `/admin/v1/workspaces/${ws.id}/instances`, {
    name: 'WA',
    channel: 'whatsapp',
    provider: 'cloud',
    connected: false,
  });
  instanceId = instance.body.data.id;
  const contact = await seedContact(api, ws.id, { phone: uniquePhone(), name: 'Ssrf' });
  [{ id: conversationId }] = await api
    .db('conversations')
    .insert({ workspace_id: ws.id, contact_id: contact.id, instance_id: instanceId, channel: 'whatsapp', last_message_at: new Date() })
    .returning('id');
  // A public-looking subscriber (never called: inactive) to aim the PATCHes at.
  const sub = await api.request('POST', '/api/v1/webhooks', {
    key: ws.key,
    body: { url: 'https://hooks.example.com/in', events: ['*'], active: false },
  });
  expect(sub.status).toBe(201);
  subscriptionId = sub.body.data.id;
  const flow = await api.request('POST', '/api/v1/automations', {
    key: ws.key,
    body: {
      name: 'media',
      trigger: { type: 'deal_won' },
      actions: [{ type: 'send_message', messageType: 'image', mediaUrl: 'https://cdn.example.com/a.png' }],
    },
  });
  expect(flow.status).toBe(201);
  automationId = flow.body.data.id;
});

afterAll(async () => {
  (dns.promises as { lookup: unknown }).lookup = realLookup;
  if (table.length)
    console.log(
      `SSRF corpus (${CORPUS.length} forms; W+ webhook create, W~ webhook patch, M messages, C conversation messages, A+ automation create, A~ automation patch, H a template header in a send, AT in an automation, B in a broadcast, media activity):\n${table.join('\n')}`,
    );
  await api?.close();
});

/**
 * Sends `form` to every URL field through `client` (an API whose ALLOW_PRIVATE_URLS is
 * `allowPrivate`; the suite's workspace and records) and to the send saga's media check with the
 * same policy; adds a row to the printed table and returns what was not refused with INVALID_URL.
 */
async function refusedEverywhere(client: TestApi, form: Form, allowPrivate: boolean): Promise<string[]> {
  const failures: string[] = [];
  const cells: string[] = [];
  const expectInvalid = async (label: string, res: { status: number; body: any; text: string }) => {
    const ok = res.status === 400 && res.body?.code === 'INVALID_URL';
    cells.push(`${label}:${ok ? 'ok' : `${res.status} ${res.body?.code ?? ''}`}`);
    if (!ok) failures.push(`${JSON.stringify(form.url)} (${form.why}) ${label}: ${res.status} ${res.text.slice(0, 160)}`);
    else expectError(res as never, 400, 'INVALID_URL');
  };
  await expectInvalid('W+', await client.request('POST', '/api/v1/webhooks', { key: ws.key, body: { url: form.url, events: ['*'] } }));
  await expectInvalid('W~', await client.request('PATCH', `/api/v1/webhooks/${subscriptionId}`, { key: ws.key, body: { url: form.url } }));
  if (!form.dns) {
    // The API's mediaUrl check is syntax and address literals; names are resolved by the send saga (below).
    await expectInvalid(
      'M',
      await client.request('POST', '/api/v1/messages', {
        key: ws.key,
        body: { phone: uniquePhone(), instanceId, type: 'image', mediaUrl: form.url },
      }),
    );
    await expectInvalid(
      'C',
      await client.request('POST', `/api/v1/conversations/${conversationId}/messages`, {
        key: ws.key,
        body: { type: 'document', mediaUrl: form.url, fileName: 'a.pdf' },
      }),
    );
    const action = { type: 'send_message', messageType: 'video', mediaUrl: form.url };
    await expectInvalid(
      'A+',
      await client.request('POST', '/api/v1/automations', {
        key: ws.key,
        body: { name: 'x', trigger: { type: 'deal_won' }, actions: [{ type: 'add_tag', tag: 't' }, action] },
      }),
    );
    await expectInvalid(
      'A~',
      await client.request('PATCH', `/api/v1/automations/${automationId}`, { key: ws.key, body: { actions: [action] } }),
    );
    // A template's header file, in a send (H), an automation's send (AT) and a broadcast (B).
    const templateHeader = { mediaUrl: form.url };
    const template = { templateName: 'promo', templateLanguage: 'pt_BR', templateHeader };
    await expectInvalid(
      'H',
      await client.request('POST', '/api/v1/messages', {
        key: ws.key,
        body: { phone: uniquePhone(), instanceId, type: 'template', ...template },
      }),
    );
    await expectInvalid(
      'AT',
      await client.request('POST', '/api/v1/automations', {
        key: ws.key,
        body: { name: 'x', trigger: { type: 'deal_won' }, actions: [{ type: 'send_message', messageType: 'template', ...template }] },
      }),
    );
    await expectInvalid(
      'B',
      await client.request('POST', '/api/v1/broadcasts', {
        key: ws.key,
        body: {
          name: 'x',
          instanceId,
          audience: { leadIds: ['00000000-0000-4000-8000-000000000000'] },
          template: { name: 'promo', language: 'pt_BR', header: templateHeader },
        },
      }),
    );
  } else {
    cells.push('M/C/A: resolved at send time');
  }
  // The send saga's media check (worker side), with the same policy: every form, names resolved.
  const err = await createMediaActivities({ db: client.db, config: { allowPrivateUrls: allowPrivate } })
    .checkMedia({ url: form.url, type: 'image' })
    .then(
      () => undefined,
      (e: { type?: string; message?: string }) => e,
    );
  cells.push(`media activity:${err?.type === 'INVALID_URL' ? 'ok' : (err?.type ?? 'accepted')}`);
  if (err?.type !== 'INVALID_URL')
    failures.push(`${JSON.stringify(form.url)} (${form.why}) media activity: ${err?.type ?? 'accepted'} ${err?.message ?? ''}`);
  table.push(
    `  ${allowPrivate ? '[ALLOW_PRIVATE_URLS] ' : ''}${JSON.stringify(form.url).padEnd(58)} ${form.why.padEnd(44)} ${cells.join(' ')}`,
  );
  return failures;
}

describe('the endpoints that take a URL', () => {
  it('are the ones this suite covers (a new url field must be added here)', () => {
    const urlFields = new Set<string>();
    for (const r of ROUTES.filter((r) => r.body)) {
      const text = JSON.stringify(z.toJSONSchema(r.body!, { io: 'input', unrepresentable: 'any' }));
      for (const m of text.matchAll(/"(\w*(?:url|Url|URL))":/g)) urlFields.add(`${r.method} ${r.path} ${m[1]}`);
    }
    expect([...urlFields].sort()).toEqual(
      [
        'post /api/v1/webhooks url',
        'patch /api/v1/webhooks/{id} url',
        'post /api/v1/messages mediaUrl',
        'post /api/v1/conversations/{id}/messages mediaUrl',
        'post /api/v1/automations mediaUrl',
        'patch /api/v1/automations/{id} mediaUrl',
        'post /api/v1/broadcasts mediaUrl',
        'post /admin/v1/workspaces/{id}/instances baseUrl',
        'patch /admin/v1/workspaces/{id}/instances/{instanceId} baseUrl',
        // The AI model's address: operator configuration like an instance's, not subject to the anti-SSRF check (docs/insights.md).
        'patch /admin/v1/workspaces/{id} baseUrl',
      ].sort(),
    );
  });
});

describe('SSRF corpus at the API (ALLOW_PRIVATE_URLS off)', () => {
  it(`has at least 30 forms (${CORPUS.length})`, () => {
    expect(CORPUS.length).toBeGreaterThanOrEqual(30);
  });

  it('refuses every form with 400 INVALID_URL on every endpoint, and stores nothing', async () => {
    // The setup's own events are dispatched first: the dispatcher's bookkeeping is not a change.
    await settleOutbox(api, ws.id);
    const before = await stored();
    const failures: string[] = [];
    for (const form of CORPUS) failures.push(...(await refusedEverywhere(api, form, false)));
    expect(failures).toEqual([]);
    expect(await stored()).toEqual(before);
    // The PATCHes changed nothing: the subscription still points where it did.
    expect((await api.request('GET', `/api/v1/webhooks/${subscriptionId}`, { key: ws.key })).body.data.url).toBe(
      'https://hooks.example.com/in',
    );
  });

  it('accepts the public controls (the refusals above are not a blanket no)', async () => {
    const sub = await api.request('PATCH', `/api/v1/webhooks/${subscriptionId}`, {
      key: ws.key,
      body: { url: 'https://hooks.example.com/in?v=2' },
    });
    expect(sub.status).toBe(200);
    const flow = await api.request('PATCH', `/api/v1/automations/${automationId}`, {
      key: ws.key,
      body: {
        actions: [
          { type: 'send_message', messageType: 'image', mediaUrl: 'https://93.184.216.34/a.png' },
          { type: 'send_message', messageType: 'image', mediaUrl: 'https://{{webhook.host}}/a.png' },
        ],
      },
    });
    expect(flow.status).toBe(200);
    // A media URL passing the API check goes on to the send (here: the instance is disconnected).
    const sent = await api.request('POST', `/api/v1/conversations/${conversationId}/messages`, {
      key: ws.key,
      body: { type: 'image', mediaUrl: 'https://[2606:4700:4700::1111]/a.png' },
    });
    expect(sent.body?.code).not.toBe('INVALID_URL');
  });

  it('leaves the instance base URL to the operator (the contract: not subject to the anti-SSRF check)', async () => {
    const res = await api.admin('PATCH', `/admin/v1/workspaces/${ws.id}/instances/${instanceId}`, {
      config: { baseUrl: 'http://127.0.0.1:1' },
    });
    expect(res.status).toBe(200);
    expect(res.body.data.config.baseUrl).toBe('http://127.0.0.1:1');
  });

  it('refuses at attempt time a subscriber name that now resolves to a private address (the worker-side delivery call)', async () => {
    for (const form of CORPUS.filter((f) => f.dns)) {
      const outcome = await postWebhook({
        url: form.url,
        secret: 'whsec_x',
        event: 'test.ping',
        deliveryId: 'd',
        body: '{}',
        policy: { allowPrivate: false },
      });
      expect({ url: form.url, ok: outcome.ok, statusCode: outcome.statusCode }).toEqual({ url: form.url, ok: false, statusCode: null });
      expect(outcome.error).toMatch(/^Invalid url: /);
    }
  });
});

/* ------------------------------------------------------------------------------------------------
 * ALLOW_PRIVATE_URLS: private addresses allowed, link-local and cloud metadata never
 * ---------------------------------------------------------------------------------------------- */

const ALWAYS_REFUSED: Form[] = [
  { url: 'http://169.254.169.254/latest/meta-data/iam/security-credentials/', why: 'AWS/GCP/Azure metadata' },
  { url: 'http://2852039166/latest/meta-data/', why: 'metadata, decimal' },
  { url: 'http://0xa9.0xfe.0xa9.0xfe/latest/meta-data/', why: 'metadata, hex' },
  { url: 'http://169.254.0.1/', why: 'IPv4 link-local' },
  { url: 'http://[fe80::1]/', why: 'IPv6 link-local' },
  { url: 'http://[febf:ffff::1]/', why: 'IPv6 link-local, top of fe80::/10' },
  { url: 'http://[fd00:ec2::254]/latest/meta-data/', why: 'AWS IPv6 metadata' },
  { url: 'http://[fd20:ce::254]/computeMetadata/v1/', why: 'GCP IPv6 metadata' },
  { url: 'http://100.100.100.200/latest/meta-data/', why: 'Alibaba metadata' },
  { url: 'http://[::ffff:169.254.169.254]/', why: 'IPv4-mapped metadata' },
  { url: 'http://[::169.254.169.254]/', why: 'IPv4-compatible metadata' },
  { url: 'http://[64:ff9b::169.254.169.254]/', why: 'NAT64 of metadata' },
  { url: 'http://[2002:a9fe:a9fe::]/', why: '6to4 of metadata' },
  { url: 'http://metadata.example.com/', why: 'name → 169.254.169.254', dns: true },
  { url: 'http://v6metadata.example.com/', why: 'name → fd00:ec2::254', dns: true },
  { url: 'http://mixed-metadata.example.com/', why: 'name → 10.0.0.5 + 169.254.169.254', dns: true },
];

describe('ALLOW_PRIVATE_URLS on: link-local and cloud metadata addresses are still refused', () => {
  let permissive: TestApi;
  beforeAll(async () => {
    // The same workspace and records, through an API that allows private addresses.
    permissive = await startApi({ config: { allowPrivateUrls: true, rateLimitScale: 100_000 } });
  });
  afterAll(async () => {
    await permissive?.close();
  });

  it('refuses every form with 400 INVALID_URL on every endpoint and in the media check, and stores nothing', async () => {
    await settleOutbox(api, ws.id);
    const before = await stored();
    const failures: string[] = [];
    for (const form of ALWAYS_REFUSED) failures.push(...(await refusedEverywhere(permissive, form, true)));
    expect(failures).toEqual([]);
    expect(await stored()).toEqual(before);
  });

  it('refuses them at attempt time too, even for a name that did not resolve when checked', async () => {
    for (const url of [
      'http://169.254.169.254/',
      'http://[fd00:ec2::254]/',
      'http://metadata.example.com/',
      'http://late-metadata.example.com/',
    ]) {
      const outcome = await postWebhook({
        url,
        secret: 'whsec_x',
        event: 'test.ping',
        deliveryId: 'd',
        body: '{}',
        policy: { allowPrivate: true },
        timeoutMs: 3000,
      });
      expect({ url, ok: outcome.ok, statusCode: outcome.statusCode }).toEqual({ url, ok: false, statusCode: null });
      expect(outcome.error).toMatch(/link-local|cloud metadata/);
    }
  });

  it('still allows private addresses (the flag is not a blanket no)', async () => {
    const action = { type: 'send_message', messageType: 'image', mediaUrl: 'http://10.0.0.5/a.png' };
    const flow = await permissive.request('PATCH', `/api/v1/automations/${automationId}`, { key: ws.key, body: { actions: [action] } });
    expect(flow.status).toBe(200);
    for (const url of ['http://127.0.0.1:9/in', 'http://[fd00::1]/in', 'http://private.example.com/in']) {
      const sub = await permissive.request('PATCH', `/api/v1/webhooks/${subscriptionId}`, { key: ws.key, body: { url } });
      expect({ url, status: sub.status }).toEqual({ url, status: 200 });
    }
    expect(
      (
        await permissive.request('PATCH', `/api/v1/webhooks/${subscriptionId}`, {
          key: ws.key,
          body: { url: 'https://hooks.example.com/in' },
        })
      ).status,
    ).toBe(200);
  });
});

/* ------------------------------------------------------------------------------------------------
 * Redirects
 * ---------------------------------------------------------------------------------------------- */

/** Starts `server` on a free port of `host`; answers its base URL. */
async function listen(server: http.Server, host: string): Promise<string> {
  await new Promise<void>((resolve) => server.listen(0, host, resolve));
  return `http://${host}:${(server.address() as AddressInfo).port}`;
}

/** Stops the servers, dropping their kept-alive connections. */
async function closeServers(...servers: http.Server[]): Promise<void> {
  for (const server of servers) server.closeAllConnections();
  await Promise.all(servers.map((server) => new Promise((resolve) => server.close(resolve))));
}

/** A server no request may reach (run it at a private address): it records whatever does. */
function trapServer(hits: string[]): http.Server {
  return http.createServer((req, res) => {
    hits.push(`${req.method} ${req.url}`);
    res.writeHead(200).end('internal secret');
  });
}

describe('redirects to a private address are never followed', () => {
  let trap: http.Server;
  let bouncer: http.Server;
  let trapHits: string[];
  let bouncerUrl: string;
  let local: TestApi;

  beforeAll(async () => {
    trapHits = [];
    trap = trapServer(trapHits);
    const trapUrl = await listen(trap, '127.0.0.2');
    // `/<status>/...` answers that redirect to the trap (a different private address).
    bouncer = http.createServer((req, res) => {
      req.resume();
      req.on('end', () => {
        const status = Number(req.url?.split('/')[1]) || 302;
        res.writeHead(status, { location: `${trapUrl}/stolen${req.url}` }).end();
      });
    });
    bouncerUrl = await listen(bouncer, '127.0.0.1');
    // The receiver is on this machine: an API that allows private addresses (as the suite's worker does).
    local = await startApi({ config: { allowPrivateUrls: true } });
  });
  afterAll(async () => {
    await closeServers(bouncer, trap);
    await local?.close();
  });

  it('ping (API process): 30x is a failed attempt, the target is never requested', async () => {
    const lws = await createWorkspace(local, { scopes: ['webhooks:write', 'webhooks:read', 'leads:write'], name: 'ssrf-redirect' });
    for (const status of [301, 302, 303, 307, 308]) {
      const sub = await local.request('POST', '/api/v1/webhooks', {
        key: lws.key,
        body: { url: `${bouncerUrl}/${status}/ping`, events: ['lead.created'], active: false },
      });
      expect(sub.status).toBe(201);
      const ping = await local.request('POST', `/api/v1/webhooks/${sub.body.data.id}/ping`, { key: lws.key });
      expect(ping.body.data).toMatchObject({ delivered: false, statusCode: status });
      expect(ping.body.data.error).toContain('redirects are not followed');
      table.push(`  redirect ${status} via ping → delivered=false, "${ping.body.data.error.slice(0, 80)}"`);
    }
    expect(trapHits).toEqual([]);
  });

  it('event delivery (worker): 307 to a private address is a failed attempt and the target is never requested', async () => {
    const {
      ws: lws,
      subscriptionId: redirected,
      delivery,
    } = await firstLeadDelivery(local, `${bouncerUrl}/307/event`, 'ssrf-redirect-worker');
    expect(delivery).toMatchObject({ lastStatusCode: 307 });
    expect(delivery.lastError).toContain('redirects are not followed');
    // Stop the retry schedule.
    expect((await local.request('DELETE', `/api/v1/webhooks/${redirected}`, { key: lws.key })).status).toBe(200);
    expect(trapHits).toEqual([]);
    table.push(
      `  redirect 307 via worker delivery → attempts=${delivery.attempts} lastStatusCode=307 "${String(delivery.lastError).slice(0, 80)}"`,
    );
  });

  it('media check (worker activity): a 302 to a private address is not followed, and is INVALID_URL', async () => {
    const media = createMediaActivities({ db: local.db, config: { allowPrivateUrls: true } });
    await expect(media.checkMedia({ url: `${bouncerUrl}/302/a.png`, type: 'image' })).rejects.toMatchObject({
      type: 'INVALID_URL',
      nonRetryable: true,
    });
    expect(trapHits).toEqual([]);
  });
});

/* ------------------------------------------------------------------------------------------------
 * Media through the providers: a redirect is refused, a web gateway gets bytes
 * ---------------------------------------------------------------------------------------------- */

describe('media URLs at send time (the worker): redirects refused, a web gateway is given the file, never the URL', () => {
  const EMULATOR = process.env.EMULATOR_URL!;
  const METADATA = 'http://169.254.169.254/latest/meta-data/iam/security-credentials/';
  const FILE = randomBytes(3000);
  const IMAGE_LIMIT = 5 * 1024 * 1024;
  let files: http.Server;
  let trap: http.Server;
  let filesUrl: string;
  let trapHits: string[];
  let hits: string[];
  let local: TestApi;
  let mws: Workspace;
  let cloudId: string;
  let webId: string;

  /** The emulator's send calls to a number (either ninth-digit form). */
  const callsTo = async (to: string): Promise<any[]> =>
    ((await (await fetch(`${EMULATOR}/__emulator/calls?to=${to}`)).json()) as { calls: any[] }).calls;
  /** Cold sends are 5 per minute per key: each send here has its own. */
  const send = async (body: Record<string, unknown>) => {
    const key = (await createKey(local, mws.id, ['conversations:send'], { rateLimitPerMinute: 1000 })).key;
    return local.request('POST', '/api/v1/messages', { key, body });
  };
  /** The contact and the messages a send to this number left. */
  const rows = async (phone: string) => {
    const phoneKey = requirePhone(phone).key;
    const conversations = local
      .db('conversations')
      .join('contacts', 'contacts.id', 'conversations.contact_id')
      .where('contacts.phone_key', phoneKey)
      .select('conversations.id');
    return {
      contacts: (await local.db('contacts').where({ workspace_id: mws.id, phone_key: phoneKey })).length,
      messages: (await local.db('messages').where({ workspace_id: mws.id }).whereIn('conversation_id', conversations)).length,
    };
  };

  beforeAll(async () => {
    trapHits = [];
    hits = [];
    trap = trapServer(trapHits);
    const trapUrl = await listen(trap, '127.0.0.2');
    files = http.createServer((req, res) => {
      hits.push(`${req.method} ${req.url}`);
      const [, route, arg] = (req.url ?? '').split('/');
      if (route === 'redirect') {
        // Every method: a redirect to the cloud metadata address.
        res.writeHead(Number(arg), { location: METADATA }).end();
      } else if (route === 'get-redirect') {
        // A HEAD that looks like a small image, a GET that redirects (to a private address).
        if (req.method === 'HEAD') res.writeHead(200, { 'content-type': 'image/png', 'content-length': String(FILE.length) }).end();
        else res.writeHead(302, { location: `${trapUrl}/stolen` }).end();
      } else if (route === 'file') {
        res
          .writeHead(200, { 'content-type': 'image/png; charset=binary', 'content-length': String(FILE.length) })
          .end(req.method === 'HEAD' ? undefined : FILE);
      } else if (route === 'lying' || route === 'unsized') {
        // HEAD: a false small size (lying) or none (unsized); GET: one chunk past the image limit, chunked (no Content-Length).
        if (req.method === 'HEAD') {
          res.writeHead(200, { 'content-type': 'image/jpeg', ...(route === 'lying' ? { 'content-length': '1000' } : {}) }).end();
          return;
        }
        res.writeHead(200, { 'content-type': 'image/jpeg', 'transfer-encoding': 'chunked' });
        const chunk = Buffer.alloc(64 * 1024);
        let left = IMAGE_LIMIT + 1;
        const pump = (): void => {
          while (left > 0) {
            const n = Math.min(left, chunk.length);
            left -= n;
            if (!res.write(chunk.subarray(0, n))) {
              res.once('drain', pump);
              return;
            }
          }
          res.end();
        };
        res.on('close', () => (left = 0));
        pump();
      } else {
        res.writeHead(404).end();
      }
    });
    filesUrl = await listen(files, '127.0.0.1');
    // The media server is on this machine: an API that allows private addresses (as the suite's worker does).
    local = await startApi({ config: { allowPrivateUrls: true } });
    mws = await createWorkspace(local, { scopes: ['conversations:send'], name: 'ssrf-media' });
    const instance = async (provider: 'cloud' | 'web', name: string) => {
      const res = await local.admin('POST', `/admin/v1/workspaces/${mws.id}/instances`, {
        name,
        channel: 'whatsapp',
        provider,
        connected: true,
        config: {
          baseUrl: EMULATOR,
          phoneNumberId: `PN-media-${mws.id.slice(0, 8)}`,
          accessToken: 'token',
          appSecret: 's',
          instanceName: `media-${mws.id.slice(0, 8)}`,
        },
      });
      expect(res.status).toBe(201);
      return res.body.data.id as string;
    };
    cloudId = await instance('cloud', 'Cloud');
    webId = await instance('web', 'Web');
  });
  afterAll(async () => {
    await closeServers(files, trap);
    await local?.close();
  });

  /** A Cloud API conversation whose 24-hour window is open (the contact wrote a moment ago). */
  async function openCloudConversation(phone: string): Promise<string> {
    const contact = await seedContact(local, mws.id, { phone, name: 'Media' });
    const [{ id }] = await local
      .db('conversations')
      .insert({
        workspace_id: mws.id,
        contact_id: contact.id,
        instance_id: cloudId,
        channel: 'whatsapp',
        last_message_at: new Date(),
        last_inbound_at: new Date(),
      })
      .returning('id');
    return id;
  }

  it.each([301, 302, 307])(
    'a media URL answering %i (to the metadata address) is 400 INVALID_URL on a Cloud API and a web instance, nothing sent',
    async (status) => {
      const mediaUrl = `${filesUrl}/redirect/${status}/photo.png`;
      const cloudPhone = uniquePhone();
      const conversationId = await openCloudConversation(cloudPhone);
      const cloud = await local.request('POST', `/api/v1/conversations/${conversationId}/messages`, {
        key: mws.key,
        body: { type: 'image', mediaUrl },
      });
      expectError(cloud, 400, 'INVALID_URL');
      expect(cloud.body.error).toContain(`redirect (HTTP ${status})`);

      const webPhone = uniquePhone();
      const web = await send({ phone: webPhone, instanceId: webId, type: 'image', mediaUrl, caption: 'x' });
      expectError(web, 400, 'INVALID_URL');

      expect(await callsTo(cloudPhone)).toEqual([]);
      expect(await callsTo(webPhone)).toEqual([]);
      expect(await rows(webPhone)).toEqual({ contacts: 0, messages: 0 });
      expect(await rows(cloudPhone)).toEqual({ contacts: 1, messages: 0 });
    },
  );

  it('a web instance: a GET that redirects (after a HEAD that did not) is 400 INVALID_URL, not followed, nothing sent', async () => {
    const phone = uniquePhone();
    const res = await send({ phone, instanceId: webId, type: 'image', mediaUrl: `${filesUrl}/get-redirect/photo.png` });
    expectError(res, 400, 'INVALID_URL');
    expect(hits).toContain('GET /get-redirect/photo.png');
    expect(trapHits).toEqual([]);
    expect(await callsTo(phone)).toEqual([]);
    expect(await rows(phone)).toEqual({ contacts: 0, messages: 0 });
  });

  it("a web instance: the gateway receives the file's bytes (base64), never the URL", async () => {
    const phone = uniquePhone();
    const mediaUrl = `${filesUrl}/file/photo.png`;
    const res = await send({ phone, instanceId: webId, type: 'image', mediaUrl, caption: 'Foto' });
    expect(res.status).toBe(201);
    const calls = await callsTo(phone);
    expect(calls).toHaveLength(1);
    expect(calls[0]).toMatchObject({
      api: 'web',
      status: 201,
      media: { kind: 'base64', bytes: FILE.length, sha256: createHash('sha256').update(FILE).digest('hex'), mimetype: 'image/png' },
      body: { mediatype: 'image', mimetype: 'image/png', caption: 'Foto' },
    });
    expect(JSON.stringify(calls[0])).not.toContain(filesUrl);
    // The worker fetched it (HEAD for the check, GET for the bytes).
    expect(hits.filter((h) => h.endsWith('/file/photo.png'))).toEqual(['HEAD /file/photo.png', 'GET /file/photo.png']);
  });

  it.each(['lying', 'unsized'])(
    'a web instance: media over the type limit found while downloading (HEAD Content-Length %s) is 422 MEDIA_TOO_LARGE, nothing sent',
    async (route) => {
      const phone = uniquePhone();
      const res = await send({ phone, instanceId: webId, type: 'image', mediaUrl: `${filesUrl}/${route}/photo.jpg` });
      expectError(res, 422, 'MEDIA_TOO_LARGE');
      expect(res.body.error).toContain('more than 5 MB');
      expect(await callsTo(phone)).toEqual([]);
      expect(await rows(phone)).toEqual({ contacts: 0, messages: 0 });
    },
  );

  it('a web instance: media that cannot be downloaded (404) is 422 MEDIA_TOO_LARGE, said plainly, nothing sent', async () => {
    const phone = uniquePhone();
    const res = await send({ phone, instanceId: webId, type: 'document', mediaUrl: `${filesUrl}/missing/file.pdf`, fileName: 'file.pdf' });
    expectError(res, 422, 'MEDIA_TOO_LARGE');
    expect(res.body.error).toMatch(/could not be downloaded .*HTTP 404/);
    expect(await callsTo(phone)).toEqual([]);
    expect(await rows(phone)).toEqual({ contacts: 0, messages: 0 });
  });
});
