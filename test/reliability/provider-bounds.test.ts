/**
 * What one send can make the worker spend on the provider side (issue 32, "no tenant can slow down
 * the others"): a 100 MB document through a web gateway instance, and a provider that answers a
 * megabyte of hostile text, each leave the worker's memory within 100 MB of its idle size and its
 * event loop responsive (no delay over 200 ms).
 *
 * The test runs its own worker process on its own task queue, its own API starting sends there,
 * so what it measures is this test's sends and nothing the other suites make the shared worker do.
 * Memory is the worker's VmRSS (/proc), sampled from here; the event loop's delay is what the
 * worker itself reports (WORKER_LOOP_STATS_FILE, workers/main.ts), a gap in its reports counting
 * as a delay too (a frozen worker reports nothing).
 */
import { createHash, randomBytes } from 'node:crypto';
import fs from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import { Child, ROOT, startChild, waitForWorker, workerFromSources } from '../../scripts/stack';
import { MEDIA_LIMITS } from '../../domain/messaging/sending';
import { createKey, createWorkspace, eventually, expectError, seedContact, startApi, TestApi, Workspace } from '../helpers';
import { uniquePhone } from './workspace-fixture';

const EMULATOR = process.env.EMULATOR_URL!;
const TASK_QUEUE = `crm-provider-bounds-${process.pid}`;
const LOG_DIR = path.join(process.env.TEST_STACK_DIR ? path.resolve(process.env.TEST_STACK_DIR) : path.join(ROOT, '.data', 'test'), 'logs');
const STATS_FILE = path.join(LOG_DIR, `worker-${TASK_QUEUE}-loop.jsonl`);
/** How often the worker writes a stats line (workers/main.ts). */
const STATS_EVERY_MS = 100;

const MB = 1024 * 1024;
/** The largest document a send may carry. */
const DOCUMENT_BYTES = MEDIA_LIMITS.document;
const HOSTILE_BYTES = 1 * MB;
/**
 * The documented promises (docs/reliability.md, "Resource bounds"): the worker within 100 MB of its
 * idle memory and no event-loop delay over 200 ms (measured 60 to 130 ms; 2.3 s and a 30 s freeze
 * before). The delay is the worker's own measurement of its loop, not a time this test takes.
 */
const RSS_MARGIN = 100 * MB;
const MAX_LAG_MS = 200;

let api: TestApi;
let worker: Child;
let ws: Workspace;
let media: http.Server;
let mediaUrl: string;
let hostile: http.Server;
let hostileUrl: string;
/** What the media server served, by path: the bytes and their SHA-256, once fully written. */
const served = new Map<string, { bytes: number; sha256: string }>();
/** Every request the media server got (`GET /doc/...`). */
const mediaHits: string[] = [];

/** The worker's resident memory now. */
function rss(pid: number): number {
  const status = fs.readFileSync(`/proc/${pid}/status`, 'utf8');
  const kb = /^VmRSS:\s+(\d+) kB/m.exec(status);
  if (!kb) throw new Error(`no VmRSS for ${pid}`);
  return Number(kb[1]) * 1024;
}

/**
 * Runs `work` while sampling the worker's RSS every 20 ms; then its worst event-loop delay over
 * that time, from the worker's own lines, a gap between lines (or since the last one) counting as
 * a delay.
 */
async function measure<T>(work: () => Promise<T>): Promise<{ result: T; peakRss: number; worstLagMs: number }> {
  const pid = worker.process.pid!;
  const started = Date.now();
  let peakRss = rss(pid);
  const sampler = setInterval(() => {
    peakRss = Math.max(peakRss, rss(pid));
  }, 20);
  let result: T;
  try {
    result = await work();
  } finally {
    clearInterval(sampler);
  }
  peakRss = Math.max(peakRss, rss(pid));
  const ended = Date.now();
  const lines = fs
    .readFileSync(STATS_FILE, 'utf8')
    .split('\n')
    .filter(Boolean)
    .map((line) => JSON.parse(line) as { t: number; lagMaxMs: number })
    .filter((line) => line.t >= started);
  let worstLagMs = 0;
  let previous = started;
  for (const line of lines) {
    worstLagMs = Math.max(worstLagMs, line.lagMaxMs, line.t - previous - STATS_EVERY_MS);
    previous = line.t;
  }
  worstLagMs = Math.max(worstLagMs, ended - previous - STATS_EVERY_MS);
  return { result, peakRss, worstLagMs };
}

