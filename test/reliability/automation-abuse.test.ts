/**
 * Automations cannot turn one tenant's API call into unbounded work on the shared worker,
 * Temporal and PostgreSQL: a chain of automations has a run budget as well as a depth, an
 * automation never re-runs on the record it already ran on in the same chain, a workspace's
 * triggered runs are rate-limited by its plan, and the plan caps how many automations it has.
 * Everything runs through the real API, outbox dispatcher, worker and Temporal.
 */
import { MockActivityEnvironment } from '@temporalio/testing';
import { createMessagingActivities } from '../../activities/messaging';
import { createDeal } from '../../domain/sales/deals';
import { ALL_SCOPES } from '../../domain/access/scopes';
import { CHAIN_RUN_BUDGET } from '../../domain/automations/automations';
import { REFUSALS_LISTED_PER_EVENT } from '../../domain/automations/automation-triggers';
import {
  createKey,
  createWorkspace,
  eventually,
  expectError,
  realMinuteWithRoom,
  seedContact,
  seedPipeline,
  startApi,
  TestApi,
  Workspace,
} from '../helpers';
import { uniqueMobile } from '../phones';

let api: TestApi;
beforeAll(async () => {
  api = await startApi();
});
afterAll(() => api.close());

const phone = (): string => uniqueMobile('47');

const workspace = (plan?: Record<string, unknown>): Promise<Workspace> => createWorkspace(api, { scopes: [...ALL_SCOPES], plan });

async function automation(ws: Workspace, body: Record<string, unknown>): Promise<{ id: string }> {
  const res = await api.request('POST', '/api/v1/automations', { key: ws.key, body: { name: 'flow', ...body } });
  expect(res.status).toBe(201);
  return res.body.data;
}

type Run = { status: string; error: string | null; chain_id: string | null; automation_id: string };
const runsOf = (ws: Workspace): Promise<Run[]> =>
  api.db('automation_runs').where({ workspace_id: ws.id }).select('status', 'error', 'chain_id', 'automation_id');

/** The workspace's runs once none is running and the count has stayed the same for a second. */
async function settled(ws: Workspace, atLeast: number, timeoutMs = 60_000): Promise<Run[]> {
  let last = -1;
  return eventually(
    `${atLeast}+ settled runs`,
    async () => {
      const all = await runsOf(ws);
      const done = all.length >= atLeast && all.every((r) => r.status !== 'running') && all.length === last;
      last = all.length;
      return done && all;
    },
    timeoutMs,
    1000,
  );
}

async function dealIn(ws: Workspace, pipelineId: string): Promise<{ id: string }> {
  const contact = await seedContact(api, ws.id, { phone: phone(), name: 'Chain' });
  const res = await api.request('POST', '/api/v1/deals', { key: ws.key, body: { contactId: contact.id, pipeline: pipelineId } });
  expect(res.status).toBe(201);
  return res.body.data;
}

