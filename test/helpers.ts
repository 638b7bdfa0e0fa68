/**
 * Test harness: a real API (our Koa app on a real port) against the suite's PostgreSQL and
 * Temporal, and small clients that speak HTTP to it like an integrator would.
 */
import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Writable } from 'node:stream';
import type { temporal } from '@temporalio/proto';
import pino from 'pino';
import { createApp } from '../api/app';
import type { AnyRoute } from '../api/route';
import { loadConfig, Config, sendTaskQueueOf } from '../domain/platform/config';
import { createServiceDb, Db } from '../domain/platform/db';
import { REDACT_PATHS } from '../domain/platform/logger';
import { temporalClientFactory } from '../domain/platform/temporal';
import type { Scope } from '../domain/access/scopes';
import { setNow } from '../domain/kernel/clock';

export interface ApiResponse<T = any> {
  status: number;
  headers: Headers;
  body: T;
  text: string;
}

export interface RequestOptions {
  key?: string;
  body?: unknown;
  rawBody?: string;
  headers?: Record<string, string>;
}

export interface TestApi {
  url: string;
  db: Db;
  config: Config;
  logs: string[];
  request: <T = any>(method: string, path: string, options?: RequestOptions) => Promise<ApiResponse<T>>;
  admin: <T = any>(method: string, path: string, body?: unknown) => Promise<ApiResponse<T>>;
  close: () => Promise<void>;
}

// Jest reloads this module for every test file, and one worker process runs several files: each
// load starts at a random point of all 2^24 addresses of 10.0.0.0/8. (A block of 100,000 per pid
// modulo 150 put every file of a worker in one block, where a run's few hundred IPs collided: a
// counting test met an IP another file had used two minutes before, and its total was one over.)
const IP_SPACE = 2 ** 24;
let ipCounter = Math.floor(Math.random() * IP_SPACE);
/** A distinct client IP per test so per-IP limits of parallel test files never collide. */
export function uniqueIp(): string {
  ipCounter += 1;
  const n = ipCounter % IP_SPACE;
  return `10.${(n >> 16) & 255}.${(n >> 8) & 255}.${n & 255}`;
}

export async function startApi(options: { extraRoutes?: AnyRoute[]; config?: Partial<Config> } = {}): Promise<TestApi> {
  // A task queue of the test's own (served by its own worker) takes its sends' queue with it.
  const ownQueue = options.config?.taskQueue ? { sendTaskQueue: sendTaskQueueOf(options.config.taskQueue) } : {};
  const config = { ...loadConfig(), trustProxy: 1, ...ownQueue, ...options.config };
  const db = createServiceDb(config, 10);
  const logs: string[] = [];
  const sink = new Writable({
    write(chunk, _enc, cb) {
      logs.push(chunk.toString());
      cb();
    },
  });
  const logger = pino({ level: 'info', redact: { paths: REDACT_PATHS, censor: '[redacted]' } }, sink);
  const temporal = temporalClientFactory(config);
  const app = createApp({ config, db, logger, temporal: temporal.get }, { extraRoutes: options.extraRoutes });
  const server: Server = await new Promise((resolve) => {
    const s = app.listen(0, '127.0.0.1', () => resolve(s));
  });
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  const request = async <T>(method: string, path: string, opts: RequestOptions = {}): Promise<ApiResponse<T>> => {
    // Each request comes from its own client IP, so per-IP limits never couple unrelated tests;
    // tests of the IP limits set X-Forwarded-For themselves.
    const headers: Record<string, string> = { 'x-forwarded-for': uniqueIp(), ...opts.headers };
    if (opts.key) headers.authorization = `Bearer ${opts.key}`;
    let body: string | undefined = opts.rawBody;
    if (opts.body !== undefined) {
      body = JSON.stringify(opts.body);
      headers['content-type'] ??= 'application/json';
    }
    const res = await fetch(url + path, { method, headers, body, redirect: 'manual' });
    const text = await res.text();
    let parsed: unknown;
    try {
      parsed = text ? JSON.parse(text) : undefined;
    } catch {
      parsed = undefined;
    }
    return { status: res.status, headers: res.headers, body: parsed as T, text };
  };

  return {
    url,
    db,
    config,
    logs,
    request,
    admin: (method, path, body) => request(method, path, { body, headers: { authorization: `Bearer ${config.adminToken}` } }),
    close: async () => {
      await new Promise<void>((resolve) => server.close(() => resolve()));
      await Promise.allSettled([db.destroy(), temporal.close()]);
    },
  };
}

export interface Workspace {
  id: string;
  key: string;
  keyId: string;
}

