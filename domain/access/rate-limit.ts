import ipaddr from 'ipaddr.js';
import { clock } from '../kernel';
import type { Db } from '../platform';

/**
 * Rate limits are fixed one-minute windows counted in PostgreSQL, so every API replica shares
 * them. One statement increments every bucket a request touches and returns the counts.
 *
 * The window is the calendar minute of the process's clock (domain/kernel/clock.ts), not of
 * PostgreSQL's: each statement is given the window's start as a bound parameter (windowAt), and
 * the seconds until it ends are computed from the same instant. So the replicas' own clocks decide
 * which minute a request counts in: replicas skewed by a few milliseconds (NTP) disagree only on
 * the requests of those milliseconds around the minute's turn. Tests set the clock of the process
 * they run the API in; production never does.
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
  ready: 120, // GET /ready: a probe every few seconds from each checker, far from it; each call pings PostgreSQL and Temporal
} as const;
export type IpProfile = keyof typeof IP_PROFILES;

/**
 * Profiles counted in memory (LocalCounts), never with a statement of their own: `/ready` must
 * answer its own 503 body when PostgreSQL is down, not fail on counting. Shared across replicas by
 * the flush, like the large limits.
 */
export const IN_MEMORY_IP_PROFILES: ReadonlySet<IpProfile> = new Set<IpProfile>(['ready']);

/** Per-key limits that hold even when the key's own limit is higher. */
export const KEY_PROFILES = {
  send: 15,
  coldSend: 5,
} as const;
export type KeyProfile = keyof typeof KEY_PROFILES;

export const DEFAULT_KEY_LIMIT = 100;

/**
 * The client a per-IP limit counts: an IPv4 address as it is; an IPv4-mapped IPv6 address
 * (`::ffff:a.b.c.d`, what a dual-stack socket reports) as its IPv4 address; any other IPv6
 * address as its /64 (`2001:db8:1:2::/64`), the smallest network a subscriber is given, which
 * holds 2^64 addresses it may use at will. Anything else (not an address) as it is.
 */
export function ipClient(ip: string): string {
  if (!ip.includes(':')) return ip;
  // Parsing an IPv6 address cost 40-50 µs of a request's CPU (what a dual-stack socket reports for
  // every IPv4 client too): remembered per address, the map emptied when it fills.
  let client = ipv6Clients.get(ip);
  if (client === undefined) {
    if (ipv6Clients.size >= IPV6_CLIENTS_MAX) ipv6Clients.clear();
    client = ipv6Client(ip);
    ipv6Clients.set(ip, client);
  }
  return client;
}
const IPV6_CLIENTS_MAX = 10_000;
const ipv6Clients = new Map<string, string>();

function ipv6Client(ip: string): string {
  if (!ipaddr.IPv6.isValid(ip)) return ip;
  const v6 = ipaddr.IPv6.parse(ip);
  if (v6.isIPv4MappedAddress()) return v6.toIPv4Address().toString();
  return `${new ipaddr.IPv6([...v6.parts.slice(0, 4), 0, 0, 0, 0]).toString()}/64`;
}