describe('automation fan-out', () => {
  it(`one root event causes at most ${CHAIN_RUN_BUDGET} runs, however many automations fire each other`, async () => {
    const ws = await workspace();
    const pipeline = await seedPipeline(api, ws.id, { name: 'Fan', stages: ['New'] });
    // Three automations that each create a deal on every new deal: 3 + 9 + 27 + 81 + 243 runs
    // within the depth limit alone.
    for (let i = 0; i < 3; i++)
      await automation(ws, {
        trigger: { type: 'card_created' },
        actions: [{ type: 'create_deal', pipeline: pipeline.id, name: `copy ${i}` }],
      });
    await dealIn(ws, pipeline.id);
    const all = await settled(ws, CHAIN_RUN_BUDGET);
    expect(new Set(all.map((r) => r.chain_id)).size).toBe(1);
    expect(all.filter((r) => r.status === 'completed').length).toBeLessThanOrEqual(CHAIN_RUN_BUDGET);
    expect(
      all.some(
        (r) =>
          r.status === 'failed' &&
          /^Loop protection: the event that began this chain of automations has caused \d+ runs; the limit is 25$/.test(r.error ?? ''),
      ),
    ).toBe(true);
    const deals = await api.db('deals').where({ workspace_id: ws.id }).count({ n: '*' }).first();
    expect(Number(deals!.n)).toBeLessThanOrEqual(1 + CHAIN_RUN_BUDGET);
  });

  it(`an event matching ${CHAIN_RUN_BUDGET + REFUSALS_LISTED_PER_EVENT + 30} automations costs a bounded number of run rows: ${CHAIN_RUN_BUDGET} started, ${REFUSALS_LISTED_PER_EVENT} refusals listed, the rest only counted`, async () => {
    const matching = CHAIN_RUN_BUDGET + REFUSALS_LISTED_PER_EVENT + 30;
    const ws = await workspace({ automationLimit: matching });
    const pipeline = await seedPipeline(api, ws.id, { name: 'Wide', stages: ['New'] });
    for (let i = 0; i < matching; i++) await automation(ws, { trigger: { type: 'card_created' }, actions: [{ type: 'wait', seconds: 1 }] });
    await dealIn(ws, pipeline.id);
    const all = await settled(ws, CHAIN_RUN_BUDGET + REFUSALS_LISTED_PER_EVENT);
    // One row per automation would be 80: only the started runs and the listed refusals are rows.
    expect(all).toHaveLength(CHAIN_RUN_BUDGET + REFUSALS_LISTED_PER_EVENT);
    expect(all.filter((r) => r.status === 'completed')).toHaveLength(CHAIN_RUN_BUDGET);
    const refused = all.filter((r) => r.status === 'failed');
    expect(refused).toHaveLength(REFUSALS_LISTED_PER_EVENT);
    for (const r of refused)
      expect(r.error).toBe(
        `Loop protection: the event that began this chain of automations has caused ${CHAIN_RUN_BUDGET} runs; the limit is ${CHAIN_RUN_BUDGET}`,
      );
    // The oldest automations run; each run or refusal belongs to a different automation.
    expect(new Set(all.map((r) => r.automation_id)).size).toBe(all.length);
  });

  it('an automation does not run again on the record it already ran on in the same chain', async () => {
    const ws = await workspace();
    const pipeline = await seedPipeline(api, ws.id, { name: 'Ping', stages: ['One', 'Two'] });
    // Moves the deal back where it came from: each move fires stage_changed again, on the same deal.
    const pingPong = await automation(ws, {
      trigger: { type: 'stage_changed' },
      actions: [{ type: 'move_deal', stage: '{{fromStageId}}' }],
    });
    const deal = await dealIn(ws, pipeline.id);
    await api.request('PATCH', `/api/v1/deals/${deal.id}`, { key: ws.key, body: { stageId: pipeline.stages[1].id } });
    const all = await settled(ws, 2);
    expect(all.map((r) => r.status).sort()).toEqual(['completed', 'failed']);
    expect(all.find((r) => r.status === 'failed')!.error).toBe(
      'Loop protection: this automation already ran on this record in the same chain of automations',
    );
    expect(all.every((r) => r.automation_id === pingPong.id)).toBe(true);
    // The deal ends where the automation put it: back in the first stage, moved once.
    expect((await api.db('deals').where({ id: deal.id }).first('stage_id')).stage_id).toBe(pipeline.stages[0].id);
  });

  it("limits a workspace's triggered runs per minute by its plan, recording the ones it did not start", async () => {
    // Triggered runs are counted by the worker's dispatcher, a process whose clock a test cannot
    // set: the four deals' runs must be taken in one real minute.
    await realMinuteWithRoom(15_000);
    const ws = await workspace({ automationRunsPerMinute: 2 });
    const pipeline = await seedPipeline(api, ws.id, { name: 'Rate', stages: ['New'] });
    await automation(ws, { trigger: { type: 'card_created' }, actions: [{ type: 'add_note', body: 'hello' }] });
    for (let i = 0; i < 4; i++) await dealIn(ws, pipeline.id);
    const all = await settled(ws, 4);
    expect(all.filter((r) => r.status === 'completed')).toHaveLength(2);
    const limited = all.filter((r) => r.status === 'failed');
    expect(limited.map((r) => r.error)).toEqual(
      Array(2).fill('Rate limit: the plan allows 2 automation runs a minute; this one was not started'),
    );
    expect(await api.db('notes').where({ workspace_id: ws.id }).count({ n: '*' }).first()).toEqual({ n: 2 });
  });

  it('caps the automations of a workspace by its plan (402 AUTOMATION_LIMIT_REACHED), concurrent creations included', async () => {
    const ws = await workspace({ automationLimit: 2 });
    const create = () =>
      api.request('POST', '/api/v1/automations', {
        key: ws.key,
        body: { name: 'flow', trigger: { type: 'deal_won' }, actions: [{ type: 'add_note', body: 'won' }] },
      });
    const results = await Promise.all(Array.from({ length: 5 }, create));
    expect(results.map((r) => r.status).sort()).toEqual([201, 201, 402, 402, 402]);
    expectError(
      results.find((r) => r.status === 402)!,
      402,
      'AUTOMATION_LIMIT_REACHED',
    );
    const id = results.find((r) => r.status === 201)!.body.data.id;
    expect((await api.request('DELETE', `/api/v1/automations/${id}`, { key: ws.key })).status).toBe(200);
    expect((await create()).status).toBe(201);
  });
});

