import { createHash, timingSafeEqual } from 'node:crypto';
import type { Context, Next } from 'koa';
import { authenticateAndCount, hashApiKey, looksLikeApiKey } from '../../domain/api-keys';
import { ApiError } from '../../domain/errors';
import { bucketStates, IpProfile, KeyProfile } from '../../domain/rate-limit';
import { grants, satisfying, Scope } from '../../domain/scopes';
import { enforce, ipBucket, keyBuckets, record, scaled } from './rate-limit';

/** Who is calling: API keys (with scopes and the plan) for /api/v1, the admin token for /admin/v1. */

function bearer(ctx: Context): string | undefined {
  const header = ctx.get('authorization');
  const match = /^Bearer\s+(\S+)\s*$/i.exec(header);
  return match?.[1];
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
    const scaledIp = scaled(ctx, ip)[0];
    const { key, counted } = await authenticateAndCount(ctx.deps.db, hashApiKey(token), scaledIp ? { name: scaledIp.name, limit: scaledIp.limit } : null, keyProfile ?? null, ctx.deps.config.rateLimitScale);
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
