/**
 * Killing the worker in the middle of a send (SIGKILL, then a new worker on the same task queue)
 * still makes exactly one provider call. The test runs its own worker process on its own task
 * queue (the suite's worker must not be killed) and its own API starting sends there; the
 * emulator posts the Cloud API's `sent` status callbacks (with our `biz_opaque_callback_data`)
 * to that API's webhook URL, as Meta would to the app's configured callback URL.
 */
import { loadConfig } from '../domain/platform/config';
import { saoPauloDay } from '../domain/messaging/sending';
import { temporalClientFactory } from '../domain/platform/temporal';
import path from 'node:path';
import { Child, freePort, nodeTs, startChild, waitFor, waitForHttp } from '../scripts/stack';
import { cloudInstance, emulator, killWorker, LOG_DIR, ownWorker } from './stack-fixtures';
import { createWorkspace, outbox, startApi, TestApi, uniqueIp, Workspace } from './helpers';
import { uniqueMobile } from './phones';

const TASK_QUEUE = `crm-crash-${process.pid}`;
/** Short in tests: how long a send whose provider call may have happened waits for the status callback. */
const RECONCILE_WINDOW_MS = 4000;

const temporal = temporalClientFactory(loadConfig());
let api: TestApi;
let worker: Child | undefined;
const mobile = (): string => uniqueMobile('11');

// No outbox dispatcher in it (ownWorker): it would lease the other suites' events, and each SIGKILL would hold them back for the lease's minute.
const startWorker = () => ownWorker(TASK_QUEUE);

/** Until some statement waits on a lock held by the backend `pid` (the test's own transaction). */
async function blockedBy(pid: number, what: string): Promise<void> {
  await waitFor(
    what,
    async () => {
      const { rows } = await api.db.raw(`SELECT count(*)::int AS n FROM pg_stat_activity WHERE ?::int = ANY(pg_blocking_pids(pid))`, [pid]);
      if (rows[0].n === 0) throw new Error('not blocked yet');
    },
    20_000,
  );
}

/** SIGKILL: no graceful shutdown, no chance to finish or report the running activity. */
const callsTo = async (to: string): Promise<any[]> => (await emulator(`/__emulator/calls?to=${to}`)).calls;

interface Setup {
  ws: Workspace;
  instanceId: string;
  phoneNumberId: string;
}

/** A workspace with a Cloud API instance on the emulator, an approved template, and the instance's webhook registered with the emulator. */
async function setup(): Promise<Setup> {
  const ws = await createWorkspace(api, { scopes: ['conversations:send', 'conversations:read'] });
  return { ws, ...(await cloudInstance(api, ws.id, { label: 'crash' })) };
}

const body = (phone: string) => ({
  phone,
  type: 'template',
  templateName: 'welcome',
  templateLanguage: 'pt_BR',
  templateVariables: ['Ana'],
});
const send = (s: Setup, phone: string, key: string) =>
  api.request('POST', '/api/v1/messages', {
    key: s.ws.key,
    body: body(phone),
    headers: { 'x-forwarded-for': uniqueIp(), 'Idempotency-Key': key },
  });
/**
 * The daily cold-slot rows a send's prepare step may take, held by the caller's uncommitted insert:
 * today's and tomorrow's (by the code's own saoPauloDay, the unit tier pins it), so a São Paulo
 * midnight between the hold and the send still finds its row held.
 */
const coldSlotRows = (workspaceId: string) =>
  [0, 86_400_000].map((ahead) => ({
    workspace_id: workspaceId,
    day: saoPauloDay(new Date(Date.now() + ahead)),
    kind: 'cold_conversations',
    count: 0,
  }));
const workflowId = (s: Setup, key: string): string => `send/${s.ws.id}/key/${key}`;

/**
 * The API's answer: 201, or, when its 30 s wait ran out (409 IN_PROGRESS), the replay (200)
 * of the same Idempotency-Key once the workflow completed.
 */
async function answer(s: Setup, phone: string, key: string, pending: Promise<Awaited<ReturnType<typeof send>>>) {
  const first = await pending;
  if (first.status !== 409) return first;
  expect(first.body.code).toBe('IN_PROGRESS');
  await (await temporal.get()).workflow.getHandle(workflowId(s, key)).result();
  const replay = await send(s, phone, key);
  expect(replay.status).toBe(200);
  return replay;
}