/** The worker's resident memory at rest: the median of a second's samples. */
async function idleRss(): Promise<number> {
  const samples: number[] = [];
  for (let i = 0; i < 20; i++) {
    samples.push(rss(worker.process.pid!));
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  return samples.sort((a, b) => a - b)[samples.length >> 1];
}

const report = (message: string): void => console.log(`[provider-bounds] ${message}`);

/** Within 100 MB of the idle size, no event-loop delay over 200 ms (both figures shown on failure). */
function expectBounded(what: string, idle: number, peakRss: number, worstLagMs: number): void {
  const aboveIdleMB = Math.round((peakRss - idle) / MB);
  const figures = { idleMB: Math.round(idle / MB), aboveIdleMB, worstLagMs };
  report(`${what}: worker idle ${figures.idleMB} MB, peak ${aboveIdleMB} MB above idle, worst event-loop delay ${worstLagMs} ms`);
  expect({ ...figures, withinMemory: peakRss - idle < RSS_MARGIN, responsive: worstLagMs < MAX_LAG_MS }).toEqual({
    ...figures,
    withinMemory: true,
    responsive: true,
  });
}

async function instance(provider: 'cloud' | 'web', name: string, baseUrl: string): Promise<string> {
  const res = await api.admin('POST', `/admin/v1/workspaces/${ws.id}/instances`, {
    name,
    channel: 'whatsapp',
    provider,
    connected: true,
    config: {
      baseUrl,
      phoneNumberId: `PN-bounds-${name}-${ws.id.slice(0, 8)}`,
      accessToken: 'token',
      appSecret: 's',
      instanceName: `bounds-${name}-${ws.id.slice(0, 8)}`,
    },
  });
  expect(res.status).toBe(201);
  return res.body.data.id as string;
}

/** A cold send with its own key (cold sends are limited per key and minute). */
async function send(body: Record<string, unknown>) {
  const key = (await createKey(api, ws.id, ['conversations:send'], { rateLimitPerMinute: 1000 })).key;
  return api.request('POST', '/api/v1/messages', { key, body });
}

const callsTo = async (to: string): Promise<any[]> =>
  ((await (await fetch(`${EMULATOR}/__emulator/calls?to=${to}`)).json()) as { calls: any[] }).calls;

beforeAll(async () => {
  fs.mkdirSync(LOG_DIR, { recursive: true });
  fs.rmSync(STATS_FILE, { force: true });
  worker = startChild({
    name: 'bounds-worker',
    ...workerFromSources(),
    // No outbox dispatcher: it would take the other suites' events onto this worker.
    env: { TEMPORAL_TASK_QUEUE: TASK_QUEUE, OUTBOX_DISPATCHER: 'false', WORKER_LOOP_STATS_FILE: STATS_FILE },
    logFile: path.join(LOG_DIR, `worker-${TASK_QUEUE}.log`),
  });

  // Files of any size, generated as they are written (GET /doc/<bytes>/<name>): 64 KiB random
  // blocks, each stamped with its index, so the hash proves every byte arrived in order.
  const block = randomBytes(64 * 1024);
  media = http.createServer((req, res) => {
    mediaHits.push(`${req.method} ${req.url}`);
    const match = /^\/doc\/(\d+)\/[\w.-]+$/.exec(req.url ?? '');
    if (!match) {
      res.writeHead(404).end();
      return;
    }
    const total = Number(match[1]);
    res.writeHead(200, { 'content-type': 'application/pdf', 'content-length': String(total) });
    if (req.method === 'HEAD') {
      res.end();
      return;
    }
    const hash = createHash('sha256');
    let sent = 0;
    let index = 0;
    const pump = (): void => {
      while (sent < total) {
        const chunk = Buffer.from(block.subarray(0, Math.min(block.length, total - sent)));
        if (chunk.length >= 4) chunk.writeUInt32BE(index++ % 2 ** 32, 0);
        hash.update(chunk);
        sent += chunk.length;
        if (!res.write(chunk)) {
          res.once('drain', pump);
          return;
        }
      }
      served.set(req.url!, { bytes: sent, sha256: hash.digest('hex') });
      res.end();
    };
    res.on('close', () => (sent = total + 1));
    pump();
  });
  // A provider that answers every request with a megabyte of `<` (no `>`): the shape that made
  // the old excerpt's regex quadratic. The status is the path's first segment.
  hostile = http.createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      const status = Number(/^\/(\d{3})\//.exec(req.url ?? '')?.[1] ?? 500);
      res.writeHead(status, { 'content-type': 'text/html', 'content-length': String(HOSTILE_BYTES) }).end('<'.repeat(HOSTILE_BYTES));
    });
  });
  const listen = async (server: http.Server) => {
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  };
  mediaUrl = await listen(media);
  hostileUrl = await listen(hostile);

  // The media server is on this machine: an API (and a worker, from the suite's environment) that allow private addresses.
  api = await startApi({ config: { taskQueue: TASK_QUEUE, allowPrivateUrls: true } });
  ws = await createWorkspace(api, { scopes: ['conversations:send'], name: 'provider-bounds' });
  await waitForWorker(worker);
}, 180_000);

afterAll(async () => {
  await worker?.stop();
  for (const server of [media, hostile]) {
    server?.closeAllConnections();
    await new Promise((resolve) => server?.close(resolve));
  }
  await api?.close();
});

