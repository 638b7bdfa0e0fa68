/**
 * Input bounds, end to end: bodies over the 1 MiB limit however they are framed, JSON nested
 * 100k levels deep, arrays of 100k items, and every string and array bound of every body schema
 * (read from the route table through z.toJSONSchema) at exactly its maximum and one past it. A
 * separate API process proves its memory stays flat under such traffic.
 */
import { randomUUID } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import zlib from 'node:zlib';
import { z } from 'zod';
import { ROUTES } from '../../api/app';
import { MAX_JSON_DEPTH } from '../../api/middleware/body';
import type { AnyRoute } from '../../api/route';
import { Child, freePort, nodeTs, ROOT, startChild, waitForHttp } from '../../scripts/stack';
import { ApiResponse, expectError, Receiver, startApi, startReceiver, TestApi } from '../helpers';
import { BODIES, buildFixture, Fixture, inBatches, routeKey, uniquePhone, withIds } from './workspace-fixture';
import { chunked, paddedJson, rawRequest, RawResult } from './raw-http';

jest.setTimeout(180_000);

const MiB = 1024 * 1024;

let api: TestApi;
let receiver: Receiver;
let f: Fixture;
let inboundToken: string;
const report: string[] = [];

const bodyRoutes = ROUTES.filter((r) => r.body && r.auth !== 'none');

beforeAll(async () => {
  api = await startApi({ config: { rateLimitScale: 100_000 } });
  receiver = await startReceiver();
  f = await buildFixture(api, receiver, 'bounds');
  // Sends end quickly and cheaply (422 INSTANCE_DISCONNECTED) instead of reaching the provider.
  expect((await api.admin('PATCH', `/admin/v1/workspaces/${f.ws.id}/instances/${f.instance.id}`, { connected: false })).status).toBe(200);
  const automation = await api.request('GET', `/api/v1/automations/${f.automation.id}`, { key: f.ws.key });
  inboundToken = String(automation.body.data.webhookUrl).split('/').pop()!;
});

afterAll(async () => {
  if (report.length) console.log(`input bounds:\n${report.join('\n')}`);
  await receiver?.close();
  await api?.close();
});

/** Authorization for a route of the table: the fixture's all-scope key, or the admin token. */
function authFor(r: AnyRoute): Record<string, string> {
  if (r.auth === 'admin') return { authorization: `Bearer ${api.config.adminToken}` };
  if (r.auth === 'apiKey') return { authorization: `Bearer ${f.ws.key}` };
  return {};
}

const automationsByType = new Map<string, string>();

/** The fixture's automation has the inbound trigger: a PATCH of another trigger type's option needs an automation of that type. */
async function pathFor(r: AnyRoute, body: unknown): Promise<string> {
  const type = (body as { trigger?: { type?: string } } | undefined)?.trigger?.type;
  if (r.path !== '/api/v1/automations/{id}' || r.method !== 'patch' || !type || type === 'webhook_received') return withIds(r.path, f);
  if (!automationsByType.has(type)) {
    const res = await api.request('POST', '/api/v1/automations', {
      key: f.ws.key,
      body: { name: type, trigger: { type }, actions: [{ type: 'add_tag', tag: 'x' }] },
    });
    expect(res.status).toBe(201);
    automationsByType.set(type, res.body.data.id);
  }
  return `/api/v1/automations/${automationsByType.get(type)}`;
}

async function call(r: AnyRoute, body: unknown, extraHeaders: Record<string, string> = {}): Promise<ApiResponse> {
  return api.request(r.method.toUpperCase(), await pathFor(r, body), { body, headers: { ...authFor(r), ...extraHeaders } });
}

/**
 * `call`, read for the field at `steps`: a batch route answers a field of an item in that item's
 * entry (the single call's status and error, inside a 200), which is the answer checked.
 */
async function callFor(r: AnyRoute, body: unknown, steps: { key: string | number }[]): Promise<ApiResponse> {
  const res = await call(r, body);
  const index = steps[1]?.key;
  if (!r.batch || steps[0]?.key !== r.batch.field || typeof index !== 'number' || res.status !== 200) return res;
  const item = res.body.data.find((answer: { index: number }) => answer.index === index);
  const answer = item.error
    ? { error: item.error.message, code: item.error.code, ...(item.error.hint ? { hint: item.error.hint } : {}) }
    : { data: item.data };
  return { ...res, status: item.status, body: answer, text: JSON.stringify(answer) };
}

function callRaw(r: AnyRoute, rawBody: string): Promise<ApiResponse> {
  return api.request(r.method.toUpperCase(), withIds(r.path, f), {
    rawBody,
    headers: { ...authFor(r), 'content-type': 'application/json' },
  });
}

async function stillAnswering(): Promise<void> {
  const res = await api.request('GET', '/health');
  expect(res.status).toBe(200);
}

const deepArray = (levels: number): string => '['.repeat(levels) + ']'.repeat(levels);
const deepObject = (levels: number): string => '{"a":'.repeat(levels) + '1' + '}'.repeat(levels);

