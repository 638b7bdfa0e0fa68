/**
 * One tenant cannot slow the others down through the work every tenant shares: the worker's
 * outbox dispatcher (webhook deliveries and automation triggers) and its first-attempt slots.
 *
 * The attacker does what one workspace's API key allows: a subscriber that answers every webhook
 * only after 9.5 s, 100-deal batches every few seconds, and 3,000 automations that every one of
 * those deals triggers. Meanwhile the victim, another workspace, creates a lead and a deal now and
 * then: its `lead.created` must reach its receiver, and its automation's run must have started (its
 * workflow exists in Temporal), within 2 s every time (the p99 of the target, over every sample taken).
 */
import path from 'node:path';
import { Client, Connection } from '@temporalio/client';
import { runWorkflowId } from '../../domain/automations/automations';
import {
  Child,
  ensureDatabase,
  ensureTemporalCli,
  freePort,
  migrateLatest,
  workerFromSources,
  ROOT,
  startChild,
  startTemporalDevServer,
  waitForWorker,
} from '../../scripts/stack';
import { createKey, createWorkspace, eventually, Receiver, startApi, startReceiver, TestApi, Workspace } from '../helpers';
import { uniquePhone } from './workspace-fixture';

// A database, a Temporal dev server and a worker (dispatcher included) of this file's own: the
// flood it makes would otherwise land on the worker and the Temporal server every other test file
// shares, and their load on this file's measurements.
const TASK_QUEUE = 'crm-fairness';
const LOG_DIR = path.join(process.env.TEST_STACK_DIR ? path.resolve(process.env.TEST_STACK_DIR) : path.join(ROOT, '.data', 'test'), 'logs');

let api: TestApi;
let temporalServer: Child & { address: string };
let worker: Child;
let receiver: Receiver;
let connection: Connection;
let temporal: Client;
beforeAll(async () => {
  const databaseUrl = await ensureDatabase(process.env.TEST_ADMIN_DATABASE_URL!, 'crm_fairness', true);
  await migrateLatest(databaseUrl, () => undefined);
  temporalServer = await startTemporalDevServer(await ensureTemporalCli(() => undefined), {
    port: await freePort(),
    logFile: path.join(LOG_DIR, 'temporal-fairness.log'),
    log: () => undefined,
  });
  const queues = { TEMPORAL_TASK_QUEUE: TASK_QUEUE, TEMPORAL_WEBHOOK_TASK_QUEUE: `${TASK_QUEUE}-webhooks` };
  worker = startChild({
    name: 'fairness-worker',
    ...workerFromSources(),
    env: { DATABASE_URL: databaseUrl, TEMPORAL_ADDRESS: temporalServer.address, ...queues },
    logFile: path.join(LOG_DIR, 'worker-fairness.log'),
  });
  api = await startApi({
    config: {
      databaseUrl,
      temporalAddress: temporalServer.address,
      taskQueue: TASK_QUEUE,
      webhookTaskQueue: queues.TEMPORAL_WEBHOOK_TASK_QUEUE,
    },
  });
  receiver = await startReceiver();
  connection = await Connection.connect({ address: temporalServer.address });
  temporal = new Client({ connection, namespace: api.config.temporalNamespace });
  await waitForWorker(worker);
}, 180_000);
afterAll(async () => {
  await worker?.stop();
  await api?.close();
  await receiver?.close();
  await connection?.close();
  await temporalServer?.stop();
});

const ATTACKER_AUTOMATIONS = 3_000;
/**
 * The documented promise itself (docs/reliability.md, "Tenants": the victim's lead.created and runs
 * within 2 s in every sample under the flood; measured 20-130 ms and 0.2-0.8 s), so this elapsed-time
 * bound stays: it is what the test proves, and it is ten times the measured figures.
 */
const VICTIM_TARGET_MS = 2_000;

/** Runs `fn` for each of `items`, `width` at a time. */
async function inParallel<T>(items: T[], width: number, fn: (item: T) => Promise<void>): Promise<void> {
  let next = 0;
  await Promise.all(
    Array.from({ length: width }, async () => {
      while (next < items.length) await fn(items[next++]);
    }),
  );
}

const p99 = (samples: number[]): number =>
  [...samples].sort((a, b) => a - b)[Math.min(samples.length - 1, Math.ceil(samples.length * 0.99) - 1)];

async function call(ws: Workspace | string, method: string, path: string, body?: unknown) {
  const res = await api.request(method, path, { key: typeof ws === 'string' ? ws : ws.key, body });
  if (res.status >= 300) throw new Error(`${method} ${path}: ${res.status} ${res.text}`);
  return res.body.data;
}

