#!/usr/bin/env node
// `npm run build`: the service as production runs it (the Dockerfile's build stage runs this).
// 1. dist/ emptied, so nothing of an earlier build (a migration since removed) is left to run;
// 2. tsc compiles the API, the worker, the migration job and what they import (tsconfig.build.json);
// 3. the workflow bundle is made once, here, by the compiled workers/workflow-bundle.js from the
//    sources of workflows/, into dist/workflow-bundle.js, which the compiled worker reads at start
//    instead of running webpack. Plain JavaScript: it needs no tsx.
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const seconds = (since) => `${((Date.now() - since) / 1000).toFixed(1)} s`;

function run(what, args) {
  const since = Date.now();
  const { status, signal, error } = spawnSync(process.execPath, args, { cwd: root, stdio: 'inherit' });
  if (error || status !== 0) {
    console.error(`[build] ${what} failed (${error ? error.message : `exit ${status ?? signal}`})`);
    process.exit(status || 1);
  }
  console.log(`[build] ${what} (${seconds(since)})`);
}

const started = Date.now();
fs.rmSync(path.join(root, 'dist'), { recursive: true, force: true });
run('compiled to dist/', [path.join(root, 'node_modules', 'typescript', 'bin', 'tsc'), '-p', 'tsconfig.build.json']);
run('workflow bundle: dist/workflow-bundle.js', [
  'dist/workers/workflow-bundle.js',
  '--out',
  'dist/workflow-bundle.js',
  'workflows/index.ts',
]);
console.log(`[build] done in ${seconds(started)}`);