/* ------------------------------------------------------------------------------------------------
 * Oversized bodies
 * ---------------------------------------------------------------------------------------------- */

describe('bodies over 1 MiB', () => {
  const webhookIn = ROUTES.find((r) => r.path === '/api/automations/webhook-in/{token}')!;
  const inboundPath = () => `/api/automations/webhook-in/${inboundToken}`;

  it('answer 413 PAYLOAD_TOO_LARGE on every endpoint that takes a body (honest Content-Length), before authentication', async () => {
    const big = `{"pad":"${'a'.repeat(MiB + 1 - 10)}"}`;
    expect(Buffer.byteLength(big)).toBe(MiB + 1);
    for (const r of bodyRoutes) {
      const res = await callRaw(r, big);
      expect({ route: routeKey(r), status: res.status, code: res.body?.code }).toEqual({
        route: routeKey(r),
        status: 413,
        code: 'PAYLOAD_TOO_LARGE',
      });
      expectError(res, 413, 'PAYLOAD_TOO_LARGE');
      // Without credentials too: the limit applies before any work.
      const anonymous = await api.request(r.method.toUpperCase(), withIds(r.path, f), {
        rawBody: big,
        headers: { 'content-type': 'application/json' },
      });
      expectError(anonymous, 413, 'PAYLOAD_TOO_LARGE');
    }
    expectError(
      await api.request('POST', inboundPath(), { rawBody: big, headers: { 'content-type': 'application/json' } }),
      413,
      'PAYLOAD_TOO_LARGE',
    );
    expectError(
      await api.request('POST', inboundPath(), { rawBody: big, headers: { 'content-type': 'text/plain' } }),
      413,
      'PAYLOAD_TOO_LARGE',
    );
    report.push(`413 on ${bodyRoutes.length} body routes + ${routeKey(webhookIn)} (json and text/plain), with and without credentials`);
    await stillAnswering();
  });

  it('accepts a body of exactly 1 MiB', async () => {
    const name = `exact-${randomUUID().slice(0, 8)}`;
    const head = `{"name":"${name}","pad":"`;
    const exact = head + 'a'.repeat(MiB - head.length - 2) + '"}';
    expect(Buffer.byteLength(exact)).toBe(MiB);
    const res = await api.request('POST', '/api/v1/tags', {
      key: f.ws.key,
      rawBody: exact,
      headers: { 'content-type': 'application/json' },
    });
    expect(res.status).toBe(201);
    expect(res.body.data.name).toBe(name);
  });

  const raw = (p: string, headers: Record<string, string>, body?: Iterable<Buffer | string>, halfClose = false): Promise<RawResult> =>
    rawRequest(api.url, {
      method: 'POST',
      path: p,
      headers: { authorization: `Bearer ${f.ws.key}`, 'x-forwarded-for': '10.250.0.1', ...headers },
      body,
      halfClose,
    });

  it('answers 413 to chunked uploads (no Content-Length) over the limit, JSON or not', async () => {
    for (const size of [MiB + 1, 2 * MiB, 8 * MiB]) {
      const res = await raw(
        '/api/v1/tags',
        { 'content-type': 'application/json', 'transfer-encoding': 'chunked' },
        chunked(paddedJson(size)),
      );
      expect({ size, status: res.status, code: res.json?.code }).toEqual({ size, status: 413, code: 'PAYLOAD_TOO_LARGE' });
    }
    // The inbound receiver reads any label as JSON, through its own reader.
    for (const type of ['text/plain', 'application/json']) {
      const res = await raw(inboundPath(), { 'content-type': type, 'transfer-encoding': 'chunked' }, chunked(paddedJson(2 * MiB)));
      expect({ type, status: res.status, code: res.json?.code }).toEqual({ type, status: 413, code: 'PAYLOAD_TOO_LARGE' });
    }
    const noType = await raw(inboundPath(), { 'transfer-encoding': 'chunked' }, chunked(paddedJson(2 * MiB)));
    expect([noType.status, noType.json?.code]).toEqual([413, 'PAYLOAD_TOO_LARGE']);
    // Its own limit is 256 KiB.
    const mid = await raw(
      inboundPath(),
      { 'content-type': 'application/json', 'transfer-encoding': 'chunked' },
      chunked(paddedJson(300 * 1024)),
    );
    expect([mid.status, mid.json?.code]).toEqual([413, 'PAYLOAD_TOO_LARGE']);
    report.push('chunked 1 MiB+1 / 2 MiB / 8 MiB → 413; inbound receiver chunked 2 MiB (json, text, no type) and 300 KiB → 413');
    await stillAnswering();
  });

  it('answers 413 when the declared Content-Length is over the limit, whatever actually follows', async () => {
    const res = await raw('/api/v1/tags', { 'content-type': 'application/json', 'content-length': String(2 * MiB) }, ['{"name":"x"}']);
    expect([res.status, res.json?.code]).toEqual([413, 'PAYLOAD_TOO_LARGE']);
    const huge = await raw('/api/v1/tags', { 'content-type': 'application/json', 'content-length': '99999999999999999999' }, ['{}']);
    expect(huge.status).toBeGreaterThanOrEqual(400);
    expect(huge.status).toBeLessThan(500);
    await stillAnswering();
  });

  it('gives a clear 4xx, not a crash, to a Content-Length that understates the body, a truncated upload, and both framings at once', async () => {
    // Declares 40 bytes, sends 2 MiB: the first 40 bytes are the body (not JSON), the rest is garbage on the connection.
    const under = await raw('/api/v1/tags', { 'content-type': 'application/json', 'content-length': '40' }, paddedJson(2 * MiB));
    // Either our answer to the 40-byte body (400 VALIDATION) or, when the trailing garbage is parsed
    // first, Node's HTTP layer closing the connection with a bare 400: a 400 either way.
    expect(under.status).toBe(400);
    if (under.json !== undefined) expect(under.json.code).toBe('VALIDATION');
    // Declares 500 KB, sends 12 bytes and half-closes.
    const truncated = await raw(
      '/api/v1/tags',
      { 'content-type': 'application/json', 'content-length': String(500_000) },
      ['{"name":"x"'],
      true,
    );
    expect(
      truncated.status === undefined
        ? 'closed without an answer'
        : truncated.status < 500 && truncated.status >= 400
          ? '4xx'
          : truncated.status,
    ).toMatch(/4xx|closed/);
    // Content-Length and Transfer-Encoding together (the request-smuggling shape): refused by the HTTP layer.
    const both = await raw(
      '/api/v1/tags',
      { 'content-type': 'application/json', 'content-length': '5', 'transfer-encoding': 'chunked' },
      chunked(['{"name":"smuggled"}']),
    );
    expect(both.status === undefined || (both.status >= 400 && both.status < 500)).toBe(true);
    expect((await api.db('tags').where({ workspace_id: f.ws.id, name: 'smuggled' })).length).toBe(0);
    report.push(
      `lying Content-Length → ${under.status}; truncated upload → ${truncated.status ?? 'closed'}; CL+TE → ${both.status ?? 'closed'}`,
    );
    await stillAnswering();
  });

  it('refuses a compressed body that inflates past the limit (gzip bomb) without inflating it all', async () => {
    const inflated = Buffer.concat([Buffer.from('{"name":"bomb","pad":"'), Buffer.alloc(64 * MiB, 'a'), Buffer.from('"}')]);
    const bomb = zlib.gzipSync(inflated);
    expect(bomb.length).toBeLessThan(MiB);
    const res = await raw(
      '/api/v1/tags',
      { 'content-type': 'application/json', 'content-encoding': 'gzip', 'content-length': String(bomb.length) },
      [bomb],
    );
    expect([413, 415]).toContain(res.status);
    expect(['PAYLOAD_TOO_LARGE', 'UNSUPPORTED_MEDIA_TYPE']).toContain(res.json?.code);
    report.push(`gzip bomb (${(bomb.length / 1024).toFixed(0)} KiB → 64 MiB) → ${res.status} ${res.json?.code}`);
    await stillAnswering();
  });
});

