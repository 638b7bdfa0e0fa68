/**
 * A broadcast's workflow continues as new (issue 36): every BATCHES_PER_RUN (100) batches its run
 * ends and a new one carries on, so a run's history stays bounded at any audience size. A worker of
 * this file's own, on its own task queue, takes one recipient a batch (BROADCAST_BATCH_SIZE=1), so
 * 130 recipients take 131 batches: two runs. The provider emulator counts the calls per number.
 */
import { temporal as proto } from '@temporalio/proto';
import { createWorkspace, eventually, outbox, startApi, TestApi, uniqueIp, Workspace } from './helpers';
import type { Child } from '../scripts/stack';
import { cloudInstance, emulator, ownWorker } from './stack-fixtures';
import { BATCHES_PER_RUN } from '../workflows/broadcast';
import { uniqueMobile } from './phones';
import { temporalClientFactory } from '../domain/platform/temporal';
import { loadConfig } from '../domain/platform/config';
import { broadcastWorkflowId } from '../domain/broadcasts';

const TASK_QUEUE = `crm-broadcast-history-${process.pid}`;
/**
 * A batch is at most 6 history events (its activity scheduled, started, completed; the workflow
 * task that follows scheduled, started, completed); a run adds a few of its own (started, the
 * audience frozen or the completion, its end). A run's history never exceeds this, whatever the audience.
 */
const RUN_EVENTS_BOUND = BATCHES_PER_RUN * 6 + 30;
/** Recipients: more than BATCHES_PER_RUN batches of one. */
const AUDIENCE = 130;

let api: TestApi;
let worker: Child | undefined;
const temporal = temporalClientFactory(loadConfig());

interface Setup {
  ws: Workspace;
  instanceId: string;
  phoneNumberId: string;
}

/** A workspace with one connected Cloud API instance on the emulator (its status callbacks registered) and an approved template. */
async function setup(): Promise<Setup> {
  const ws = await createWorkspace(api, { scopes: ['broadcasts:read', 'broadcasts:write', 'tags:write', 'leads:write', 'leads:read'] });
  return { ws, ...(await cloudInstance(api, ws.id, { label: 'bh' })) };
}

const request = (s: Setup, method: string, path: string, body?: unknown) =>
  api.request(method, path, { key: s.ws.key, body, headers: { 'x-forwarded-for': uniqueIp() } });

/** Provider calls through this setup's phone-number id. */
const calls = async (s: Setup): Promise<{ to: string }[]> => (await emulator(`/__emulator/calls?phoneNumberId=${s.phoneNumberId}`)).calls;

async function callsPerNumber(s: Setup): Promise<Record<string, number>> {
  const out: Record<string, number> = {};
  for (const c of await calls(s)) out[c.to] = (out[c.to] ?? 0) + 1;
  return out;
}

/** A tag and `n` leads carrying it (batch upserts of 100); their phones as the provider sees them. */
async function audience(s: Setup, n: number): Promise<{ tagId: string; phones: string[] }> {
  const t = await request(s, 'POST', '/api/v1/tags', { name: 'history' });
  expect(t.status).toBe(201);
  const phones = Array.from({ length: n }, () => uniqueMobile());
  for (let i = 0; i < n; i += 100) {
    const res = await request(s, 'POST', '/api/v1/leads/batch', {
      leads: phones.slice(i, i + 100).map((phone, j) => ({ phone, name: `Lead ${i + j}`, tags: ['history'] })),
    });
    expect(res.status).toBe(200);
    expect(res.body.data.every((item: { status: number }) => item.status === 201)).toBe(true);
  }
  return { tagId: t.body.data.id, phones };
}

async function create(s: Setup, tagId: string): Promise<string> {
  const res = await request(s, 'POST', '/api/v1/broadcasts', {
    name: 'Grande',
    audience: { tagIds: [tagId] },
    template: { name: 'welcome', language: 'pt_BR', variables: ['Olá {{contact.name}}'] },
    ratePerSecond: 80,
  });
  expect(res.status).toBe(201);
  return res.body.data.id;
}

const get = async (s: Setup, id: string) => (await request(s, 'GET', `/api/v1/broadcasts/${id}`)).body.data;

interface Run {
  runId: string;
  events: proto.api.history.v1.IHistoryEvent[];
}

/**
 * Every run of the broadcast's workflow, first to latest: from the latest run back through each
 * run's WorkflowExecutionStarted `continuedExecutionRunId` (no visibility query, so nothing lags).
 */
async function runs(workflowId: string): Promise<Run[]> {
  const client = await temporal.get();
  const out: Run[] = [];
  let runId: string | undefined = (await client.workflow.getHandle(workflowId).describe()).runId;
  while (runId) {
    const history = await client.workflow.getHandle(workflowId, runId).fetchHistory();
    out.unshift({ runId, events: history.events ?? [] });
    runId = history.events?.[0]?.workflowExecutionStartedEventAttributes?.continuedExecutionRunId || undefined;
  }
  return out;
}

const EventType = proto.api.enums.v1.EventType;
/** How a run ended: the name of its last event's type. */
const ending = (run: Run): string => EventType[run.events.at(-1)?.eventType ?? EventType.EVENT_TYPE_UNSPECIFIED];
/** Batches a run scheduled. */
const batchesOf = (run: Run): number =>
  run.events.filter((e) => e.activityTaskScheduledEventAttributes?.activityType?.name === 'sendBroadcastBatch').length;

