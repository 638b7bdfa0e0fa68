/**
 * The broadcast workflow's waits (workflows/broadcast.ts), on Temporal's time-skipping test server
 * with mocked activities: paused, waiting for the quota's reset, reconciling, scheduled, cancelled,
 * and continue-as-new. A wait of hours takes milliseconds; the times asserted are the server's
 * (skipped) clock, read from when the workflow scheduled each activity. The activities are a fake
 * broadcast that answers like the real ones (activities/broadcasts.ts) from a few fields the test
 * sets, the way the API's pause, resume and cancel set the row.
 */
import { Context } from '@temporalio/activity';
import type { WorkflowHandle } from '@temporalio/client';
import type { temporal } from '@temporalio/proto';
import { TestWorkflowEnvironment } from '@temporalio/testing';
import { bundleWorkflowCode, DefaultLogger, Runtime, Worker } from '@temporalio/worker';
import type { BatchResult, BroadcastActivities, BroadcastRef } from '../../activities/broadcasts';
import { BATCHES_PER_RUN, broadcastWake, broadcastWorkflow, type BroadcastWorkflowInput } from '../../workflows/broadcast';
import { ensureTemporalTestServer } from './temporal-test-server';

const MINUTE = 60_000;
const HOUR = 60 * MINUTE;
/** At once, on the server's clock: what a wake signal promises, well under the minute of a look without one. */
const PROMPTLY = 10_000;

type Status = 'scheduled' | 'in_progress' | 'paused' | 'cancelled' | 'completed';
type MockedActivities = Pick<
  BroadcastActivities,
  'startBroadcast' | 'broadcastStatus' | 'completeBroadcast' | 'releaseCancelledBroadcast' | 'sendBroadcastBatch'
>;
type ActivityName = keyof MockedActivities;

interface Call {
  name: ActivityName;
  /** When the workflow scheduled it, on the test server's clock. */
  at: number;
  /** What it answered: a status or a batch's state. */
  answer: string;
  /** The run that called it. */
  runId: string;
}

/**
 * A broadcast as the activities see its rows: a status and recipients still pending. A batch sends
 * to `perBatch` of them while `in_progress` (answering `more`, or `done` once none is left) and
 * answers `paused`, `cancelled` or `completed` from the status, as the real batch does; `next`
 * holds answers the test scripts for the coming batches (a quota reached, a call to reconcile).
 */
class FakeBroadcast {
  status: Status = 'scheduled';
  pending: number;
  sent = 0;
  readonly calls: Call[] = [];
  readonly next: ((at: number) => BatchResult)[] = [];
  /** Runs after every call, with the calls so far: how a test pauses or resumes it at a given point. */
  after: (calls: Call[]) => void = () => undefined;
  private waiters: { until: (calls: Call[]) => boolean; resolve: () => void }[] = [];

  constructor(
    recipients: number,
    readonly perBatch = 1,
  ) {
    this.pending = recipients;
  }

  private record(name: ActivityName, answer: string): void {
    const info = Context.current().info;
    this.calls.push({ name, at: info.currentAttemptScheduledTimestampMs, answer, runId: info.workflowExecution?.runId ?? '' });
    this.after(this.calls);
    this.waiters = this.waiters.filter((w) => (w.until(this.calls) ? (w.resolve(), false) : true));
  }

  /** Resolves once the calls so far satisfy `until`. */
  reached(until: (calls: Call[]) => boolean): Promise<void> {
    if (until(this.calls)) return Promise.resolve();
    return new Promise((resolve) => this.waiters.push({ until, resolve }));
  }

  named(name: ActivityName): Call[] {
    return this.calls.filter((c) => c.name === name);
  }

