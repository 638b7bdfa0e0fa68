import { randomUUID, timingSafeEqual, createHash } from 'node:crypto';
import type { Context, Next } from 'koa';
import { koaBody } from 'koa-body';
import { ZodError } from 'zod';
import { ApiError, validationError } from '../domain/errors';
import { hashApiKey, looksLikeApiKey } from '../domain/api-keys';
import { bucketStates, consume, COUNT_BUCKETS_SQL, CountedRow, tightest, Bucket, BucketState, IP_PROFILES, IpProfile, KEY_PROFILES, KeyProfile } from '../domain/rate-limit';
import { isDatabaseUnavailable, type Db } from '../domain/db';
import { grants, satisfying, Scope } from '../domain/scopes';

const REQUEST_ID = /^[A-Za-z0-9._-]{1,128}$/;

/** Paths that carry a secret in the URL are logged with the secret masked. */
export function loggablePath(path: string): string {
  return path.replace(/(\/webhook-in\/)[^/?]+/, '$1[redacted]');
}

/** Request id, one structured log line per request, and the flat error body for every failure. */
export async function requestContext(ctx: Context, next: Next): Promise<void> {
  const incoming = ctx.get('x-request-id');
  const requestId = REQUEST_ID.test(incoming) ? incoming : randomUUID();
  ctx.state.requestId = requestId;
  ctx.state.log = ctx.deps.logger.child({ reqId: requestId });
  ctx.set('X-Request-Id', requestId);
  const started = process.hrtime.bigint();
  try {
    await next();
  } catch (err) {
    renderError(ctx, err);
  } finally {
    const ms = Number(process.hrtime.bigint() - started) / 1e6;
    const line = {
      method: ctx.method,
      path: loggablePath(ctx.path),
      status: ctx.status,
      ms: Math.round(ms * 10) / 10,
      workspaceId: ctx.state.auth?.workspaceId,
    };
    if (ctx.status >= 500) ctx.state.log.error(line, 'request failed');
    else ctx.state.log.info(line, 'request');
  }
}

function renderError(ctx: Context, err: unknown): void {
  let apiError: ApiError;
  if (err instanceof ApiError) apiError = err;
  else if (err instanceof ZodError) apiError = validationError(err, 'body');
  else if (isPgError(err, '23505')) {
    apiError = new ApiError('CONFLICT', 'A record with the same unique value already exists', { hint: `Constraint ${err.constraint ?? 'unique'}.` });
  } else if (isPgError(err, '23503')) {
    // A referenced record vanished between our check and the write (e.g. deleted concurrently).
    apiError = new ApiError('CONFLICT', 'A referenced record no longer exists', { hint: 'Re-read the records and retry.' });
  } else if (isDatabaseUnavailable(err)) {
    ctx.state.log?.warn({ code: (err as { code?: string }).code, message: (err as Error).message }, 'database unavailable');
    apiError = new ApiError('UNAVAILABLE', 'The database is unavailable', { hint: 'Retry in a few seconds.', headers: { 'Retry-After': '5' } });
  } else if (isHttpError(err) && err.status === 413) {
    apiError = new ApiError('PAYLOAD_TOO_LARGE', 'Request body too large', { hint: 'The limit is 1 MiB.' });
  } else if (isHttpError(err) && err.status === 415) {
    apiError = new ApiError('UNSUPPORTED_MEDIA_TYPE', 'Unsupported content type', { hint: 'Send Content-Type: application/json.' });
  } else if (isHttpError(err) && err.status === 400) {
    apiError = new ApiError('VALIDATION', 'Malformed JSON body', { hint: err.message });
  } else {
    ctx.state.log?.error({ err }, 'unhandled error');
    apiError = new ApiError('INTERNAL', 'Internal error', { hint: `Quote request id ${ctx.state.requestId} when reporting this.` });
  }
  ctx.status = apiError.status;
  ctx.body = apiError.toBody();
  for (const [name, value] of Object.entries(apiError.headers ?? {})) ctx.set(name, value);
}

function isPgError(err: unknown, code: string): err is { code: string; constraint?: string } {
  return typeof err === 'object' && err !== null && (err as { code?: unknown }).code === code && 'severity' in err;
}

function isHttpError(err: unknown): err is { status: number; message: string; expose?: boolean } {
  return typeof err === 'object' && err !== null && typeof (err as { status?: unknown }).status === 'number';
}