export interface Bucket {
  /** Unique bucket name, e.g. `ip:pipelines:1.2.3.4`, `ip:read:2001:db8:1:2::/64` or `key:<id>`. */
  name: string;
  limit: number;
  /** The 429 code this bucket answers with when exhausted. */
  code: string;
  /** How many units this request takes from the bucket (a batch of N items takes N); 1 when unset. */
  n?: number;
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

export const WINDOW_MS = 60_000;

/** A rate-limit window as an instant of the clock sees it: the calendar minute it falls in. */
export interface RateWindow {
  /** The minute's first millisecond (ms since the epoch). */
  start: number;
  /** `start` as the bound value of THIS_MINUTE (ISO 8601). */
  windowStart: string;
  /** Seconds from the instant to the minute's end, rounded up, at least 1 (`X-RateLimit-Reset`, `Retry-After`). */
  resetSeconds: number;
}

/** The window a request counted at `at` (the clock's reading) falls in. */
export function windowAt(at: number = clock.now()): RateWindow {
  const start = Math.floor(at / WINDOW_MS) * WINDOW_MS;
  return { start, windowStart: new Date(start).toISOString(), resetSeconds: Math.max(1, Math.ceil((start + WINDOW_MS - at) / 1000)) };
}

/**
 * The `window_start` of a request counted now: the named binding `windowStart`, a RateWindow's
 * (never PostgreSQL's now(): the clock decides the window, and the text stays one statement).
 */
export const THIS_MINUTE = `CAST(:windowStart AS timestamptz)`;

/**
 * Adds `n` requests to each bucket named by `namesSql` (a query with `name`, `shards`, `n` and
 * `window_start` columns), on this connection's shard row: two CTEs, `counted` holding each
 * bucket's total across its rows afterwards, usable alone or in a larger statement (see
 * authenticateAndCount, LocalCounts). Names are taken in sorted order, so concurrent multi-row
 * upserts never deadlock. No binding of its own: the caller's window is in `namesSql`.
 */
export const COUNT_BUCKETS_CTES = (namesSql: string): string =>
  `counted_rows AS (
     INSERT INTO rate_limit_counters AS c (bucket, window_start, shard, count)
     SELECT name, window_start, (pg_backend_pid() % shards)::smallint, n FROM (${namesSql}) AS names ORDER BY name
     ON CONFLICT (bucket, window_start, shard) DO UPDATE SET count = c.count + EXCLUDED.count
     RETURNING bucket, window_start, shard, count
   ), counted AS (
     SELECT r.bucket, r.window_start,
            (r.count + coalesce((SELECT sum(o.count) FROM rate_limit_counters o
                                  WHERE o.bucket = r.bucket AND o.window_start = r.window_start AND o.shard <> r.shard), 0))::int AS count
       FROM counted_rows r
   )`;

/** A bucket's total in a window, and the seconds until the window ends (its RateWindow's resetSeconds). */
export interface CountedRow {
  bucket: string;
  count: number;
  reset: number;
}

/** Adds each bucket's `n` (1 when unset) to its count in the clock's current minute and returns the buckets' states (one statement). */
export async function consume(db: Db, buckets: Bucket[]): Promise<BucketState[]> {
  if (buckets.length === 0) return [];
  const window = windowAt();
  const result = await db.raw<{ rows: { bucket: string; count: number }[] }>(
    `WITH ${COUNT_BUCKETS_CTES(
      `SELECT unnest(CAST(:names AS text[])) AS name, unnest(CAST(:shards AS int[])) AS shards, unnest(CAST(:n AS int[])) AS n, ${THIS_MINUTE} AS window_start`,
    )} SELECT bucket, count FROM counted`,
    {
      names: buckets.map((b) => b.name),
      shards: buckets.map((b) => shardsFor(b.limit)),
      n: buckets.map((b) => b.n ?? 1),
      windowStart: window.windowStart,
    },
  );
  return bucketStates(
    buckets,
    result.rows.map((row) => ({ ...row, reset: window.resetSeconds })),
  );
}

/**
 * Takes `n` more from a bucket only if they all fit under its limit, in one statement: a batch's
 * items beyond the request itself (api/middleware/rate-limit.ts countBatchItems), on the same rows
 * as consume. The upsert's row lock makes concurrent takers on this row count one after another
 * against its latest count, so a bucket on one row (limits under SHARDED_LIMIT) holds its limit
 * exactly; a sharded one reads the other rows as of its statement's start, consume's overshoot
 * bound. Taken or not, the state is the bucket's count afterwards (refused: as last seen).
 */
export async function consumeIfRoom(db: Db, bucket: Bucket & { n: number }): Promise<{ state: BucketState; taken: boolean }> {
  const window = windowAt();
  const { rows } = await db.raw<{ rows: { taken: boolean; count: number }[] }>(
    `WITH others AS (
       SELECT coalesce(sum(o.count), 0) AS count FROM rate_limit_counters o
        WHERE o.bucket = CAST(:name AS text) AND o.window_start = ${THIS_MINUTE} AND o.shard <> pg_backend_pid() % CAST(:shards AS int)
     ), own AS (
       SELECT coalesce(sum(r.count), 0) AS count FROM rate_limit_counters r
        WHERE r.bucket = CAST(:name AS text) AND r.window_start = ${THIS_MINUTE} AND r.shard = pg_backend_pid() % CAST(:shards AS int)
     ), taken AS (
       INSERT INTO rate_limit_counters AS c (bucket, window_start, shard, count)
       SELECT CAST(:name AS text), ${THIS_MINUTE}, CAST(pg_backend_pid() % CAST(:shards AS int) AS smallint), CAST(:n AS int)
         FROM others WHERE others.count + CAST(:n AS int) <= CAST(:limit AS int)
       ON CONFLICT (bucket, window_start, shard) DO UPDATE SET count = c.count + EXCLUDED.count
        WHERE c.count + EXCLUDED.count + (SELECT count FROM others) <= CAST(:limit AS int)
       RETURNING count
     )
     SELECT EXISTS (SELECT 1 FROM taken) AS taken,
            CAST(coalesce((SELECT count FROM taken), (SELECT count FROM own)) + (SELECT count FROM others) AS int) AS count`,
    { name: bucket.name, n: bucket.n, limit: bucket.limit, shards: shardsFor(bucket.limit), windowStart: window.windowStart },
  );
  const [state] = bucketStates([bucket], [{ bucket: bucket.name, count: rows[0].count, reset: window.resetSeconds }]);
  return { state, taken: rows[0].taken };
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
  return states.reduce<BucketState | undefined>((best, s) => (best === undefined || s.remaining < best.remaining ? s : best), undefined);
}

/**
 * Deletes the counters of windows that began over two minutes ago. A row goes only when it is that
 * old by the clock and by PostgreSQL's now() both, so no process's current window is removed,
 * whatever the clock says (a test's set in the past or the future, a replica's skewed).
 */
export async function pruneCounters(db: Db): Promise<number> {
  const cutoff = new Date(clock.now() - 2 * WINDOW_MS).toISOString();
  return db('rate_limit_counters')
    .where('window_start', '<', db.raw(`LEAST(CAST(? AS timestamptz), now() - interval '2 minutes')`, [cutoff]))
    .delete();
}

/**
 * Counting without a statement, for buckets whose every limit is large (shardsFor > 1): each API
 * process counts such requests in memory and every FLUSH_MS adds its counts to the same sharded
 * rows in one statement, reading back each bucket's total across processes. A request is judged on
 * the total as of the last flush plus the process's own requests since. Overshoot at the limit is
 * bounded by what the other processes admitted since this one's last flush (their requests in
 * FLUSH_MS) plus the requests in flight; a process that stops loses at most FLUSH_MS of counts.
 * Small limits never take this path: they stay exact, one statement per request.
 */
export const FLUSH_MS = 100;

interface LocalBucket {
  window: number;
  /** The bucket's total across processes at the last flush (this process's flushed counts included). */
  base: number;
  /** This process's requests not flushed yet. */
  pending: number;
}

export class LocalCounts {
  private readonly buckets = new Map<string, LocalBucket>();
  private readonly timer: NodeJS.Timeout;
  private flushing: Promise<void> | undefined;