  readonly activities: MockedActivities = {
    startBroadcast: async (_ref: BroadcastRef) => {
      if (this.status === 'scheduled') this.status = 'in_progress';
      this.record('startBroadcast', this.status);
      return { status: this.status };
    },
    broadcastStatus: async (_ref: BroadcastRef) => {
      this.record('broadcastStatus', this.status);
      return { status: this.status };
    },
    completeBroadcast: async (_ref: BroadcastRef) => {
      if (this.status === 'in_progress' && this.pending === 0) this.status = 'completed';
      this.record('completeBroadcast', this.status);
      return { status: this.status };
    },
    releaseCancelledBroadcast: async (_ref: BroadcastRef) => {
      this.record('releaseCancelledBroadcast', this.status);
      return { released: 0 };
    },
    sendBroadcastBatch: async (_ref: BroadcastRef) => {
      let result: BatchResult;
      if (this.status === 'paused' || this.status === 'cancelled' || this.status === 'completed') result = { state: this.status };
      else if (this.next.length > 0) result = this.next.shift()!(Context.current().info.currentAttemptScheduledTimestampMs);
      else {
        const n = Math.min(this.perBatch, this.pending);
        this.pending -= n;
        this.sent += n;
        result = { state: this.pending > 0 ? 'more' : 'done' };
      }
      this.record('sendBroadcastBatch', result.state);
      return result;
    },
  };
}

/** The calls as `name:answer`, to compare sequences at a glance. */
const trace = (calls: Call[]) => calls.map((c) => `${c.name}:${c.answer}`);
const times = (n: number, item: string) => Array.from({ length: n }, () => item);

let env: TestWorkflowEnvironment;
let worker: Worker;
let running: Promise<void>;
const TASK_QUEUE = `broadcast-workflow-${process.pid}`;
/** Each case's fake broadcast, by its workflow id: the one worker's activities answer from it. */
const fakes = new Map<string, FakeBroadcast>();
/** The workflows of the case running: a case that fails part-way must not leave one running into the next. */
const open: WorkflowHandle[] = [];
let cases = 0;

const fakeOfCaller = (): FakeBroadcast => fakes.get(Context.current().info.workflowExecution?.workflowId ?? '')!;
const activities: MockedActivities = {
  startBroadcast: (ref) => fakeOfCaller().activities.startBroadcast(ref),
  broadcastStatus: (ref) => fakeOfCaller().activities.broadcastStatus(ref),
  completeBroadcast: (ref) => fakeOfCaller().activities.completeBroadcast(ref),
  releaseCancelledBroadcast: (ref) => fakeOfCaller().activities.releaseCancelledBroadcast(ref),
  sendBroadcastBatch: (ref) => fakeOfCaller().activities.sendBroadcastBatch(ref),
};

// A case takes a second or less; the limit leaves room for a loaded machine.
jest.setTimeout(20_000);

let workflowBundle: { code: string };

/** A time-skipping test server and one worker on it, running every case's workflow. */
async function startEnvironment(): Promise<void> {
  env = await TestWorkflowEnvironment.createTimeSkipping({
    server: { executable: { type: 'existing-path', path: ensureTemporalTestServer() } },
  });
  worker = await Worker.create({ connection: env.nativeConnection, taskQueue: TASK_QUEUE, workflowBundle, activities });
  running = worker.run();
}

async function stopEnvironment(): Promise<void> {
  if (worker?.getState() === 'RUNNING') worker.shutdown();
  await running;
  await env?.teardown();
}

beforeAll(async () => {
  // Errors only: the test server does not advertise every capability of a real server, which the SDK warns of.
  Runtime.install({ logger: new DefaultLogger('ERROR'), telemetryOptions: { logging: { filter: { core: 'ERROR', other: 'ERROR' } } } });
  // The worker's own entry (workflows/index.ts).
  workflowBundle = await bundleWorkflowCode({ workflowsPath: require.resolve('../../workflows'), logger: new DefaultLogger('ERROR') });
  await startEnvironment();
}, 120_000);

// A case that failed part-way can leave its workflow running, and the test server's clock held by
// its activities: the next case gets a server and a worker of its own, so one failure stays one.
afterEach(async () => {
  let leftRunning = false;
  for (const handle of open.splice(0)) {
    const status = await handle.describe().then(
      (d) => d.status.name,
      () => 'UNKNOWN',
    );
    if (status === 'RUNNING' || status === 'UNKNOWN') leftRunning = true;
  }
  if (leftRunning) {
    await stopEnvironment();
    await startEnvironment();
  }
}, 60_000);

afterAll(stopEnvironment);