/** Attempt numbers of each activity of the send, from its history (proves what the crash did). */
async function activityAttempts(s: Setup, key: string): Promise<Record<string, number[]>> {
  const history = await (await temporal.get()).workflow.getHandle(workflowId(s, key)).fetchHistory();
  const names = new Map<string, string>();
  const attempts: Record<string, number[]> = {};
  for (const event of history.events ?? []) {
    const scheduled = event.activityTaskScheduledEventAttributes;
    if (scheduled) names.set(String(event.eventId), scheduled.activityType?.name ?? '?');
    const started = event.activityTaskStartedEventAttributes;
    if (started) {
      const name = names.get(String(started.scheduledEventId)) ?? '?';
      (attempts[name] ??= []).push(started.attempt ?? 1);
    }
  }
  return attempts;
}

/**
 * The local activities of the send that completed, by type, in order: a local activity leaves no
 * task events, only a marker (its data is core's JSON, not a payload of ours).
 */
async function localActivities(s: Setup, key: string): Promise<string[]> {
  const history = await (await temporal.get()).workflow.getHandle(workflowId(s, key)).fetchHistory();
  return (history.events ?? [])
    .map((e) => e.markerRecordedEventAttributes)
    .filter((m) => m?.markerName === 'core_local_activity')
    .map((m) => {
      const data = JSON.parse(Buffer.from(m!.details!.data!.payloads![0].data!).toString('utf8'));
      return data.activity_type ?? data.activityType;
    });
}

/**
 * Workflow tasks the killed worker never finished (timed out or failed, then run again by the new
 * worker). The send's database steps are local activities, run inside the workflow task: a worker
 * killed in one loses that task, and the next worker runs the step again from the history.
 */
async function lostWorkflowTasks(s: Setup, key: string): Promise<number> {
  const history = await (await temporal.get()).workflow.getHandle(workflowId(s, key)).fetchHistory();
  return (history.events ?? []).filter((e) => e.workflowTaskTimedOutEventAttributes || e.workflowTaskFailedEventAttributes).length;
}

/** Exactly one provider call, and everything the one send should leave behind, once. */
async function expectOneSend(s: Setup, phone: string, res: { status: number; body: any }): Promise<void> {
  expect([200, 201]).toContain(res.status);
  expect(res.body.data).toMatchObject({ status: 'sent', type: 'template', created: { contact: true, conversation: true } });

  const calls = await callsTo(phone);
  expect(calls.map((c) => c.outcome)).toEqual(['ok']);
  const { messageId, waId } = calls[0];

  const messages = await api
    .db('messages')
    .where({ workspace_id: s.ws.id })
    .select('id', 'direction', 'status', 'provider_message_id', 'conversation_id');
  expect(messages).toEqual([
    {
      id: res.body.data.id,
      direction: 'out',
      status: 'sent',
      provider_message_id: messageId,
      conversation_id: res.body.data.conversationId,
    },
  ]);
  const contacts = await api.db('contacts').where({ workspace_id: s.ws.id }).select('id', 'phone', 'wa_id');
  expect(contacts).toEqual([{ id: res.body.data.contactId, phone, wa_id: waId }]);
  expect(await api.db('conversations').where({ workspace_id: s.ws.id }).pluck('id')).toEqual([res.body.data.conversationId]);

  const counters = await api.db('daily_counters').where({ workspace_id: s.ws.id }).select('kind', 'count');
  expect(Object.fromEntries(counters.map((c) => [c.kind, c.count]))).toEqual({ messages: 1, cold_conversations: 1 });
  expect(await outbox(api, s.ws.id, 'contact.created')).toHaveLength(1);

  const attempts = await api.db('send_attempts').where({ workspace_id: s.ws.id }).select('state', 'provider_message_id');
  expect(attempts).toEqual([{ state: 'sent', provider_message_id: messageId }]);
}

beforeAll(async () => {
  // The crashes of this file are a workflow's: every send is one from the start (the API's own first attempt is tested at the end).
  api = await startApi({ config: { taskQueue: TASK_QUEUE, sendReconcileWindowMs: RECONCILE_WINDOW_MS, sendFirstAttempt: 'workflow' } });
  worker = await startWorker();
}, 120_000);

afterAll(async () => {
  await worker?.stop();
  await api?.close();
  await temporal.close();
});

