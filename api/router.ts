import { METHODS } from 'node:http';
import Router from '@koa/router';
import type { Context, Middleware, Next } from 'koa';
import { z, ZodError } from 'zod';
import { ApiError, validationError } from '../domain/errors';
import { unstorableReason } from '../domain/text';
import { adminAuth, apiKeyAuth } from './middleware/auth';
import { requestBody } from './middleware/body';
import { enforce, ipBucket } from './middleware/rate-limit';
import { AnyRoute, koaPath } from './route';
import { IdempotencyHeaders } from './send';

/**
 * Where a validated input holds text PostgreSQL cannot store (domain/text), in a string or a key,
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

function parse<T extends z.ZodType>(schema: T | undefined, value: unknown, where: 'params' | 'query' | 'body' | 'headers'): z.infer<T> | undefined {
  if (!schema) return undefined;
  const result = schema.safeParse(value);
  if (result.success) {
    // Checked on what the schema kept: an unknown field is ignored, whatever it holds.
    const bad = unstorableText(result.data);
    if (!bad) return result.data;
    const field = [where, ...bad.path].map(String).join('.');
    if (where === 'params') throw new ApiError('NOT_FOUND', 'Record not found', { hint: `${field}: ${bad.problem}.` });
    throw new ApiError('VALIDATION', `Invalid ${field}: ${bad.problem}`, { hint: `${field}: ${bad.problem}.` });
  }
  if (where === 'params') {
    // A malformed id names no record: the same answer as an id that does not exist.
    throw new ApiError('NOT_FOUND', 'Record not found', { hint: validationError(result.error as ZodError, 'params').message });
  }
  throw validationError(result.error as ZodError, where);
}

function handle(def: AnyRoute): Middleware {
  return async (ctx: Context) => {
    if (def.noStore) ctx.set('Cache-Control', 'no-store');
    const params = parse(def.params, ctx.params, 'params');
    const query = parse(def.query, ctx.query, 'query');
    const body = parse(def.body, requestBody(ctx) ?? {}, 'body');
    if (def.idempotent) parse(IdempotencyHeaders, { 'Idempotency-Key': ctx.get('idempotency-key') || undefined }, 'headers');
    ctx.status = def.status ?? 200;
    const result = await def.handler(ctx, { params, query, body });
    if (result !== undefined) ctx.body = result;
  };
}

/** Mounts every route: per-IP limit, then authentication and scope, then the body, validation and the handler. */
export function buildRouter(routes: AnyRoute[], body: Middleware): Router {
  // Every method Node knows counts as implemented: one a known path does not take is 405 with Allow (api/app.ts), never 501.
  const router = new Router({ methods: METHODS });
  for (const def of routes) {
    const chain: Middleware[] = [];
    const profile = def.ipProfile;
    // API-key routes count the IP in the same statement that reads the key (apiKeyAuth).
    if (profile && def.auth !== 'apiKey') {
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
