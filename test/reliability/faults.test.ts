/**
 * Faults: the parts this service depends on go away under load and come back. The file runs its
 * own stack (PostgreSQL, Temporal dev server with a SQLite file, worker, and an API process where
 * one must be killed) so stopping them cannot disturb the suite's other files; the provider
 * emulator is the suite's. Each case prints what it did and what it found.
 */
import fs from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import {
  Child,
  ROOT,
  ensureDatabase,
  ensureTemporalCli,
  freePort,
  migrateLatest,
  nodeTs,
  workerFromSources,
  startChild,
  startTemporalDevServer,
  waitFor,
  waitForHttp,
  waitForWorker,
} from '../../scripts/stack';
import { ALL_SCOPES } from '../../domain/access/scopes';
import { createWorkspace, eventually, startApi, TestApi, uniqueIp, Workspace } from '../helpers';
import { uniqueMobile } from '../phones';

const EMULATOR = process.env.EMULATOR_URL!;
const STACK_DIR = path.join(
  process.env.TEST_STACK_DIR ? path.resolve(process.env.TEST_STACK_DIR) : path.join(ROOT, '.data', 'test'),
  'faults',
);
const LOG_DIR = path.join(STACK_DIR, 'logs');
const TASK_QUEUE = 'crm-faults';
const report = (message: string): void => console.log(`[faults] ${message}`);
// Subscriptions are never unlimited (a number, default 10): a quota far above what this file makes.
const UNLIMITED = { dealLimit: null, dailyMessageQuota: null, broadcastLimit: null, inboundWebhookQuota: null, webhookQuota: 1000 };

let pg: Child;
const adminUrl = (): string => `postgres://postgres:postgres@127.0.0.1:${pgPort}/postgres`;
let pgPort: number;
let temporal: Child & { address: string };
let temporalPort: number;
let worker: Child;
let databaseUrl: string;
let api: TestApi;
let cli: string;

const workerEnv = (): Record<string, string> => ({
  DATABASE_URL: databaseUrl,
  TEMPORAL_ADDRESS: temporal.address,
  TEMPORAL_TASK_QUEUE: TASK_QUEUE,
  // Retries after 2.5 ms, 150 ms, 0.9 s, 3.6 s, 9 s...: an outage of seconds spans several attempts.
  WEBHOOK_RETRY_SCALE: '0.0005',
});

/** PostgreSQL in its own process (scripts/postgres-server.ts), so the case can stop and restart it. */
async function startPostgres(): Promise<void> {
  pg = startChild({
    name: 'faults-postgres',
    ...nodeTs('scripts/postgres-server.ts'),
    args: [...nodeTs('scripts/postgres-server.ts').args, path.join(STACK_DIR, 'postgres'), String(pgPort)],
    logFile: path.join(LOG_DIR, 'postgres.log'),
  });
  await waitFor(
    'the fault suite PostgreSQL',
    async () => {
      if (pg.process.exitCode !== null) throw new Error(`postgres-server exited: ${pg.output().slice(-2000)}`);
      if (!pg.output().includes('ready ')) throw new Error('not ready');
    },
    120_000,
  );
}

async function startTemporal(): Promise<void> {
  temporal = await startTemporalDevServer(cli, {
    dbFile: path.join(STACK_DIR, 'temporal.sqlite'),
    port: temporalPort,
    logFile: path.join(LOG_DIR, 'temporal.log'),
    log: () => undefined,
  });
}

beforeAll(async () => {
  fs.rmSync(STACK_DIR, { recursive: true, force: true });
  fs.mkdirSync(LOG_DIR, { recursive: true });
  [pgPort, temporalPort] = [await freePort(), await freePort()];
  await startPostgres();
  databaseUrl = await ensureDatabase(adminUrl(), 'crm_faults', true);
  await migrateLatest(databaseUrl, () => undefined);
  cli = await ensureTemporalCli(() => undefined);
  await startTemporal();
  worker = startChild({ name: 'faults-worker', ...workerFromSources(), env: workerEnv(), logFile: path.join(LOG_DIR, 'worker.log') });
  await waitForWorker(worker);
  // Limits raised: the cases send more cold messages per key than a minute allows.
  api = await startApi({ config: { databaseUrl, temporalAddress: temporal.address, taskQueue: TASK_QUEUE, rateLimitScale: 100 } });
}, 180_000);

