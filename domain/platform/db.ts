import { createHash } from 'node:crypto';
import knex, { Knex } from 'knex';
import { TypeOverrides, types } from 'pg';
import type { Config } from './config';

// BIGINT (count(*)) as a JS number: our counts stay far below 2^53.
types.setTypeParser(types.builtins.INT8, (value: string) => Number(value));

export type Db = Knex;

/**
 * `statementTimeoutMs`: PostgreSQL cancels any statement running longer (the API's and the
 * worker's pools), so no request, however crafted, holds a connection and a core for long. The
 * same pools end a session left idle inside a transaction for a minute (a bug's leak): an open
 * transaction holds locks, and holds back the settled horizon of cursor reads (domain/platform/cursor.ts).
 *
 * `randomPageCost`: the planner's price of a random page read (DB_RANDOM_PAGE_COST). PostgreSQL's
 * default, 4, models spinning disks; on SSDs or data in memory (1.1, PostgreSQL's documented
 * advice) a lookup by key beats scanning a small table: each lead's tags were read by scanning
 * `tags` once per lead (15 µs each) instead of by its primary key (2 µs).
 */
const IDLE_IN_TRANSACTION_MS = 60_000;
export function createDb(
  databaseUrl: string,
  pool: { min?: number; max?: number; statementTimeoutMs?: number; randomPageCost?: number } = {},
): Db {
  const session = {
    ...(pool.statementTimeoutMs
      ? { statement_timeout: pool.statementTimeoutMs, idle_in_transaction_session_timeout: IDLE_IN_TRANSACTION_MS }
      : {}),
    ...(pool.randomPageCost ? { options: `-c random_page_cost=${pool.randomPageCost}` } : {}),
  };
  return knex({
    client: 'pg',
    connection: Object.keys(session).length > 0 ? { connectionString: databaseUrl, ...session } : databaseUrl,
    pool: { min: pool.min ?? 0, max: pool.max ?? 10 },
    acquireConnectionTimeout: 10_000,
    // Knex reports lost or refused connections with console.log; one plain line on stderr instead
    // (the caller's error handling says what it means for the request or activity).
    log: {
      warn: (message: unknown) => process.stderr.write(`knex: ${String(message)}\n`),
      error: (message: unknown) => process.stderr.write(`knex: ${String(message)}\n`),
      deprecate: () => undefined,
      debug: () => undefined,
    },
  });
}

/** The pool of an API or worker process, as its configuration says (the tests' in-process API too). */
export function createServiceDb(
  config: Pick<Config, 'databaseUrl' | 'dbPoolMax' | 'statementTimeoutMs' | 'dbRandomPageCost'>,
  max = config.dbPoolMax,
): Db {
  return createDb(config.databaseUrl, { max, statementTimeoutMs: config.statementTimeoutMs, randomPageCost: config.dbRandomPageCost });
}

/**
 * Statement texts this process prepares, at most PREPARED_MAX: every pool connection keeps each one
 * it ran, with its plan, for its life. A lead list has a text per filter set, sort and page size,
 * so a client varying those must not grow every backend's memory without bound; past the cap a
 * new text runs unnamed (parsed and planned each time, as any other statement).
 */
const PREPARED_MAX = 200;
/** Each prepared text's name (hashed once: a lookup here costs less than the hash). */
const preparedNames = new Map<string, string>();

/**
 * Runs a hot read as a named prepared statement (the name is the hash of its SQL, so one text is
 * one statement on every connection). After five executions PostgreSQL may keep a generic plan and
 * stop planning it: the deal activities statement planned for 0.4 ms to run for 0.1, the lead
 * list's page for 0.17 ms to run for 0.15. PostgreSQL keeps the generic plan only when it costs
 * no more than the custom ones, so prepare only statements:
 * - whose best plan does not depend on their values (not a filtered list read over every match,
 *   whose plan follows the filter's selectivity);
 * - with their LIMIT written into the text (`limit(n, { skipBinding: true })`): under a bound
 *   LIMIT the generic plan is priced for a tenth of the rows and never chosen;
 * - with constants the partial indexes test written, not bound (see `canonical`);
 * - with explicit result columns: a prepared `SELECT *` fails ("cached plan must not change result
 *   type") once a migration adds a column to its table.
 * Behind a pooler in transaction mode, the pooler must support prepared statements (PgBouncer 1.21+).
 */