/* ------------------------------------------------------------------------------------------------
 * Deep nesting
 * ---------------------------------------------------------------------------------------------- */

describe('deeply nested JSON', () => {
  it('answers every body endpoint 400 VALIDATION for 100k levels of [ (balanced or not) and stays up', async () => {
    const balanced = deepArray(100_000);
    const unbalanced = '['.repeat(100_000);
    for (const r of bodyRoutes) {
      const a = await callRaw(r, balanced);
      expect({ route: routeKey(r), status: a.status, code: a.body?.code }).toEqual({ route: routeKey(r), status: 400, code: 'VALIDATION' });
      const b = await callRaw(r, unbalanced);
      expect({ route: routeKey(r), status: b.status, code: b.body?.code }).toEqual({ route: routeKey(r), status: 400, code: 'VALIDATION' });
    }
    report.push(`100k-deep array and 100k unbalanced [ → 400 VALIDATION on ${bodyRoutes.length} body routes`);
    await stillAnswering();
  });

  it(`accepts exactly ${MAX_JSON_DEPTH} levels and answers ${MAX_JSON_DEPTH + 1} with 400 VALIDATION (api/middleware/body MAX_JSON_DEPTH)`, async () => {
    // The root object is level 1; `pad` (an unknown field, ignored) holds the rest.
    const body = (levels: number) => `{"name":"depth-${levels}-${randomUUID().slice(0, 6)}","pad":${deepArray(levels - 1)}}`;
    const ok = await api.request('POST', '/api/v1/tags', {
      key: f.ws.key,
      rawBody: body(MAX_JSON_DEPTH),
      headers: { 'content-type': 'application/json' },
    });
    expect(ok.status).toBe(201);
    const deep = await api.request('POST', '/api/v1/tags', {
      key: f.ws.key,
      rawBody: body(MAX_JSON_DEPTH + 1),
      headers: { 'content-type': 'application/json' },
    });
    expectError(deep, 400, 'VALIDATION');
    expect(deep.body.error).toContain('nested too deeply');
    // The inbound receiver reads any label: the same rule.
    const inbound = await api.request('POST', `/api/automations/webhook-in/${inboundToken}`, {
      rawBody: `{"a":${deepArray(MAX_JSON_DEPTH)}}`,
      headers: { 'content-type': 'text/plain' },
    });
    expectError(inbound, 400, 'VALIDATION');
  });

  it('answers a clear 4xx (never 5xx) when the deep value sits inside a field, on every body endpoint', async () => {
    const lines: string[] = [];
    for (const r of bodyRoutes) {
      const js = z.toJSONSchema(r.body!, { io: 'input', unrepresentable: 'any' }) as JsonSchema;
      // Every top-level field in turn, on top of a body that is otherwise valid.
      for (const field of Object.keys(js.properties ?? {})) {
        for (const [shape, deep] of [
          ['array', deepArray(100_000)],
          ['object', deepObject(50_000)],
        ] as const) {
          const base = JSON.stringify(baseBody(r, js));
          const inner = base === '{}' ? '' : `${base.slice(1, -1)},`;
          const res = await callRaw(r, `{${inner}"${field}":${deep}}`);
          // A deep value where an object is expected may be accepted: unknown keys are ignored (docs/api-conventions.md).
          expect({ route: routeKey(r), field, shape, status: res.status < 500 ? '<500' : res.status }).toEqual({
            route: routeKey(r),
            field,
            shape,
            status: '<500',
          });
          if (res.status !== 400) lines.push(`${routeKey(r)} ${field} (${shape}) → ${res.status} ${res.body?.code ?? ''}`);
        }
      }
    }
    report.push(`deep value in every top-level field → 400${lines.length ? ` (except: ${lines.join('; ')})` : ''}`);
    await stillAnswering();
  });

  it('answers the inbound receiver a clear answer (4xx, or 202 when it can run it) for a deep payload, never a 5xx', async () => {
    const p = `/api/automations/webhook-in/${inboundToken}`;
    for (const [shape, body] of [
      ['array in a field', `{"a":${deepArray(100_000)}}`],
      ['object', deepObject(40_000)],
    ]) {
      const res = await api.request('POST', p, { rawBody: body, headers: { 'content-type': 'application/json' } });
      report.push(`inbound receiver, deep ${shape} → ${res.status} ${res.body?.code ?? res.body?.data?.status}`);
      expect({
        shape,
        status: res.status,
        text: res.text.slice(0, 300),
        ok: res.status === 202 || (res.status >= 400 && res.status < 500),
      }).toEqual(expect.objectContaining({ shape, ok: true }));
    }
    await stillAnswering();
  });
});