const BODY_METHODS = new Set(['POST', 'PUT', 'PATCH', 'DELETE']);

/**
 * JSON bodies only, at most 1 MiB; anything else is 415, malformed JSON 400 VALIDATION. Where
 * `anyContentType` says so (the inbound automation receiver: senders label JSON as text/plain or
 * nothing at all), the body is read as JSON whatever its label, and what is not JSON is 400.
 */
export function jsonBody(limit = '1mb', options: { anyContentType?: (ctx: Context) => boolean } = {}) {
  const parse = koaBody({
    json: true,
    multipart: false,
    urlencoded: false,
    text: false,
    jsonLimit: limit,
    jsonStrict: true,
    includeUnparsed: true,
    parsedMethods: ['POST', 'PUT', 'PATCH', 'DELETE'] as never,
    onError: (err: Error) => {
      throw err;
    },
  });
  return async (ctx: Context, next: Next): Promise<void> => {
    if (BODY_METHODS.has(ctx.method) && hasBody(ctx)) {
      const declaredJson = ctx.is('application/json', 'application/*+json');
      const anyType = !declaredJson && options.anyContentType?.(ctx);
      if (!declaredJson && !anyType) {
        throw new ApiError('UNSUPPORTED_MEDIA_TYPE', `Unsupported content type "${ctx.get('content-type') || 'none'}"`, {
          hint: 'Send Content-Type: application/json.',
        });
      }
      const declared = Number(ctx.get('content-length'));
      if (Number.isFinite(declared) && declared > 1024 * 1024) {
        throw new ApiError('PAYLOAD_TOO_LARGE', 'Request body too large', { hint: 'The limit is 1 MiB.' });
      }
      if (anyType) {
        await readAsJson(ctx, 1024 * 1024);
      } else {
        await parse(ctx, async () => undefined);
      }
      assertShallow((ctx.request as { body?: unknown }).body);
    }
    await next();
  };
}

/** How deeply objects and arrays may nest in a JSON body (no endpoint needs more than a handful). */
export const MAX_JSON_DEPTH = 64;

/**
 * JSON.parse reads any depth, but what comes after does not: JSON.stringify (jsonb columns,
 * Temporal payloads, logs) overflows the stack around a few thousand levels, which surfaced as
 * 500 INTERNAL or 503 UNAVAILABLE. A body nested deeper than MAX_JSON_DEPTH is 400 VALIDATION,
 * checked iteratively (a recursive walk would overflow on the same input).
 */
function assertShallow(body: unknown): void {
  if (body === null || typeof body !== 'object') return;
  const stack: [object, number][] = [[body, 1]];
  while (stack.length > 0) {
    const [value, depth] = stack.pop()!;
    if (depth > MAX_JSON_DEPTH) {
      throw new ApiError('VALIDATION', 'The JSON body is nested too deeply', { hint: `At most ${MAX_JSON_DEPTH} levels of objects and arrays.` });
    }
    for (const child of Array.isArray(value) ? value : Object.values(value)) {
      if (child !== null && typeof child === 'object') stack.push([child, depth + 1]);
    }
  }
}

async function readAsJson(ctx: Context, maxBytes: number): Promise<void> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of ctx.req as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size > maxBytes) throw new ApiError('PAYLOAD_TOO_LARGE', 'Request body too large', { hint: 'The limit is 1 MiB.' });
    chunks.push(chunk);
  }
  const raw = Buffer.concat(chunks).toString('utf8');
  try {
    (ctx.request as { body?: unknown }).body = JSON.parse(raw);
  } catch (err) {
    throw new ApiError('VALIDATION', 'The body is not JSON', { hint: (err as Error).message });
  }
  (ctx.request as { rawBody?: string }).rawBody = raw;
}

function hasBody(ctx: Context): boolean {
  return Number(ctx.get('content-length') || 0) > 0 || ctx.get('transfer-encoding') !== '';
}

/** The parsed JSON body, or undefined when none was sent. */
export function requestBody(ctx: Context): unknown {
  const body = (ctx.request as { body?: unknown }).body;
  if (body === undefined || body === null) return undefined;
  if (typeof body === 'object' && !Array.isArray(body) && Object.keys(body).length === 0 && !hasBody(ctx)) return undefined;
  return body;
}

