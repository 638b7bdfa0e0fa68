/**
 * Issue 32, the inbound edge: an outbound webhook pointed at an automation's own inbound URL
 * looped for ever, because each inbound call began a new chain with a fresh budget. A call made
 * by one of our own deliveries (X-Service-Delivery with a valid signature) now continues the chain
 * of the event it carried, so loop protection's depth and run budget stop it; and runs the
 * receiver starts count against the plan's automationRunsPerMinute, as triggered runs do. All
 * through the real API, outbox dispatcher, worker and Temporal.
 */
import { CHAIN_RUN_BUDGET, MAX_CHAIN_DEPTH } from '../../domain/automations/automations';
import { ALL_SCOPES } from '../../domain/access/scopes';
import {
  createWorkspace,
  eventually,
  expectError,
  realMinuteWithRoom,
  Receiver,
  settleOutbox,
  startApi,
  startReceiver,
  TestApi,
  Workspace,
} from '../helpers';
import { uniqueMobile } from '../phones';

let api: TestApi;
let receiver: Receiver;
beforeAll(async () => {
  [api, receiver] = await Promise.all([startApi(), startReceiver()]);
});
afterAll(async () => {
  await receiver.close();
  await api.close();
});

let seq = 0;
const unique = (label: string): string => `${label}-${process.pid}-${++seq}`;

const workspace = (plan?: Record<string, unknown>): Promise<Workspace> => createWorkspace(api, { scopes: [...ALL_SCOPES], plan });

/** An inbound automation; its URL on the test's API (the worker's deliveries reach it there). */
async function inboundAutomation(ws: Workspace, body: Record<string, unknown>): Promise<{ id: string; path: string; url: string }> {
  const res = await api.request('POST', '/api/v1/automations', { key: ws.key, body: { name: 'inbound', ...body } });
  expect(res.status).toBe(201);
  const path = new URL(res.body.data.webhookUrl).pathname;
  return { id: res.body.data.id, path, url: `${api.url}${path}` };
}

async function subscribe(ws: Workspace, url: string, events: string[]): Promise<{ id: string }> {
  const res = await api.request('POST', '/api/v1/webhooks', { key: ws.key, body: { url, events } });
  expect(res.status).toBe(201);
  return res.body.data;
}

type Run = { id: string; status: string; error: string | null; depth: number; chain_id: string | null };
const runsOf = (automationId: string): Promise<Run[]> =>
  api
    .db('automation_runs')
    .where({ automation_id: automationId })
    .orderBy('created_at')
    .select('id', 'status', 'error', 'depth', 'chain_id');

/** The chain has ended: a run refused by loop protection, no run still running, nothing left to dispatch or deliver. */
async function chainEnded(ws: Workspace[], automationIds: string[]): Promise<Run[]> {
  await eventually(
    'a run refused by loop protection',
    async () => (await Promise.all(automationIds.map(runsOf))).flat().some((r) => r.error?.startsWith('Loop protection')),
    60_000,
    200,
  );
  await eventually(
    'no run still running',
    async () => (await Promise.all(automationIds.map(runsOf))).flat().every((r) => r.status !== 'running'),
    60_000,
    200,
  );
  for (const w of ws) await settleOutbox(api, w.id);
  // Settled: what ran is final (a run starts only from an outbox row or a delivery, and none is left).
  expect((await Promise.all(automationIds.map(runsOf))).flat().every((r) => r.status !== 'running')).toBe(true);
  return (await Promise.all(automationIds.map(runsOf))).flat();
}

const DEPTH_REFUSAL = (depth: number) =>
  `Loop protection: this event comes from a chain of automations ${depth} deep; the limit is ${MAX_CHAIN_DEPTH}`;