describe('a worker killed mid-send', () => {
  it('dies while the provider call is under way: the status callback records the answer, the retry does not call again', async () => {
    const s = await setup();
    const phone = mobile();
    const key = `crash-mid-call-${phone}`;
    // The provider takes 2 s to answer: the worker dies after the request reached it.
    await emulator('/__emulator/script', { to: phone, behaviour: 'ok', delayMs: 2000, times: 1 });
    const started = Date.now();
    const pending = send(s, phone, key);
    await waitFor(
      'the provider call',
      async () => {
        if ((await callsTo(phone)).length === 0) throw new Error('no call yet');
      },
      20_000,
    );
    await killWorker(worker!);
    worker = await startWorker();

    const res = await answer(s, phone, key, pending);
    await expectOneSend(s, phone, res);
    // The provider's callback reached the webhook. The first call is a local activity: the killed
    // worker lost its workflow task, and the next worker's call found the attempt claimed (no second call).
    const deliveries = (await emulator(`/__emulator/webhook?phoneNumberId=${s.phoneNumberId}`)).deliveries;
    expect(deliveries.map((d: any) => d.httpStatus)).toEqual([200]);
    expect(await lostWorkflowTasks(s, key)).toBeGreaterThanOrEqual(1);
    expect(await localActivities(s, key)).toContain('sendAtOnce');
    console.log(`[send-crash] killed mid-call: answered ${res.status} after ${((Date.now() - started) / 1000).toFixed(1)} s`);
  }, 60_000);

  it('dies right after the send started, before the provider was reached: still exactly one call', async () => {
    const s = await setup();
    const phone = mobile();
    const key = `crash-early-${phone}`;
    // Hold the workspace's daily cold-slot row (an uncommitted insert): the send's prepare step
    // blocks on it, so the worker is certainly killed after the workflow started and before any
    // provider call. Its transaction never commits (the client that would commit it is dead).
    const blocker = await api.db.transaction();
    const blockerPid = (await blocker.raw('SELECT pg_backend_pid() AS pid')).rows[0].pid;
    await blocker('daily_counters').insert(coldSlotRows(s.ws.id));
    const started = Date.now();
    const pending = send(s, phone, key);
    try {
      await blockedBy(blockerPid, 'the send blocked in prepare');
      expect(await callsTo(phone)).toHaveLength(0);
      await killWorker(worker!);
    } finally {
      await blocker.rollback();
    }
    worker = await startWorker();

    const res = await answer(s, phone, key, pending);
    await expectOneSend(s, phone, res);
    expect(await lostWorkflowTasks(s, key)).toBeGreaterThanOrEqual(1);
    console.log(
      `[send-crash] killed before the provider call: answered ${res.status} after ${((Date.now() - started) / 1000).toFixed(1)} s`,
    );
  }, 60_000);

  it('dies after the contact and conversation were created, before the provider call: one call, no orphan, events once', async () => {
    const s = await setup();
    const phone = mobile();
    const key = `crash-after-prepare-${phone}`;
    // Two holds: the daily cold-slot row stops prepare until the attempt's reference is known;
    // then an uncommitted attempt row with that reference stops the provider step's claim, after
    // prepare committed the contact and the conversation.
    const slot = await api.db.transaction();
    await slot('daily_counters').insert(coldSlotRows(s.ws.id));
    const slotPid = (await slot.raw('SELECT pg_backend_pid() AS pid')).rows[0].pid;
    const started = Date.now();
    const pending = send(s, phone, key);
    const claim = await api.db.transaction();
    try {
      await blockedBy(slotPid, 'the send blocked in prepare');
      const { runId } = await (await temporal.get()).workflow.getHandle(workflowId(s, key)).describe();
      await claim('send_attempts').insert({ reference: `${workflowId(s, key)}/${runId}`, workspace_id: s.ws.id, state: 'failed' });
      const claimPid = (await claim.raw('SELECT pg_backend_pid() AS pid')).rows[0].pid;
      await slot.rollback();
      await blockedBy(claimPid, 'the provider step blocked on its claim');
      // The point of the kill: contact and conversation committed, no provider call.
      expect(await api.db('contacts').where({ workspace_id: s.ws.id, phone }).pluck('id')).toHaveLength(1);
      expect(await api.db('conversations').where({ workspace_id: s.ws.id }).pluck('id')).toHaveLength(1);
      expect(await callsTo(phone)).toHaveLength(0);
      await killWorker(worker!);
    } finally {
      if (!slot.isCompleted()) await slot.rollback();
      await claim.rollback();
    }
    worker = await startWorker();

    const res = await answer(s, phone, key, pending);
    await expectOneSend(s, phone, res);
    console.log(
      `[send-crash] killed after prepare, before the provider call: answered ${res.status} after ${((Date.now() - started) / 1000).toFixed(1)} s`,
    );
  }, 60_000);

  it('dies after the provider accepted, before the message and events were recorded: no second call, events once', async () => {
    const s = await setup();
    const phone = mobile();
    const key = `crash-before-record-${phone}`;
    await emulator('/__emulator/script', { to: phone, behaviour: 'ok', delayMs: 1500, times: 1 });
    const started = Date.now();
    const pending = send(s, phone, key);
    await waitFor(
      'the provider call',
      async () => {
        if ((await callsTo(phone)).length === 0) throw new Error('no call yet');
      },
      20_000,
    );
    // Prepare committed the conversation; holding it stops recordSent, which locks it first.
    const hold = await api.db.transaction();
    try {
      await hold('conversations').where({ workspace_id: s.ws.id }).forUpdate().select('id');
      const holdPid = (await hold.raw('SELECT pg_backend_pid() AS pid')).rows[0].pid;
      await blockedBy(holdPid, 'recording blocked after the provider answered');
      // The point of the kill: the provider accepted, nothing of the message or its events is recorded.
      expect(await api.db('send_attempts').where({ workspace_id: s.ws.id }).pluck('state')).toEqual(['sent']);
      expect(await api.db('messages').where({ workspace_id: s.ws.id }).pluck('id')).toHaveLength(0);
      expect(await outbox(api, s.ws.id, 'contact.created')).toHaveLength(0);
      await killWorker(worker!);
    } finally {
      await hold.rollback();
    }
    worker = await startWorker();

    const res = await answer(s, phone, key, pending);
    await expectOneSend(s, phone, res);
    expect(await lostWorkflowTasks(s, key)).toBeGreaterThanOrEqual(1);
    console.log(`[send-crash] killed before recording: answered ${res.status} after ${((Date.now() - started) / 1000).toFixed(1)} s`);
  }, 60_000);

  it('finds an attempt claimed by a worker that died before calling: no callback within the window, so it sends once', async () => {
    const s = await setup();
    const phone = mobile();
    const key = `claimed-${phone}`;
    // The state a worker leaves when it dies between claiming the attempt and calling the
    // provider: the row `in_flight`, no provider call. Written by the test while prepare waits.
    const blocker = await api.db.transaction();
    const blockerPid = (await blocker.raw('SELECT pg_backend_pid() AS pid')).rows[0].pid;
    await blocker('daily_counters').insert(coldSlotRows(s.ws.id));
    const started = Date.now();
    const pending = send(s, phone, key);
    try {
      await blockedBy(blockerPid, 'the send blocked in prepare');
      const { runId } = await (await temporal.get()).workflow.getHandle(workflowId(s, key)).describe();
      await api.db('send_attempts').insert({ reference: `${workflowId(s, key)}/${runId}`, workspace_id: s.ws.id, state: 'in_flight' });
    } finally {
      await blocker.rollback();
    }

    const res = await pending;
    expect(res.status).toBe(201);
    await expectOneSend(s, phone, res);
    const attempts = await activityAttempts(s, key);
    // Round 1 (in the one local activity, sendAtOnce) found the claim and waited for the window; round 2 called the provider.
    expect(await localActivities(s, key)).toEqual(['sendAtOnce', 'recordSent']);
    expect(attempts.sendToProvider).toEqual([1]);
    expect(attempts.reconcileSend).toHaveLength(1);
    expect(Date.now() - started).toBeGreaterThanOrEqual(RECONCILE_WINDOW_MS);
    console.log(`[send-crash] claimed, never called: answered ${res.status} after ${((Date.now() - started) / 1000).toFixed(1)} s`);
  }, 60_000);
});