beforeAll(async () => {
  api = await startApi({ config: { taskQueue: TASK_QUEUE } });
  worker = await ownWorker(TASK_QUEUE, { BROADCAST_BATCH_SIZE: '1' });
}, 120_000);
afterAll(async () => {
  await worker?.stop();
  await api?.close();
  await temporal.close();
});

it(`a broadcast of ${AUDIENCE} recipients in batches of one continues as new after ${BATCHES_PER_RUN} batches: each run's history is bounded, each recipient gets one call, the counts are exact`, async () => {
  const s = await setup();
  const { tagId, phones } = await audience(s, AUDIENCE);
  const id = await create(s, tagId);
  const workflowId = broadcastWorkflowId(s.ws.id, id);
  const client = await temporal.get();
  await client.workflow.getHandle(workflowId).result();

  const done = await get(s, id);
  expect(done.status).toBe('completed');
  expect(done.counts).toEqual({ total: AUDIENCE, pending: 0, sent: AUDIENCE, delivered: 0, read: 0, failed: 0, skipped: 0 });
  expect(await callsPerNumber(s)).toEqual(Object.fromEntries(phones.map((p) => [p, 1])));
  expect(await api.db('messages').where({ workspace_id: s.ws.id, direction: 'out' }).count({ n: '*' })).toEqual([{ n: AUDIENCE }]);
  expect(await outbox(api, s.ws.id, 'broadcast.completed')).toHaveLength(1);

  // 131 batches (the last finds nothing pending): the first run ran 100 and continued as new, the second ran 31 and completed.
  const all = await runs(workflowId);
  expect(all.map((r) => ({ batches: batchesOf(r), end: ending(r) }))).toEqual([
    { batches: BATCHES_PER_RUN, end: 'EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW' },
    { batches: AUDIENCE + 1 - BATCHES_PER_RUN, end: 'EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED' },
  ]);
  expect((await client.workflow.getHandle(workflowId).describe()).status.name).toBe('COMPLETED');
  for (const run of all) expect(run.events.length).toBeLessThanOrEqual(RUN_EVENTS_BOUND);
  // One history holding every batch would have passed the bound.
  expect(all.reduce((n, r) => n + r.events.length, 0)).toBeGreaterThan(RUN_EVENTS_BOUND);
}, 90_000);

/** Until the workflow's latest run has no batch running and no workflow task pending: it is resting. */
async function resting(workflowId: string): Promise<string> {
  const handle = (await temporal.get()).workflow.getHandle(workflowId);
  return eventually(
    'the workflow resting',
    async () => {
      const d = await handle.describe();
      return (d.raw.pendingActivities?.length ?? 0) === 0 && !d.raw.pendingWorkflowTask && d.runId;
    },
    20_000,
  );
}

it('paused and resumed around the continue-as-new boundary: the new run keeps the pause, resumes at once, and each recipient still gets one call', async () => {
  const s = await setup();
  const { tagId, phones } = await audience(s, AUDIENCE);
  const id = await create(s, tagId);
  const workflowId = broadcastWorkflowId(s.ws.id, id);
  const handle = (await temporal.get()).workflow.getHandle(workflowId);
  const firstRun = (await handle.describe()).runId;
  const move = async (to: 'pause' | 'resume') => {
    const res = await request(s, 'POST', `/api/v1/broadcasts/${id}/${to}`);
    expect(res.status).toBe(200);
    expect(res.body.data.status).toBe(to === 'pause' ? 'paused' : 'in_progress');
  };

  await eventually('90 provider calls', async () => (await calls(s)).length >= BATCHES_PER_RUN - 10, 60_000);
  await move('pause');
  // Resumed and paused again at once, turn after turn: each turn is at least one loop turn of the
  // run (a batch that finds it paused, or sends one recipient), so the run soon continues as new
  // while the broadcast is paused. 130 recipients need 131 batches: it cannot finish first.
  let run = await resting(workflowId);
  for (let turn = 0; run === firstRun; turn++) {
    expect(turn).toBeLessThan(60);
    await move('resume');
    await move('pause');
    run = await resting(workflowId);
  }
  // The new run keeps the pause: no provider call.
  const before = (await calls(s)).length;
  expect(before).toBeLessThan(AUDIENCE);
  await new Promise((resolve) => setTimeout(resolve, 1500));
  expect((await calls(s)).length).toBe(before);
  expect((await get(s, id)).status).toBe('paused');

  // Resumed, the new run wakes at once (not at its minute's look at the row) and finishes.
  const resumedAt = Date.now();
  await move('resume');
  await handle.result();
  expect(Date.now() - resumedAt).toBeLessThan(30_000);
  const done = await get(s, id);
  expect(done.status).toBe('completed');
  expect(done.counts).toEqual({ total: AUDIENCE, pending: 0, sent: AUDIENCE, delivered: 0, read: 0, failed: 0, skipped: 0 });
  expect(await callsPerNumber(s)).toEqual(Object.fromEntries(phones.map((p) => [p, 1])));
  const all = await runs(workflowId);
  expect(all.length).toBeGreaterThanOrEqual(2);
  expect(ending(all[0])).toBe('EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW');
  expect(ending(all.at(-1)!)).toBe('EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED');
}, 90_000);
