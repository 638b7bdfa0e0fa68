import { spawn } from 'node:child_process';
import { bundleWorkflowCode } from '@temporalio/worker';

/**
 * The workflow code bundle, built by webpack in a child process. Built in the worker's own
 * process, webpack leaves about 115 MB of resident memory the process never gives back; built
 * apart, the long-running worker holds only the bundle's text (about 2 MB). Built at every start
 * from the current sources, so it can never be stale.
 */
export function bundleWorkflowsApart(workflowsPath: string = require.resolve('../workflows')): Promise<{ code: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ['--import', 'tsx', __filename, workflowsPath], { stdio: ['ignore', 'pipe', 'inherit'] });
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

/** The child: the bundle of `workflowsPath` on stdout, the bundler's warnings and errors on stderr. */
async function printBundle(workflowsPath: string): Promise<void> {
  const toStderr = (level: string) => (message: string) => process.stderr.write(`[workflow bundle] ${level}: ${message}\n`);
  const quiet = () => undefined;
  const { code } = await bundleWorkflowCode({
    workflowsPath,
    logger: { log: quiet, trace: quiet, debug: quiet, info: quiet, warn: toStderr('warn'), error: toStderr('error') },
  });
  process.stdout.write(code);
}

if (require.main === module) {
  printBundle(process.argv[2]).catch((err) => {
    process.stderr.write(`[workflow bundle] ${err instanceof Error ? err.stack : String(err)}\n`);
    process.exit(1);
  });
}