describe('fair dispatch', () => {
  it("keeps another workspace's webhooks and automation runs within 2 s while one workspace floods the dispatcher", async () => {
    const scopes = ['webhooks:write', 'leads:write', 'deals:write', 'notes:write', 'automations:write', 'automations:read'] as const;
    const attacker = await createWorkspace(api, { name: 'attacker', scopes: [...scopes], plan: { automationLimit: ATTACKER_AUTOMATIONS } });
    const victim = await createWorkspace(api, { name: 'victim', scopes: [...scopes] });
    // Keys allow at most 1,000 requests (batch items) a minute: the attacker holds several.
    const attackerKeys = [
      attacker.key,
      ...(await Promise.all(Array.from({ length: 5 }, () => createKey(api, attacker.id, [...scopes], { rateLimitPerMinute: 1000 })))).map(
        (k) => k.key,
      ),
    ];
    let turn = 0;
    const nextKey = () => attackerKeys[turn++ % attackerKeys.length];
    const pipelineOf = async (ws: Workspace) => {
      const res = await api.admin('POST', `/admin/v1/workspaces/${ws.id}/pipelines`, {
        name: 'Sales',
        stages: [{ name: 'New' }],
        customFields: [],
      });
      expect(res.status).toBe(201);
      return res.body.data.id as string;
    };
    const [attackerPipeline, victimPipeline] = await Promise.all([pipelineOf(attacker), pipelineOf(victim)]);

    // The attacker: a receiver that holds every delivery 9.5 s (a 2xx in time: never retried), and
    // 3,000 automations that each new deal triggers.
    await call(attacker, 'POST', '/api/v1/webhooks', { url: `${receiver.url}/slow/9500/attacker`, events: ['*'] });
    await inParallel(
      Array.from({ length: ATTACKER_AUTOMATIONS }, (_, i) => i),
      16,
      async (i) => {
        await call(nextKey(), 'POST', '/api/v1/automations', {
          name: `flood ${i}`,
          trigger: { type: 'card_created' },
          actions: [{ type: 'wait', seconds: 1 }],
        });
      },
    );
    const attackerContact = await call(attacker, 'POST', '/api/v1/leads', { phone: uniquePhone(), name: 'Flood' });

    // The victim: its own receiver path, and one automation on new deals that adds a note.
    await call(victim, 'POST', '/api/v1/webhooks', { url: `${receiver.url}/ok/victim`, events: ['lead.created'] });
    const victimFlow = await call(victim, 'POST', '/api/v1/automations', {
      name: 'welcome',
      trigger: { type: 'card_created' },
      actions: [{ type: 'add_note', body: 'new deal' }],
    });

    let flooding = true;
    const batches: number[] = [];
    const flood = (async () => {
      while (flooding) {
        const started = Date.now();
        const deals = Array.from({ length: 100 }, (_, i) => ({
          contactId: attackerContact.id,
          pipeline: attackerPipeline,
          name: `flood ${batches.length}-${i}`,
        }));
        const res = await api.request('POST', '/api/v1/deals/batch', { key: nextKey(), body: { deals } });
        batches.push(res.status);
        await new Promise((resolve) => setTimeout(resolve, Math.max(0, 3_000 - (Date.now() - started))));
      }
    })();

    const webhookMs: number[] = [];
    const runMs: number[] = [];
    try {
      // Let the flood build up (two batches in, their deliveries holding slots) before sampling.
      await eventually('the flood to be under way', async () => batches.length >= 2, 30_000, 100);
      for (let i = 0; i < 15; i++) {
        const phone = uniquePhone();
        const sent = Date.now();
        const lead = await call(victim, 'POST', '/api/v1/leads', { phone, name: `Victim ${i}` });
        const deal = await call(victim, 'POST', '/api/v1/deals', { contactId: lead.id, pipeline: victimPipeline });
        const dealAt = Date.now();
        await Promise.all([
          eventually(`victim lead.created ${i}`, async () => receiver.to('/ok/victim').find((r) => r.json?.contact_id === lead.id)).then(
            (r) => webhookMs.push(r.at - sent),
          ),
          eventually(
            `victim run ${i} to start`,
            async () => {
              const run = await api
                .db('automation_runs')
                .where({ workspace_id: victim.id, automation_id: victimFlow.id })
                .whereRaw(`trigger->>'dealId' = ?`, [deal.id])
                .first('event_id', 'status');
              if (!run) return false;
              // Carried out by the dispatcher (a run of database actions: activities/automations.ts createRunHere) ...
              if (run.status !== 'running') return true;
              // ... or started: its workflow exists in Temporal (the dispatcher starts it right after recording the run).
              return temporal.workflow
                .getHandle(runWorkflowId(victim.id, victimFlow.id, { eventId: run.event_id }))
                .describe()
                .then(
                  () => true,
                  () => false,
                );
            },
            30_000,
            20,
          ).then(() => runMs.push(Date.now() - dealAt)),
        ]);
        await new Promise((resolve) => setTimeout(resolve, 1_000));
      }
    } finally {
      flooding = false;
      await flood;
    }

    console.log(`victim webhook ms: ${webhookMs.join(' ')}; run ms: ${runMs.join(' ')}; attacker batches: ${batches.length}`);
    const attackerIds = receiver.to('/slow/9500/attacker').map((r) => String(r.headers['x-service-delivery']));
    console.log(`attacker deliveries received: ${attackerIds.length}, distinct: ${new Set(attackerIds).size}`);
    // The flood was real: every batch accepted, the attacker's slow deliveries and its runs under way.
    expect(batches.every((s) => s === 200)).toBe(true);
    expect(batches.length).toBeGreaterThanOrEqual(5);
    const attackerRuns = await api.db('automation_runs').where({ workspace_id: attacker.id }).count({ n: '*' }).first();
    expect(Number(attackerRuns!.n)).toBeGreaterThan(100);
    expect(receiver.to('/slow/9500/attacker').length).toBeGreaterThan(16);

    expect({ webhookP99: p99(webhookMs) <= VICTIM_TARGET_MS, runP99: p99(runMs) <= VICTIM_TARGET_MS, webhookMs, runMs }).toMatchObject({
      webhookP99: true,
      runP99: true,
    });

    // The victim's own run completed as usual.
    await eventually(
      'the victim runs to complete',
      async () => {
        const open = await api.db('automation_runs').where({ workspace_id: victim.id }).whereNot({ status: 'completed' }).first('id');
        return !open;
      },
      120_000,
      500,
    );
  }, 300_000);
});
