/**
 * Templates in the API, synchronised with the provider (issue 37, part 3): `GET /api/v1/templates`,
 * `POST /api/v1/instances/{id}/templates/sync` reading the Cloud API's paged
 * `GET /{version}/{wabaId}/message_templates` (the provider emulator, at its wire format), the
 * `message_template_status_update` webhook field, and the hourly Temporal schedule.
 */
import { loadConfig } from '../domain/platform/config';
import { temporalClientFactory } from '../domain/platform/temporal';
import { TEMPLATE_SYNC_SCHEDULE_ID } from '../types/templates';
import { createWorkspace, eventually, expectError, startApi, TestApi, uniqueIp, Workspace } from './helpers';
import { cloudInstance, emulator } from './stack-fixtures';
import { uniqueMobile } from './phones';

let api: TestApi;
beforeAll(async () => {
  api = await startApi();
});
afterAll(async () => {
  await api.close();
});

const SCOPES = ['templates:read', 'templates:write', 'conversations:send'] as const;
const request = (ws: Workspace, method: string, path: string, body?: unknown) =>
  api.request(method, path, { key: ws.key, body, headers: { 'x-forwarded-for': uniqueIp() } });

/** A template as the Graph API lists it. */
function graphTemplate(name: string, extra: Record<string, unknown> = {}) {
  return {
    name,
    language: 'pt_BR',
    status: 'APPROVED',
    category: 'UTILITY',
    components: [{ type: 'BODY', text: 'Olá {{1}}' }],
    ...extra,
  };
}

/** A Cloud API instance whose configuration names its business account (the emulator's wabaId of its number). */
async function cloudWithWaba(
  ws: Workspace,
  templates: unknown[],
  options: { operatorTemplates?: { name: string; status: string }[] } = {},
) {
  const { instanceId, phoneNumberId } = await cloudInstance(api, ws.id, { label: 'tpl', templates: options.operatorTemplates ?? [] });
  const { webhook } = await emulator(`/__emulator/webhook?phoneNumberId=${phoneNumberId}`);
  const wabaId = webhook.wabaId as string;
  const patched = await api.admin('PATCH', `/admin/v1/workspaces/${ws.id}/instances/${instanceId}`, { config: { wabaId } });
  expect(patched.status).toBe(200);
  await emulator('/__emulator/templates', { wabaId, templates });
  return { instanceId, phoneNumberId, wabaId };
}

const sync = (ws: Workspace, instanceId: string) => request(ws, 'POST', `/api/v1/instances/${instanceId}/templates/sync`);

async function list(ws: Workspace, query = ''): Promise<any[]> {
  const res = await request(ws, 'GET', `/api/v1/templates?limit=100${query}`);
  expect(res.status).toBe(200);
  return res.body.data;
}