/**
 * Runs one broadcast workflow to its end with the fake's activities; `during` acts on it meanwhile
 * (time moves only while it sleeps the environment); then waits for the result, time skipping.
 * Returns the result, every run's history and when the last run closed (the server's clock).
 */
async function runBroadcast(
  fake: FakeBroadcast,
  input: Partial<BroadcastWorkflowInput> = {},
  during: (handle: WorkflowHandle<typeof broadcastWorkflow>) => Promise<void> = async () => undefined,
): Promise<{ result: { status: string }; runs: temporal.api.history.v1.IHistory[]; closedAt: number }> {
  const workflowId = `broadcast-${process.pid}-${++cases}`;
  fakes.set(workflowId, fake);
  const handle = await env.client.workflow.start(broadcastWorkflow, {
    taskQueue: TASK_QUEUE,
    workflowId,
    args: [{ workspaceId: 'w1', broadcastId: 'b1', ...input }],
  });
  open.push(handle);
  await during(handle);
  const result = await handle.result();
  const runs: temporal.api.history.v1.IHistory[] = [];
  for (let runId: string | null | undefined = handle.firstExecutionRunId; runId;) {
    const history = await env.client.workflow.getHandle(workflowId, runId).fetchHistory();
    runs.push(history);
    runId = history.events?.at(-1)?.workflowExecutionContinuedAsNewEventAttributes?.newExecutionRunId;
  }
  const closedAt = (await handle.describe()).closeTime!.getTime();
  return { result, runs, closedAt };
}

/** Activities of a given type that a run's history scheduled. */
function scheduled(history: temporal.api.history.v1.IHistory, type: ActivityName): number {
  return (history.events ?? []).filter((e) => e.activityTaskScheduledEventAttributes?.activityType?.name === type).length;
}

describe('a broadcast paused while sending', () => {
  it('stops sending, looks at its row once a minute, and resumes at once on the wake signal', async () => {
    const fake = new FakeBroadcast(4);
    // The user pauses after the first batch.
    fake.after = (calls) => {
      if (calls.filter((c) => c.name === 'sendBroadcastBatch').length === 1) fake.status = 'paused';
    };
    let resumedAt = 0;
    const { result, runs } = await runBroadcast(fake, {}, async (handle) => {
      await fake.reached((calls) => calls.some((c) => c.answer === 'paused'));
      await env.sleep('315 seconds');
      expect(fake.sent).toBe(1);
      // Resumed: the API sets the row and signals.
      fake.status = 'in_progress';
      resumedAt = await env.currentTimeMs();
      await handle.signal(broadcastWake);
    });

    expect(result).toEqual({ status: 'completed' });
    expect(trace(fake.calls)).toEqual([
      'startBroadcast:in_progress',
      'sendBroadcastBatch:more',
      // The batch that found it paused, then one look a minute for the five minutes and more it stays paused.
      ...times(6, 'sendBroadcastBatch:paused'),
      'sendBroadcastBatch:more',
      'sendBroadcastBatch:more',
      'sendBroadcastBatch:done',
      'completeBroadcast:completed',
    ]);
    const paused = fake.calls.filter((c) => c.answer === 'paused');
    for (let i = 1; i < paused.length; i++) expect(paused[i].at - paused[i - 1].at).toBeGreaterThanOrEqual(MINUTE);
    // On the signal, not at the next minute's look.
    const firstAfter = fake.named('sendBroadcastBatch')[7];
    expect(firstAfter.at).toBeGreaterThanOrEqual(resumedAt);
    expect(firstAfter.at - resumedAt).toBeLessThan(PROMPTLY);
    expect(fake.sent).toBe(4);
    expect(runs).toHaveLength(1);
  });

  it('resumed without a signal, carries on at its next look (within the minute)', async () => {
    const fake = new FakeBroadcast(2);
    fake.after = (calls) => {
      const batches = calls.filter((c) => c.name === 'sendBroadcastBatch');
      if (batches.length === 1) fake.status = 'paused';
      // The row says in_progress again after the third look; nobody signals.
      if (batches.length === 4) fake.status = 'in_progress';
    };
    const { result } = await runBroadcast(fake);

    expect(result).toEqual({ status: 'completed' });
    expect(trace(fake.calls)).toEqual([
      'startBroadcast:in_progress',
      'sendBroadcastBatch:more',
      ...times(3, 'sendBroadcastBatch:paused'),
      'sendBroadcastBatch:done',
      'completeBroadcast:completed',
    ]);
    const batches = fake.named('sendBroadcastBatch');
    for (let i = 2; i < batches.length; i++) {
      expect(batches[i].at - batches[i - 1].at).toBeGreaterThanOrEqual(MINUTE);
      expect(batches[i].at - batches[i - 1].at).toBeLessThan(2 * MINUTE);
    }
  });

  it('paused before it started, starts only once resumed', async () => {
    const fake = new FakeBroadcast(1);
    fake.status = 'paused';
    fake.after = (calls) => {
      if (calls.filter((c) => c.name === 'startBroadcast').length === 3) fake.status = 'scheduled';
    };
    const { result } = await runBroadcast(fake);

    expect(result).toEqual({ status: 'completed' });
    expect(trace(fake.calls)).toEqual([
      ...times(3, 'startBroadcast:paused'),
      'startBroadcast:in_progress',
      'sendBroadcastBatch:done',
      'completeBroadcast:completed',
    ]);
    const starts = fake.named('startBroadcast');
    for (let i = 1; i < starts.length; i++) expect(starts[i].at - starts[i - 1].at).toBeGreaterThanOrEqual(MINUTE);
  });
});

