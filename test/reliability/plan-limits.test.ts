/**
 * Issue 32, plan limits: every count a tenant controls has a default, never unlimited. A new
 * workspace holds at most 100 automations (402 AUTOMATION_LIMIT_REACHED), 10 webhook subscriptions
 * (402 WEBHOOK_LIMIT_REACHED) and starts 600 runs a minute; the admin API refuses null for them;
 * the migration gives existing unlimited workspaces the defaults.
 */
import { createDb } from '../../domain/platform/db';
import { ALL_SCOPES } from '../../domain/access/scopes';
import { migrationConfig } from '../../knexfile';
import { ensureDatabase } from '../../scripts/stack';
import { createWorkspace, expectError, startApi, TestApi } from '../helpers';

let api: TestApi;
beforeAll(async () => {
  api = await startApi();
});
afterAll(async () => api.close());

const DEFAULTS = { automationLimit: 100, webhookQuota: 10, automationRunsPerMinute: 600 };

describe('plan limits a tenant controls have defaults', () => {
  it('gives a new workspace the defaults, and refuses null (unlimited) for them with 400 VALIDATION', async () => {
    const created = await api.admin('POST', '/admin/v1/workspaces', { name: 'defaults' });
    expect(created.status).toBe(201);
    expect(created.body.data.plan).toMatchObject({ ...DEFAULTS, dealLimit: null, inboundWebhookQuota: null });
    const id = created.body.data.id;

    for (const field of Object.keys(DEFAULTS)) {
      const onCreate = await api.admin('POST', '/admin/v1/workspaces', { name: 'unlimited', plan: { [field]: null } });
      expectError(onCreate, 400, 'VALIDATION');
      expect(onCreate.body.error).toContain(`body.plan.${field}`);
      expectError(await api.admin('PATCH', `/admin/v1/workspaces/${id}`, { plan: { [field]: null } }), 400, 'VALIDATION');
    }
    // The operator still chooses the number, and the other limits may still be unlimited.
    const patched = await api.admin('PATCH', `/admin/v1/workspaces/${id}`, {
      plan: { automationLimit: 3000, webhookQuota: 50, automationRunsPerMinute: 10_000, dealLimit: null },
    });
    expect(patched.status).toBe(200);
    expect(patched.body.data.plan).toMatchObject({
      automationLimit: 3000,
      webhookQuota: 50,
      automationRunsPerMinute: 10_000,
      dealLimit: null,
    });
    // Patching another field leaves them as they are (no default put back).
    expect((await api.admin('PATCH', `/admin/v1/workspaces/${id}`, { plan: { dealLimit: 5 } })).body.data.plan).toMatchObject({
      automationLimit: 3000,
      webhookQuota: 50,
    });
  });

  it('documents the defaults and the refusal of null in the admin API reference', async () => {
    const doc = (await api.request('GET', '/api/v1/openapi.json')).body;
    const op = doc.paths['/admin/v1/workspaces'].post;
    expect(op.description).toContain('`automationLimit` (default 100');
    expect(op.description).toContain('`webhookQuota` (webhook subscriptions, default 10');
    const plan = op.requestBody.content['application/json'].schema.properties.plan;
    const fields = (plan.properties ?? plan.anyOf?.find((s: { properties?: unknown }) => s.properties)?.properties) as Record<
      string,
      { type?: unknown; default?: unknown }
    >;
    expect(fields.automationLimit).toMatchObject({ type: 'integer', default: 100 });
    expect(fields.webhookQuota).toMatchObject({ type: 'integer', default: 10 });
    expect(fields.automationRunsPerMinute).toMatchObject({ type: 'integer', default: 600 });
  });

  it('stops a default workspace at 10 webhook subscriptions (402 WEBHOOK_LIMIT_REACHED), concurrent creations included', async () => {
    const ws = await createWorkspace(api, { scopes: [...ALL_SCOPES] });
    const results = await Promise.all(
      Array.from({ length: 14 }, (_, i) =>
        api.request('POST', '/api/v1/webhooks', {
          key: ws.key,
          body: { url: `https://hooks.example.com/in/${i}`, events: ['*'], active: false },
        }),
      ),
    );
    expect(results.filter((r) => r.status === 201)).toHaveLength(10);
    for (const r of results.filter((r) => r.status !== 201)) expectError(r, 402, 'WEBHOOK_LIMIT_REACHED');
    expect(await api.db('webhook_subscriptions').where({ workspace_id: ws.id }).count({ n: '*' }).first()).toEqual({ n: 10 });
  });

  it('stops a default workspace at 100 automations (402 AUTOMATION_LIMIT_REACHED), concurrent creations included', async () => {
    const ws = await createWorkspace(api, { scopes: [...ALL_SCOPES] });
    const create = () =>
      api.request('POST', '/api/v1/automations', {
        key: ws.key,
        body: { name: 'flow', trigger: { type: 'deal_won' }, actions: [{ type: 'wait', seconds: 5 }] },
      });
    const results: Awaited<ReturnType<typeof create>>[] = [];
    // 106 creations, 16 at a time (each one takes the workspace row's lock in turn).
    for (let i = 0; i < 106; i += 16) results.push(...(await Promise.all(Array.from({ length: Math.min(16, 106 - i) }, create))));
    expect(results.filter((r) => r.status === 201)).toHaveLength(100);
    for (const r of results.filter((r) => r.status !== 201)) expectError(r, 402, 'AUTOMATION_LIMIT_REACHED');
    expect(await api.db('automations').where({ workspace_id: ws.id }).count({ n: '*' }).first()).toEqual({ n: 100 });
  });
});