/**
 * An API process (api/server.ts, as production runs it) hosting its send worker on the file's task
 * queue: its sends start eagerly, their first workflow task run by that worker. `firstAttempt`:
 * who makes a send's first provider attempt (SEND_FIRST_ATTEMPT).
 */
async function apiProcess(firstAttempt: 'api' | 'workflow' = 'workflow'): Promise<{ child: Child; url: string }> {
  const port = await freePort();
  const child = startChild({
    name: 'eager-api',
    ...nodeTs('api/server.ts'),
    env: {
      ...process.env,
      PORT: String(port),
      PUBLIC_BASE_URL: `http://127.0.0.1:${port}`,
      TRUST_PROXY: 'true',
      TEMPORAL_TASK_QUEUE: TASK_QUEUE,
      SEND_RECONCILE_WINDOW_MS: String(RECONCILE_WINDOW_MS),
      API_SEND_WORKER: 'true',
      SEND_FIRST_ATTEMPT: firstAttempt,
    },
    logFile: path.join(LOG_DIR, `api-${firstAttempt}-${process.pid}.log`),
  });
  const url = `http://127.0.0.1:${port}`;
  await waitForHttp(`${url}/health`, child);
  await waitFor(
    'the hosted send worker',
    async () => {
      if (!child.output().includes('hosted worker ready')) throw new Error('not ready yet');
    },
    60_000,
  );
  return { child, url };
}