describe('a broadcast at its daily quota', () => {
  it('sleeps until the reset the batch names, sends nothing before it, then carries on', async () => {
    const fake = new FakeBroadcast(3);
    let until = 0;
    // The second batch finds the quota reached: the reset is 9 hours away.
    fake.after = (calls) => {
      if (calls.filter((c) => c.name === 'sendBroadcastBatch').length === 1) {
        fake.next.push((at) => {
          until = at + 9 * HOUR;
          return { state: 'waiting', until: new Date(until).toISOString() };
        });
      }
    };
    const { result } = await runBroadcast(fake);

    expect(result).toEqual({ status: 'completed' });
    expect(trace(fake.calls)).toEqual([
      'startBroadcast:in_progress',
      'sendBroadcastBatch:more',
      'sendBroadcastBatch:waiting',
      'sendBroadcastBatch:more',
      'sendBroadcastBatch:done',
      'completeBroadcast:completed',
    ]);
    const afterWait = fake.named('sendBroadcastBatch')[2];
    expect(afterWait.at).toBeGreaterThanOrEqual(until);
    expect(afterWait.at - until).toBeLessThan(MINUTE);
  });
});

describe('a broadcast reconciling a recipient', () => {
  it('waits a second for the provider’s status callback before the next batch', async () => {
    const fake = new FakeBroadcast(2);
    fake.next.push(() => ({ state: 'reconciling' }));
    const { result } = await runBroadcast(fake);

    expect(result).toEqual({ status: 'completed' });
    expect(trace(fake.calls)).toEqual([
      'startBroadcast:in_progress',
      'sendBroadcastBatch:reconciling',
      'sendBroadcastBatch:more',
      'sendBroadcastBatch:done',
      'completeBroadcast:completed',
    ]);
    const [reconciling, next] = fake.named('sendBroadcastBatch');
    expect(next.at - reconciling.at).toBeGreaterThanOrEqual(1000);
    expect(next.at - reconciling.at).toBeLessThan(MINUTE);
  });
});

describe('a scheduled broadcast', () => {
  it('freezes its audience at the scheduled time, not before', async () => {
    const fake = new FakeBroadcast(1);
    const scheduledAt = (await env.currentTimeMs()) + 2 * 24 * HOUR;
    const { result } = await runBroadcast(fake, { scheduledAt: new Date(scheduledAt).toISOString() });

    expect(result).toEqual({ status: 'completed' });
    expect(trace(fake.calls)).toEqual(['startBroadcast:in_progress', 'sendBroadcastBatch:done', 'completeBroadcast:completed']);
    expect(fake.calls[0].at).toBeGreaterThanOrEqual(scheduledAt);
  });
});

