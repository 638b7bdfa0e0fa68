import type { Db } from './db';

/**
 * Rate limits are fixed one-minute windows counted in PostgreSQL, so every API replica shares
 * them. One statement increments every bucket a request touches and returns the counts.
 */

/** Per-IP limits applied before authentication, by operation profile (requests per minute). */
export const IP_PROFILES = {
  pipelines: 120, // the API contract's figure for GET /api/v1/pipelines
  read: 600,
  write: 300,
  delete: 120,
  send: 120,
  coldSend: 60,
  webhookIn: 600,
  admin: 600,
} as const;
export type IpProfile = keyof typeof IP_PROFILES;

/** Per-key limits that hold even when the key's own limit is higher. */
export const KEY_PROFILES = {
  send: 15,
  coldSend: 5,
} as const;
export type KeyProfile = keyof typeof KEY_PROFILES;

export const DEFAULT_KEY_LIMIT = 100;

export interface Bucket {
  /** Unique bucket name, e.g. `ip:pipelines:1.2.3.4` or `key:<id>`. */
  name: string;
  limit: number;
  /** The 429 code this bucket answers with when exhausted. */
  code: string;
}

export interface BucketState extends Bucket {
  count: number;
  remaining: number;
  resetSeconds: number;
}

/**
 * A bucket whose limit is at least SHARDED_LIMIT requests a minute is counted on SHARDS rows (one
 * per database connection: backend pid modulo SHARDS), so concurrent requests on different
 * connections never wait for one another's row lock; its count is the sum of the rows. A request
 * sees the others' increments committed before its statement began, so concurrent requests at the
 * limit can overshoot it by at most the number of statements in flight at that instant (at most
 * the pool size of every API process together): well under 1% of such a limit in practice, and
 * tested. Smaller limits (the send profiles, small keys) stay on one row and are exact.
 */
export const SHARDED_LIMIT = 600;
export const SHARDS = 8;

export function shardsFor(limit: number): number {
  return limit >= SHARDED_LIMIT ? SHARDS : 1;
}

/**
 * Counts one request in each bucket named by `namesSql` (a query with `name` and `shards`
 * columns): two CTEs, `counted` holding each bucket's total after this request, usable alone or
 * in a larger statement (see authenticateAndCount). Names are taken in sorted order, so concurrent
 * multi-row upserts never deadlock.
 */
export const COUNT_BUCKETS_CTES = (namesSql: string): string =>
  `counted_rows AS (
     INSERT INTO rate_limit_counters AS c (bucket, window_start, shard, count)
     SELECT name, date_trunc('minute', now()), (pg_backend_pid() % shards)::smallint, 1 FROM (${namesSql}) AS names ORDER BY name
     ON CONFLICT (bucket, window_start, shard) DO UPDATE SET count = c.count + 1
     RETURNING bucket, window_start, shard, count
   ), counted AS (
     SELECT r.bucket,
            (r.count + coalesce((SELECT sum(o.count) FROM rate_limit_counters o
                                  WHERE o.bucket = r.bucket AND o.window_start = r.window_start AND o.shard <> r.shard), 0))::int AS count,
            ceil(extract(epoch FROM (r.window_start + interval '1 minute' - now()))) AS reset
       FROM counted_rows r
   )`;

export interface CountedRow {
  bucket: string;
  count: number;
  reset: string | number;
}

export async function consume(db: Db, buckets: Bucket[]): Promise<BucketState[]> {
  if (buckets.length === 0) return [];
  const result = await db.raw<{ rows: CountedRow[] }>(
    `WITH ${COUNT_BUCKETS_CTES('SELECT unnest(?::text[]) AS name, unnest(?::int[]) AS shards')} SELECT bucket, count, reset FROM counted`,
    [buckets.map((b) => b.name), buckets.map((b) => shardsFor(b.limit))],
  );
  return bucketStates(buckets, result.rows);
}

/** The buckets' states from the counted rows (a bucket not counted is reported as untouched). */
export function bucketStates(buckets: Bucket[], rows: CountedRow[]): BucketState[] {
  const byName = new Map(rows.map((r) => [r.bucket, r]));
  return buckets.map((bucket) => {
    const row = byName.get(bucket.name)!;
    return {
      ...bucket,
      count: row.count,
      remaining: Math.max(0, bucket.limit - row.count),
      resetSeconds: Math.max(1, Number(row.reset)),
    };
  });
}

/** The bucket to report in headers: the one closest to its limit. */
export function tightest(states: BucketState[]): BucketState | undefined {
  return states.reduce<BucketState | undefined>(
    (best, s) => (best === undefined || s.remaining < best.remaining ? s : best),
    undefined,
  );
}

export async function pruneCounters(db: Db): Promise<number> {
  return db('rate_limit_counters').where('window_start', '<', db.raw(`now() - interval '2 minutes'`)).delete();
}
