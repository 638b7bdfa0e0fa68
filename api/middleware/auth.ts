import { createHash, timingSafeEqual } from 'node:crypto';
import type { Context, Next } from 'koa';
import {
  authenticateAndCount,
  bucketStates,
  grants,
  hashApiKey,
  IpProfile,
  KeyProfile,
  type KeyRow,
  looksLikeApiKey,
  satisfying,
  Scope,
  shardsFor,
  suspension,
} from '../../domain/access';
import { ApiError } from '../../domain/kernel';
import { enforce, ipBucket, keyBuckets, markCountedInMemory, record, scaled } from './rate-limit';
import { CODEC_SESSION_COOKIE, CODEC_SESSION_PATH, validCodecSession } from '../../domain/platform';

/** Who is calling: API keys (with scopes and the plan) for /api/v1, the admin token for /admin/v1. */

function bearer(ctx: Context): string | undefined {
  const header = ctx.get('authorization');
  const match = /^Bearer\s+(\S+)\s*$/i.exec(header);
  return match?.[1];
}

/**
 * API key authentication, then the key's rate limit, then the plan, then the scope:
 * 401 UNAUTHORIZED, 429 RATE_LIMITED, 402 SUBSCRIPTION_INACTIVE / API_ACCESS_DISABLED, 403 INSUFFICIENT_SCOPE.
 *
 * A key read in the last second whose buckets all have large limits (a high-rate integration)
 * needs no statement: the key comes from the process's cache (or from the read another request
 * has under way when the entry went stale) and the request is counted in memory (domain/access/rate-limit
 * LocalCounts). Anything else (an unknown, revoked, expired or stale key, a small limit) takes the
 * one exact statement that reads the key and counts the request.
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
    const hash = hashApiKey(token);
    const scaledIp = scaled(ctx, ip);
    const bucketsOf = (key: KeyRow) => scaled(ctx, keyBuckets(key.id, key.rate_limit_per_minute, keyProfile));
    // Real time, for the key cache and expiry; the rate windows follow domain/kernel/clock (LocalCounts' default).
    const now = Date.now();
    // A key that needs no statement: read in the last second, usable, every bucket's limit large.
    const inMemory = (candidate: KeyRow | undefined) => {
      if (!candidate || candidate.revoked_at || (candidate.expires_at && candidate.expires_at.getTime() <= now)) return undefined;
      const buckets = [...scaledIp, ...bucketsOf(candidate)];
      return buckets.every((b) => shardsFor(b.limit) > 1) ? buckets : undefined;
    };
    // The key from the cache; when its entry went stale, from the exact read another request of
    // this process has under way, if the key was one that needs no statement (a small limit's
    // requests never wait for one another's reads).
    let cached = ctx.limits.keys.get(hash, now);
    let buckets = inMemory(cached);
    if (!buckets && !cached && inMemory(ctx.limits.keys.last(hash))) {
      cached = await ctx.limits.keys.pending(hash);
      buckets = inMemory(cached);
    }
    let key: KeyRow;
    if (cached && buckets) {
      key = cached;
      setAuth(ctx, key);
      markCountedInMemory(ctx);
      // The IP's states first: when both are exhausted, the IP's answers, as on the exact path.
      record(ctx, ctx.limits.counts.take(buckets));
    } else {
      // One round trip: the IP's count, the key, and the key's counts when the key is usable. The
      // statement decides whether the key is usable (not revoked, not expired by the database's
      // clock): then its buckets were counted.
      const usableKey = (found: Awaited<ReturnType<typeof authenticateAndCount>>) =>
        found.key && found.counted.some((row) => row.bucket === `key:${found.key!.id}`) ? found.key : undefined;
      const found = await ctx.limits.keys.read(
        hash,
        now,
        authenticateAndCount(
          ctx.deps.db,
          hash,
          scaledIp[0] ? { name: scaledIp[0].name, limit: scaledIp[0].limit } : null,
          keyProfile ?? null,
          ctx.deps.config.rateLimitScale,
        ),
        usableKey,
      );
      const ipStates = bucketStates(scaledIp, found.counted);
      if (ip.length) record(ctx, ipStates);
      if (!found.key || found.key.revoked_at) throw new ApiError('UNAUTHORIZED', 'Invalid API key');
      if (!usableKey(found)) throw new ApiError('UNAUTHORIZED', 'API key expired');
      key = found.key;
      setAuth(ctx, key);
      const keyStates = bucketStates(bucketsOf(key), found.counted);
      // What this request's statement counted, for the requests of a usable key counted in memory next.
      ctx.limits.counts.learn([...ipStates, ...keyStates]);
      record(ctx, keyStates);
    }
    const suspended = suspension(key, 'api');
    if (suspended) throw suspended;
    if (!grants(key.scopes, scopes)) {
      const accepted = [...new Set(scopes.flatMap(satisfying))];
      throw new ApiError('INSUFFICIENT_SCOPE', 'The API key lacks the scope this endpoint needs', {
        hint: `Needs one of: ${accepted.join(', ')}.`,
      });
    }
    await next();
  };
}

function setAuth(ctx: Context, key: KeyRow): void {
  ctx.state.auth = {
    keyId: key.id,
    keyName: key.name,
    workspaceId: key.workspace_id,
    scopes: key.scopes,
    rateLimitPerMinute: key.rate_limit_per_minute,
  };
}

function sameSecret(a: string, b: string): boolean {
  // Hash first so lengths match and comparison time does not depend on the secret.
  const ha = createHash('sha256').update(a).digest();
  const hb = createHash('sha256').update(b).digest();
  return timingSafeEqual(ha, hb);
}

/** The calls a codec session cookie may make (not the one that issues it). */
const CODEC_CALLS = new Set([`${CODEC_SESSION_PATH}/decode`, `${CODEC_SESSION_PATH}/encode`]);

export async function adminAuth(ctx: Context, next: Next): Promise<void> {
  const expected = ctx.deps.config.adminToken;
  const token = bearer(ctx);
  // The Temporal UI's calls to the codec endpoint carry the operator's session cookie instead.
  const codecCall =
    !token && expected && CODEC_CALLS.has(ctx.path) && validCodecSession(expected, ctx.cookies.get(CODEC_SESSION_COOKIE), Date.now());
  if (codecCall) return next();
  if (!expected || !token || !sameSecret(token, expected)) {
    throw new ApiError('UNAUTHORIZED', 'Missing or invalid admin token', {
      hint: expected ? 'Send Authorization: Bearer <ADMIN_TOKEN>.' : 'The admin API is disabled: ADMIN_TOKEN is not set.',
    });
  }
  await next();
}