/* ------------------------------------------------------------------------------------------------
 * Bounds of every body schema
 * ---------------------------------------------------------------------------------------------- */

// The subset of JSON Schema z.toJSONSchema emits for our bodies.
interface JsonSchema {
  type?: string | string[];
  properties?: Record<string, JsonSchema>;
  required?: string[];
  additionalProperties?: JsonSchema | boolean;
  propertyNames?: JsonSchema;
  items?: JsonSchema;
  anyOf?: JsonSchema[];
  oneOf?: JsonSchema[];
  enum?: unknown[];
  const?: unknown;
  format?: string;
  pattern?: string;
  minLength?: number;
  maxLength?: number;
  minItems?: number;
  maxItems?: number;
  maxProperties?: number;
  minimum?: number;
  exclusiveMinimum?: number;
  default?: unknown;
}

type Key = string | number;
interface Step {
  key: Key;
  schema: JsonSchema;
}
interface Slot {
  kind: 'string' | 'array' | 'record';
  steps: Step[];
  schema: JsonSchema;
  max?: number;
}

const pathOf = (steps: Step[]): string => ['body', ...steps.map((s) => s.key)].join('.');
const typeOf = (s: JsonSchema): string | undefined => (Array.isArray(s.type) ? s.type[0] : s.type);

/** Every string, array and record of a schema, with the path to it (union variants each on their own). */
function slots(schema: JsonSchema, steps: Step[] = []): Slot[] {
  const variants = schema.anyOf ?? schema.oneOf;
  if (variants) {
    return variants.flatMap((v) => {
      if (steps.length === 0) return slots(v, steps);
      return slots(v, [...steps.slice(0, -1), { key: steps[steps.length - 1].key, schema: v }]);
    });
  }
  const type = typeOf(schema);
  if (type === 'string') {
    if (schema.enum || schema.const !== undefined) return [];
    return [{ kind: 'string', steps, schema, max: schema.maxLength }];
  }
  if (type === 'array') {
    const out: Slot[] = [{ kind: 'array', steps, schema, max: schema.maxItems }];
    if (schema.items) out.push(...slots(schema.items, [...steps, { key: 0, schema: schema.items }]));
    return out;
  }
  if (type === 'object') {
    const out: Slot[] = [];
    for (const [key, prop] of Object.entries(schema.properties ?? {})) out.push(...slots(prop, [...steps, { key, schema: prop }]));
    if (typeof schema.additionalProperties === 'object') {
      out.push({ kind: 'record', steps, schema, max: schema.maxProperties });
      out.push(...slots(schema.additionalProperties, [...steps, { key: 'k', schema: schema.additionalProperties }]));
    }
    return out;
  }
  return [];
}