const exited = (child: Child): boolean => child.process.exitCode !== null || child.process.signalCode !== null;

/** What a case leaves running (receivers, load loops, an API process) is stopped even when it fails. */
const cleanups: (() => Promise<unknown>)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup().catch(() => undefined);
});

afterAll(async () => {
  await api?.close();
  await worker?.stop();
  await temporal?.stop();
  await pg?.stop();
});

/** A webhook receiver on a fixed port that can be taken down and brought back; counts each event once per delivery id. */
async function startReceiver(port = 0) {
  const arrivals: { delivery: string; event: any }[] = [];
  let server: http.Server | undefined;
  const listen = (p: number) =>
    new Promise<number>((resolve) => {
      server = http.createServer((req, res) => {
        const chunks: Buffer[] = [];
        req.on('data', (c: Buffer) => chunks.push(c));
        req.on('end', () => {
          arrivals.push({ delivery: String(req.headers['x-service-delivery']), event: JSON.parse(Buffer.concat(chunks).toString()) });
          res.writeHead(200).end('ok');
        });
      });
      server.listen(p, '127.0.0.1', () => resolve((server!.address() as AddressInfo).port));
    });
  const bound = await listen(port);
  let listening = true;
  const receiver = {
    url: `http://127.0.0.1:${bound}/hook`,
    arrivals,
    down: async () => {
      if (!listening) return;
      listening = false;
      server!.closeAllConnections();
      await new Promise<void>((resolve) => server!.close(() => resolve()));
    },
    up: async () => {
      await listen(bound);
      listening = true;
    },
  };
  cleanups.push(receiver.down);
  return receiver;
}
type Receiver = Awaited<ReturnType<typeof startReceiver>>;

const callsTo = async (phone: string): Promise<number> =>
  ((await (await fetch(`${EMULATOR}/__emulator/calls?to=${phone}`)).json()) as { calls: unknown[] }).calls.length;

/** A connected Cloud API instance on the emulator with the approved template `welcome` the cases send. */
async function cloudInstanceWithTemplate(ws: Workspace): Promise<void> {
  const instance = await api.admin('POST', `/admin/v1/workspaces/${ws.id}/instances`, {
    name: 'Main',
    channel: 'whatsapp',
    provider: 'cloud',
    connected: true,
    config: { baseUrl: EMULATOR, phoneNumberId: `PN-faults-${ws.id.slice(0, 8)}`, accessToken: 'faults-token', appSecret: 'faults-secret' },
  });
  expect(instance.status).toBe(201);
  const template = await api.admin('POST', `/admin/v1/workspaces/${ws.id}/templates`, {
    instanceId: instance.body.data.id,
    name: 'welcome',
    language: 'pt_BR',
    variableCount: 1,
    status: 'approved',
  });
  expect(template.status).toBe(201);
}

const mobile = (): string => uniqueMobile('21');

async function subscribe(ws: Workspace, url: string, events: string[]): Promise<string> {
  const res = await api.request('POST', '/api/v1/webhooks', { key: ws.key, body: { url, events } });
  expect(res.status).toBe(201);
  return res.body.data.id;
}

/**
 * Every committed contact of the workspace reached the receiver as exactly one delivery of its
 * creation event (lead.created from the API, contact.created from a cold send); a delivery id may
 * arrive again only as a retry.
 */