/** Who ran each workflow task of the send, in order (a worker's identity is `<pid>@<host>`). */
async function workflowTaskRunners(s: Setup, key: string): Promise<string[]> {
  const history = await (await temporal.get()).workflow.getHandle(workflowId(s, key)).fetchHistory();
  return (history.events ?? [])
    .filter((e) => e.workflowTaskStartedEventAttributes)
    .map((e) => e.workflowTaskStartedEventAttributes!.identity ?? '');
}

const sendThrough = (url: string, s: Setup, phone: string, key: string) =>
  fetch(`${url}/api/v1/messages`, {
    method: 'POST',
    headers: {
      authorization: `Bearer ${s.ws.key}`,
      'content-type': 'application/json',
      'x-forwarded-for': uniqueIp(),
      'Idempotency-Key': key,
    },
    body: JSON.stringify(body(phone)),
  });

/** Sends through the API process and SIGKILLs it while the provider (2 s to answer) has the call: the client loses its connection. */
async function killDuringCall(apiChild: { child: Child; url: string }, s: Setup, phone: string, key: string): Promise<void> {
  await emulator('/__emulator/script', { to: phone, behaviour: 'ok', delayMs: 2000, times: 1 });
  const pending = sendThrough(apiChild.url, s, phone, key).then(
    (res) => res.status,
    () => 'connection lost',
  );
  await waitFor(
    'the provider call',
    async () => {
      if ((await callsTo(phone)).length === 0) throw new Error('no call yet');
    },
    20_000,
  );
  await killWorker(apiChild.child);
  expect(await pending).toBe('connection lost');
}

describe('an API process that hosts its send worker', () => {
  let eager: { child: Child; url: string } | undefined;
  beforeAll(async () => {
    eager = await apiProcess();
  }, 90_000);
  afterAll(async () => {
    await eager?.child.stop();
  });

  it('starts a send eagerly: its one workflow task runs in the API process, one provider call', async () => {
    const s = await setup();
    const phone = mobile();
    const key = `eager-${phone}`;
    const res = await sendThrough(eager!.url, s, phone, key);
    expect(res.status).toBe(201);
    await expectOneSend(s, phone, { status: res.status, body: await res.json() });
    expect(await workflowTaskRunners(s, key)).toEqual([expect.stringMatching(new RegExp(`^${eager!.child.process.pid}@`))]);
    expect(await localActivities(s, key)).toEqual(['sendAtOnce']);
  }, 60_000);

  it('killed mid-send (its hosted worker with it): a dedicated worker takes the send over, one provider call, recorded once', async () => {
    const s = await setup();
    const phone = mobile();
    const key = `api-killed-${phone}`;
    const started = Date.now();
    const killedPid = eager!.child.process.pid!;
    await killDuringCall(eager!, s, phone, key);
    eager = await apiProcess();

    // The client repeats with its key (on another API): it joins the send and gets its answer.
    const res = await answer(s, phone, key, send(s, phone, key));
    await expectOneSend(s, phone, res);
    const runners = await workflowTaskRunners(s, key);
    // The first task died with the API; the rest ran on the dedicated worker.
    expect(runners[0]).toMatch(new RegExp(`^${killedPid}@`));
    expect(runners.slice(1).every((r) => !r.startsWith(`${killedPid}@`))).toBe(true);
    expect(await lostWorkflowTasks(s, key)).toBeGreaterThanOrEqual(1);
    const deliveries = (await emulator(`/__emulator/webhook?phoneNumberId=${s.phoneNumberId}`)).deliveries;
    expect(deliveries.map((d: any) => d.httpStatus)).toEqual([200]);
    console.log(`[send-crash] API killed mid-call: answered ${res.status} after ${((Date.now() - started) / 1000).toFixed(1)} s`);
  }, 90_000);
});