it('a 100 MB document through a web gateway: streamed from the media URL to the gateway, the worker within 100 MB of idle and responsive', async () => {
  const webId = await instance('web', 'web', EMULATOR);
  // Warm up the path (code loaded, pools and buffers made) before the idle size is taken.
  const warm = uniquePhone();
  expect(
    (await send({ phone: warm, instanceId: webId, type: 'document', mediaUrl: `${mediaUrl}/doc/${MB}/warm.pdf`, fileName: 'warm.pdf' }))
      .status,
  ).toBe(201);
  const idle = await idleRss();

  const phone = uniquePhone();
  const url = `${mediaUrl}/doc/${DOCUMENT_BYTES}/contract.pdf`;
  const {
    result: res,
    peakRss,
    worstLagMs,
  } = await measure(async () => {
    const answer = await send({ phone, instanceId: webId, type: 'document', mediaUrl: url, fileName: 'contract.pdf' });
    // On a slow machine the API may stop waiting (409 IN_PROGRESS) while the send carries on.
    if (answer.status === 409 && answer.body?.code === 'IN_PROGRESS')
      await eventually(
        'the gateway to accept the document',
        async () => (await callsTo(phone)).find((c) => c.status === 201),
        120_000,
        200,
      );
    return answer;
  });
  expect([201, 409]).toContain(res.status);
  expectBounded('100 MB document', idle, peakRss, worstLagMs);

  const file = served.get(`/doc/${DOCUMENT_BYTES}/contract.pdf`);
  expect(file?.bytes).toBe(DOCUMENT_BYTES);
  const calls = await callsTo(phone);
  expect(calls).toHaveLength(1);
  expect(calls[0]).toMatchObject({
    api: 'web',
    status: 201,
    media: { kind: 'base64', bytes: DOCUMENT_BYTES, sha256: file!.sha256, mimetype: 'application/pdf' },
    body: { mediatype: 'document', mimetype: 'application/pdf', fileName: 'contract.pdf', media: `[base64, ${DOCUMENT_BYTES} bytes]` },
  });
}, 180_000);

it('a provider answering 1 MB of `<` (Cloud API 400, web gateway 500): read up to a cap, excerpted in the error, the worker within 100 MB of idle and responsive', async () => {
  const cloudId = await instance('cloud', 'cloud-hostile', `${hostileUrl}/400`);
  const webId = await instance('web', 'web-hostile', `${hostileUrl}/500`);
  // A Cloud API conversation whose 24-hour window is open (the contact wrote a moment ago).
  const contact = await seedContact(api, ws.id, { phone: uniquePhone(), name: 'Hostile' });
  const [conversation] = await api
    .db('conversations')
    .insert({
      workspace_id: ws.id,
      contact_id: contact.id,
      instance_id: cloudId,
      channel: 'whatsapp',
      last_message_at: new Date(),
      last_inbound_at: new Date(),
    })
    .returning('id');
  const idle = await idleRss();

  const { result, peakRss, worstLagMs } = await measure(() =>
    Promise.all([
      api.request('POST', `/api/v1/conversations/${conversation.id}/messages`, { key: ws.key, body: { text: 'Oi' } }),
      send({ phone: uniquePhone(), instanceId: webId, type: 'text', text: 'Oi' }),
    ]),
  );
  expectBounded('1 MB hostile answers', idle, peakRss, worstLagMs);
  const [cloud, web] = result;
  // Refused (400) at once; unavailable (500) after the send's retries: both say what the provider answered.
  expectError(cloud, 502, 'SEND_FAILED');
  expect(cloud.body.error).toMatch(/WhatsApp said \(HTTP 400\): <{50,}/);
  expectError(web, 502, 'SEND_FAILED');
  expect(web.body.error).toMatch(/The gateway said \(HTTP 500\): <{50,}/);
  for (const answer of [cloud, web]) expect(answer.body.error.length).toBeLessThan(1000);
}, 180_000);

it('a streamed media send the gateway refused (5xx) is retried with a new download: the file cannot be replayed', async () => {
  const webId = await instance('web', 'web-retry', EMULATOR);
  const phone = uniquePhone();
  await fetch(`${EMULATOR}/__emulator/script`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ to: phone, behaviour: 'error', httpStatus: 503, times: 1 }),
  });
  const path = `/doc/${3 * MB + 1}/retried.pdf`;
  const res = await send({ phone, instanceId: webId, type: 'document', mediaUrl: `${mediaUrl}${path}`, fileName: 'retried.pdf' });
  expect(res.status).toBe(201);
  expect(mediaHits.filter((hit) => hit.endsWith(path))).toEqual([`HEAD ${path}`, `GET ${path}`, `GET ${path}`]);
  const calls = await callsTo(phone);
  expect(calls.map((c) => c.status)).toEqual([503, 201]);
  for (const call of calls)
    expect(call.media).toEqual({ kind: 'base64', bytes: 3 * MB + 1, sha256: served.get(path)!.sha256, mimetype: 'application/pdf' });
}, 120_000);