const CREATED = ['lead.created', 'contact.created'];
async function expectEachContactDeliveredOnce(ws: Workspace, receiver: Receiver, timeoutMs = 60_000): Promise<number> {
  const contacts: string[] = await api.db('contacts').where({ workspace_id: ws.id }).pluck('id');
  await eventually(
    'every contact creation delivered',
    async () => {
      const seen = new Set(receiver.arrivals.filter((a) => CREATED.includes(a.event.event)).map((a) => a.event.contact_id));
      return contacts.every((id) => seen.has(id));
    },
    timeoutMs,
    200,
  );
  const deliveriesPerContact = new Map<string, Set<string>>();
  for (const a of receiver.arrivals.filter((x) => CREATED.includes(x.event.event))) {
    if (!deliveriesPerContact.has(a.event.contact_id)) deliveriesPerContact.set(a.event.contact_id, new Set());
    deliveriesPerContact.get(a.event.contact_id)!.add(a.delivery);
  }
  expect([...deliveriesPerContact.keys()].sort()).toEqual([...contacts].sort());
  for (const ids of deliveriesPerContact.values()) expect(ids.size).toBe(1);
  // Once for good, not only so far: each contact has one creation event in the outbox (written with
  // it), and what arrived for it is that event's one delivery to this receiver (unique per event and
  // subscription, so a re-dispatch after a lease expiry finds the same row, and its id).
  const events: { id: string; contact_id: string }[] = await api
    .db('outbox_events')
    .where({ workspace_id: ws.id, kind: 'webhook' })
    .whereIn('name', CREATED)
    .select('id', api.db.raw(`payload->>'contact_id' AS contact_id`));
  expect(events.map((e) => e.contact_id).sort()).toEqual([...contacts].sort());
  const rows: { event_id: string; id: string }[] = await api
    .db('webhook_deliveries as d')
    .join('webhook_subscriptions as s', 's.id', 'd.subscription_id')
    .where({ 'd.workspace_id': ws.id, 's.url': receiver.url })
    .whereIn(
      'd.event_id',
      events.map((e) => e.id),
    )
    .select('d.event_id', 'd.id');
  const contactOf = new Map(events.map((e) => [e.id, e.contact_id]));
  expect(rows.map((r) => `${contactOf.get(r.event_id)} ${r.id}`).sort()).toEqual(
    [...deliveriesPerContact].map(([contact, ids]) => `${contact} ${[...ids][0]}`).sort(),
  );
  return contacts.length;
}

interface Outcome {
  phone: string;
  status: number;
  code?: string;
  ms: number;
}

/** Lead upserts from `workers` loops until `stop()`: each answer recorded with its time. */
function leadLoad(ws: Workspace, workers = 4) {
  const outcomes: Outcome[] = [];
  let running = true;
  const loops = Array.from({ length: workers }, async () => {
    while (running) {
      const phone = mobile();
      const started = Date.now();
      const res = await api
        .request('POST', '/api/v1/leads', { key: ws.key, body: { phone, name: `Load ${phone}` } })
        .catch(() => ({ status: 0, body: undefined }));
      outcomes.push({ phone, status: res.status, code: res.body?.code, ms: Date.now() - started });
      await new Promise((r) => setTimeout(r, 20));
    }
  });
  const stop = async () => {
    running = false;
    await Promise.all(loops);
  };
  cleanups.push(stop);
  return { outcomes, stop };
}

const tally = (outcomes: Outcome[]): string =>
  Object.entries(
    outcomes.reduce<Record<string, number>>(
      (acc, o) => ((acc[`${o.status}${o.code ? ` ${o.code}` : ''}`] = (acc[`${o.status}${o.code ? ` ${o.code}` : ''}`] ?? 0) + 1), acc),
      {},
    ),
  )
    .map(([k, v]) => `${k}: ${v}`)
    .join(', ');

