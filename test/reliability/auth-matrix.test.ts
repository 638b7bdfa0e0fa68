/**
 * Authentication and scope matrix, built from the route table so a new endpoint cannot be missed.
 *
 * Every API-key endpoint, aimed at real records of a fixture workspace (so a rejection is not just
 * a 404) with a body that would succeed: without a key, with malformed headers, an unknown key, an
 * expired key and a revoked key it answers 401 UNAUTHORIZED; with a key holding only a scope that
 * does not satisfy it, 403 INSUFFICIENT_SCOPE. Every admin endpoint refuses a missing or wrong
 * token and an API key with 401. Nothing in the workspace changes.
 */
import { ROUTES } from '../../api/app';
import type { AnyRoute } from '../../api/route';
import { ALL_SCOPES, grants, satisfying, Scope } from '../../domain/access/scopes';
import { ApiResponse, createKey, expectError, Receiver, startApi, startReceiver, TestApi } from '../helpers';
import { BODIES, buildFixture, Fixture, inBatches, routeKey, snapshot, withIds } from './workspace-fixture';

jest.setTimeout(240_000);

let api: TestApi;
let receiver: Receiver;
let f: Fixture;
let expiredKey: string;
let revokedKey: string;
let noScopeKey: string;
const scopeKeys = new Map<Scope, string>();
const summary: string[] = [];

/** Routes anyone may call: a deliberate list, so a new unauthenticated endpoint fails this suite. */
const PUBLIC_ROUTES = new Set([
  'post /api/automations/webhook-in/{token}',
  'get /health',
  'get /ready',
  'get /webhooks/whatsapp/{instanceId}',
  'post /webhooks/whatsapp/{instanceId}',
  'get /webhooks/instagram/{instanceId}',
  'post /webhooks/instagram/{instanceId}',
  'post /webhooks/web/{instanceId}',
]);

const apiKeyRoutes = ROUTES.filter((r) => r.auth === 'apiKey');
const adminRoutes = ROUTES.filter((r) => r.auth === 'admin');

beforeAll(async () => {
  // The matrix sends a few thousand requests: the limits are not what is tested here.
  api = await startApi({ config: { rateLimitScale: 100_000 } });
  receiver = await startReceiver();
  f = await buildFixture(api, receiver, 'authm');
  const all = [...ALL_SCOPES];
  expiredKey = (await createKey(api, f.ws.id, all, { expiresAt: new Date(Date.now() - 60_000).toISOString() })).key;
  const revoked = await createKey(api, f.ws.id, all);
  expect((await api.admin('DELETE', `/admin/v1/workspaces/${f.ws.id}/api-keys/${revoked.id}`)).status).toBe(200);
  revokedKey = revoked.key;
  noScopeKey = (await createKey(api, f.ws.id, [])).key;
  for (const scope of ALL_SCOPES) scopeKeys.set(scope, (await createKey(api, f.ws.id, [scope], { rateLimitPerMinute: 1000 })).key);
});

afterAll(async () => {
  if (summary.length) console.log(`auth matrix (${summary.length} endpoints):\n${summary.join('\n')}`);
  await receiver?.close();
  await api?.close();
});

/** One request as an integrator would send it, with a raw Authorization header (or none). */
function send(r: AnyRoute, authorization: string | undefined): Promise<ApiResponse> {
  const body = BODIES[routeKey(r)]?.(f, receiver.url);
  const headers: Record<string, string> = authorization === undefined ? {} : { authorization };
  return api.request(r.method.toUpperCase(), withIds(r.path, f), { body, headers });
}

