import { METHODS } from 'node:http';
import Router from '@koa/router';
import type { Context, Middleware, Next } from 'koa';
import { z, ZodError } from 'zod';
import { ApiError, unstorableReason, validationError } from '../domain/kernel';
import { adminAuth, apiKeyAuth } from './middleware/auth';
import { requestBody } from './middleware/body';
import { countBatchItems, enforce, ipBucket, record, scaled } from './middleware/rate-limit';
import { IN_MEMORY_IP_PROFILES } from '../domain/access';
import { BATCH_MAX } from '../domain/platform';
import { AnyObject, AnyRoute, BatchItem, koaPath } from './route';
import { setBody } from './schemas';
import { IdempotencyHeaders } from './send';

/**
 * Where a validated input holds text PostgreSQL cannot store (domain/kernel/text), in a string or a key,
 * and why; undefined when all is well. Refused here, naming the field, instead of failing in the
 * database. Iterative: any nesting depth.
 */
function unstorableText(value: unknown): { path: (string | number)[]; problem: string } | undefined {
  const stack: { value: unknown; path: (string | number)[] }[] = [{ value, path: [] }];
  while (stack.length) {
    const { value: v, path } = stack.pop()!;
    if (typeof v === 'string') {
      const problem = unstorableReason(v);
      if (problem) return { path, problem };
    } else if (Array.isArray(v)) {
      v.forEach((item, i) => stack.push({ value: item, path: [...path, i] }));
    } else if (v !== null && typeof v === 'object') {
      for (const [key, item] of Object.entries(v)) {
        const problem = unstorableReason(key);
        if (problem) return { path: [...path, key], problem: `key ${problem}` };
        stack.push({ value: item, path: [...path, key] });
      }
    }
  }
  return undefined;
}

function parse<T extends z.ZodType>(
  schema: T | undefined,
  value: unknown,
  where: 'params' | 'query' | 'body' | 'headers',
  prefix: (string | number)[] = [],
): z.infer<T> | undefined {
  if (!schema) return undefined;
  const result = schema.safeParse(value);
  if (result.success) {
    // Checked on what the schema kept: an unknown field is ignored, whatever it holds.
    const bad = unstorableText(result.data);
    if (!bad) return result.data;
    const field = [where, ...prefix, ...bad.path].map(String).join('.');
    if (where === 'params') throw new ApiError('NOT_FOUND', 'Record not found', { hint: `${field}: ${bad.problem}.` });
    throw new ApiError('VALIDATION', `Invalid ${field}: ${bad.problem}`, { hint: `${field}: ${bad.problem}.` });
  }
  if (where === 'params') {
    // A malformed id names no record: the same answer as an id that does not exist.
    throw new ApiError('NOT_FOUND', 'Record not found', { hint: validationError(result.error as ZodError, 'params').message });
  }
  throw validationError(result.error as ZodError, where, prefix);
}

/**
 * A batch body (RouteDef.batch): the envelope decides for the whole request, each item for itself,
 * with the same checks as a single call's body (schema, then text PostgreSQL cannot store).
 */
function parseBatch(def: AnyRoute, value: unknown): BatchItem[] {
  const { field, schemaFor } = def.batch!;
  const array = (def.body as AnyObject).shape[field] as z.ZodArray<z.ZodType>;
  const envelope = z.object({ [field]: z.array(z.unknown()).min(1).max(BATCH_MAX) });
  const checked = envelope.safeParse(value);
  if (!checked.success) throw validationError(checked.error, 'body');
  return (checked.data[field] as unknown[]).map((raw, index): BatchItem => {
    try {
      return { index, input: parse(schemaFor?.(raw) ?? array.element, raw, 'body', [field, index]) };
    } catch (err) {
      if (err instanceof ApiError) return { index, error: err, raw };
      throw err;
    }
  });
}

function handle(def: AnyRoute): Middleware {
  return async (ctx: Context) => {
    if (def.noStore) ctx.set('Cache-Control', 'no-store');
    const params = parse(def.params, ctx.params, 'params');
    const query = parse(def.query, ctx.query, 'query');
    const items = def.batch ? parseBatch(def, requestBody(ctx) ?? {}) : [];
    const body = def.batch ? undefined : parse(def.body, requestBody(ctx) ?? {}, 'body');
    // A header sent empty (or blank: Node trims it) is checked too: it is not a missing one.
    if (def.idempotent)
      parse(
        IdempotencyHeaders,
        { 'Idempotency-Key': ctx.headers['idempotency-key'] === undefined ? undefined : ctx.get('idempotency-key') },
        'headers',
      );
    // A batch's items count against the key's limit once the body says how many, before any item runs.
    if (def.batch && ctx.state.auth) await countBatchItems(ctx, items.length);
    ctx.status = def.status ?? 200;
    const result = await def.handler(ctx, { params, query, body, items });
    if (result !== undefined) setBody(ctx, result);
  };
}

/**
 * The routes, split by their first GROUP_SEGMENTS path segments: @koa/router tests every route it
 * holds against every request (about 100 regular expressions, 30 µs of a request's CPU), so each
 * request is given only its own group's router. A route with a parameter among those segments (or
 * fewer segments) is in every group, so a request still meets every route that could match it.
 * Paths match case-insensitively, as in @koa/router.
 */