describe('loop protection across the inbound edge', () => {
  it("stops a subscription pointed at the automation's own inbound URL at the chain's depth limit", async () => {
    const ws = await workspace();
    // Each run adds and removes a tag: one contact.tag_removed per run, delivered to the automation itself.
    const flow = await inboundAutomation(ws, {
      trigger: { type: 'webhook_received', mapping: { phone: 'phone' } },
      actions: [
        { type: 'add_tag', tag: 'loop' },
        { type: 'remove_tag', tag: 'loop' },
      ],
    });
    const sub = await subscribe(ws, flow.url, ['contact.tag_removed']);

    const root = await api.request('POST', flow.path, { body: { phone: uniqueMobile('41') } });
    expect(root.status).toBe(202);
    expect(root.body.data.status).toBe('accepted');

    const runs = await chainEnded([ws], [flow.id]);
    // The root call (depth 0), then one run per delivery, each two steps deeper (its event, then the delivery's call).
    expect(runs.map((r) => [r.status, r.depth])).toEqual([
      ['completed', 0],
      ['completed', 2],
      ['completed', 4],
      ['failed', 6],
    ]);
    expect(runs[3].error).toBe(DEPTH_REFUSAL(6));
    // One chain, named by the root run.
    expect(runs.slice(1).map((r) => r.chain_id)).toEqual([runs[0].id, runs[0].id, runs[0].id]);
    // The refused call was answered 2xx: every delivery succeeded, none is retried.
    const deliveries = await api.db('webhook_deliveries').where({ workspace_id: ws.id, subscription_id: sub.id }).select('status');
    expect(deliveries.map((d) => d.status)).toEqual(['succeeded', 'succeeded', 'succeeded']);
  }, 180_000);

  it("stops a loop between two workspaces' automations (each one's webhook pointed at the other's inbound URL)", async () => {
    const [a, b] = await Promise.all([workspace(), workspace()]);
    const actions = [
      { type: 'add_tag', tag: 'ping' },
      { type: 'remove_tag', tag: 'ping' },
    ];
    const flowA = await inboundAutomation(a, { trigger: { type: 'webhook_received', mapping: { phone: 'phone' } }, actions });
    const flowB = await inboundAutomation(b, { trigger: { type: 'webhook_received', mapping: { phone: 'phone' } }, actions });
    await subscribe(a, flowB.url, ['contact.tag_removed']);
    await subscribe(b, flowA.url, ['contact.tag_removed']);

    expect((await api.request('POST', flowA.path, { body: { phone: uniqueMobile('41') } })).status).toBe(202);
    await chainEnded([a, b], [flowA.id, flowB.id]);
    const [runsA, runsB] = await Promise.all([runsOf(flowA.id), runsOf(flowB.id)]);
    // A's root call (0), B's run (2), A's (4), B's refused (6): one chain across the two workspaces.
    expect(runsA.map((r) => [r.status, r.depth])).toEqual([
      ['completed', 0],
      ['completed', 4],
    ]);
    expect(runsB.map((r) => [r.status, r.depth])).toEqual([
      ['completed', 2],
      ['failed', 6],
    ]);
    expect(runsB[1].error).toBe(DEPTH_REFUSAL(6));
    expect([runsA[1].chain_id, ...runsB.map((r) => r.chain_id)]).toEqual([runsA[0].id, runsA[0].id, runsA[0].id]);
  }, 180_000);

  describe('a call carrying one of our deliveries, replayed as received', () => {
    /** A lead.created delivery of a new workspace to the test receiver, as the receiver got it (headers and exact bytes). */
    async function capturedDelivery(ws: Workspace) {
      const path = `/ok/${unique('captured')}`;
      await subscribe(ws, `${receiver.url}${path}`, ['lead.created']);
      expect(
        (await api.request('POST', '/api/v1/leads', { key: ws.key, body: { phone: uniqueMobile('41'), name: 'Captured' } })).status,
      ).toBe(201);
      const got = await eventually('the delivery at the receiver', async () => receiver.to(path)[0]);
      const eventId = String(got.headers['x-service-event-id']);
      const replay = (url: string, headers: Record<string, string> = {}) =>
        api.request('POST', url, {
          rawBody: got.raw,
          headers: {
            'content-type': 'application/json',
            'x-service-delivery': String(got.headers['x-service-delivery']),
            'x-service-signature': String(got.headers['x-service-signature']),
            ...headers,
          },
        });
      return { eventId, replay };
    }
    type AcceptedRow = { payload: Record<string, unknown>; depth: number; chain_id: string | null };
    const acceptedRow = (ws: Workspace, runId: string): Promise<AcceptedRow> =>
      eventually('the outbox row that starts the run', async (): Promise<AcceptedRow | undefined> =>
        api
          .db('outbox_events')
          .where({ workspace_id: ws.id, name: 'webhook_received' })
          .whereRaw(`payload->>'runId' = ?`, [runId])
          .first('payload', 'depth', 'chain_id'),
      );

    it('continues the chain of the event it carried, in the run and in the outbox row that starts it', async () => {
      const ws = await workspace();
      const flow = await inboundAutomation(ws, { trigger: { type: 'webhook_received' }, actions: [{ type: 'wait', seconds: 1 }] });
      const { eventId, replay } = await capturedDelivery(ws);

      const res = await replay(flow.path);
      expect(res.status).toBe(202);
      expect(res.body.data.status).toBe('accepted');
      const run = (await runsOf(flow.id)).find((r) => r.id === res.body.data.runId)!;
      expect({ depth: run.depth, chain: run.chain_id }).toEqual({ depth: 1, chain: eventId });
      const row = await acceptedRow(ws, run.id);
      expect(row.payload).toMatchObject({ runId: run.id, automationId: flow.id, depth: 1, chain: eventId });
      expect({ depth: row.depth, chain: row.chain_id }).toEqual({ depth: 1, chain: eventId });

      // A root call: depth 0, its chain named by its own run.
      const rootCall = await api.request('POST', flow.path, { body: { any: 'thing' } });
      const root = await acceptedRow(ws, rootCall.body.data.runId);
      expect(root.payload).toMatchObject({ depth: 0, chain: rootCall.body.data.runId });
      expect({ depth: root.depth, chain: root.chain_id }).toEqual({ depth: 0, chain: rootCall.body.data.runId });
    });

    it('is a root call when the signature is not the delivery’s (anyone can send the header)', async () => {
      const ws = await workspace();
      const flow = await inboundAutomation(ws, { trigger: { type: 'webhook_received' }, actions: [{ type: 'wait', seconds: 1 }] });
      const { replay } = await capturedDelivery(ws);
      const forged = await replay(flow.path, { 'x-service-signature': `t=${Math.floor(Date.now() / 1000)},v1=${'0'.repeat(64)}` });
      expect(forged.body.data.status).toBe('accepted');
      const row = await acceptedRow(ws, forged.body.data.runId);
      expect({ depth: row.depth, chain: row.chain_id }).toEqual({ depth: 0, chain: forged.body.data.runId });
    });

    it(`is refused (202 filtered, a failed run) once its chain has used its ${CHAIN_RUN_BUDGET} runs or is too deep`, async () => {
      const ws = await workspace();
      const flow = await inboundAutomation(ws, { trigger: { type: 'webhook_received' }, actions: [{ type: 'wait', seconds: 1 }] });
      const { eventId, replay } = await capturedDelivery(ws);
      // The chain's earlier runs, as a fan-out of automations would have left them.
      await api.db('automation_runs').insert(
        Array.from({ length: CHAIN_RUN_BUDGET }, () => ({
          workspace_id: ws.id,
          automation_id: flow.id,
          status: 'completed',
          trigger: '{}',
          depth: 1,
          chain_id: eventId,
          finished_at: api.db.fn.now(),
        })),
      );
      const refused = await replay(flow.path);
      expect(refused.status).toBe(202);
      expect(refused.body.data.status).toBe('filtered');
      const run = await api
        .db('automation_runs')
        .where({ id: refused.body.data.runId })
        .first('status', 'error', 'depth', 'chain_id', 'finished_at');
      expect(run).toMatchObject({
        status: 'failed',
        error: `Loop protection: the event that began this chain of automations has caused ${CHAIN_RUN_BUDGET} runs; the limit is ${CHAIN_RUN_BUDGET}`,
        depth: 1,
        chain_id: eventId,
      });
      expect(run.finished_at).not.toBeNull();
      // Nothing was handed to the dispatcher for it.
      expect(await api.db('outbox_events').where({ workspace_id: ws.id, name: 'webhook_received' }).count({ n: '*' }).first()).toEqual({
        n: 0,
      });

      // Too deep: the event it carried was itself MAX_CHAIN_DEPTH - 1 deep.
      await api.db('automation_runs').where({ workspace_id: ws.id, chain_id: eventId }).delete();
      await api
        .db('outbox_events')
        .where({ workspace_id: ws.id, id: eventId })
        .update({ depth: MAX_CHAIN_DEPTH - 1 });
      const deep = await replay(flow.path);
      expect(deep.body.data.status).toBe('filtered');
      expect((await api.db('automation_runs').where({ id: deep.body.data.runId }).first('error')).error).toBe(
        DEPTH_REFUSAL(MAX_CHAIN_DEPTH),
      );
    });
  });
});