/** The malformed, unknown, expired and revoked credentials every API-key endpoint must refuse. */
function badCredentials(): [string, string | undefined][] {
  const key = f.ws.key;
  const secret = key.slice('vg_live_'.length);
  return [
    ['no header', undefined],
    ['empty header', ''],
    ['"Bearer"', 'Bearer'],
    ['"Bearer  "', 'Bearer  '],
    ['Basic', `Basic ${Buffer.from(`user:${key}`).toString('base64')}`],
    ['Basic xxx', 'Basic xxx'],
    ['Token scheme', `Token ${key}`],
    ['key without scheme', key],
    ['"Bearer:" glued', `Bearer:${key}`],
    ['wrong prefix vg_test_', `Bearer vg_test_${secret}`],
    ['upper-case prefix', `Bearer VG_LIVE_${secret}`],
    ['prefix only', 'Bearer vg_live_'],
    ['truncated key', `Bearer ${key.slice(0, -1)}`],
    ['half a key', `Bearer ${key.slice(0, 20)}`],
    ['trailing junk', `Bearer ${key}x`],
    ['trailing word', `Bearer ${key} junk`],
    ['two keys', `Bearer ${key},${key}`],
    ['over-long key', `Bearer ${key}${'a'.repeat(300)}`],
    ['unknown well-formed key', `Bearer vg_live_${'A'.repeat(43)}`],
    ['admin token as key', `Bearer ${api.config.adminToken}`],
    ['expired key', `Bearer ${expiredKey}`],
    ['revoked key', `Bearer ${revokedKey}`],
  ];
}

describe('auth matrix: the route table', () => {
  it('classifies every route: API-key routes name scopes, admin routes are under /admin/v1, the rest is the public allowlist', () => {
    expect(apiKeyRoutes.length).toBeGreaterThan(50);
    for (const r of apiKeyRoutes) {
      expect({ route: routeKey(r), scopes: (r.scopes ?? []).length > 0 }).toEqual({ route: routeKey(r), scopes: true });
      expect(r.path.startsWith('/api/v1/')).toBe(true);
    }
    for (const r of adminRoutes) expect(r.path.startsWith('/admin/v1/')).toBe(true);
    const others = ROUTES.filter((r) => r.auth !== 'apiKey' && r.auth !== 'admin').map(routeKey);
    expect(others.sort()).toEqual([...PUBLIC_ROUTES].sort());
    // Every /api/v1 and /admin/v1 route is authenticated.
    for (const r of ROUTES)
      if (r.path.startsWith('/api/v1/') || r.path.startsWith('/admin/v1/'))
        expect([routeKey(r), r.auth]).not.toEqual([routeKey(r), 'none']);
  });

  it('knows a record for every path parameter and a succeeding body for every write', () => {
    for (const r of [...apiKeyRoutes, ...adminRoutes]) {
      expect(() => withIds(r.path, f)).not.toThrow();
      if (r.body) expect([routeKey(r), !!BODIES[routeKey(r)]]).toEqual([routeKey(r), true]);
    }
  });
});

