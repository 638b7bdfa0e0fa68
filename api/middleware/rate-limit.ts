import type { Context } from 'koa';
import { ApiError } from '../../domain/kernel';
import {
  Bucket,
  BucketState,
  consume,
  consumeIfRoom,
  IP_PROFILES,
  ipClient,
  IpProfile,
  KEY_PROFILES,
  KeyProfile,
  tightest,
} from '../../domain/access';

/**
 * Rate limits of a request: its buckets counted in PostgreSQL (domain/access/rate-limit.ts), the
 * `X-RateLimit-*` headers, and 429 with `Retry-After` and the bucket's code when one is exhausted.
 */

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
export function scaled(ctx: Context, buckets: Bucket[]): Bucket[] {
  return ctx.deps.config.rateLimitScale === 1 ? buckets : buckets.map((b) => ({ ...b, limit: scaledLimit(ctx, b.limit) }));
}

/** One limit with RATE_LIMIT_SCALE applied (a bucket whose name only its statement knows). */
export function scaledLimit(ctx: Context, limit: number): number {
  return Math.round(limit * ctx.deps.config.rateLimitScale);
}

/** Keeps the counted states for the headers, and answers 429 when one is exhausted. */
export function record(ctx: Context, states: BucketState[]): void {
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

/** Requests whose key authentication counted in memory (LocalCounts), not with a statement. */
const countedInMemory = new WeakSet<Context>();

/** Authentication counted this request in memory: a batch's items are counted there too. */
export function markCountedInMemory(ctx: Context): void {
  countedInMemory.add(ctx);
}

/**
 * A batch of N items counts N against the key's own per-minute limit: authentication counted the
 * request (one), this takes the other N - 1, before any item runs, only if they all fit; else the
 * whole batch is 429 RATE_LIMITED, its items not counted (the request stays counted, as any
 * refused request). Per-IP limits count the request once. The items are counted where
 * authentication counted the request: with one statement (consumeIfRoom; exact for limits under
 * 600), or in memory when it needed none (every limit large: LocalCounts); so a batch route, whose
 * `write` IP profile is small, takes one statement more than a single call.
 */
export async function countBatchItems(ctx: Context, items: number): Promise<void> {
  const auth = ctx.state.auth!;
  const extra = items - 1;
  if (extra <= 0) return;
  const [key] = scaled(ctx, keyBuckets(auth.keyId, auth.rateLimitPerMinute));
  const bucket = { ...key, n: extra };
  let result: { state: BucketState; taken: boolean };
  if (countedInMemory.has(ctx)) {
    result = ctx.limits.counts.takeIfRoom(bucket);
  } else {
    result = await consumeIfRoom(ctx.deps.db, bucket);
    // The requests of this key counted in memory next start from it.
    ctx.limits.counts.learn([result.state]);
  }
  const { state, taken } = result;
  // The key's state after the items replaces the one authentication counted, for the headers.
  const { n: _n, ...counted } = state as BucketState & { n?: number };
  ctx.state.rateLimit = [...(ctx.state.rateLimit ?? []).filter((s) => s.name !== counted.name), counted];
  setRateLimitHeaders(ctx, ctx.state.rateLimit);
  if (!taken) {
    throw new ApiError('RATE_LIMITED', 'Too many requests', {
      hint:
        `A batch counts one request per item: ${items} items, and the key has ${counted.remaining} of its ${counted.limit} requests a minute left ` +
        `(this request counted as one). ${counted.remaining > 0 ? `Send at most ${counted.remaining} items, or retry` : 'Retry'} after ${counted.resetSeconds} s.`,
      headers: { 'Retry-After': String(counted.resetSeconds) },
    });
  }
}

/** A path of the public API, whose every answer carries the rate-limit headers (matched as the router does: in any case). */
export function isApiPath(path: string): boolean {
  const lower = path.toLowerCase();
  return lower === '/api/v1' || lower.startsWith('/api/v1/');
}

/**
 * Counts the request against the IP's profile in memory (LocalCounts: no statement, so it works
 * while PostgreSQL is unreachable) and sets the headers from it. For /api/v1 answers no counter
 * reached: the OpenAPI document (which `record` then limits), and the answers given before any
 * counter ran (413 from a declared Content-Length, a 503 of an unreachable database).
 */
export function countIpInMemory(ctx: Context, profile: IpProfile = 'read'): BucketState[] {
  const states = ctx.limits.counts.take(scaled(ctx, [ipBucket(ctx, profile)]));
  setRateLimitHeaders(ctx, states);
  return states;
}

export function ipBucket(ctx: Context, profile: IpProfile): Bucket {
  return { name: `ip:${profile}:${ipClient(ctx.ip)}`, limit: IP_PROFILES[profile], code: 'IP_RATE_LIMITED' };
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