/**
 * The headers report the key's state (its own limit or a per-key profile, whichever is nearer
 * exhaustion); before authentication, or when the IP limit is what stopped the request, the IP's.
 */
export function setRateLimitHeaders(ctx: Context, states: BucketState[]): void {
  const exceeded = states.find((s) => s.count > s.limit);
  const keyStates = states.filter((s) => s.name.startsWith('key:'));
  const report = exceeded ?? tightest(keyStates.length ? keyStates : states);
  if (!report) return;
  ctx.set('X-RateLimit-Limit', String(report.limit));
  ctx.set('X-RateLimit-Remaining', String(report.remaining));
  ctx.set('X-RateLimit-Reset', String(report.resetSeconds));
}

/** Counts the request in every bucket; answers 429 with Retry-After and the bucket's code when one is exhausted. */
export async function enforce(ctx: Context, buckets: Bucket[]): Promise<void> {
  record(ctx, await consume(ctx.deps.db, scaled(ctx, buckets)));
}

/** RATE_LIMIT_SCALE (benchmarks) applied to every limit. */
function scaled(ctx: Context, buckets: Bucket[]): Bucket[] {
  const scale = ctx.deps.config.rateLimitScale;
  return scale === 1 ? buckets : buckets.map((b) => ({ ...b, limit: Math.round(b.limit * scale) }));
}

/** Keeps the counted states for the headers, and answers 429 when one is exhausted. */
function record(ctx: Context, states: BucketState[]): void {
  ctx.state.rateLimit = [...(ctx.state.rateLimit ?? []), ...states];
  setRateLimitHeaders(ctx, ctx.state.rateLimit);
  const exceeded = states.find((s) => s.count > s.limit);
  if (exceeded) {
    throw new ApiError(exceeded.code as never, 'Too many requests', {
      hint: `Limit of ${exceeded.limit} requests per minute reached; retry after ${exceeded.resetSeconds} s.`,
      headers: { 'Retry-After': String(exceeded.resetSeconds) },
    });
  }
}

export function ipBucket(ctx: Context, profile: IpProfile): Bucket {
  return { name: `ip:${profile}:${ctx.ip}`, limit: IP_PROFILES[profile], code: 'IP_RATE_LIMITED' };
}

export function keyBuckets(keyId: string, keyLimit: number, profile?: KeyProfile): Bucket[] {
  const buckets: Bucket[] = [{ name: `key:${keyId}`, limit: keyLimit, code: 'RATE_LIMITED' }];
  if (profile) {
    buckets.push({
      name: `key:${keyId}:${profile}`,
      limit: KEY_PROFILES[profile],
      code: profile === 'coldSend' ? 'COLD_SEND_RATE_LIMITED' : 'SEND_RATE_LIMITED',
    });
  }
  return buckets;
}

function bearer(ctx: Context): string | undefined {
  const header = ctx.get('authorization');
  const match = /^Bearer\s+(\S+)\s*$/i.exec(header);
  return match?.[1];
}

interface KeyRow {
  id: string;
  name: string;
  workspace_id: string;
  scopes: string[];
  rate_limit_per_minute: number;
  expires_at: Date | null;
  revoked_at: Date | null;
  api_access: boolean;
  active: boolean;
}

/**
 * API key authentication, then the key's rate limit, then the plan, then the scope:
 * 401 UNAUTHORIZED, 429 RATE_LIMITED, 402 SUBSCRIPTION_INACTIVE / API_ACCESS_DISABLED, 403 INSUFFICIENT_SCOPE.
 */