describe('auth matrix: API-key endpoints', () => {
  it('answers 401 UNAUTHORIZED to every missing, malformed, unknown, expired or revoked credential, and 403 INSUFFICIENT_SCOPE to every scope that does not satisfy the endpoint; nothing changes', async () => {
    const before = await snapshot(api, f.ws.id);
    const bad = badCredentials();

    for (const r of apiKeyRoutes) {
      const required = r.scopes ?? [];
      const wrongScopes = ALL_SCOPES.filter((s) => !grants([s], required));
      const rightScopes = ALL_SCOPES.filter((s) => grants([s], required));
      // The scopes that do satisfy it are exactly the documented ones (domain/access/scopes `satisfying`).
      expect(rightScopes.sort()).toEqual([...new Set(required.flatMap(satisfying))].sort());

      const unauthorized = await inBatches(bad, 6, async ([label, header]) => ({ label, res: await send(r, header) }));
      for (const { label, res } of unauthorized) {
        expect({ route: routeKey(r), label, status: res.status, code: res.body?.code }).toEqual({
          route: routeKey(r),
          label,
          status: 401,
          code: 'UNAUTHORIZED',
        });
        expectError(res, 401, 'UNAUTHORIZED');
        // The flat error body, and nothing of the fixture in it.
        expect(res.text).not.toContain(f.ws.id);
      }

      const forbidden = await inBatches(wrongScopes, 6, async (scope) => ({ scope, res: await send(r, `Bearer ${scopeKeys.get(scope)}`) }));
      for (const { scope, res } of forbidden) {
        expect({ route: routeKey(r), scope, status: res.status, code: res.body?.code }).toEqual({
          route: routeKey(r),
          scope,
          status: 403,
          code: 'INSUFFICIENT_SCOPE',
        });
        expectError(res, 403, 'INSUFFICIENT_SCOPE');
        for (const s of rightScopes) expect(res.body.hint).toContain(s);
      }

      // A key without any scope, with the scheme in lower case (RFC 7235: the scheme is
      // case-insensitive, and api/middleware/auth reads it so): authenticated, then refused for scope.
      const noScope = await send(r, `bearer ${noScopeKey}`);
      expectError(noScope, 403, 'INSUFFICIENT_SCOPE');
      const upper = await send(r, `BEARER   ${noScopeKey}  `);
      expectError(upper, 403, 'INSUFFICIENT_SCOPE');

      summary.push(
        `${r.method.toUpperCase().padEnd(6)} ${r.path.padEnd(52)} 401×${bad.length} 403×${wrongScopes.length + 2} (needs ${rightScopes.join('|')})`,
      );
    }

    expect(await snapshot(api, f.ws.id)).toEqual(before);
  });

  it('lets the right scope through on every read endpoint with the real ids (the rejections above were not 404s)', async () => {
    for (const r of apiKeyRoutes.filter((r) => r.method === 'get')) {
      const scope = (r.scopes ?? [])[0];
      const res = await send(r, `bearer ${scopeKeys.get(scope)}`);
      expect({ route: routeKey(r), status: res.status }).toEqual({ route: routeKey(r), status: 200 });
    }
    // leads:write implies pipelines:read and nothing else.
    expect(
      (
        await send(
          apiKeyRoutes.find((r) => r.path === '/api/v1/pipelines')!,
          `Bearer ${scopeKeys.get('leads:write')}`,
        )
      ).status,
    ).toBe(200);
  });

  it('has a snapshot that sees a write (so "nothing changed" above means something)', async () => {
    const before = await snapshot(api, f.ws.id);
    const patch = apiKeyRoutes.find((r) => routeKey(r) === 'patch /api/v1/tags/{id}')!;
    expect((await send(patch, `Bearer ${scopeKeys.get('tags:write')}`)).status).toBe(200);
    expect(await snapshot(api, f.ws.id)).not.toEqual(before);
  });
});

describe('auth matrix: admin endpoints', () => {
  it('answers 401 UNAUTHORIZED to no token, a wrong token and an API key; nothing changes', async () => {
    const before = await snapshot(api, f.ws.id);
    const token = api.config.adminToken;
    const bad: [string, string | undefined][] = [
      ['no header', undefined],
      ['"Bearer"', 'Bearer'],
      ['"Bearer  "', 'Bearer  '],
      ['wrong token', 'Bearer wrong-admin-token'],
      ['token without scheme', token],
      ['Basic with the token', `Basic ${Buffer.from(`admin:${token}`).toString('base64')}`],
      ['token + junk', `Bearer ${token}x`],
      ['truncated token', `Bearer ${token.slice(0, -1)}`],
      ['token + word', `Bearer ${token} x`],
      ['API key (all scopes)', `Bearer ${f.ws.key}`],
    ];
    for (const r of adminRoutes) {
      const results = await inBatches(bad, 5, async ([label, header]) => ({ label, res: await send(r, header) }));
      for (const { label, res } of results) {
        expect({ route: routeKey(r), label, status: res.status, code: res.body?.code }).toEqual({
          route: routeKey(r),
          label,
          status: 401,
          code: 'UNAUTHORIZED',
        });
        expectError(res, 401, 'UNAUTHORIZED');
      }
      summary.push(`${r.method.toUpperCase().padEnd(6)} ${r.path.padEnd(52)} 401×${bad.length} (admin token)`);
    }
    expect(await snapshot(api, f.ws.id)).toEqual(before);
    // The real token still works on the same ids (the refusals were not 404s).
    expect((await api.admin('GET', `/admin/v1/workspaces/${f.ws.id}`)).status).toBe(200);
  });
});
