import { createHash, randomBytes } from 'node:crypto';
import type { Db } from '../platform';
import { notFound, iso } from '../kernel';
import {
  COUNT_BUCKETS_CTES,
  DEFAULT_KEY_LIMIT,
  SHARDED_LIMIT,
  SHARDS,
  shardsFor,
  THIS_MINUTE,
  windowAt,
  type CountedRow,
  type KeyProfile,
} from './rate-limit';
import type { Scope } from './scopes';

export const API_KEY_PREFIX = 'vg_live_';

/** A new API key: the secret part is 32 random bytes, base64url. */
export function generateApiKey(): { key: string; hash: string; prefix: string } {
  const key = API_KEY_PREFIX + randomBytes(32).toString('base64url');
  return { key, hash: hashApiKey(key), prefix: key.slice(0, API_KEY_PREFIX.length + 4) };
}

/** Keys are stored only as this hash; SHA-256 suffices for 256-bit random secrets. */
export function hashApiKey(key: string): string {
  return createHash('sha256').update(key).digest('hex');
}

/** Cheap shape check before any database work. */
export function looksLikeApiKey(value: string): boolean {
  return value.startsWith(API_KEY_PREFIX) && value.length > API_KEY_PREFIX.length && value.length <= 200;
}

interface ApiKeyRow {
  id: string;
  name: string;
  key_prefix: string;
  scopes: string[];
  rate_limit_per_minute: number;
  expires_at: Date | null;
  revoked_at: Date | null;
  last_used_at: Date | null;
  created_at: Date;
}

/** A key as the operator sees it: its prefix, never its hash. */
export function serializeApiKey(row: ApiKeyRow) {
  return {
    id: row.id,
    name: row.name,
    prefix: row.key_prefix,
    scopes: row.scopes,
    rateLimitPerMinute: row.rate_limit_per_minute,
    expiresAt: iso(row.expires_at),
    revokedAt: iso(row.revoked_at),
    /** When a request last authenticated with it, to the minute (LAST_USED_EVERY). */
    lastUsedAt: iso(row.last_used_at),
    createdAt: iso(row.created_at),
  };
}

/** A new key of the workspace; `key` is in this answer only (the table keeps its hash). */
export async function createApiKey(
  db: Db,
  workspaceId: string,
  input: { name: string; scopes: Scope[]; rateLimitPerMinute?: number; expiresAt?: Date },
) {
  const { key, hash, prefix } = generateApiKey();
  const [row]: ApiKeyRow[] = await db('api_keys')
    .insert({
      workspace_id: workspaceId,
      name: input.name,
      key_hash: hash,
      key_prefix: prefix,
      scopes: [...new Set(input.scopes)],
      rate_limit_per_minute: input.rateLimitPerMinute ?? DEFAULT_KEY_LIMIT,
      expires_at: input.expiresAt ?? null,
    })
    .returning('*');
  return { ...serializeApiKey(row), key };
}

export async function setApiKeyRateLimit(db: Db, workspaceId: string, keyId: string, rateLimitPerMinute: number) {
  const [row]: ApiKeyRow[] = await db('api_keys')
    .where({ id: keyId, workspace_id: workspaceId })
    .update({ rate_limit_per_minute: rateLimitPerMinute })
    .returning('*');
  if (!row) throw notFound('API key');
  return serializeApiKey(row);
}

/** Revoking twice keeps the first revocation time. */
export async function revokeApiKey(db: Db, workspaceId: string, keyId: string): Promise<{ id: string; deleted: true }> {
  const [row]: { id: string }[] = await db('api_keys')
    .where({ id: keyId, workspace_id: workspaceId })
    .update({ revoked_at: db.raw('coalesce(revoked_at, now())') })
    .returning('id');
  if (!row) throw notFound('API key');
  return { id: row.id, deleted: true };
}

/** A key as authentication reads it, with its workspace's plan flags. */
export interface KeyRow {
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
 * How stale `api_keys.last_used_at` may get: authentication writes it only when it is older, so a
 * busy key costs one row update a minute, not one per request. (A high-rate key is served from
 * the process's cache, but re-read by authenticateAndCount every KEY_CACHE_MS.)
 */
const LAST_USED_EVERY = `interval '1 minute'`;

/**
 * The key (with its workspace's plan flags) and the request counted in the IP bucket and, when
 * the key is neither revoked nor expired, in `key:<id>` and `key:<id>:<profile>`, and its
 * `last_used_at` when that is over LAST_USED_EVERY old: one statement.
 * `scale` is the factor on every limit (RATE_LIMIT_SCALE): it decides, with the key's own limit,
 * whether its bucket is sharded.
 */
export async function authenticateAndCount(
  db: Db,
  keyHash: string,
  ip: { name: string; limit: number } | null,
  profile: KeyProfile | null,
  scale: number,
): Promise<{ key: KeyRow | undefined; counted: CountedRow[] }> {
  const window = windowAt();
  const { rows } = await db.raw<{
    rows: {
      key: (Omit<KeyRow, 'expires_at' | 'revoked_at'> & { expires_at: string | null; revoked_at: string | null }) | null;
      counted: Omit<CountedRow, 'reset'>[] | null;
    }[];
  }>(
    `WITH k AS (
       SELECT k.id, k.name, k.workspace_id, k.scopes, k.rate_limit_per_minute, k.expires_at, k.revoked_at, w.api_access, w.active
         FROM api_keys k JOIN workspaces w ON w.id = k.workspace_id
        WHERE k.key_hash = :hash
     ), usable AS (
       SELECT * FROM k WHERE k.revoked_at IS NULL AND (k.expires_at IS NULL OR k.expires_at > now())
     ), used AS (
       -- Never waits: a row another statement is writing (another request's update, a revocation) is skipped.
       UPDATE api_keys SET last_used_at = now()
        WHERE id IN (SELECT x.id FROM api_keys x JOIN usable k ON k.id = x.id
                      WHERE x.last_used_at IS NULL OR x.last_used_at < now() - ${LAST_USED_EVERY}
                        FOR UPDATE OF x SKIP LOCKED)
     ), ${COUNT_BUCKETS_CTES(`
         SELECT name, shards, 1 AS n, ${THIS_MINUTE} AS window_start FROM (
           SELECT CAST(:ip AS text) AS name, CAST(:ipShards AS int) AS shards WHERE CAST(:ip AS text) IS NOT NULL
           UNION ALL
           SELECT v.name, v.shards FROM usable k, LATERAL (VALUES
               ('key:' || k.id, CASE WHEN k.rate_limit_per_minute * CAST(:scale AS float8) >= ${SHARDED_LIMIT} THEN ${SHARDS} ELSE 1 END),
               ('key:' || k.id || ':' || CAST(:profile AS text), 1)) AS v(name, shards)
            WHERE v.name IS NOT NULL
         ) AS requested`)}
     SELECT (SELECT row_to_json(k) FROM k) AS key, (SELECT json_agg(counted) FROM counted) AS counted`,
    { hash: keyHash, ip: ip?.name ?? null, ipShards: ip ? shardsFor(ip.limit) : 1, profile, scale, windowStart: window.windowStart },
  );
  const raw = rows[0].key;
  const key: KeyRow | undefined = raw
    ? { ...raw, expires_at: raw.expires_at ? new Date(raw.expires_at) : null, revoked_at: raw.revoked_at ? new Date(raw.revoked_at) : null }
    : undefined;
  return { key, counted: (rows[0].counted ?? []).map((row) => ({ ...row, reset: window.resetSeconds })) };
}