describe('the plan-defaults migration', () => {
  const MIGRATION = '20261126200100_plan_limit_defaults.ts';

  it('gives existing workspaces whose limits were unlimited (NULL) the defaults, keeps chosen values, and reverses', async () => {
    const url = await ensureDatabase(process.env.TEST_ADMIN_DATABASE_URL!, 'crm_plan_defaults_test', true);
    const db = createDb(url, { max: 1 });
    try {
      await db.migrate.latest(migrationConfig);
      await db.migrate.down({ ...migrationConfig, name: MIGRATION });
      const [unlimited] = await db('workspaces')
        .insert({ name: 'before', automation_limit: null, webhook_quota: null, automation_runs_per_minute: null })
        .returning('id');
      const [chosen] = await db('workspaces')
        .insert({ name: 'chosen', automation_limit: 7, webhook_quota: 2, automation_runs_per_minute: 30 })
        .returning('id');
      await db.migrate.up({ ...migrationConfig, name: MIGRATION });

      const plan = (id: string) => db('workspaces').where({ id }).first('automation_limit', 'webhook_quota', 'automation_runs_per_minute');
      expect(await plan(unlimited.id)).toEqual({ automation_limit: 100, webhook_quota: 10, automation_runs_per_minute: 600 });
      expect(await plan(chosen.id)).toEqual({ automation_limit: 7, webhook_quota: 2, automation_runs_per_minute: 30 });
      const [fresh] = await db('workspaces').insert({ name: 'after' }).returning('id');
      expect(await plan(fresh.id)).toEqual({ automation_limit: 100, webhook_quota: 10, automation_runs_per_minute: 600 });
      // NULL can no longer be stored.
      await expect(db('workspaces').where({ id: fresh.id }).update({ webhook_quota: null })).rejects.toThrow(/not-null|null value/);

      await db.migrate.down({ ...migrationConfig, name: MIGRATION });
      await db('workspaces').where({ id: fresh.id }).update({ webhook_quota: null });
      await db.migrate.up({ ...migrationConfig, name: MIGRATION });
      expect((await plan(fresh.id))!.webhook_quota).toBe(10);
    } finally {
      await db.destroy();
    }
  });
});