/** The smallest valid instance of a schema (index `i` keeps array items distinct). */
function sample(s: JsonSchema, i = 0): unknown {
  if (s.const !== undefined) return s.const;
  if (s.enum) {
    const values = s.enum.filter((v) => v !== '*');
    return values[i % values.length];
  }
  const variants = s.anyOf ?? s.oneOf;
  if (variants) return sample(variants.find((v) => typeOf(v) !== 'null') ?? variants[0], i);
  switch (typeOf(s)) {
    case 'string': {
      if (s.format === 'email') return `s${i}@example.com`;
      if (s.format === 'uuid') return randomUUID();
      if (s.format === 'uri') return `${receiver.url}/ok/s${i}`;
      if (s.format === 'date-time') return new Date().toISOString();
      if (s.pattern) {
        const re = new RegExp(s.pattern);
        const found = [`k${i}`, 'v1.0', 'a', `${i}`].find((c) => re.test(c));
        if (found !== undefined) return found;
      }
      const base = `s${i}`;
      return base.padEnd(s.minLength ?? 0, 'x');
    }
    case 'number':
    case 'integer':
      return s.exclusiveMinimum !== undefined ? s.exclusiveMinimum + 1 : (s.minimum ?? 0);
    case 'boolean':
      return true;
    case 'null':
      return null;
    case 'array':
      return Array.from({ length: s.minItems ?? 0 }, (_, j) => sample(s.items ?? {}, j));
    case 'object': {
      const out: Record<string, unknown> = {};
      for (const key of s.required ?? []) out[key] = sample(s.properties?.[key] ?? {}, i);
      return out;
    }
    default:
      return s.default ?? null;
  }
}

/** A body that passes validation: the route's succeeding body for creates, required fields only otherwise. */
function baseBody(r: AnyRoute, js: JsonSchema): Record<string, unknown> {
  if (routeKey(r) === 'post /api/v1/automations') {
    // The inbound trigger takes eventFilter and mapping, so their bounds are reached.
    return { name: 'bounds', trigger: { type: 'webhook_received' }, actions: [{ type: 'add_tag', tag: 'x' }] };
  }
  const given = r.method === 'post' || r.method === 'put' ? BODIES[routeKey(r)]?.(f, receiver.url) : undefined;
  return structuredClone((given ?? sample(js)) as Record<string, unknown>);
}

function fits(value: unknown, schema: JsonSchema): boolean {
  const type = typeOf(schema);
  if (type === 'array') return Array.isArray(value);
  if (type === 'object') {
    if (value === null || typeof value !== 'object' || Array.isArray(value)) return false;
    const discriminator = schema.properties?.type?.const;
    return discriminator === undefined || (value as { type?: unknown }).type === discriminator;
  }
  return value !== undefined;
}

/** The base body with `leaf` at the slot's path (containers created from the schema as needed). */
function withLeaf(base: Record<string, unknown>, steps: Step[], leaf: unknown): Record<string, unknown> {
  const root = structuredClone(base);
  let container: any = root;
  steps.forEach((step, index) => {
    if (index === steps.length - 1) {
      container[step.key] = leaf;
      return;
    }
    if (!fits(container[step.key], step.schema)) container[step.key] = sample(step.schema);
    container = container[step.key];
  });
  return root;
}

const MEDIA_FIELDS = ['mediaUrl', 'caption', 'fileName'];
const TEMPLATE_FIELDS = ['templateName', 'templateLanguage', 'templateVariables'];

/** Route-specific context a field needs to be read at all (a caption is only read on a media message). */
function tweak(r: AnyRoute, body: Record<string, unknown>, steps: Step[]): Record<string, unknown> {
  const isSend = r.path === '/api/v1/messages' || r.path === '/api/v1/conversations/{id}/messages';
  const field = String(steps[0]?.key);
  if (isSend && MEDIA_FIELDS.includes(field))
    return { mediaUrl: `${receiver.url}/ok/file.pdf`, ...body, type: 'document', text: undefined };
  if (isSend && TEMPLATE_FIELDS.includes(field))
    return { templateName: 'welcome', templateLanguage: 'pt_BR', ...body, type: 'template', text: undefined };
  if (r.path === '/api/v1/deals/{id}' && field === 'lostReason') return { ...body, status: 'lost' };
  if (r.path === '/api/v1/deals/batch' && typeof steps[1]?.key === 'number' && steps[1].schema.properties?.id) {
    // A field of the change variant is read on a change item: the fixture's deal, as PATCH reads it.
    const items = [...(body.deals as Record<string, unknown>[])];
    const { contactId: _contact, pipeline: _pipeline, ...change } = items[steps[1].key];
    const leaf = String(steps[2]?.key);
    items[steps[1].key] = { ...change, ...(leaf === 'id' ? {} : { id: f.deal.id }), ...(leaf === 'lostReason' ? { status: 'lost' } : {}) };
    return { ...body, deals: items };
  }
  if (r.path.startsWith('/api/v1/automations') && field === 'trigger') {
    // Each trigger option is read only for its trigger type.
    const option = String(steps[1]?.key);
    const type = option === 'fields' ? 'contact_updated' : option === 'pipelineId' ? 'card_created' : 'webhook_received';
    return { ...body, trigger: { ...(body.trigger as object), type } };
  }
  return body;
}