export function prepared<T extends Knex.QueryBuilder | Knex.Raw>(statement: T): T {
  const compiled = statement.toSQL() as Knex.Sql;
  let name = preparedNames.get(compiled.sql);
  if (name === undefined) {
    if (preparedNames.size >= PREPARED_MAX) return statement;
    name = `crm_${createHash('sha1').update(compiled.sql).digest('base64url').slice(0, 24)}`;
    preparedNames.set(compiled.sql, name);
  }
  statement.options({ name });
  // Knex compiles a statement again when it runs it (60-75 µs for a lead page, a tenth of the
  // API's CPU per request): the text is the one just hashed, so the run takes this compilation.
  compiled.options = { ...compiled.options, name };
  statement.toSQL = () => compiled;
  return statement;
}

/**
 * A read whose text is the same on every call of one shape, all its values bound: built and
 * compiled once per pool and shape, then each call binds its values to that text with no query
 * builder (building and compiling the deal activities statement took a fifth of that request's CPU
 * under load). `build` is given a placeholder for each value (a marked string, or for a number one
 * no caller passes), and each must reach the statement as one whole binding: checked when it is
 * built, so a value that would change the text (written into it, into part of a binding, or
 * computed on) fails at once. What does change the text goes in `shape`, named by `shapeKey`, or
 * in which values are given; it must have few variants (each is a text kept for the process's
 * life). Runs as a raw statement: it resolves to pg's result (`rows`).
 */
export function compiledOnce<V extends Record<string, string | number>, S = void>(
  build: (db: Db, values: V, shape: S) => Knex.QueryBuilder | Knex.Raw,
  shapeKey: (shape: S) => string = () => '',
): (db: Db, values: V, shape: S) => Knex.Raw {
  // `positioned`: the text as PostgreSQL takes it (`$1`, not `?`). Knex rewrites a raw statement's
  // text twice on every run (its bindings, then their positions): a lead page's several KB copied
  // twice a request, a tenth of what the read rows promoted.
  type Text = { sql: string; positioned: string; bindings: Array<{ value: keyof V } | { constant: unknown }> };
  const texts = new WeakMap<Db, Map<string, Text>>();
  const compile = (db: Db, values: V, shape: S): Text => {
    const names = Object.keys(values) as (keyof V)[];
    const placeholders = names.map((name, i) =>
      typeof values[name] === 'number' ? PLACEHOLDER_NUMBER + i * PLACEHOLDER_STEP : `\u0000${String(name)}\u0000`,
    );
    const { sql, bindings } = build(
      db,
      Object.fromEntries(names.map((name, i) => [name, placeholders[i]])) as V,
      shape,
    ).toSQL() as Knex.Sql;
    const slots = bindings.map((b) => {
      const i = placeholders.indexOf(b as string | number);
      if (i === -1 && typeof b === 'string' && b.includes('\u0000'))
        throw new Error(`compiledOnce: a value is part of a binding (${b.replace(/\u0000/g, '')}), not the whole of it`);
      if (
        i === -1 &&
        typeof b === 'number' &&
        b > PLACEHOLDER_NUMBER - PLACEHOLDER_STEP &&
        b < PLACEHOLDER_NUMBER + names.length * PLACEHOLDER_STEP
      )
        throw new Error(`compiledOnce: a number value was computed on (${b}), not bound as given`);
      return i === -1 ? { constant: b } : { value: names[i] };
    });
    const missing = names.filter((n) => !slots.some((slot) => 'value' in slot && slot.value === n));
    if (missing.length) throw new Error(`compiledOnce: ${missing.join(', ')} did not become a binding (written into the text?)`);
    if ((sql.match(/\?/g) ?? []).length !== bindings.length) throw new Error('compiledOnce: the text holds a ? that is not a binding');
    return { sql, positioned: db.client.positionBindings(sql), bindings: slots };
  };
  return (db, values, shape) => {
    let byShape = texts.get(db);
    if (!byShape) texts.set(db, (byShape = new Map()));
    // The values given are part of the shape: a value left out (a first page's OFFSET) is text the builder did not write.
    const key = `${shapeKey(shape)}\u0000${Object.keys(values).join()}`;
    let text = byShape.get(key);
    if (!text) byShape.set(key, (text = compile(db, values, shape)));
    const { sql, positioned } = text;
    const bindings = text.bindings.map((slot) => ('value' in slot ? values[slot.value] : slot.constant)) as Knex.RawBinding[];
    const statement = db.raw(sql, bindings) as Knex.Raw & { _options?: object[] };
    // A fresh object each time: the runner writes into what it is given. The text has no `?` left
    // for Knex to rewrite (compile checks that every `?` is a binding); `toString` keeps Knex's own.
    statement.toSQL = (() => ({
      method: 'raw',
      sql: positioned,
      bindings,
      options: Object.assign({}, ...(statement._options ?? [])),
    })) as never;
    statement.toQuery = () => db.raw(sql, bindings).toQuery();
    return statement;
  };
}
/** Number placeholders: far apart, so a value computed on (`offset + 1`) is recognised as such, not taken for another. */
const PLACEHOLDER_NUMBER = 2_000_000_000;
const PLACEHOLDER_STEP = 1_000_000;