describe('PostgreSQL restarted during load', () => {
  it('answers 503 UNAVAILABLE while it is down, recovers by itself, and loses no committed lead or its delivery', async () => {
    const ws = await createWorkspace(api, { scopes: [...ALL_SCOPES], plan: UNLIMITED });
    const receiver = await startReceiver();
    await subscribe(ws, receiver.url, ['lead.created']);
    const load = leadLoad(ws);
    await eventually('some leads before the stop', async () => load.outcomes.filter((o) => o.status === 201).length >= 10, 30_000);

    await pg.stop();
    const downAt = Date.now();
    cleanups.push(async () => exited(pg) && (await startPostgres()));
    const before = load.outcomes.length;
    await eventually(
      'answers while PostgreSQL is down',
      async () => load.outcomes.slice(before).filter((o) => o.status === 503).length >= 8,
      40_000,
    );
    const duringDown = load.outcomes.slice(before);
    await startPostgres();
    const upAt = Date.now();
    const afterUp = load.outcomes.length;
    await eventually(
      'leads created again after the restart',
      async () => load.outcomes.slice(afterUp).filter((o) => o.status === 201).length >= 10,
      60_000,
    );
    await load.stop();

    report(
      `PostgreSQL down ${((upAt - downAt) / 1000).toFixed(1)} s; answers while down: ${tally(duringDown)}; slowest ${Math.max(...duringDown.map((o) => o.ms))} ms`,
    );
    report(`all answers: ${tally(load.outcomes)}`);
    // Only success or a clear 503 with the stable code: never a 500 or a hang.
    for (const o of load.outcomes) expect([201, 503]).toContain(o.status);
    for (const o of load.outcomes.filter((x) => x.status === 503)) expect(o.code).toBe('UNAVAILABLE');
    // "A prompt 503, never a hang" is the documented promise (docs/reliability.md), so a bound stays:
    // a generous one (answers are measured in milliseconds to a few seconds), far below a hang.
    expect(Math.max(...duringDown.map((o) => o.ms))).toBeLessThan(15_000);
    // Every lead the API confirmed is stored, once.
    const created = load.outcomes.filter((o) => o.status === 201).map((o) => o.phone);
    const stored: string[] = await api.db('contacts').where({ workspace_id: ws.id }).pluck('phone');
    expect(stored.filter((p) => created.includes(p)).sort()).toEqual([...created].sort());
    expect(new Set(stored).size).toBe(stored.length);
    // The dispatcher and the delivery activities rode out the restart: each stored lead delivered once.
    const delivered = await expectEachContactDeliveredOnce(ws, receiver);
    report(`${created.length} leads confirmed, ${stored.length} stored, ${delivered} delivered once each`);
    await receiver.down();
  }, 180_000);
});

describe('webhook receiver down for a while, then up', () => {
  it('delivers every event once, as attempts on one delivery id', async () => {
    const ws = await createWorkspace(api, { scopes: [...ALL_SCOPES], plan: UNLIMITED });
    const receiver = await startReceiver();
    const subscription = await subscribe(ws, receiver.url, ['lead.created']);
    await receiver.down();
    for (let i = 0; i < 10; i++)
      expect((await api.request('POST', '/api/v1/leads', { key: ws.key, body: { phone: mobile() } })).status).toBe(201);
    // Down long enough for the first attempts and a retry or two to fail.
    await eventually(
      'failed attempts while the receiver is down',
      async () => (await api.db('webhook_deliveries').where({ workspace_id: ws.id }).where('attempts', '>=', 2)).length === 10,
      30_000,
      100,
    );
    await receiver.up();
    const delivered = await expectEachContactDeliveredOnce(ws, receiver);
    // The receiver has answered each; the attempt that got the answer records it a moment later.
    const history = await eventually(
      'every delivery recorded as succeeded',
      async () => {
        const res = await api.request('GET', `/api/v1/webhooks/${subscription}/deliveries?limit=100`, { key: ws.key });
        return res.body.data.length === 10 && res.body.data.every((d: { status: string }) => d.status === 'succeeded') ? res : undefined;
      },
      20_000,
      100,
    );
    for (const d of history.body.data) expect(d).toMatchObject({ event: 'lead.created', status: 'succeeded' });
    const attempts = history.body.data.map((d: { attempts: number }) => d.attempts);
    for (const n of attempts) expect(n).toBeGreaterThanOrEqual(3);
    report(`receiver down, then up: ${delivered} events delivered once each; attempts per delivery ${attempts.join(',')}`);
    await receiver.down();
  }, 120_000);
});