  constructor(
    private readonly db: Db,
    private readonly onError: (err: unknown) => void = () => undefined,
  ) {
    this.timer = setInterval(() => void this.flush().catch(this.onError), FLUSH_MS);
    this.timer.unref();
  }

  /** Counts one request in each bucket and returns their states (no statement); `now` is the clock's reading. */
  take(buckets: Bucket[], now = clock.now()): BucketState[] {
    return buckets.map((bucket) => {
      const local = this.current(bucket, now);
      local.pending += 1;
      return this.state(bucket, local, now);
    });
  }

  /**
   * Takes `n` more from the bucket only if they all fit under its limit as this process knows it
   * (no statement): a batch's items beyond the request itself. Its overshoot bound is take's, in
   * items: what other processes admitted since the last flush.
   */
  takeIfRoom(bucket: Bucket & { n: number }, now = clock.now()): { state: BucketState; taken: boolean } {
    const local = this.current(bucket, now);
    const taken = local.base + local.pending + bucket.n <= bucket.limit;
    if (taken) local.pending += bucket.n;
    return { state: this.state(bucket, local, now), taken };
  }

  /** The bucket's entry for the minute of `now`; an entry of an earlier minute with counts still to flush is kept apart for the flush. */
  private current(bucket: Bucket, now: number): LocalBucket {
    const window = windowAt(now).start;
    let local = this.buckets.get(bucket.name);
    if (!local || local.window !== window) {
      if (local && local.pending > 0) this.buckets.set(`${bucket.name}\u0000${local.window}`, local); // flushed into its own minute
      local = { window, base: 0, pending: 0 };
      this.buckets.set(bucket.name, local);
    }
    return local;
  }

  private state(bucket: Bucket, local: LocalBucket, now: number): BucketState {
    const count = local.base + local.pending;
    // local.window is windowAt(now).start (current() just made it so): the same instant's reset.
    const { resetSeconds } = windowAt(now);
    return { ...bucket, count, remaining: Math.max(0, bucket.limit - count), resetSeconds };
  }

  /**
   * A bucket's total as an exact statement of this process just counted it (authentication when a
   * key's entry went stale): the requests counted here afterwards start from it rather than from
   * the last flush, which did not include that request. Never lowers what is known; only buckets
   * counted in memory (large limits) are kept.
   */
  learn(states: BucketState[], now = clock.now()): void {
    const window = windowAt(now).start;
    for (const state of states) {
      if (shardsFor(state.limit) <= 1) continue;
      const local = this.buckets.get(state.name);
      if (!local) this.buckets.set(state.name, { window, base: state.count, pending: 0 });
      else if (local.window === window) local.base = Math.max(local.base, state.count);
    }
  }

