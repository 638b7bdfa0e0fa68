import { spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { bundleWorkflowCode } from '@temporalio/worker';

/**
 * Whether this process runs the compiled service (`npm run build`, dist/: this file is a .js)
 * rather than the TypeScript sources under tsx or jest (a .ts).
 */
const COMPILED = path.extname(__filename) === '.js';

/** The bundle `npm run build` writes beside the compiled code: dist/workflow-bundle.js. */
export const PREBUILT_BUNDLE_FILE = path.resolve(__dirname, '..', 'workflow-bundle.js');

/**
 * The workflow code bundle.
 *
 * From the sources (tsx, jest), or for a workflows module of its own (the bench's): built by
 * webpack in a child process, at every start from the current sources, so it can never be stale.
 * Built in the worker's own process, webpack leaves about 115 MB of resident memory the process
 * never gives back; built apart, the long-running worker holds only the bundle's text (about 2 MB).
 *
 * Compiled (dist/, production) with the service's workflows: the bundle `npm run build` made with
 * the same bundler from the same sources as the compiled code, read from PREBUILT_BUNDLE_FILE (no
 * webpack at start, no tsx). A missing file fails the start with a message saying how to make it.
 */
export function bundleWorkflowsApart(workflowsPath?: string): Promise<{ code: string }> {
  if (workflowsPath === undefined && COMPILED) return readPrebuiltBundle(PREBUILT_BUNDLE_FILE);
  return buildApart(workflowsPath ?? require.resolve('../workflows'));
}

async function readPrebuiltBundle(file: string): Promise<{ code: string }> {
  try {
    return { code: await fs.promises.readFile(file, 'utf8') };
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
    throw new Error(
      `the prebuilt workflow bundle ${file} is missing: \`npm run build\` writes it with the compiled code ` +
        '(or run the worker from the sources: node --import tsx workers/main.ts)',
      { cause: err },
    );
  }
}

function buildApart(workflowsPath: string): Promise<{ code: string }> {
  return new Promise((resolve, reject) => {
    // The child is this file: compiled, plain node runs it; from the sources, through tsx.
    const loader = COMPILED ? [] : ['--import', 'tsx'];
    const child = spawn(process.execPath, [...loader, __filename, workflowsPath], { stdio: ['ignore', 'pipe', 'inherit'] });
    // A worker stopped while it bundles does not leave the bundler behind.
    const stop = () => child.kill();
    process.once('exit', stop);
    const chunks: Buffer[] = [];
    child.stdout.on('data', (chunk: Buffer) => chunks.push(chunk));
    child.on('error', reject);
    child.on('close', (code, signal) => {
      process.removeListener('exit', stop);
      if (code === 0) resolve({ code: Buffer.concat(chunks).toString('utf8') });
      else reject(new Error(`the workflow bundle could not be built (bundler exited with ${code ?? signal}; its errors are above)`));
    });
  });
}

/** The bundle of `workflowsPath`, the bundler's warnings and errors on stderr. */
async function bundle(workflowsPath: string): Promise<string> {
  const toStderr = (level: string) => (message: string) => process.stderr.write(`[workflow bundle] ${level}: ${message}\n`);
  const quiet = () => undefined;
  const { code } = await bundleWorkflowCode({
    workflowsPath,
    logger: { log: quiet, trace: quiet, debug: quiet, info: quiet, warn: toStderr('warn'), error: toStderr('error') },
  });
  return code;
}

/**
 * The child, `workflow-bundle <workflowsPath>`: the bundle on stdout. The build,
 * `workflow-bundle --out <file> <workflowsPath>`: the bundle written to `file` (whole or not at all).
 */
async function main(args: string[]): Promise<void> {
  const out = args[0] === '--out' ? args[1] : undefined;
  const workflowsPath = out === undefined ? args[0] : args[2];
  if (!workflowsPath || (args[0] === '--out' && !out)) throw new Error('usage: workflow-bundle [--out <file>] <workflowsPath>');
  const code = await bundle(path.resolve(workflowsPath));
  if (out === undefined) {
    process.stdout.write(code);
    return;
  }
  const partial = `${out}.partial`;
  await fs.promises.mkdir(path.dirname(path.resolve(out)), { recursive: true });
  await fs.promises.writeFile(partial, code);
  await fs.promises.rename(partial, out);
}

if (require.main === module) {
  main(process.argv.slice(2)).catch((err) => {
    process.stderr.write(`[workflow bundle] ${err instanceof Error ? err.stack : String(err)}\n`);
    process.exit(1);
  });
}