describe("inbound runs count against the plan's automationRunsPerMinute", () => {
  it('refuses a call over the budget with 429 RATE_LIMITED and Retry-After, recording nothing; triggered runs share the budget', async () => {
    // One budget, counted by this API (inbound calls) and by the worker's dispatcher (triggered
    // runs), a process whose clock a test cannot set: both on the real clock, in one real minute.
    await realMinuteWithRoom(15_000);
    const ws = await workspace({ automationRunsPerMinute: 2 });
    const flow = await inboundAutomation(ws, { trigger: { type: 'webhook_received' }, actions: [{ type: 'wait', seconds: 1 }] });
    const call = (n: number) => api.request('POST', flow.path, { body: { order: n } });

    expect((await call(1)).body.data.status).toBe('accepted');
    expect((await call(2)).body.data.status).toBe('accepted');
    const over = await call(3);
    expectError(over, 429, 'RATE_LIMITED');
    const retryAfter = Number(over.headers.get('retry-after'));
    expect(retryAfter).toBeGreaterThanOrEqual(1);
    expect(retryAfter).toBeLessThanOrEqual(60);
    expect(over.body.hint).toContain('allows 2 automation runs a minute');
    expect(await runsOf(flow.id)).toHaveLength(2);

    // A triggered run in the same minute finds the budget spent too.
    const triggered = await api.request('POST', '/api/v1/automations', {
      key: ws.key,
      body: { name: 'on tag', trigger: { type: 'contact_updated' }, actions: [{ type: 'add_note', body: 'tagged' }] },
    });
    expect(triggered.status).toBe(201);
    const lead = await api.request('POST', '/api/v1/leads', { key: ws.key, body: { phone: uniqueMobile('41'), name: 'Budget' } });
    expect((await api.request('POST', `/api/v1/leads/${lead.body.data.id}/tags`, { key: ws.key, body: { tag: 'vip' } })).status).toBe(200);
    const refused = await eventually('the triggered run', async () => (await runsOf(triggered.body.data.id))[0]);
    expect(refused.status).toBe('failed');
    expect(refused.error).toMatch(/^Rate limit: the plan allows 2 /);
  });

  it('takes nothing from the budget for a duplicate externalId (no run starts)', async () => {
    await realMinuteWithRoom(15_000);
    const ws = await workspace({ automationRunsPerMinute: 2 });
    const flow = await inboundAutomation(ws, {
      trigger: { type: 'webhook_received', mapping: { externalId: 'order' } },
      actions: [{ type: 'wait', seconds: 1 }],
    });
    const call = (n: number) => api.request('POST', flow.path, { body: { order: n } });

    expect((await call(1)).body.data.status).toBe('accepted');
    // Repeats of the running run: answered duplicate, the budget untouched.
    for (let i = 0; i < 3; i++) expect((await call(1)).body.data.status).toBe('duplicate');
    expect((await call(2)).body.data.status).toBe('accepted');
    expectError(await call(3), 429, 'RATE_LIMITED');
    expect((await runsOf(flow.id)).filter((r) => r.status !== 'duplicate')).toHaveLength(2);
  });
});