  /** Adds the pending counts to PostgreSQL and learns each bucket's total (one statement). */
  flush(): Promise<void> {
    this.flushing ??= this.flushNow().finally(() => (this.flushing = undefined));
    return this.flushing;
  }

  private async flushNow(): Promise<void> {
    const due = [...this.buckets.entries()].filter(([, b]) => b.pending > 0);
    // Forget finished minutes that have nothing left to flush.
    const current = windowAt().start;
    for (const [name, b] of this.buckets) if (b.window < current && b.pending === 0) this.buckets.delete(name);
    if (due.length === 0) return;
    const taken = due.map(([, b]) => b.pending);
    const bucketOf = (name: string) => name.split('\u0000')[0];
    const { rows } = await this.db.raw<{ rows: { bucket: string; window_start: Date; count: number }[] }>(
      `WITH ${COUNT_BUCKETS_CTES(`SELECT name, ${SHARDS} AS shards, n, window_start FROM unnest(?::text[], ?::int[], ?::timestamptz[]) AS d(name, n, window_start)`)}
       SELECT bucket, window_start, count FROM counted`,
      [due.map(([name]) => bucketOf(name)), taken, due.map(([, b]) => new Date(b.window).toISOString())],
    );
    const totals = new Map(rows.map((r) => [`${r.bucket}@${new Date(r.window_start).getTime()}`, r.count]));
    due.forEach(([name, b], i) => {
      b.pending -= taken[i];
      b.base = totals.get(`${bucketOf(name)}@${b.window}`) ?? b.base;
      if (name.includes('\u0000') && b.pending === 0) this.buckets.delete(name);
    });
  }
}

/**
 * API keys as authentication last read them, for at most KEY_CACHE_MS counted from when the read
 * began (its statement's snapshot is no older): a revoked or expired key is refused within that on
 * every replica, however long a read or a flush takes.
 */
export const KEY_CACHE_MS = 1000;

export class KeyCache<K> {
  private readonly entries = new Map<string, { key: K; at: number }>();
  /** The exact statement each key's entry is being read with, so requests meanwhile wait for it. */
  private readonly reading = new Map<string, { key: Promise<K | undefined>; at: number }>();
  /** Moves on clear(): a read begun before a change to keys or plans is not kept after it. */
  private generation = 0;

  get(hash: string, now = Date.now()): K | undefined {
    const entry = this.entries.get(hash);
    return entry && now - entry.at < KEY_CACHE_MS ? entry.key : undefined;
  }

  /** The key as last read, however long ago (never to authenticate with: to know what it was). */
  last(hash: string): K | undefined {
    return this.entries.get(hash)?.key;
  }

  /** Forgets every key: the process made a change to keys or plans, which takes effect here at once. */
  clear(): void {
    this.entries.clear();
    this.reading.clear();
    this.generation += 1;
  }

  set(hash: string, key: K, now = Date.now(), generation = this.generation): void {
    if (generation !== this.generation) return;
    // Bounded: a flood of distinct keys only empties the cache.
    if (this.entries.size >= 10_000) this.entries.clear();
    this.entries.set(hash, { key, at: now });
  }

  /**
   * The key as a read under way will find it (undefined: none under way, or it found no usable
   * key). When a busy key's entry goes stale, every request arriving before the first one's
   * statement returns would otherwise take the exact statement too: a dozen each second at 5,000
   * requests a second, all writing the same counter rows, which made the p99 of the cheapest reads.
   */
  async pending(hash: string): Promise<K | undefined> {
    const read = this.reading.get(hash);
    if (!read) return undefined;
    const key = await read.key.catch(() => undefined);
    // A read that stalled (its statement waited for a lock on the counter rows, as a stalled flush
    // holds) found the key as it was when it began: past KEY_CACHE_MS, too old to authenticate with.
    return Date.now() - read.at < KEY_CACHE_MS ? key : undefined;
  }

  /** Reads the key with `read` (the exact statement), keeps it (read from `now`) and lets others wait for it. */
  async read<R>(hash: string, now: number, read: Promise<R>, usableKey: (result: R) => K | undefined): Promise<R> {
    const generation = this.generation;
    const key = read.then((result) => {
      const usable = usableKey(result);
      if (usable !== undefined) this.set(hash, usable, now, generation);
      return usable;
    });
    const entry = { key, at: now };
    this.reading.set(hash, entry);
    try {
      return await read;
    } finally {
      void key
        .finally(() => {
          if (this.reading.get(hash) === entry) this.reading.delete(hash);
        })
        .catch(() => undefined);
    }
  }
}
