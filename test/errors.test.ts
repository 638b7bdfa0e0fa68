import http from 'node:http';
import { z } from 'zod';
import { ApiError } from '../domain/kernel/errors';
import { route } from '../api/route';
import { createWorkspace, expectError, startApi, TestApi } from './helpers';

// Test-only endpoints mounted through the same route machinery as the real ones.
const extraRoutes = [
  route({
    method: 'get',
    path: '/api/v1/__test/boom',
    operationId: 'testBoom',
    tag: 'Test',
    auth: 'none',
    summary: 'throws an unexpected error',
    handler: async () => {
      throw new Error('database exploded at /srv/secret/path.ts:42');
    },
  }),
  route({
    method: 'post',
    path: '/api/v1/__test/echo',
    operationId: 'testEcho',
    tag: 'Test',
    auth: 'none',
    summary: 'validates a body',
    body: z.object({ name: z.string().max(5), nested: z.object({ count: z.number().int() }).optional() }),
    handler: async (_ctx, { body }) => ({ data: body }),
  }),
  route({
    method: 'get',
    path: '/api/v1/__test/hinted',
    operationId: 'testHinted',
    tag: 'Test',
    auth: 'none',
    summary: 'throws an ApiError',
    handler: async () => {
      throw new ApiError('PIPELINE_EMPTY', 'Pipeline has no stages', { hint: 'Add a stage first.' });
    },
  }),
];

let api: TestApi;

/** A request with a method fetch will not send (TRACE). */
function rawRequest(method: string, path: string): Promise<{ status: number; allow?: string; body: string }> {
  return new Promise((resolve, reject) => {
    const req = http.request(`${api.url}${path}`, { method }, (res) => {
      let body = '';
      res.on('data', (chunk: Buffer) => (body += chunk.toString()));
      res.on('end', () => resolve({ status: res.statusCode!, allow: res.headers.allow, body }));
    });
    req.on('error', reject);
    req.end();
  });
}

beforeAll(async () => {
  api = await startApi({ extraRoutes });
});
afterAll(async () => api.close());