describe('automations cannot escalate a key’s scopes', () => {
  it('saving or re-arming an automation needs the scopes its actions need; renaming or turning it off does not', async () => {
    const ws = await workspace();
    const narrow = (await createKey(api, ws.id, ['automations:write', 'automations:read'])).key;
    const save = (key: string, actions: unknown[], trigger: Record<string, unknown> = { type: 'deal_won' }) =>
      api.request('POST', '/api/v1/automations', { key, body: { name: 'flow', trigger, actions } });

    const send = await save(narrow, [
      { type: 'send_message', text: 'hi' },
      { type: 'create_deal', pipeline: 'Sales' },
    ]);
    expectError(send, 403, 'INSUFFICIENT_SCOPE');
    expect(send.body.hint).toMatch(/add conversations:send, deals:write to the key/);
    // An inbound mapping that takes in leads is a lead write.
    expectError(
      await save(narrow, [{ type: 'wait', seconds: 5 }], { type: 'webhook_received', mapping: { phone: 'customer.phone' } }),
      403,
      'INSUFFICIENT_SCOPE',
    );
    expect((await save(narrow, [{ type: 'wait', seconds: 5 }])).status).toBe(201);
    expect(await api.db('automations').where({ workspace_id: ws.id }).count({ n: '*' }).first()).toEqual({ n: 1 });

    // One saved by a key with every scope: the narrow key may rename it or turn it off, not change or re-arm it.
    const full = await save(ws.key, [{ type: 'add_tag', tag: 'won' }]);
    expect(full.status).toBe(201);
    const patch = (body: Record<string, unknown>) =>
      api.request('PATCH', `/api/v1/automations/${full.body.data.id}`, { key: narrow, body });
    expect((await patch({ name: 'renamed', active: false })).status).toBe(200);
    expectError(await patch({ active: true }), 403, 'INSUFFICIENT_SCOPE');
    expectError(await patch({ actions: [{ type: 'add_note', body: 'x' }] }), 403, 'INSUFFICIENT_SCOPE');
    expect(await api.db('automations').where({ id: full.body.data.id }).first('active', 'actions')).toEqual({
      active: false,
      actions: [{ type: 'add_tag', tag: 'won' }],
    });
  });
});

describe('a suspended workspace', () => {
  it('stops its inbound receiver, automation runs and sends, not only its API keys, and resumes when reactivated', async () => {
    const ws = await workspace();
    const pipeline = await seedPipeline(api, ws.id, { name: 'Suspended', stages: ['New'] });
    const inbound = await api.request('POST', '/api/v1/automations', {
      key: ws.key,
      body: { name: 'in', trigger: { type: 'webhook_received' }, actions: [{ type: 'wait', seconds: 1 }] },
    });
    const onDeal = await automation(ws, { trigger: { type: 'card_created' }, actions: [{ type: 'add_note', body: 'new deal' }] });
    const instance = await api.admin('POST', `/admin/v1/workspaces/${ws.id}/instances`, {
      name: 'Main',
      channel: 'whatsapp',
      provider: 'cloud',
      connected: true,
      config: { baseUrl: process.env.EMULATOR_URL, phoneNumberId: `PN-suspended-${ws.id.slice(0, 8)}`, accessToken: 't' },
    });
    await api.admin('POST', `/admin/v1/workspaces/${ws.id}/templates`, {
      instanceId: instance.body.data.id,
      name: 'hello',
      language: 'pt_BR',
      variableCount: 0,
    });
    const contact = await seedContact(api, ws.id, { phone: phone(), name: 'Suspended' });
    const receive = () => api.request('POST', new URL(inbound.body.data.webhookUrl).pathname, { body: { order: 1 } });

    expect((await api.admin('PATCH', `/admin/v1/workspaces/${ws.id}`, { plan: { active: false } })).status).toBe(200);
    expectError(await api.request('GET', '/api/v1/leads', { key: ws.key }), 402, 'SUBSCRIPTION_INACTIVE');
    expectError(await receive(), 402, 'SUBSCRIPTION_INACTIVE');
    // A change the panel (not the API) makes still records its trigger: the run is not started.
    await createDeal(api.db, ws.id, { contactId: contact.id, pipeline: pipeline.id });
    const [refused] = await settled(ws, 1);
    expect(refused).toMatchObject({ automation_id: onDeal.id, status: 'failed', error: 'The workspace subscription is inactive' });
    // An automation's send (or one already in flight) is refused before anything is taken or sent.
    const send = new MockActivityEnvironment({ workflowExecution: { workflowId: `send/${ws.id}/suspended`, runId: 'r' } } as never);
    const input = {
      workspaceId: ws.id,
      phone: contact.phone,
      message: { type: 'template' as const, templateName: 'hello', templateLanguage: 'pt_BR', templateVariables: [] },
    };
    await expect(send.run(createMessagingActivities({ db: api.db, config: api.config }).prepareSend, input)).rejects.toMatchObject({
      type: 'SUBSCRIPTION_INACTIVE',
    });
    expect(await api.db('daily_counters').where({ workspace_id: ws.id }).count({ n: '*' }).first()).toEqual({ n: 0 });

    expect((await api.admin('PATCH', `/admin/v1/workspaces/${ws.id}`, { plan: { active: true } })).status).toBe(200);
    expect((await receive()).status).toBe(202);
  });
});