/** A string of exactly n characters that is otherwise valid for the field (its pattern included), or undefined when none can be made. */
function fillString(slot: Slot, n: number): string | undefined {
  const s = slot.schema;
  const key = String(slot.steps[slot.steps.length - 1]?.key ?? '');
  if (s.format === 'uuid' || s.format === 'date-time') return undefined;
  // The phone's bound is the phone rule's (parsePhone takes runs of separators the document's pattern does not spell out).
  if (isPhone(slot)) {
    const digits = `+${uniquePhone()}`;
    return n >= digits.length ? digits + '-'.repeat(n - digits.length) : undefined;
  }
  const emailLike = s.format === 'email' || key === 'email';
  const filled = emailLike
    ? n >= 14
      ? 'a'.repeat(n - 12) + '@example.com'
      : undefined
    : s.format === 'uri' || /url$/i.test(key)
      ? n >= `${receiver.url}/ok/`.length
        ? `${receiver.url}/ok/` + 'a'.repeat(n - `${receiver.url}/ok/`.length)
        : undefined
      : 'a'.repeat(n);
  return filled !== undefined && (!s.pattern || new RegExp(s.pattern).test(filled)) ? filled : undefined;
}

/** The phone bound (32) is enforced by the phone rule itself (400 INVALID_PHONE), whatever the schema's coarser guard says. */
const PHONE_MAX = 32;
const isPhone = (slot: Slot): boolean =>
  slot.kind === 'string' && String(slot.steps[slot.steps.length - 1]?.key) === 'phone' && !slot.steps.some((s) => s.key === 'mapping'); // mapping.phone is a payload path

function fillArray(slot: Slot, n: number): unknown[] {
  return Array.from({ length: n }, (_, j) => sample(slot.schema.items ?? {}, j));
}

/** Whether an answer is a 400 about this very field (by path, or by the field's own code). */
function namesField(res: ApiResponse, slot: Slot): boolean {
  if (res.status !== 400) return false;
  const key = String(slot.steps[slot.steps.length - 1]?.key ?? '');
  if (/url$/i.test(key) && res.body?.code === 'INVALID_URL') return true;
  if (isPhone(slot) && res.body?.code === 'INVALID_PHONE') return true;
  const p = pathOf(slot.steps).replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
  return new RegExp(`${p}:`).test(`${res.body?.error ?? ''} ${res.body?.hint ?? ''}`);
}