describe('POST /api/v1/instances/{id}/templates/sync', () => {
  it('follows paging.next to the last page, upserts every template, and counts exactly on later runs', async () => {
    const ws = await createWorkspace(api, { scopes: [...SCOPES] });
    const many = Array.from({ length: 230 }, (_, i) => graphTemplate(`t_${String(i).padStart(3, '0')}`));
    const { instanceId, wabaId } = await cloudWithWaba(ws, many);

    const first = await sync(ws, instanceId);
    expect(first.status).toBe(200);
    expect(first.body).toEqual({ data: { created: 230, updated: 0, unchanged: 0 } });
    // Three pages of 100: the first without a cursor, the next two with the cursor the one before gave.
    const { calls } = await emulator(`/__emulator/templates?wabaId=${wabaId}`);
    expect(calls.map((c: any) => [c.after === null, c.limit, c.auth])).toEqual([
      [true, 100, 'bearer'],
      [false, 100, 'bearer'],
      [false, 100, 'bearer'],
    ]);
    expect((await request(ws, 'GET', `/api/v1/templates?instanceId=${instanceId}&limit=1`)).body.pagination.total).toBe(230);

    const second = await sync(ws, instanceId);
    expect(second.body).toEqual({ data: { created: 0, updated: 0, unchanged: 230 } });

    // One paused, one gone from the account (now disabled), one new; the provider's ids stay.
    const { templates: listed } = await emulator(`/__emulator/templates?wabaId=${wabaId}`);
    const changed = listed.slice(1).map((t: any, i: number) => (i === 0 ? { ...t, status: 'PAUSED' } : t));
    await emulator('/__emulator/templates', { wabaId, templates: [...changed, graphTemplate('t_new')] });
    const third = await sync(ws, instanceId);
    expect(third.body).toEqual({ data: { created: 1, updated: 2, unchanged: 228 } });
    const byName = new Map((await list(ws, `&instanceId=${instanceId}&status=disabled`)).map((t) => [t.name, t.status]));
    expect([...byName]).toEqual([['t_000', 'disabled']]);
    expect((await list(ws, `&instanceId=${instanceId}&status=paused`)).map((t) => t.name)).toEqual(['t_001']);
  });

  it("describes each template's components in lower case, and an operator's row and the provider's become one", async () => {
    const ws = await createWorkspace(api, { scopes: [...SCOPES] });
    const { instanceId } = await cloudWithWaba(
      ws,
      [
        graphTemplate('welcome', { status: 'APPROVED', category: 'MARKETING', components: [{ type: 'BODY', text: 'Oi {{1}}, {{2}}' }] }),
        graphTemplate('promo', {
          category: 'MARKETING',
          components: [
            { type: 'HEADER', format: 'IMAGE', example: { header_handle: ['https://example.com/x.jpg'] } },
            { type: 'BODY', text: 'Oferta para {{1}}' },
            { type: 'FOOTER', text: 'Sair: STOP' },
            {
              type: 'BUTTONS',
              buttons: [
                { type: 'URL', text: 'Ver', url: 'https://shop.example.com/p/{{1}}' },
                { type: 'QUICK_REPLY', text: 'Não quero' },
              ],
            },
          ],
        }),
      ],
      { operatorTemplates: [{ name: 'welcome', status: 'pending' }] },
    );
    const [operatorRow] = await list(ws);
    expect(operatorRow).toEqual({
      id: expect.any(String),
      instanceId,
      name: 'welcome',
      language: 'pt_BR',
      status: 'pending',
      category: null,
      components: { header: null, body: { text: null, variableCount: 1 }, buttons: [] },
      updatedAt: expect.any(String),
    });

    const res = await sync(ws, instanceId);
    expect(res.body).toEqual({ data: { created: 1, updated: 1, unchanged: 0 } });
    const rows = await list(ws);
    expect(rows).toEqual([
      {
        ...operatorRow,
        status: 'approved',
        category: 'marketing',
        components: { header: null, body: { text: 'Oi {{1}}, {{2}}', variableCount: 2 }, buttons: [] },
        updatedAt: expect.any(String),
      },
      {
        id: expect.any(String),
        instanceId,
        name: 'promo',
        language: 'pt_BR',
        status: 'approved',
        category: 'marketing',
        components: {
          header: { format: 'image', variableCount: 0 },
          body: { text: 'Oferta para {{1}}', variableCount: 1 },
          buttons: [
            { type: 'url', text: 'Ver', urlVariable: true },
            { type: 'quick_reply', text: 'Não quero', urlVariable: false },
          ],
        },
        updatedAt: expect.any(String),
      },
    ]);
    // The one row keeps its id; sends now take the provider's two variables.
    const send = (variables: string[]) =>
      request(ws, 'POST', '/api/v1/messages', {
        phone: uniqueMobile(),
        type: 'template',
        templateName: 'welcome',
        templateLanguage: 'pt_BR',
        templateVariables: variables,
      });
    expectError(await send(['Ana']), 422, 'TEMPLATE_INVALID');
    expect((await send(['Ana', 'x'])).status).toBe(201);
  });

  it('refuses a web gateway instance, a Cloud instance without wabaId, another workspace and a key without templates:write', async () => {
    const ws = await createWorkspace(api, { scopes: [...SCOPES] });
    const web = await api.admin('POST', `/admin/v1/workspaces/${ws.id}/instances`, {
      name: 'Gateway',
      channel: 'whatsapp',
      provider: 'web',
      connected: true,
      // Even with an account id and templates at that account: a gateway has no template API.
      config: {
        baseUrl: process.env.EMULATOR_URL,
        instanceName: `tpl-${ws.id.slice(0, 8)}`,
        accessToken: 'gateway-key',
        wabaId: '777000111',
      },
    });
    await emulator('/__emulator/templates', { wabaId: '777000111', templates: [graphTemplate('gateway')] });
    const gateway = await sync(ws, web.body.data.id);
    expectError(gateway, 422, 'TEMPLATE_UNSUPPORTED');
    expect(gateway.body.error).toMatch(/web gateway/);
    // The admin route keeps registering templates for every instance, the web gateway's too.
    const registered = await api.admin('POST', `/admin/v1/workspaces/${ws.id}/templates`, {
      instanceId: web.body.data.id,
      name: 'manual',
      language: 'pt_BR',
      variableCount: 0,
      status: 'approved',
    });
    expect(registered.status).toBe(201);

    const { instanceId: noWaba } = await cloudInstance(api, ws.id, { label: 'nowaba', templates: [] });
    const refused = await sync(ws, noWaba);
    expectError(refused, 422, 'TEMPLATE_UNSUPPORTED');
    expect(refused.body.error).toMatch(/wabaId/);

    const other = await createWorkspace(api, { scopes: [...SCOPES] });
    expectError(await sync(other, noWaba), 404, 'INSTANCE_NOT_FOUND');
    const reader = await createWorkspace(api, { scopes: ['templates:read'] });
    expectError(await sync(reader, noWaba), 403, 'INSUFFICIENT_SCOPE');
  });
});