export function apiKeyAuth(scopes: Scope[], keyProfile?: KeyProfile, ipProfile?: IpProfile) {
  return async (ctx: Context, next: Next): Promise<void> => {
    const ip = ipProfile ? [ipBucket(ctx, ipProfile)] : [];
    const token = bearer(ctx);
    if (!token || !looksLikeApiKey(token)) {
      if (ip.length) await enforce(ctx, ip);
      throw new ApiError('UNAUTHORIZED', 'Missing or invalid API key', {
        hint: 'Send Authorization: Bearer vg_live_<secret>.',
      });
    }
    // One round trip: the IP's count, the key, and the key's counts when the key is usable.
    const { key, counted } = await authenticateAndCount(ctx.deps.db, hashApiKey(token), ip[0]?.name ?? null, keyProfile ?? null);
    // The statement decided whether the key is usable (not revoked, not expired by the database's clock): its buckets were counted.
    const usable = key !== undefined && counted.some((row) => row.bucket === `key:${key.id}`);
    if (ip.length) record(ctx, bucketStates(scaled(ctx, ip), counted));
    if (!key || key.revoked_at) throw new ApiError('UNAUTHORIZED', 'Invalid API key');
    if (!usable) throw new ApiError('UNAUTHORIZED', 'API key expired');
    ctx.state.auth = {
      keyId: key.id,
      keyName: key.name,
      workspaceId: key.workspace_id,
      scopes: key.scopes,
      rateLimitPerMinute: key.rate_limit_per_minute,
    };
    record(ctx, bucketStates(scaled(ctx, keyBuckets(key.id, key.rate_limit_per_minute, keyProfile)), counted));
    if (!key.active) throw new ApiError('SUBSCRIPTION_INACTIVE', 'The workspace subscription is inactive');
    if (!key.api_access) throw new ApiError('API_ACCESS_DISABLED', 'API access is not available on the workspace plan');
    if (!grants(key.scopes, scopes)) {
      const accepted = [...new Set(scopes.flatMap(satisfying))];
      throw new ApiError('INSUFFICIENT_SCOPE', 'The API key lacks the scope this endpoint needs', {
        hint: `Needs one of: ${accepted.join(', ')}.`,
      });
    }
    await next();
  };
}

/**
 * The key (with its workspace's plan flags) and the request counted in the IP bucket and, when
 * the key is neither revoked nor expired, in `key:<id>` and `key:<id>:<profile>`: one statement.
 */
async function authenticateAndCount(db: Db, keyHash: string, ipBucketName: string | null, profile: KeyProfile | null): Promise<{ key: KeyRow | undefined; counted: CountedRow[] }> {
  const { rows } = await db.raw<{ rows: { key: (Omit<KeyRow, 'expires_at' | 'revoked_at'> & { expires_at: string | null; revoked_at: string | null }) | null; counted: CountedRow[] | null }[] }>(
    `WITH k AS (
       SELECT k.id, k.name, k.workspace_id, k.scopes, k.rate_limit_per_minute, k.expires_at, k.revoked_at, w.api_access, w.active
         FROM api_keys k JOIN workspaces w ON w.id = k.workspace_id
        WHERE k.key_hash = :hash
     ), counted AS (
       ${COUNT_BUCKETS_SQL(`
         SELECT CAST(:ip AS text) AS name WHERE CAST(:ip AS text) IS NOT NULL
         UNION ALL
         SELECT n FROM k, LATERAL (VALUES ('key:' || k.id), ('key:' || k.id || ':' || CAST(:profile AS text))) AS v(n)
          WHERE k.revoked_at IS NULL AND (k.expires_at IS NULL OR k.expires_at > now()) AND n IS NOT NULL`)}
     )
     SELECT (SELECT row_to_json(k) FROM k) AS key, (SELECT json_agg(counted) FROM counted) AS counted`,
    { hash: keyHash, ip: ipBucketName, profile },
  );
  const raw = rows[0].key;
  const key: KeyRow | undefined = raw
    ? { ...raw, expires_at: raw.expires_at ? new Date(raw.expires_at) : null, revoked_at: raw.revoked_at ? new Date(raw.revoked_at) : null }
    : undefined;
  return { key, counted: rows[0].counted ?? [] };
}

function sameSecret(a: string, b: string): boolean {
  // Hash first so lengths match and comparison time does not depend on the secret.
  const ha = createHash('sha256').update(a).digest();
  const hb = createHash('sha256').update(b).digest();
  return timingSafeEqual(ha, hb);
}

export async function adminAuth(ctx: Context, next: Next): Promise<void> {
  const expected = ctx.deps.config.adminToken;
  const token = bearer(ctx);
  if (!expected || !token || !sameSecret(token, expected)) {
    throw new ApiError('UNAUTHORIZED', 'Missing or invalid admin token', {
      hint: expected ? 'Send Authorization: Bearer <ADMIN_TOKEN>.' : 'The admin API is disabled: ADMIN_TOKEN is not set.',
    });
  }
  await next();
}