describe('every bound of every body schema', () => {
  it('accepts exactly the maximum and answers max+1 with 400 VALIDATION naming the field', async () => {
    const failures: string[] = [];
    let checked = 0;
    for (const r of bodyRoutes) {
      const js = z.toJSONSchema(r.body!, { io: 'input', unrepresentable: 'any' }) as JsonSchema;
      const base = baseBody(r, js);
      const bounded = slots(js).filter((s) => s.kind !== 'record' && s.max !== undefined);
      const done: string[] = [];
      const skipped: string[] = [];
      for (const slot of bounded) {
        const max = isPhone(slot) ? Math.min(slot.max!, PHONE_MAX) : slot.max!;
        const fill = (n: number) => (slot.kind === 'string' ? fillString(slot, n) : fillArray(slot, n));
        const atMax = fill(max);
        const over = fill(max + 1);
        if (atMax === undefined || over === undefined) {
          skipped.push(`${pathOf(slot.steps)}≤${max}`);
          continue;
        }
        const exact = await callFor(r, tweak(r, withLeaf(base, slot.steps, atMax), slot.steps), slot.steps);
        const tooLong = await callFor(r, tweak(r, withLeaf(base, slot.steps, over), slot.steps), slot.steps);
        checked += 1;
        const where = `${routeKey(r)} ${pathOf(slot.steps)} (max ${max})`;
        if (namesField(exact, slot) || exact.status >= 500)
          failures.push(`${where}: exactly max → ${exact.status} ${exact.text.slice(0, 200)}`);
        const code = tooLong.body?.code === 'VALIDATION' || (isPhone(slot) && tooLong.body?.code === 'INVALID_PHONE');
        if (tooLong.status !== 400 || !code || !namesField(tooLong, slot)) {
          failures.push(`${where}: max+1 → ${tooLong.status} ${tooLong.text.slice(0, 200)}`);
        }
        done.push(`${slot.steps.map((s) => s.key).join('.')}≤${max}→${exact.status}`);
      }
      report.push(
        `${routeKey(r)}: ${done.join(', ') || 'no bounded field'}${skipped.length ? ` | skipped (pattern/format): ${skipped.join(', ')}` : ''}`,
      );
    }
    expect(checked).toBeGreaterThan(100);
    expect(failures).toEqual([]);
    await stillAnswering();
  });

  it('bounds every array and record of every body (up to 100k items, 70k keys → 400 VALIDATION naming it)', async () => {
    const failures: string[] = [];
    const lines: string[] = [];
    for (const r of bodyRoutes) {
      const js = z.toJSONSchema(r.body!, { io: 'input', unrepresentable: 'any' }) as JsonSchema;
      const base = baseBody(r, js);
      for (const slot of slots(js).filter((s) => s.kind !== 'string')) {
        // As many items as fit well under 1 MiB (the body limit would answer first otherwise).
        let big: unknown;
        if (slot.kind === 'record') {
          const value = typeof slot.schema.additionalProperties === 'object' ? sample(slot.schema.additionalProperties) : 1;
          big = Object.fromEntries(Array.from({ length: 70_000 }, (_, j) => [`k${j}`, value]));
        } else {
          const make = (count: number) => Array.from({ length: count }, (_, j) => sample(slot.schema.items ?? {}, j));
          big = make(100_000);
          const length = JSON.stringify(big).length;
          if (length > 900 * 1024) big = make(Math.floor((100_000 * 900 * 1024) / length));
        }
        const res = await callFor(r, tweak(r, withLeaf(base, slot.steps, big), slot.steps), slot.steps);
        const size = Array.isArray(big) ? big.length : Object.keys(big as object).length;
        lines.push(`${routeKey(r)} ${pathOf(slot.steps)}[${size}] → ${res.status}`);
        if (res.status !== 400 || res.body?.code !== 'VALIDATION' || !namesField(res, slot)) {
          failures.push(
            `${routeKey(r)} ${pathOf(slot.steps)} with ${size} ${slot.kind === 'record' ? 'keys' : 'items'}: ${res.status} ${res.text.slice(0, 200)}`,
          );
        }
      }
    }
    report.push(`huge arrays/records: ${lines.join('; ')}`);
    expect(failures).toEqual([]);
    await stillAnswering();
  });

  it('never fails with a 5xx on an unbounded string field given ~900 KB', async () => {
    const lines: string[] = [];
    for (const r of bodyRoutes) {
      const js = z.toJSONSchema(r.body!, { io: 'input', unrepresentable: 'any' }) as JsonSchema;
      const base = baseBody(r, js);
      for (const slot of slots(js).filter((s) => s.kind === 'string' && s.max === undefined && !s.schema.pattern && !s.schema.format)) {
        const res = await callFor(r, tweak(r, withLeaf(base, slot.steps, 'a'.repeat(900 * 1024)), slot.steps), slot.steps);
        lines.push(`${routeKey(r)} ${pathOf(slot.steps)} → ${res.status} ${res.body?.code ?? ''}`);
        expect({ route: routeKey(r), field: pathOf(slot.steps), status: res.status < 500 ? '<500' : res.status }).toEqual({
          route: routeKey(r),
          field: pathOf(slot.steps),
          status: '<500',
        });
      }
    }
    report.push(`unbounded strings (the 1 MiB body limit bounds them): ${lines.join('; ') || 'none'}`);
  });

  it('answers the named huge arrays of the brief with 400 VALIDATION naming the path', async () => {
    const cases: [string, string, unknown, string][] = [
      ['POST', '/api/v1/leads', { phone: uniquePhone(), tags: Array.from({ length: 100_000 }, (_, i) => `t${i % 10}`) }, 'body.tags'],
      [
        'POST',
        `/api/v1/lists/${f.list.id}/contacts`,
        { contactIds: Array.from({ length: 100_000 }, () => f.contact.id.slice(0, 4)) },
        'body.contactIds',
      ],
      [
        'POST',
        '/api/v1/messages',
        {
          phone: uniquePhone(),
          type: 'template',
          templateName: 'x',
          templateLanguage: 'pt_BR',
          templateVariables: Array.from({ length: 100_000 }, () => 'v'),
        },
        'body.templateVariables',
      ],
      ['POST', '/api/v1/webhooks', { url: `${receiver.url}/ok/x`, events: Array.from({ length: 100_000 }, () => '*') }, 'body.events'],
    ];
    for (const [method, p, body, named] of cases) {
      const res = await api.request(method, p, { key: f.ws.key, body });
      expectError(res, 400, 'VALIDATION');
      expect(res.body.error).toContain(named);
    }
    const scopes = await api.admin('POST', `/admin/v1/workspaces/${f.ws.id}/api-keys`, {
      name: 'k',
      scopes: Array.from({ length: 60_000 }, () => 'deals:read'),
    });
    expectError(scopes, 400, 'VALIDATION');
    expect(scopes.body.error).toContain('body.scopes');
  });
});

/* ------------------------------------------------------------------------------------------------
 * Memory of a separate API process
 * ---------------------------------------------------------------------------------------------- */

function rssKiB(pid: number): number {
  const status = fs.readFileSync(`/proc/${pid}/status`, 'utf8');
  return Number(/VmRSS:\s+(\d+)\s+kB/.exec(status)?.[1]);
}