describe('error bodies', () => {
  it('answers malformed JSON with 400 VALIDATION and a hint', async () => {
    const res = await api.request('POST', '/api/v1/__test/echo', { rawBody: '{"name": ', headers: { 'content-type': 'application/json' } });
    expectError(res, 400, 'VALIDATION');
    expect(res.body.hint).toBeTruthy();
  });

  it('names the offending field of a zod failure', async () => {
    const res = await api.request('POST', '/api/v1/__test/echo', { body: { name: 'too long name', nested: { count: 1.5 } } });
    expectError(res, 400, 'VALIDATION');
    expect(res.body.error).toContain('body.name');
    expect(res.body.hint).toContain('body.nested.count');
    const ok = await api.request('POST', '/api/v1/__test/echo', { body: { name: 'ok', extra: 'ignored' } });
    expect(ok.status).toBe(200);
    expect(ok.body).toEqual({ data: { name: 'ok' } });
  });

  it('answers bodies over 1 MiB with 413 PAYLOAD_TOO_LARGE', async () => {
    const res = await api.request('POST', '/api/v1/__test/echo', { body: { name: 'x', pad: 'a'.repeat(1024 * 1024 + 10) } });
    expectError(res, 413, 'PAYLOAD_TOO_LARGE');
  });

  it('answers a non-JSON content type with 415 UNSUPPORTED_MEDIA_TYPE', async () => {
    const res = await api.request('POST', '/api/v1/__test/echo', {
      rawBody: 'name=x',
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
    });
    expectError(res, 415, 'UNSUPPORTED_MEDIA_TYPE');
    const plain = await api.request('POST', '/api/v1/__test/echo', { rawBody: '{"name":"x"}', headers: { 'content-type': 'text/plain' } });
    expectError(plain, 415, 'UNSUPPORTED_MEDIA_TYPE');
  });

  it('answers unknown routes with 404 NOT_FOUND in the flat body', async () => {
    expectError(await api.request('GET', '/api/v1/does-not-exist'), 404, 'NOT_FOUND');
    expectError(await api.request('GET', '/nowhere'), 404, 'NOT_FOUND');
  });

  it('answers a method a known path does not take with 405 METHOD_NOT_ALLOWED and Allow, in the flat body', async () => {
    for (const method of ['PUT', 'DELETE']) {
      const res = await api.request(method, '/api/v1/leads');
      expectError(res, 405, 'METHOD_NOT_ALLOWED');
      expect(res.headers.get('allow')?.split(', ').sort()).toEqual(['GET', 'HEAD', 'POST']);
      expect(res.headers.get('x-ratelimit-limit')).toBeTruthy();
    }
    // fetch refuses to send TRACE: a plain HTTP request does.
    const trace = await rawRequest('TRACE', '/api/v1/leads');
    expect({ status: trace.status, code: JSON.parse(trace.body).code, allow: trace.allow }).toEqual({
      status: 405,
      code: 'METHOD_NOT_ALLOWED',
      allow: expect.stringContaining('POST'),
    });
    const withId = await api.request('POST', '/api/v1/leads/3f1c2a9e-8b7d-4c6e-9a10-5d2b7e4f8c01');
    expectError(withId, 405, 'METHOD_NOT_ALLOWED');
    expect(withId.headers.get('allow')?.split(', ').sort()).toEqual(['DELETE', 'GET', 'HEAD', 'PATCH']);
    const document = await api.request('POST', '/api/v1/openapi.json');
    expectError(document, 405, 'METHOD_NOT_ALLOWED');
    expect(document.headers.get('allow')).toBe('GET, HEAD');
    // OPTIONS lists the methods; HEAD answers like GET without a body.
    const options = await api.request('OPTIONS', '/api/v1/leads');
    expect(options.status).toBe(200);
    expect(options.headers.get('allow')?.split(', ').sort()).toEqual(['GET', 'HEAD', 'POST']);
    expect((await api.request('HEAD', '/api/v1/openapi.json')).status).toBe(200);
    // An unknown path stays 404 whatever the method.
    const unknown = await rawRequest('TRACE', '/api/v1/nothing-here');
    expect({ status: unknown.status, code: JSON.parse(unknown.body).code }).toEqual({ status: 404, code: 'NOT_FOUND' });
  });

  it('answers a malformed id in a path with 404 NOT_FOUND, not a 500', async () => {
    const ws = await createWorkspace(api);
    expectError(await api.admin('PATCH', `/admin/v1/workspaces/${ws.id}/instances/not-a-uuid`, { connected: true }), 404, 'NOT_FOUND');
  });

  it('answers unexpected failures with 500 INTERNAL, no stack or internals in the body, and logs them with the request id', async () => {
    const res = await api.request('GET', '/api/v1/__test/boom', { headers: { 'x-request-id': 'req-boom-1' } });
    expectError(res, 500, 'INTERNAL');
    expect(res.text).not.toContain('exploded');
    expect(res.text).not.toContain('/srv/secret');
    expect(res.body.hint).toContain('req-boom-1');
    expect(res.headers.get('x-request-id')).toBe('req-boom-1');
    const logged = api.logs.filter((l) => l.includes('req-boom-1')).join('\n');
    expect(logged).toContain('database exploded');
    expect(logged).toContain('"status":500');
  });

  it('keeps the hint of errors that carry one', async () => {
    const res = await api.request('GET', '/api/v1/__test/hinted');
    expect(res.status).toBe(422);
    expect(res.body).toEqual({ error: 'Pipeline has no stages', code: 'PIPELINE_EMPTY', hint: 'Add a stage first.' });
  });

  it('gives every response a request id, generated when the client sends none or a bad one', async () => {
    const a = await api.request('GET', '/health');
    expect(a.headers.get('x-request-id')).toMatch(/^[0-9a-f-]{36}$/);
    const b = await api.request('GET', '/health', { headers: { 'x-request-id': 'bad id with spaces' } });
    expect(b.headers.get('x-request-id')).toMatch(/^[0-9a-f-]{36}$/);
  });
});