/** A new workspace (with an optional plan) and an API key with the given scopes. */
export async function createWorkspace(
  api: TestApi,
  options: { scopes?: Scope[]; plan?: Record<string, unknown>; rateLimitPerMinute?: number; name?: string } = {},
): Promise<Workspace> {
  const ws = await api.admin('POST', '/admin/v1/workspaces', { name: options.name ?? 'Test workspace', plan: options.plan });
  expect(ws.status).toBe(201);
  const key = await createKey(api, ws.body.data.id, options.scopes ?? [], { rateLimitPerMinute: options.rateLimitPerMinute ?? 1000 });
  return { id: ws.body.data.id, key: key.key, keyId: key.id };
}

export async function createKey(
  api: TestApi,
  workspaceId: string,
  scopes: Scope[],
  extra: { rateLimitPerMinute?: number; expiresAt?: string } = {},
): Promise<{ id: string; key: string }> {
  const res = await api.admin('POST', `/admin/v1/workspaces/${workspaceId}/api-keys`, { name: 'test key', scopes, ...extra });
  expect(res.status).toBe(201);
  return { id: res.body.data.id, key: res.body.data.key };
}

/** Asserts the flat error body `{ error, code, hint? }`. */
export function expectError(res: ApiResponse, status: number, code: string): void {
  expect({ status: res.status, code: res.body?.code }).toEqual({ status, code });
  expect(typeof res.body.error).toBe('string');
  expect(Object.keys(res.body).every((k) => ['error', 'code', 'hint'].includes(k))).toBe(true);
}

/** A contact created the way the CRM panel does (admin API), returned in the Lead shape. */
export async function seedContact(
  api: TestApi,
  workspaceId: string,
  input: { phone: string; name?: string; email?: string | null; tags?: string[] },
): Promise<{ id: string; name: string; phone: string; email: string | null }> {
  const res = await api.admin('POST', `/admin/v1/workspaces/${workspaceId}/contacts`, input);
  expect(res.status).toBe(201);
  return res.body.data;
}

/** A pipeline with stages in funnel order and custom fields, as `GET /api/v1/pipelines` lists it. */
export async function seedPipeline(
  api: TestApi,
  workspaceId: string,
  input: { name: string; stages?: string[]; customFields?: { key: string; label: string; type: string }[] },
): Promise<{ id: string; name: string; stages: { id: string; name: string; order: number }[] }> {
  const res = await api.admin('POST', `/admin/v1/workspaces/${workspaceId}/pipelines`, {
    name: input.name,
    stages: (input.stages ?? []).map((name) => ({ name })),
    customFields: input.customFields ?? [],
  });
  expect(res.status).toBe(201);
  return res.body.data;
}

export async function seedMember(api: TestApi, workspaceId: string, name: string): Promise<{ id: string; name: string }> {
  const res = await api.admin('POST', `/admin/v1/workspaces/${workspaceId}/members`, {
    name,
    email: `${name.replace(/\W+/g, '.').toLowerCase()}.${Math.random().toString(36).slice(2, 8)}@example.com`,
  });
  expect(res.status).toBe(201);
  return res.body.data;
}

/**
 * Counts the SQL statements the API's own pool runs while `fn` runs (for N+1 checks), or those of
 * them `counted` picks. By default data queries only: authentication and rate limits take a
 * statement or none (a high-rate key is served from the process, its counts flushed in the background).
 */
export async function countQueries(
  api: TestApi,
  fn: () => Promise<unknown>,
  counted: (sql: string) => boolean = (sql) => !sql.includes('rate_limit_counters'),
): Promise<number> {
  let count = 0;
  const listener = (query: { sql?: string }): void => {
    if (counted(query.sql ?? '')) count += 1;
  };
  api.db.on('query', listener);
  try {
    await fn();
  } finally {
    api.db.removeListener('query', listener);
  }
  return count;
}

/** Outbox rows of a workspace (oldest first), to prove events are recorded with the change. */
export async function outbox(
  api: TestApi,
  workspaceId: string,
  name?: string,
): Promise<{ kind: string; name: string; payload: any; depth: number }[]> {
  const q = api.db('outbox_events').where({ workspace_id: workspaceId }).orderBy('seq');
  if (name) q.where({ name });
  return q.select('kind', 'name', 'payload', 'depth');
}

/** Polls `probe` until it returns a truthy value (or throws after `timeoutMs` with `what`). */
export async function eventually<T>(
  what: string,
  probe: () => Promise<T | undefined | null | false>,
  timeoutMs = 20_000,
  everyMs = 50,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await probe();
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, everyMs));
  }
}