describe('an API process that makes the first attempt itself (SEND_FIRST_ATTEMPT=api)', () => {
  let first: { child: Child; url: string } | undefined;
  beforeAll(async () => {
    first = await apiProcess('api');
  }, 90_000);
  afterAll(async () => {
    await first?.child.stop();
  });
  const keyState = async (s: Setup, key: string) => (await api.db('send_keys').where({ workspace_id: s.ws.id, key }).first('state'))?.state;

  it('answers a send the provider accepts at once without a workflow, and replays it under its key', async () => {
    const s = await setup();
    const phone = mobile();
    const key = `here-${phone}`;
    const res = await sendThrough(first!.url, s, phone, key);
    const answered = { status: res.status, body: await res.json() };
    expect(answered.status).toBe(201);
    await expectOneSend(s, phone, answered);
    await expect((await temporal.get()).workflow.getHandle(workflowId(s, key)).describe()).rejects.toThrow(/not found/i);
    expect(await keyState(s, key)).toBe('answered');
    // A repeat, on another API process (its first attempt made by workflows): the same answer, nothing sent again.
    const replay = await send(s, phone, key);
    expect({ status: replay.status, replayed: replay.headers.get('idempotent-replayed'), body: replay.body }).toEqual({
      status: 200,
      replayed: 'true',
      body: answered.body,
    });
    expect(await callsTo(phone)).toHaveLength(1);
  }, 60_000);

  it("killed mid-call: the worker's sweep hands the send to its workflow, one provider call, recorded once", async () => {
    const s = await setup();
    const phone = mobile();
    const key = `here-killed-${phone}`;
    const started = Date.now();
    await killDuringCall(first!, s, phone, key);
    first = await apiProcess('api');
    // Nothing carries the send yet: a repeat is told to come back.
    expect(await keyState(s, key)).toBe('sending');
    expectInProgress(await send(s, phone, key));

    // The suite's worker sweeps it (SEND_SWEEP_AFTER_MS) into its workflow, which finds the attempt
    // the provider's status callback settled; the repeat then gets the workflow's answer.
    await waitFor(
      'the sweep',
      async () => {
        if ((await keyState(s, key)) !== 'workflow') throw new Error('not handed over yet');
      },
      60_000,
    );
    await (await temporal.get()).workflow.getHandle(workflowId(s, key)).result();
    const res = await send(s, phone, key);
    expect(res.status).toBe(200);
    await expectOneSend(s, phone, res);
    expect(await keyState(s, key)).toBe('workflow');
    const attempts = await activityAttempts(s, key);
    expect(attempts.sendToProvider ?? []).toEqual([]);

    // A sweep that finds the key unsettled again (its mark was lost) leaves the finished run as it is: no second run, no second call.
    await api
      .db('send_keys')
      .where({ workspace_id: s.ws.id, key })
      .update({ state: 'sending', updated_at: new Date(Date.now() - 3_600_000) });
    await waitFor(
      'the second sweep',
      async () => {
        if ((await keyState(s, key)) !== 'workflow') throw new Error('not swept yet');
      },
      30_000,
    );
    const { executions } = await (
      await temporal.get()
    ).workflowService.listWorkflowExecutions({
      namespace: api.config.temporalNamespace,
      query: `WorkflowId = "${workflowId(s, key)}"`,
    });
    expect(executions).toHaveLength(1);
    await expectOneSend(s, phone, res);
    console.log(
      `[send-crash] API killed mid-call (first attempt its own): answered ${res.status} after ${((Date.now() - started) / 1000).toFixed(1)} s`,
    );
  }, 120_000);
});

function expectInProgress(res: { status: number; body: any }): void {
  expect({ status: res.status, code: res.body?.code }).toEqual({ status: 409, code: 'IN_PROGRESS' });
}