/**
 * PostgreSQL's text of a timestamptz in a UTC session (`2026-11-26 00:56:35.80407+00`) as ISO
 * 8601 with milliseconds, the fraction truncated as a Date truncates it, without building a Date:
 * a Date read and turned back into text cost 0.9 µs, 45 µs of a lead page's CPU. Any other text
 * (another session time zone, BC, a year past 9999) goes through pg's own parser.
 */
export function isoFromTimestamptz(text: string): string {
  const fraction = text.slice(19, -3);
  if (
    text.length >= 22 &&
    text.charCodeAt(10) === 32 &&
    text.endsWith('+00') &&
    (fraction === '' || (fraction[0] === '.' && fraction.length <= 7))
  ) {
    return `${text.slice(0, 10)}T${text.slice(11, 19)}${(fraction || '.').padEnd(4, '0').slice(0, 4)}Z`;
  }
  return (parseTimestamptz(text) as Date).toISOString();
}
const parseTimestamptz = types.getTypeParser(types.builtins.TIMESTAMPTZ);

const INSTANTS_AS_TEXT = new TypeOverrides();
INSTANTS_AS_TEXT.setTypeParser(types.builtins.TIMESTAMPTZ, isoFromTimestamptz);

/**
 * The statement's timestamptz columns come back as ISO text (isoFromTimestamptz) instead of
 * Dates: for reads whose rows only leave the service as JSON (iso() keeps such text as it is).
 * Before `prepared`, which takes the statement's options as they are then.
 */
export function instantsAsText<T extends Knex.QueryBuilder | Knex.Raw>(statement: T): T {
  statement.options({ types: INSTANTS_AS_TEXT });
  return statement;
}

/**
 * An instant as the API writes it (`Date.prototype.toISOString`: UTC, milliseconds truncated),
 * written by PostgreSQL: for records PostgreSQL writes as JSON (jsonPage).
 */
export function instantSql(column: string): string {
  return `to_char(${column} AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')`;
}

/** What a jsonPage statement answers: its one row. */
export type JsonPageRow = { records: string; count: number } & Record<string, unknown>;

/**
 * A page's statement whose rows PostgreSQL writes as one JSON array (kernel's JsonRecords) instead
 * of sending them as rows: `record` is a json expression over a row `r` of `statement`, `order`
 * the page's order over `r` (json_agg keeps no order of its own), `aggregates` more columns of the
 * one row it answers (`min(r.__page_total)`), `within` a condition on `r` that picks the page's
 * rows among those read (the aggregates still see all). A page past the end still answers its
 * row: `[]`, 0, and NULL aggregates. Inside `compiledOnce` the wrapped text is compiled once with the page's.
 */