describe('process memory under hostile bodies', () => {
  let child: Child | undefined;
  afterAll(async () => {
    await child?.stop();
  });

  it('stays flat over 1200 oversized, deep and huge requests (no rising floor) and keeps answering /health', async () => {
    const port = await freePort();
    const dir = process.env.TEST_STACK_DIR ? path.resolve(process.env.TEST_STACK_DIR) : path.join(ROOT, '.data', 'test');
    child = startChild({
      name: 'api-bounds',
      ...nodeTs('api/server.ts'),
      // No hosted send worker: its start (the bundle, the Temporal runtime) would rise the floor this measures.
      env: { PORT: String(port), RATE_LIMIT_SCALE: '100000', TRUST_PROXY: 'true', LOG_LEVEL: 'warn', API_SEND_WORKER: 'false' },
      logFile: path.join(dir, 'logs', `api-bounds-${process.pid}.log`),
    });
    const base = `http://127.0.0.1:${port}`;
    await waitForHttp(`${base}/health`, child);
    const pid = child.process.pid!;
    const key = f.ws.key;

    const oversized = `{"pad":"${'a'.repeat(MiB + 100)}"}`;
    const deep = deepArray(100_000);
    const hugeTags = JSON.stringify({ phone: uniquePhone(), tags: Array.from({ length: 100_000 }, (_, i) => `t${i % 10}`) });
    // A client address of its own (TRUST_PROXY): its 1,200 answers count against that IP, in the
    // database the other test files' APIs share, never against loopback's, which they use too.
    const fromOwnIp = { 'x-forwarded-for': '10.250.0.2' };
    const kinds: (() => Promise<number | undefined>)[] = [
      async () =>
        (
          await fetch(`${base}/api/v1/tags`, {
            method: 'POST',
            headers: { ...fromOwnIp, authorization: `Bearer ${key}`, 'content-type': 'application/json' },
            body: oversized,
          })
        ).status,
      async () =>
        (
          await rawRequest(base, {
            method: 'POST',
            path: '/api/v1/tags',
            headers: { ...fromOwnIp, authorization: `Bearer ${key}`, 'content-type': 'application/json', 'transfer-encoding': 'chunked' },
            body: chunked(paddedJson(2 * MiB)),
          })
        ).status,
      async () =>
        (
          await fetch(`${base}/api/v1/leads`, {
            method: 'POST',
            headers: { ...fromOwnIp, authorization: `Bearer ${key}`, 'content-type': 'application/json' },
            body: deep,
          })
        ).status,
      async () =>
        (
          await fetch(`${base}/api/v1/leads`, {
            method: 'POST',
            headers: { ...fromOwnIp, authorization: `Bearer ${key}`, 'content-type': 'application/json' },
            body: hugeTags,
          })
        ).status,
      async () =>
        (
          await fetch(`${base}/api/v1/tags`, {
            method: 'POST',
            headers: { ...fromOwnIp, 'content-type': 'application/json' },
            body: `{"a":${deep}}`,
          })
        ).status,
    ];
    const round = async (n: number): Promise<Record<string, number>> => {
      const statuses: Record<string, number> = {};
      await inBatches(
        Array.from({ length: n }, (_, i) => i),
        4,
        async (i) => {
          const status = String((await kinds[i % kinds.length]()) ?? 'closed');
          statuses[status] = (statuses[status] ?? 0) + 1;
        },
      );
      return statuses;
    };

    // RSS swings by tens of MiB as V8 grows its heap for big bodies and gives it back (seen:
    // 194 → 271 → 211 → 254 → 181 → ...), and it may sit on a plateau for several rounds before
    // giving it back (seen: 193 → 220 → 244 → 243 → 243 → 246). A leak shows as a rising floor:
    // the lowest level of the later rounds must stay near the lowest of the earlier ones, and
    // enough later rounds are sampled for a reclaimable plateau to come down at least once.
    await round(100); // warm-up: code paths compiled, pools and buffers allocated
    const levels = [rssKiB(pid)];
    const statuses: Record<string, number> = {};
    const ROUNDS = 12;
    for (let r = 0; r < ROUNDS; r++) {
      for (const [status, n] of Object.entries(await round(100))) statuses[status] = (statuses[status] ?? 0) + n;
      levels.push(rssKiB(pid));
    }
    const mib = (kib: number) => (kib / 1024).toFixed(1);
    const floorEarly = Math.min(...levels.slice(0, ROUNDS / 2));
    const floorLate = Math.min(...levels.slice(ROUNDS / 2));
    const floorRiseMiB = (floorLate - floorEarly) / 1024;
    report.push(
      `child API pid ${pid}: VmRSS after warm-up and each round of 100: ${levels.map(mib).join(' → ')} MiB (floor ${mib(floorEarly)} → ${mib(floorLate)}) ${JSON.stringify(statuses)}`,
    );
    expect(Object.keys(statuses).every((s) => /^4\d\d$/.test(s))).toBe(true);
    expect(floorRiseMiB).toBeLessThan(40);
    expect(Math.max(...levels) / 1024).toBeLessThan(400);
    const health = await fetch(`${base}/health`);
    expect(health.status).toBe(200);
  });
});
