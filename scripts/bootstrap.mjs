#!/usr/bin/env node
// `npm start`, `npm test` and `npm run bench` land here first. Plain JavaScript, so it runs before
// any dependency is installed: it installs them when missing or stale, then hands over to the
// TypeScript entry. package.json runs it with `exec`, so npm's shell is replaced by this process
// and a signal npm forwards (or one sent to this pid) reaches us, not a shell that waits it out.
import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const mode = process.argv[2];
const extra = process.argv.slice(3);
const tag = ['start', 'test', 'bench'].includes(mode) ? mode : 'setup';
const log = (message) => console.log(`[${tag}] ${message}`);
const seconds = (since) => `${((Date.now() - since) / 1000).toFixed(1)} s`;
const SIGNALS = { SIGINT: 2, SIGTERM: 15, SIGHUP: 1 };

// One child runs at a time. A SIGINT, SIGTERM or SIGHUP sent to this process is passed to it, and
// we leave when it has finished (the stack's entry stops every process it started before exiting).
let current = null;
let received = null;
for (const signal of Object.keys(SIGNALS)) {
  process.on(signal, () => {
    received ??= signal;
    if (current) current.kill(signal);
    else process.exit(128 + SIGNALS[signal]);
  });
}

function run(command, args, stdio = 'inherit', env = {}) {
  return new Promise((resolve) => {
    const child = spawn(command, args, { cwd: root, stdio, env: { ...process.env, ...env } });
    current = child;
    child.once('error', (err) => {
      current = null;
      resolve({ code: 127, signal: null, error: err });
    });
    child.once('exit', (code, signal) => {
      current = null;
      resolve({ code, signal });
    });
  });
}

/** Exits like the child did; a signal we passed on ends us with that signal's status. */
function exitLike({ code, signal }) {
  if (received) process.exit(128 + SIGNALS[received]);
  process.exit(code ?? (signal ? 128 + (SIGNALS[signal] ?? 0) : 1));
}

/** What the installed tree was made from: the dependency fields of package.json and the lockfile. */
function installInputs() {
  const manifest = JSON.parse(fs.readFileSync(path.join(root, 'package.json'), 'utf8'));
  const fields = ['dependencies', 'devDependencies', 'optionalDependencies', 'overrides', 'allowScripts'].map((f) => manifest[f] ?? null);
  const lock = path.join(root, 'package-lock.json');
  return createHash('sha256')
    .update(JSON.stringify(fields))
    .update(fs.existsSync(lock) ? fs.readFileSync(lock) : '')
    .digest('hex');
}

/** Whether node_modules was installed from the current dependencies and lockfile. */
function dependenciesCurrent() {
  const stamp = path.join(root, 'node_modules', '.installed-from');
  const lock = path.join(root, 'package-lock.json');
  const wanted = installInputs();
  const installedLock = path.join(root, 'node_modules', '.package-lock.json');
  if (
    fs.existsSync(installedLock) &&
    !fs.existsSync(stamp) &&
    fs.existsSync(lock) &&
    fs.statSync(installedLock).mtimeMs >= fs.statSync(lock).mtimeMs
  ) {
    // Installed before the stamp existed (by an older bootstrap or by hand) and newer than the lockfile.
    fs.writeFileSync(stamp, `${wanted}\n`);
    return true;
  }
  return fs.existsSync(installedLock) && fs.existsSync(stamp) && fs.readFileSync(stamp, 'utf8').trim() === wanted;
}

/**
 * Installs the npm dependencies when node_modules is missing or was installed from other
 * dependencies or another lockfile. npm's output goes to .data/logs/npm-install.log and is
 * printed only if the installation fails.
 */
async function ensureDependencies() {
  if (dependenciesCurrent()) return;
  const stamp = path.join(root, 'node_modules', '.installed-from');
  const lock = path.join(root, 'package-lock.json');
  const npm = process.platform === 'win32' ? 'npm.cmd' : 'npm';
  const logFile = path.join(root, '.data', 'logs', 'npm-install.log');
  fs.mkdirSync(path.dirname(logFile), { recursive: true });
  const fd = fs.openSync(logFile, 'w');
  const started = Date.now();
  log('installing dependencies (about a minute on a first run) ...');
  let lastAttempt = 0;
  const install = async (args) => {
    lastAttempt = fs.fstatSync(fd).size;
    fs.writeSync(fd, `$ npm ${args.join(' ')}\n`);
    const result = await run(npm, args, ['ignore', fd, fd]);
    if (result.error) fs.writeSync(fd, `${result.error.message}\n`);
    return result.code === 0;
  };
  // npm 11 can reject its own lockfile for platform-specific optional packages a registry does
  // not serve (npm/cli#9846); `npm install` still installs the locked versions.
  let ok = fs.existsSync(lock) && (await install(['ci', '--no-audit', '--no-fund']));
  if (!ok && !received) ok = await install(['install', '--no-audit', '--no-fund']);
  fs.closeSync(fd);
  if (received) exitLike({ code: 1 });
  if (!ok) {
    const output = fs.readFileSync(logFile).subarray(lastAttempt).toString();
    console.error(`[${tag}] installing the dependencies failed. npm said (all of it is in ${path.relative(process.cwd(), logFile)}):\n`);
    console.error(output.trimEnd());
    process.exit(1);
  }
  fs.writeFileSync(stamp, `${installInputs()}\n`);
  log(`dependencies installed (${seconds(started)}; npm's output in ${path.relative(root, logFile)})`);
}

