/**
 * `npm start` as a user runs it (the real command, its own ports and a temporary STACK_DATA_DIR):
 * one signal to the process the user started stops the whole stack, PostgreSQL, the Temporal dev
 * server, the emulator, the worker and the API, and leaves no process behind. Also: the embedded
 * PostgreSQL that keeps the user's data runs with fsync on.
 */
import { ChildProcess, spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Client as PgClient } from 'pg';
import { ROOT, freePort } from '../scripts/stack';

interface Started {
  npm: ChildProcess;
  output: () => string;
  ports: { api: number; pg: number };
}

let dataDir: string;
/** Process groups of the `npm start`s this file started: signalled if the file ends (or dies) first. */
const groups = new Set<number>();
const killGroups = (): void => {
  for (const pgid of groups) {
    try {
      process.kill(-pgid, 'SIGTERM');
    } catch {
      // already gone
    }
  }
};
process.once('exit', killGroups);

beforeAll(() => {
  // npm start installs dependencies when node_modules is stale: that must not happen under a running suite.
  const check = spawnSync(process.execPath, [path.join(ROOT, 'scripts', 'bootstrap.mjs'), 'check-deps'], { cwd: ROOT });
  if (check.status !== 0)
    throw new Error(
      'node_modules is not current with package-lock.json (npm start would install now): run `npm install` or `npm start` once, then the tests.',
    );
  dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'crm-start-'));
  // Traversable like a checkout's .data: as root, a 0700 directory would move the cluster to /var/tmp, out of this cleanup's reach.
  fs.chmodSync(dataDir, 0o755);
});

afterAll(async () => {
  if (groups.size) {
    killGroups();
    await new Promise((r) => setTimeout(r, 5_000));
  }
  if (dataDir) fs.rmSync(dataDir, { recursive: true, force: true });
});

async function npmStart(): Promise<Started> {
  const ports = {
    api: await freePort(),
    emulator: await freePort(),
    temporal: await freePort(),
    ui: await freePort(),
    pg: await freePort(),
  };
  // Only what a user's shell would have: none of the suite's DATABASE_URL, TEMPORAL_ADDRESS, keys or tokens.
  const env: NodeJS.ProcessEnv = {
    PATH: process.env.PATH,
    HOME: process.env.HOME,
    LANG: process.env.LANG,
    STACK_DATA_DIR: dataDir,
    PORT: String(ports.api),
    EMULATOR_PORT: String(ports.emulator),
    TEMPORAL_PORT: String(ports.temporal),
    TEMPORAL_UI_PORT: String(ports.ui),
    EMBEDDED_PG_PORT: String(ports.pg),
  };
  // Its own process group (as a terminal would give it), so a leftover can be signalled as a whole.
  const npm = spawn('npm', ['start'], { cwd: ROOT, env, stdio: ['ignore', 'pipe', 'pipe'], detached: true });
  groups.add(npm.pid!);
  let output = '';
  npm.stdout!.on('data', (c: Buffer) => (output += c.toString()));
  npm.stderr!.on('data', (c: Buffer) => (output += c.toString()));
  const deadline = Date.now() + 150_000;
  while (!output.includes('Sales CRM is running')) {
    if (npm.exitCode !== null || npm.signalCode !== null)
      throw new Error(`npm start exited (${npm.exitCode ?? npm.signalCode}) before the stack was up:\n${output}`);
    if (Date.now() > deadline) {
      process.kill(-npm.pid!, 'SIGKILL');
      throw new Error(`npm start was not up after 150 s:\n${output}`);
    }
    await new Promise((r) => setTimeout(r, 250));
  }
  return { npm, output: () => output, ports };
}

/** Every live process (zombies excepted) by parent, from `ps`. */
function processTable(): Map<number, { ppid: number; command: string }> {
  const ps = spawnSync('ps', ['-eo', 'pid=,ppid=,stat=,args='], { encoding: 'utf8' });
  const table = new Map<number, { ppid: number; command: string }>();
  for (const line of ps.stdout.split('\n')) {
    const m = /^\s*(\d+)\s+(\d+)\s+(\S+)\s+(.*)$/.exec(line);
    if (m && !m[3].startsWith('Z')) table.set(Number(m[1]), { ppid: Number(m[2]), command: m[4] });
  }
  return table;
}

function descendants(root: number): Map<number, string> {
  const table = processTable();
  const found = new Map<number, string>([[root, table.get(root)?.command ?? '?']]);
  for (let grew = true; grew;) {
    grew = false;
    for (const [pid, { ppid, command }] of table) {
      if (found.has(ppid) && !found.has(pid)) {
        found.set(pid, command);
        grew = true;
      }
    }
  }
  return found;
}

/** Sends `signal` to one pid of the started stack and waits until none of its processes is left. */
async function stopsEverything(started: Started, signal: NodeJS.Signals, target: (tree: Map<number, string>) => number): Promise<void> {
  const tree = descendants(started.npm.pid!);
  const commands = [...tree.values()].join('\n');
  // What the stack is: the shapes a leftover would have.
  for (const part of [
    'bootstrap.mjs start',
    'scripts/start.ts',
    'postgres',
    'temporal',
    'server start-dev',
    'emulator/server.ts',
    'workers/main.ts',
    'api/server.ts',
  ]) {
    expect(commands).toContain(part);
  }
  process.kill(target(tree), signal);
  const deadline = Date.now() + 60_000;
  let left: [number, string][];
  do {
    await new Promise((r) => setTimeout(r, 250));
    const live = processTable();
    left = [...tree].filter(([pid, command]) => live.get(pid)?.command === command);
  } while (left.length && Date.now() < deadline);
  if (left.length) {
    for (const [pid] of left) process.kill(pid, 'SIGKILL');
    throw new Error(
      `${signal} left ${left.length} process(es) running:\n${left.map(([pid, c]) => `${pid} ${c}`).join('\n')}\n--- npm start said:\n${started.output()}`,
    );
  }
  groups.delete(started.npm.pid!);
  // Its last words may still be in the pipe when the processes are gone: read to the end first.
  if (!started.npm.stdout!.readableEnded)
    await new Promise((r) => {
      started.npm.stdout!.once('end', r);
      setTimeout(r, 5000);
    });
  expect(started.output()).toContain('[start] stopped');
}

const pidOf = (tree: Map<number, string>, part: string): number => {
  const found = [...tree].find(([, command]) => command.includes(part));
  if (!found) throw new Error(`no process of the stack runs ${part}`);
  return found[0];
};

test("SIGINT to npm's pid stops every process npm start started, and the user's PostgreSQL keeps fsync on", async () => {
  const started = await npmStart();
  const pg = new PgClient({ connectionString: `postgres://postgres:postgres@127.0.0.1:${started.ports.pg}/crm` });
  await pg.connect();
  try {
    const { rows } = await pg.query('SHOW fsync');
    expect(rows[0].fsync).toBe('on');
  } finally {
    await pg.end();
  }
  expect(started.output()).toMatch(/\[start\] API ready on http:\/\/localhost:\d+ \(\d+\.\d s\)/);
  await stopsEverything(started, 'SIGINT', () => started.npm.pid!);
}, 240_000);

test("SIGTERM to the node bootstrap's pid stops every process too (a restart on the kept data)", async () => {
  const started = await npmStart();
  await stopsEverything(started, 'SIGTERM', (tree) => pidOf(tree, 'bootstrap.mjs start'));
}, 240_000);