describe('GET /api/v1/templates', () => {
  it("filters by instance and status, shows only the workspace's own templates, and needs templates:read", async () => {
    const mine = await createWorkspace(api, { scopes: [...SCOPES] });
    const theirs = await createWorkspace(api, { scopes: [...SCOPES] });
    const a = await cloudWithWaba(mine, [graphTemplate('a_one'), graphTemplate('a_two', { status: 'REJECTED' })]);
    const b = await cloudWithWaba(mine, [graphTemplate('b_one', { status: 'PENDING' })]);
    const t = await cloudWithWaba(theirs, [graphTemplate('secret')]);
    for (const [ws, id] of [
      [mine, a.instanceId],
      [mine, b.instanceId],
      [theirs, t.instanceId],
    ] as const)
      expect((await sync(ws, id)).status).toBe(200);

    expect((await list(mine)).map((x) => x.name).sort()).toEqual(['a_one', 'a_two', 'b_one']);
    expect((await list(mine, `&instanceId=${a.instanceId}`)).map((x) => x.name).sort()).toEqual(['a_one', 'a_two']);
    expect((await list(mine, '&status=rejected')).map((x) => x.name)).toEqual(['a_two']);
    expect((await list(mine, `&instanceId=${b.instanceId}&status=pending`)).map((x) => x.name)).toEqual(['b_one']);
    // Another workspace's instance id filters to nothing; its templates never appear.
    expect(await list(mine, `&instanceId=${t.instanceId}`)).toEqual([]);
    expect((await list(theirs)).map((x) => x.name)).toEqual(['secret']);
    const page = await request(mine, 'GET', '/api/v1/templates?limit=2');
    expect(page.body.pagination).toEqual({ total: 3, limit: 2, offset: 0, hasMore: true });

    const sender = await createWorkspace(api, { scopes: ['conversations:send', 'templates:write'] });
    expectError(await request(sender, 'GET', '/api/v1/templates'), 403, 'INSUFFICIENT_SCOPE');
  });
});