describe('a broadcast cancelled', () => {
  it('while paused: ends on the wake signal, sends nothing more and gives back what it prepared', async () => {
    const fake = new FakeBroadcast(5);
    fake.after = (calls) => {
      if (calls.filter((c) => c.name === 'sendBroadcastBatch').length === 2) fake.status = 'paused';
    };
    let cancelledAt = 0;
    const { result, closedAt } = await runBroadcast(fake, {}, async (handle) => {
      await fake.reached((calls) => calls.some((c) => c.answer === 'paused'));
      await env.sleep('90 seconds');
      fake.status = 'cancelled';
      cancelledAt = await env.currentTimeMs();
      await handle.signal(broadcastWake);
    });

    expect(result).toEqual({ status: 'cancelled' });
    expect(trace(fake.calls)).toEqual([
      'startBroadcast:in_progress',
      'sendBroadcastBatch:more',
      'sendBroadcastBatch:more',
      ...times(2, 'sendBroadcastBatch:paused'),
      'sendBroadcastBatch:cancelled',
      'releaseCancelledBroadcast:cancelled',
    ]);
    expect(fake.sent).toBe(2);
    expect(closedAt - cancelledAt).toBeLessThan(PROMPTLY);
  });

  it('before its scheduled time: ends on the wake signal without freezing its audience', async () => {
    const fake = new FakeBroadcast(3);
    const scheduledAt = (await env.currentTimeMs()) + 24 * HOUR;
    const { result, closedAt } = await runBroadcast(fake, { scheduledAt: new Date(scheduledAt).toISOString() }, async (handle) => {
      await env.sleep('1 hour');
      fake.status = 'cancelled';
      await handle.signal(broadcastWake);
    });

    expect(result).toEqual({ status: 'cancelled' });
    expect(trace(fake.calls)).toEqual(['broadcastStatus:cancelled', 'releaseCancelledBroadcast:cancelled']);
    expect(closedAt).toBeLessThan(scheduledAt);
  });
});

describe('a broadcast longer than a run', () => {
  it(`continues as new every ${BATCHES_PER_RUN} batches, freezes its audience once and loses no batch`, async () => {
    const fake = new FakeBroadcast(2 * BATCHES_PER_RUN + 20);
    const { result, runs } = await runBroadcast(fake);

    expect(result).toEqual({ status: 'completed' });
    expect(fake.sent).toBe(2 * BATCHES_PER_RUN + 20);
    expect(trace(fake.calls)).toEqual([
      'startBroadcast:in_progress',
      ...times(2 * BATCHES_PER_RUN + 19, 'sendBroadcastBatch:more'),
      'sendBroadcastBatch:done',
      'completeBroadcast:completed',
    ]);
    expect(runs.map((h) => scheduled(h, 'sendBroadcastBatch'))).toEqual([BATCHES_PER_RUN, BATCHES_PER_RUN, 20]);
    expect(new Set(fake.calls.map((c) => c.runId)).size).toBe(3);
    // Each run's history is bounded by the batches per run, whatever the audience: about six events a batch.
    for (const history of runs) expect(history.events!.length).toBeLessThan(BATCHES_PER_RUN * 7 + 20);
  }, 60_000);

  it(`paused before it started for over ${BATCHES_PER_RUN} looks, continues as new and starts once resumed`, async () => {
    const fake = new FakeBroadcast(1);
    fake.status = 'paused';
    fake.after = (calls) => {
      if (calls.filter((c) => c.name === 'startBroadcast').length === BATCHES_PER_RUN + 10) fake.status = 'scheduled';
    };
    const { result, runs } = await runBroadcast(fake);

    expect(result).toEqual({ status: 'completed' });
    expect(trace(fake.calls)).toEqual([
      ...times(BATCHES_PER_RUN + 10, 'startBroadcast:paused'),
      'startBroadcast:in_progress',
      'sendBroadcastBatch:done',
      'completeBroadcast:completed',
    ]);
    expect(runs.map((h) => scheduled(h, 'startBroadcast'))).toEqual([BATCHES_PER_RUN, 11]);
  }, 60_000);
});