describe('Temporal restarted during sends, deliveries and automation runs', () => {
  it('sends what the provider accepts at once while it is unreachable, hands the rest over once it returns, accepts inbound runs, and finishes everything after it returns', async () => {
    const ws = await createWorkspace(api, { scopes: [...ALL_SCOPES], plan: UNLIMITED });
    await cloudInstanceWithTemplate(ws);
    const receiver = await startReceiver();
    await subscribe(ws, receiver.url, CREATED);
    const automation = await api.request('POST', '/api/v1/automations', {
      key: ws.key,
      body: {
        name: 'Orders',
        trigger: { type: 'webhook_received', mapping: { externalId: 'order.id' } },
        actions: [{ type: 'create_task', title: 'Order {{webhook.order.id}}', dueInMinutes: 60 }],
      },
    });
    expect(automation.status).toBe(201);
    const hookPath = new URL(automation.body.data.webhookUrl).pathname;

    const send = (phone: string) =>
      api.request('POST', '/api/v1/messages', {
        key: ws.key,
        headers: { 'x-forwarded-for': uniqueIp(), 'Idempotency-Key': `faults-${phone}` },
        body: { phone, type: 'template', templateName: 'welcome', templateLanguage: 'pt_BR', templateVariables: ['Ana'] },
      });
    const inbound = (id: string) => api.request('POST', hookPath, { body: { order: { id } } });

    // Work under way when Temporal goes: sends waiting on their workflows, runs, and events to deliver.
    // The provider takes 2.5 s to answer them, so they are mid-call when Temporal goes: the worker
    // cannot report those activities' results, and their retries must not call the provider again.
    const beforePhones = Array.from({ length: 4 }, mobile);
    for (const phone of beforePhones) {
      await fetch(`${EMULATOR}/__emulator/script`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ to: phone, behaviour: 'ok', delayMs: 2500, times: 1 }),
      });
    }
    const beforeSends = beforePhones.map(send);
    const beforeRuns = await Promise.all(Array.from({ length: 5 }, (_, i) => inbound(`before-${ws.id}-${i}`)));
    for (const r of beforeRuns) expect(r.status).toBe(202);
    for (let i = 0; i < 5; i++)
      expect((await api.request('POST', '/api/v1/leads', { key: ws.key, body: { phone: mobile() } })).status).toBe(201);
    await eventually(
      'the sends reached the provider',
      async () => (await Promise.all(beforePhones.map(callsTo))).every((n) => n === 1),
      30_000,
      100,
    );

    await temporal.stop();
    report('Temporal dev server stopped');
    cleanups.push(async () => exited(temporal) && (await startTemporal()));
    // While it is away: a send the provider accepts at once needs no workflow (the API makes it);
    // one the provider throttles needs its workflow, so it is 409 IN_PROGRESS until Temporal is
    // back and the workers' sweep hands it over; reads and plain writes keep working.
    const downPhone = mobile();
    const t0 = Date.now();
    const downSend = await send(downPhone);
    const sendMs = Date.now() - t0;
    const heldPhone = mobile();
    await fetch(`${EMULATOR}/__emulator/script`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ to: heldPhone, behaviour: 'error', code: 131056, httpStatus: 429, times: 1 }),
    });
    const t2 = Date.now();
    const heldSend = await send(heldPhone);
    const heldMs = Date.now() - t2;
    const t1 = Date.now();
    const downRun = await inbound(`down-${ws.id}`);
    const runMs = Date.now() - t1;
    const read = await api.request('GET', '/api/v1/leads', { key: ws.key });
    const writeWhileDown = await api.request('POST', '/api/v1/leads', { key: ws.key, body: { phone: mobile() } });
    report(
      `while down: send ${downSend.status} in ${sendMs} ms; throttled send ${heldSend.status} ${heldSend.body?.code} in ${heldMs} ms; inbound ${downRun.status} ${downRun.body?.data?.status ?? downRun.body?.code} in ${runMs} ms; lead list ${read.status}; lead write ${writeWhileDown.status}`,
    );
    expect(downSend.status).toBe(201);
    expect(sendMs).toBeLessThan(12_000);
    expect(heldSend.status).toBe(409);
    expect(heldSend.body).toMatchObject({ code: 'IN_PROGRESS' });
    // "Within seconds" is the documented promise (docs/reliability.md), not the API's 30 s wait: a generous bound.
    expect(heldMs).toBeLessThan(12_000);
    // The receiver does not need Temporal to accept: the run and its start are recorded together.
    expect(downRun.status).toBe(202);
    expect(downRun.body.data).toMatchObject({ status: 'accepted' });
    // Accepted without Temporal, not after waiting for it: the run is recorded with the outbox row
    // that starts it. Its one action only writes to the database, so the worker's dispatcher may
    // already have carried it out without Temporal (completed; its row marked dispatched right
    // after); else it is still running with its row undispatched (the dispatcher backs off while
    // another row of the workspace needs Temporal). Never dispatched and still running: no
    // workflow can start yet.
    const runNow = await api.db('automation_runs').where({ workspace_id: ws.id, id: downRun.body.data.runId }).first('status');
    const [rowNow] = await api
      .db('outbox_events')
      .where({ workspace_id: ws.id, kind: 'trigger', name: 'webhook_received' })
      .whereRaw(`payload->>'runId' = ?`, [downRun.body.data.runId])
      .select('dispatched_at');
    expect(['running', 'completed']).toContain(runNow.status);
    if (rowNow.dispatched_at !== null) expect(runNow.status).toBe('completed');
    expect(read.status).toBe(200);
    expect(writeWhileDown.status).toBe(201);

    await startTemporal();
    report('Temporal dev server back (same SQLite file)');
    const afterPhones = Array.from({ length: 3 }, mobile);
    const afterSends = await Promise.all(afterPhones.map(send));
    for (const r of afterSends) expect(r.status).toBe(201);

    // Sends that were under way finish: the API answered 201, or 409 IN_PROGRESS and the key's replay says how it ended.
    const firstAnswers = await Promise.all(beforeSends);
    for (const [i, phone] of beforePhones.entries()) {
      const answer = firstAnswers[i];
      expect([201, 409, 503]).toContain(answer.status);
      if (answer.status === 503) continue; // the start itself met the outage: nothing was sent (checked below)
      await eventually(`the send to ${phone} settled`, async () => [200, 201].includes((await send(phone)).status), 60_000, 500);
    }
    for (const [i, phone] of beforePhones.entries()) expect(await callsTo(phone)).toBe(firstAnswers[i].status === 503 ? 0 : 1);
    for (const phone of afterPhones) expect(await callsTo(phone)).toBe(1);
    expect(await callsTo(downPhone)).toBe(1);
    // The throttled send: its workflow (started by the sweep) retried it once, and the provider accepted that one.
    await eventually('the throttled send settled', async () => (await send(heldPhone)).status === 200, 60_000, 1000);
    expect(await callsTo(heldPhone)).toBe(2);
    report(
      `sends: before the stop ${firstAnswers.map((a) => a.status).join(',')}; after the restart ${afterSends.map((a) => a.status).join(',')}; one provider call each`,
    );

    // Runs accepted before the stop and the one accepted while it was away complete, once each.
    const expected = [...Array.from({ length: 5 }, (_, i) => `before-${ws.id}-${i}`), `down-${ws.id}`].sort();
    const runs = await eventually(
      'the automation runs completed',
      async () => {
        const rows = await api.db('automation_runs').where({ workspace_id: ws.id }).select('external_id', 'status');
        return rows.length === expected.length && rows.every((r) => r.status === 'completed') ? rows : undefined;
      },
      60_000,
      200,
    );
    expect(runs.map((r) => r.external_id).sort()).toEqual(expected);
    const tasks: string[] = await api.db('tasks').where({ workspace_id: ws.id }).pluck('title');
    expect(tasks.sort()).toEqual(expected.map((id) => `Order ${id}`).sort());
    const delivered = await expectEachContactDeliveredOnce(ws, receiver);
    report(
      `${runs.length} runs completed once each; ${delivered} contact creations delivered once each (a cold send's contact.created included)`,
    );
    await receiver.down();
  }, 240_000);
});