const GROUP_SEGMENTS = 3;

function routeGroup(path: string): string | undefined {
  const segments = path.split('/').slice(1, GROUP_SEGMENTS + 1);
  if (segments.length < GROUP_SEGMENTS || segments.some((s) => s.includes('{'))) return undefined;
  return segments.join('/').toLowerCase();
}

function requestGroup(path: string): string {
  let end = 0;
  for (let i = 0; i < GROUP_SEGMENTS && end !== -1; i++) end = path.indexOf('/', end + 1);
  return (end === -1 ? path.slice(1) : path.slice(1, end)).toLowerCase();
}

/** Mounts every route: per-IP limit, then authentication and scope, then the body, validation and the handler. */
export function buildRouter(routes: AnyRoute[], body: Middleware): { routes(): Middleware; allowedMethods(): Middleware } {
  const groups = new Set(routes.map((def) => routeGroup(def.path)).filter((g) => g !== undefined));
  const routerOf = (group: string | undefined) => {
    const own = routes.filter((def) => routeGroup(def.path) === undefined || routeGroup(def.path) === group);
    const router = mountRoutes(own, body);
    return { routes: router.routes() as Middleware, allowedMethods: router.allowedMethods() as Middleware };
  };
  const byGroup = new Map([...groups].map((group) => [group, routerOf(group)]));
  const rest = routerOf(undefined);
  const of = (ctx: Context) => byGroup.get(requestGroup(ctx.path)) ?? rest;
  return {
    routes: () => (ctx, next) => of(ctx).routes(ctx, next),
    allowedMethods: () => (ctx, next) => of(ctx).allowedMethods(ctx, next),
  };
}

function mountRoutes(routes: AnyRoute[], body: Middleware): Router {
  // Every method Node knows counts as implemented: one a known path does not take is 405 with Allow (api/app.ts), never 501.
  const router = new Router({ methods: METHODS });
  shadowedPathGuards(router, routes);
  for (const def of routes) {
    const chain: Middleware[] = [];
    const profile = def.ipProfile;
    // API-key routes count the IP in the same statement that reads the key (apiKeyAuth).
    if (profile && def.auth !== 'apiKey' && IN_MEMORY_IP_PROFILES.has(profile)) {
      chain.push(async (ctx: Context, next: Next) => {
        record(ctx, ctx.limits.counts.take(scaled(ctx, [ipBucket(ctx, profile)])));
        await next();
      });
    } else if (profile && def.auth !== 'apiKey' && def.ipCountedByHandler) {
      chain.push(async (ctx: Context, next: Next) => {
        ctx.state.ipToCount = ipBucket(ctx, profile);
        try {
          await next();
        } catch (err) {
          // Refused before the handler counted the IP (an unreadable body, say): counted now, and
          // over the limit the 429 is the answer, as when the IP was counted first.
          const ip = ctx.state.ipToCount;
          if (ip) {
            ctx.state.ipToCount = undefined;
            await enforce(ctx, [ip]);
          }
          throw err;
        }
      });
    } else if (profile && def.auth !== 'apiKey') {
      chain.push(async (ctx: Context, next: Next) => {
        await enforce(ctx, [ipBucket(ctx, profile)]);
        await next();
      });
    }
    if (def.auth === 'apiKey') chain.push(apiKeyAuth(def.scopes ?? [], def.keyProfile, profile));
    if (def.auth === 'admin') chain.push(adminAuth);
    chain.push(body, handle(def));
    router.register(koaPath(def.path), [def.method.toUpperCase()], chain);
  }
  return router;
}

/**
 * A concrete path wins over a template that also matches it (OpenAPI's rule): `/api/v1/leads/batch`
 * is not the lead "batch". Mounted before the routes, these answer the methods such a path does not
 * take as any known path does (405 with its own Allow, OPTIONS 200 with it: api/app.ts), where the
 * template's route would answer 404 for a malformed id.
 */
function shadowedPathGuards(router: Router, routes: AnyRoute[]): void {
  const escape = (text: string) => text.replace(/[.*+?^$()|[\]\\]/g, '\\$&');
  const templates = routes
    .filter((r) => r.path.includes('{'))
    .map(
      (r) =>
        new RegExp(
          `^${r.path
            .split(/\{[A-Za-z0-9_]+\}/)
            .map(escape)
            .join('[^/]+')}$`,
        ),
    );
  const declared = new Map<string, Set<string>>();
  for (const def of routes)
    if (!def.path.includes('{')) declared.set(def.path, (declared.get(def.path) ?? new Set()).add(def.method.toUpperCase()));
  for (const [path, methods] of declared) {
    if (!templates.some((t) => t.test(path))) continue;
    const allowed = [...methods, ...(methods.has('GET') ? ['HEAD'] : [])];
    router.register(
      path,
      METHODS.filter((m) => !allowed.includes(m)),
      [
        async (ctx: Context) => {
          ctx.set('Allow', allowed.join(', '));
          if (ctx.method === 'OPTIONS') {
            ctx.status = 200;
            ctx.body = '';
          } else {
            ctx.status = 405;
          }
        },
      ],
    );
  }
}
