#!/usr/bin/env node
// `npm start` and `npm test` land here first. Plain JavaScript, so it runs before any dependency
// is installed: it installs them when missing or stale, then hands over to the TypeScript entry.
import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const mode = process.argv[2];
const extra = process.argv.slice(3);

function mtime(file) {
  try {
    return fs.statSync(file).mtimeMs;
  } catch {
    return 0;
  }
}

function ensureDependencies() {
  const installed = path.join(root, 'node_modules', '.package-lock.json');
  const lock = path.join(root, 'package-lock.json');
  const manifest = path.join(root, 'package.json');
  const stale = !fs.existsSync(installed) || mtime(lock) > mtime(installed) || mtime(manifest) > mtime(installed);
  if (!stale) return;
  const npm = process.platform === 'win32' ? 'npm.cmd' : 'npm';
  const install = (args) => {
    console.log(`[setup] installing dependencies: npm ${args.join(' ')}`);
    return spawnSync(npm, args, { cwd: root, stdio: 'inherit' }).status === 0;
  };
  if (fs.existsSync(lock) && install(['ci', '--no-audit', '--no-fund'])) return;
  // npm 11 can reject its own lockfile for platform-specific optional packages a registry does
  // not serve (npm/cli#9846); `npm install` still installs the locked versions.
  if (fs.existsSync(lock)) console.log('[setup] npm ci refused the lockfile; falling back to npm install');
  if (!install(['install', '--no-audit', '--no-fund'])) {
    console.error('[setup] dependency installation failed');
    process.exit(1);
  }
}

function run(command, args) {
  const child = spawn(command, args, { cwd: root, stdio: 'inherit', env: process.env });
  // Ctrl-C reaches the child through the terminal's process group; we wait for it to finish.
  for (const signal of ['SIGINT', 'SIGTERM']) process.on(signal, () => child.kill(signal));
  child.on('exit', (code, signal) => process.exit(code ?? (signal ? 1 : 0)));
}

ensureDependencies();
if (mode === 'start') {
  run(process.execPath, ['--import', 'tsx', path.join(root, 'scripts', 'start.ts'), ...extra]);
} else if (mode === 'bench') {
  run(process.execPath, ['--import', 'tsx', path.join(root, 'scripts', 'bench.ts'), ...extra]);
} else if (mode === 'test') {
  // Types first: jest compiles with swc, which does not check them.
  const typecheck = spawnSync(process.execPath, [path.join(root, 'node_modules', 'typescript', 'bin', 'tsc'), '--noEmit', '-p', root], { cwd: root, stdio: 'inherit' });
  if (typecheck.status !== 0) {
    console.error('npm test: the typecheck failed (npm run typecheck), so the tests did not run.');
    process.exit(typecheck.status ?? 1);
  }
  run(process.execPath, [path.join(root, 'node_modules', 'jest', 'bin', 'jest.js'), '--ci', ...extra]);
} else {
  console.error('usage: bootstrap.mjs start|test|bench');
  process.exit(2);
}