describe('API process killed between business commits and workflow starts', () => {
  it('delivers every committed event and finishes a started send: the outbox and the workflow do not depend on the API process', async () => {
    const ws = await createWorkspace(api, { scopes: [...ALL_SCOPES], plan: UNLIMITED });
    await cloudInstanceWithTemplate(ws);
    const receiver = await startReceiver();
    await subscribe(ws, receiver.url, CREATED);

    const port = await freePort();
    const child = startChild({
      name: 'faults-api',
      ...nodeTs('api/server.ts'),
      env: { ...workerEnv(), PORT: String(port), PUBLIC_BASE_URL: `http://127.0.0.1:${port}`, RATE_LIMIT_SCALE: '100' },
      logFile: path.join(LOG_DIR, 'api.log'),
    });
    cleanups.push(() => child.stop());
    await waitForHttp(`http://127.0.0.1:${port}/health`, child);
    const post = (pathname: string, body: unknown, headers: Record<string, string> = {}) =>
      fetch(`http://127.0.0.1:${port}${pathname}`, {
        method: 'POST',
        headers: { authorization: `Bearer ${ws.key}`, 'content-type': 'application/json', ...headers },
        body: JSON.stringify(body),
      })
        .then((r) => r.status)
        .catch(() => 0);

    // A send whose workflow started: the API dies while it waits for the result.
    const phone = mobile();
    const sending = post(
      '/api/v1/messages',
      { phone, type: 'template', templateName: 'welcome', templateLanguage: 'pt_BR', templateVariables: ['Ana'] },
      { 'Idempotency-Key': `kill-${phone}` },
    );
    await eventually(
      'the send workflow started',
      async () => (await api.db('send_preparations').where({ workspace_id: ws.id }).first()) !== undefined,
      30_000,
      20,
    );
    // Lead writes in flight: some commit, some do not; the kill lands among them.
    const writes = Array.from({ length: 40 }, () => post('/api/v1/leads', { phone: mobile() }));
    await eventually(
      'some leads committed',
      async () => Number((await api.db('contacts').where({ workspace_id: ws.id }).count({ n: '*' }))[0].n) >= 5,
      30_000,
      5,
    );
    child.process.kill('SIGKILL');
    const statuses = await Promise.all(writes);
    await sending;
    await child.stop();
    report(
      `API killed with ${statuses.filter((s) => s === 201).length} of 40 lead writes answered 201, ${statuses.filter((s) => s === 0).length} cut off`,
    );

    const delivered = await expectEachContactDeliveredOnce(ws, receiver);
    // The send finishes without the API: the same key then replays its result.
    const replay = await eventually(
      'the send replayed',
      async () => {
        const r = await api.request('POST', '/api/v1/messages', {
          key: ws.key,
          headers: { 'Idempotency-Key': `kill-${phone}` },
          body: { phone, type: 'template', templateName: 'welcome', templateLanguage: 'pt_BR', templateVariables: ['Ana'] },
        });
        return r.status === 200 ? r : undefined;
      },
      60_000,
      500,
    );
    expect(replay.body.data).toMatchObject({ status: 'sent' });
    expect(await callsTo(phone)).toBe(1);
    report(`after the kill: ${delivered} committed leads delivered once each; the started send completed with one provider call`);
    await receiver.down();
  }, 180_000);
});