describe('message_template_status_update', () => {
  it('a template the provider pauses is refused at the next send, and sendable again once reinstated', async () => {
    const ws = await createWorkspace(api, { scopes: [...SCOPES] });
    const { instanceId, phoneNumberId } = await cloudWithWaba(ws, [graphTemplate('promo'), graphTemplate('other')]);
    expect((await sync(ws, instanceId)).body.data.created).toBe(2);
    const send = () =>
      request(ws, 'POST', '/api/v1/messages', {
        phone: uniqueMobile(),
        type: 'template',
        templateName: 'promo',
        templateLanguage: 'pt_BR',
        templateVariables: ['Ana'],
      });
    expect((await send()).status).toBe(201);

    const paused = await emulator('/__emulator/template-status', {
      phoneNumberId,
      name: 'promo',
      language: 'pt_BR',
      event: 'PAUSED',
      reason: 'LOW_QUALITY',
    });
    expect(paused.delivered).toBe(200);
    expect((await list(ws)).map((t) => [t.name, t.status]).sort()).toEqual([
      ['other', 'approved'],
      ['promo', 'paused'],
    ]);
    const refused = await send();
    expectError(refused, 422, 'TEMPLATE_INVALID');

    // A flag changes nothing; reinstated, it is approved again.
    await emulator('/__emulator/template-status', { phoneNumberId, name: 'promo', language: 'pt_BR', event: 'FLAGGED' });
    expect((await list(ws, '&status=paused')).map((t) => t.name)).toEqual(['promo']);
    await emulator('/__emulator/template-status', { phoneNumberId, name: 'promo', language: 'pt_BR', event: 'REINSTATED' });
    expect((await send()).status).toBe(201);
  });

  it('an unsigned template notification changes nothing', async () => {
    const ws = await createWorkspace(api, { scopes: [...SCOPES] });
    const { instanceId } = await cloudWithWaba(ws, [graphTemplate('promo')]);
    await sync(ws, instanceId);
    const body = {
      object: 'whatsapp_business_account',
      entry: [
        {
          id: '1',
          changes: [
            {
              field: 'message_template_status_update',
              value: { event: 'DISABLED', message_template_name: 'promo', message_template_language: 'pt_BR' },
            },
          ],
        },
      ],
    };
    const res = await api.request('POST', `/webhooks/whatsapp/${instanceId}`, { body, headers: { 'x-hub-signature-256': 'sha256=00' } });
    expectError(res, 401, 'UNAUTHORIZED');
    expect((await list(ws)).map((t) => t.status)).toEqual(['approved']);
  });
});

describe('the hourly template sync', () => {
  it('is a Temporal schedule created at start-up, whose run syncs every Cloud instance with a wabaId', async () => {
    const config = loadConfig();
    const temporal = temporalClientFactory(config);
    try {
      const client = await temporal.get();
      const schedule = await eventually('the schedule', () =>
        client.schedule
          .getHandle(TEMPLATE_SYNC_SCHEDULE_ID)
          .describe()
          .catch(() => undefined),
      );
      expect(schedule.spec.intervals).toEqual([{ every: 3_600_000 }]);
      expect(schedule.action).toMatchObject({
        type: 'startWorkflow',
        workflowType: 'templateSyncAllWorkflow',
        taskQueue: config.taskQueue,
      });
      expect(schedule.policies.overlap).toBe('SKIP');

      // A run now: the workspace's templates arrive without any API call.
      const ws = await createWorkspace(api, { scopes: [...SCOPES] });
      const { instanceId } = await cloudWithWaba(ws, [graphTemplate('scheduled')]);
      await client.schedule.getHandle(TEMPLATE_SYNC_SCHEDULE_ID).trigger();
      const rows = await eventually('the scheduled sync', async () => {
        const found = await list(ws, `&instanceId=${instanceId}`);
        return found.length > 0 && found;
      });
      expect(rows.map((t) => [t.name, t.status])).toEqual([['scheduled', 'approved']]);
    } finally {
      await temporal.close();
    }
  });
});