/** Waits until the worker's dispatcher took every outbox row of a workspace and no delivery of it is pending. */
export async function settleOutbox(api: TestApi, workspaceId: string, timeoutMs = 30_000): Promise<void> {
  await eventually(
    `the outbox of ${workspaceId} to be dispatched and its deliveries settled`,
    async () => {
      const [{ undispatched }] = (
        await api.db.raw(`SELECT count(*)::int AS undispatched FROM outbox_events WHERE workspace_id = ? AND dispatched_at IS NULL`, [
          workspaceId,
        ])
      ).rows;
      const [{ pending }] = (
        await api.db.raw(`SELECT count(*)::int AS pending FROM webhook_deliveries WHERE workspace_id = ? AND status = 'pending'`, [
          workspaceId,
        ])
      ).rows;
      return undispatched === 0 && pending === 0;
    },
    timeoutMs,
  );
}

export interface ReceivedWebhook {
  path: string;
  headers: Record<string, string | string[] | undefined>;
  /** The exact bytes received, as text. */
  raw: string;
  json: any;
  at: number;
}

export interface Receiver {
  url: string;
  received: ReceivedWebhook[];
  /** Requests to one path (the test's own). */
  to: (path: string) => ReceivedWebhook[];
  close: () => Promise<void>;
}

/**
 * A real HTTP receiver for outbound webhooks. The path says how it answers:
 * `/ok/...` 200; `/fail/<n>/...` 500 to the first n requests on that path, then 200;
 * `/status/<code>/...` always that status; `/redirect/...` 302 to `/ok/redirected/...`;
 * `/slow/<ms>/...` 200 after a delay.
 */
export async function startReceiver(): Promise<Receiver> {
  const http = await import('node:http');
  const received: ReceivedWebhook[] = [];
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const path = req.url ?? '/';
      const raw = Buffer.concat(chunks).toString('utf8');
      let json: unknown;
      try {
        json = JSON.parse(raw);
      } catch {
        json = undefined;
      }
      received.push({ path, headers: req.headers, raw, json, at: Date.now() });
      const seen = received.filter((r) => r.path === path).length;
      const [, kind, arg] = path.split('/');
      if (kind === 'fail' && seen <= Number(arg)) return res.writeHead(500, { 'content-type': 'text/plain' }).end('temporarily broken');
      if (kind === 'status') return res.writeHead(Number(arg)).end(`status ${arg}`);
      if (kind === 'redirect') return res.writeHead(302, { location: `/ok/redirected${path}` }).end();
      if (kind === 'slow') {
        setTimeout(() => res.writeHead(200).end('ok'), Number(arg));
        return;
      }
      res.writeHead(200, { 'content-type': 'text/plain' }).end('ok');
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return {
    url,
    received,
    to: (path) => received.filter((r) => r.path === path),
    close: async () => {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

/**
 * Pins the rate-limit clock (domain/kernel/clock.ts) of every API this test file starts with
 * startApi (they run in this process) at `secondsIn` seconds into the next calendar minute, and
 * returns that instant, its minute's start and the minute as `rate_limit_counters.window_start`.
 * A test counting up to a limit then counts in one window however long it takes, never waiting for
 * a minute to begin, and `X-RateLimit-Reset` / `Retry-After` are exactly `60 - secondsIn`. The
 * minute is one still to come, so no process's counter pruning removes its rows meanwhile.
 * Processes with a clock of their own (the worker's dispatcher, an API started as a child process)
 * keep the real minute. `resetClock()` (domain/kernel/clock.ts; in afterEach) gives the real clock back.
 */
export function pinRateClock(secondsIn = 5): { at: number; start: number; windowStart: string } {
  const start = (Math.floor(Date.now() / 60_000) + 1) * 60_000;
  const at = start + secondsIn * 1000;
  setNow(at);
  return { at, start, windowStart: new Date(start).toISOString() };
}

/**
 * For a limit counted where this process cannot set the clock (the worker's dispatcher, an API
 * started as a child process): waits for the next real minute only when less than `needMs` is left
 * of this one, so what the test counts within `needMs` from now falls in one window.
 */
export async function realMinuteWithRoom(needMs: number): Promise<void> {
  const left = 60_000 - (Date.now() % 60_000);
  if (left < needMs) await new Promise((r) => setTimeout(r, left + 50));
}

/**
 * Every payload anywhere in a workflow history (inputs, activity arguments and results, markers,
 * child inputs, results), as the objects of the history itself. Search attributes are left out:
 * they are indexed in plain text by design, not payloads of the run.
 */
export function historyPayloads(value: unknown, found: temporal.api.common.v1.IPayload[] = []): temporal.api.common.v1.IPayload[] {
  if (!value || typeof value !== 'object') return found;
  if (Array.isArray(value)) {
    for (const item of value) historyPayloads(item, found);
    return found;
  }
  const record = value as Record<string, unknown>;
  if (record.metadata && record.data instanceof Uint8Array) {
    found.push(record as temporal.api.common.v1.IPayload);
    return found;
  }
  for (const [key, child] of Object.entries(record)) {
    if (key === 'searchAttributes' || key === 'upsertWorkflowSearchAttributesEventAttributes') continue;
    historyPayloads(child, found);
  }
  return found;
}