async function main() {
  // `check-deps`: exit 0 when node_modules is current, 3 when `npm start` would install (the stop test's guard).
  if (mode === 'check-deps') process.exit(dependenciesCurrent() ? 0 : 3);
  if (!['start', 'test', 'bench'].includes(mode)) {
    console.error('usage: bootstrap.mjs start|test|bench|check-deps');
    process.exit(2);
  }
  await ensureDependencies();
  const tsEntry = (file) => [process.execPath, ['--import', 'tsx', path.join(root, 'scripts', file), ...extra]];
  if (mode === 'start') exitLike(await run(...tsEntry('start.ts')));
  if (mode === 'bench') exitLike(await run(...tsEntry('bench.ts')));
  // Types first: jest compiles with swc, which does not check them.
  const started = Date.now();
  const typecheck = await run(process.execPath, [path.join(root, 'node_modules', 'typescript', 'bin', 'tsc'), '--noEmit', '-p', root]);
  if (received) exitLike(typecheck);
  if (typecheck.code !== 0) {
    console.error('[test] the typecheck failed (npm run typecheck), so the tests did not run.');
    process.exit(typecheck.code ?? 1);
  }
  log(`typecheck passed (${seconds(started)})`);
  // Then lint and format (npm run lint): a finding fails the run before any test starts.
  const linted = Date.now();
  for (const [what, args] of [
    ['eslint', [path.join(root, 'node_modules', 'eslint', 'bin', 'eslint.js'), '--max-warnings', '0', root]],
    ['prettier', [path.join(root, 'node_modules', 'prettier', 'bin', 'prettier.cjs'), '--check', '--log-level', 'warn', root]],
  ]) {
    const result = await run(process.execPath, args);
    if (received) exitLike(result);
    if (result.code !== 0) {
      console.error(`[test] ${what} found problems (npm run lint; npm run format fixes the formatting), so the tests did not run.`);
      process.exit(result.code ?? 1);
    }
  }
  log(`lint and format clean (${seconds(linted)})`);
  // Then the unit tier (npm run test:unit): pure rules, no stack, seconds. A failure stops the run
  // before the stack starts. Arguments name integration files, so the unit tier runs whole.
  const unit = await run(process.execPath, [
    path.join(root, 'node_modules', 'jest', 'bin', 'jest.js'),
    '--ci',
    '--config',
    path.join(root, 'jest.unit.config.js'),
  ]);
  if (received) exitLike(unit);
  if (unit.code !== 0) {
    console.error('[test] the unit tier failed (npm run test:unit), so the integration tests did not run.');
    process.exit(unit.code ?? 1);
  }
  // Then the tools the integration tests need from PyPI and apt, installed before any test runs.
  const tools = await run(process.execPath, ['--import', 'tsx', path.join(root, 'scripts', 'test-tools.ts')]);
  if (received) exitLike(tools);
  if (tools.code !== 0) {
    console.error('[test] installing the test tools failed (see above), so the integration tests did not run.');
    process.exit(tools.code ?? 1);
  }
  // Then the integration tier in two runs: every file but a few, two at a time; then those few
  // (test/alone.js: they time themselves under their own load) one at a time with nothing beside
  // them, on a stack of their own in a subdirectory, so the first run's logs stay. Arguments filter
  // both runs; a filter that matches no file at all fails, it never passes on nothing.
  const jest = path.join(root, 'node_modules', 'jest', 'bin', 'jest.js');
  const stackDir = process.env.TEST_STACK_DIR ? path.resolve(process.env.TEST_STACK_DIR) : path.join(root, '.data', 'test');
  const runs = [
    { config: 'jest.config.js', env: {} },
    { config: 'jest.alone.config.js', env: { TEST_STACK_DIR: path.join(stackDir, 'alone') } },
  ];
  if (extra.length > 0) {
    for (const r of runs) r.files = (await listTests(jest, r.config)).length;
    if (runs.every((r) => r.files === 0)) {
      console.error(`[test] no integration test file matches ${extra.join(' ')}.`);
      process.exit(1);
    }
  }
  let failed = null;
  for (const r of runs) {
    if (r.files === 0) continue;
    const result = await run(process.execPath, [jest, '--ci', '--config', path.join(root, r.config), ...extra], 'inherit', r.env);
    if (received) exitLike(result);
    if (result.code !== 0) failed ??= result;
  }
  exitLike(failed ?? { code: 0 });
}

/** The test files a jest configuration runs with this run's arguments. */
async function listTests(jest, config) {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [jest, '--listTests', '--config', path.join(root, config), ...extra], {
      cwd: root,
      stdio: ['ignore', 'pipe', 'ignore'],
    });
    let out = '';
    child.stdout.on('data', (chunk) => (out += chunk));
    child.once('error', reject);
    child.once('exit', () => resolve(out.split('\n').filter((line) => line.endsWith('.test.ts'))));
  });
}

void main();
