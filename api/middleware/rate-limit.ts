import type { Context } from 'koa';
import { ApiError } from '../../domain/errors';
import { Bucket, BucketState, consume, IP_PROFILES, ipClient, IpProfile, KEY_PROFILES, KeyProfile, tightest } from '../../domain/rate-limit';

/**
 * Rate limits of a request: its buckets counted in PostgreSQL (domain/rate-limit.ts), the
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
  const scale = ctx.deps.config.rateLimitScale;
  return scale === 1 ? buckets : buckets.map((b) => ({ ...b, limit: Math.round(b.limit * scale) }));
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