export function jsonPage(
  db: Db,
  statement: Knex.QueryBuilder | Knex.Raw,
  page: { record: string; order: string; within?: string; aggregates?: Record<string, string> },
): Knex.Raw {
  const { sql, bindings } = statement.toSQL() as Knex.Sql;
  const aggregates = Object.entries(page.aggregates ?? {})
    .map(([name, expression]) => `, ${expression} AS "${name}"`)
    .join('');
  const within = page.within ? ` FILTER (WHERE ${page.within})` : '';
  return db.raw(
    `SELECT coalesce(json_agg(${page.record} ORDER BY ${page.order})${within}, '[]')::text AS records, (count(*)${within})::int AS count${aggregates} FROM (${sql}) r`,
    bindings as Knex.RawBinding[],
  );
}

/**
 * The workspace check of a statement that a list of row ids leads (`column IS NOT DISTINCT FROM
 * ?`, the workspace id its binding): the same test as `=` on a NOT NULL column, but one
 * PostgreSQL cannot take as an index condition, so the ids' primary key drives the plan. Rows
 * newer than the table's statistics (a new workspace's leads, a broadcast's first conversations)
 * put their workspace at one estimated row, and scanning all of it by a workspace index then
 * looks cheaper than the ids' probes: measured in broadcasts, a page's statements took 5-20 ms,
 * growing with the workspace, against 0.2-2.
 */
export function sameWorkspaceSql(column: string): string {
  return `${column} IS NOT DISTINCT FROM ?`;
}

/**
 * A lock held until the transaction ends, named by `key` (for example `pipelines:<workspaceId>`):
 * what must be checked and written by one transaction at a time, without a row to lock.
 */
export function lockUntilCommit(trx: Knex.Transaction, key: string): Promise<unknown> {
  return trx.raw('SELECT pg_advisory_xact_lock(hashtext(?))', [key]);
}

/**
 * The text of an INSERT of one row given as JSON (the named binding `:<binding>`, the row's
 * `columns` as keys) into `table`, only when the SQL condition `when` holds: a data-modifying
 * WITH's part, for a statement that records several rows together under a condition. The columns
 * not listed keep their defaults.
 */
export function insertJsonRowSql(table: string, columns: readonly string[], binding: string, when: string): string {
  const list = columns.map((c) => `"${c}"`).join(', ');
  return `INSERT INTO ${table} (${list}) SELECT ${list} FROM json_populate_record(NULL::${table}, CAST(:${binding} AS json)) WHERE ${when}`;
}

/** The readiness probe: one round trip to PostgreSQL. */
export async function pingDatabase(db: Db): Promise<void> {
  await db.raw('SELECT 1');
}

/** The database's clock (the `databaseTime` activity: a workflow proving it reaches PostgreSQL). */
export async function databaseNow(db: Db): Promise<Date> {
  const { rows } = await db.raw<{ rows: { now: Date }[] }>('SELECT now() AS now');
  return rows[0].now;
}

// Connection-level failures: refused or lost connections, the server shutting down or starting up
// (57P01-57P03), too many clients (53300), connection exceptions (class 08), and a pool that could
// not hand out a connection in time. A query error (syntax, constraint) is not among them.
const UNAVAILABLE_CODES = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'ETIMEDOUT',
  'EPIPE',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'EAI_AGAIN',
  '57P01',
  '57P02',
  '57P03',
  '53300',
]);
const UNAVAILABLE_MESSAGES =
  /Connection terminated|Client has encountered a connection error|Connection is closed|timeout exceeded when trying to connect/i;

/** Whether an error means PostgreSQL cannot be reached right now (retrying later can succeed). */
export function isDatabaseUnavailable(err: unknown): boolean {
  if (typeof err !== 'object' || err === null) return false;
  const { code, name, message } = err as { code?: unknown; name?: unknown; message?: unknown };
  if (typeof code === 'string' && (UNAVAILABLE_CODES.has(code) || code.startsWith('08'))) return true;
  if (name === 'KnexTimeoutError') return true;
  return typeof message === 'string' && UNAVAILABLE_MESSAGES.test(message);
}
