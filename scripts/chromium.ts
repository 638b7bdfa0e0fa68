/**
 * A headless Chromium for browser tests (the /docs page): one already on PATH, or Debian's
 * `chromium` package installed with apt-get when running as root. Never downloads anything else
 * (test/docs-browser.test.ts drives it with playwright-core, which is given this executable).
 *
 *   npx tsx scripts/chromium.ts            # prints the path, installing when needed
 *   npx tsx scripts/chromium.ts <url>      # prints the DOM of <url> after its scripts ran
 */
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { isExecutable, which } from './executables';

export type Log = (message: string) => void;

export type ChromiumResult = { path: string; installed: boolean; seconds: number } | { path: null; reason: string };

/**
 * Switches for a headless run that calls no Google service and no other host by itself (no QUIC,
 * background networking, component updates or sync). Callers add a fresh --user-data-dir.
 */
export const CHROMIUM_FLAGS = [
  '--headless',
  '--no-sandbox',
  '--disable-gpu',
  '--disable-quic',
  '--no-first-run',
  '--no-default-browser-check',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
  '--disable-extensions',
  '--disable-dev-shm-usage',
  '--mute-audio',
];

/** Executable names tried on PATH, in order. `CHROMIUM_PATH` overrides them. */
export const CHROMIUM_NAMES = ['chromium', 'chromium-browser', 'google-chrome', 'google-chrome-stable'];

export function findChromium(): string | null {
  const override = process.env.CHROMIUM_PATH;
  if (override && isExecutable(override)) return override;
  return which(...CHROMIUM_NAMES) ?? null;
}

interface RunResult {
  code: number | null;
  stdout: string;
  stderr: string;
  timedOut: boolean;
}

function run(command: string, args: string[], options: { timeoutMs: number; env?: NodeJS.ProcessEnv; log?: Log }): Promise<RunResult> {
  return new Promise((resolve) => {
    const child = spawn(command, args, { env: options.env ?? process.env, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    let timedOut = false;
    child.stdout.on('data', (chunk) => (stdout += chunk));
    child.stderr.on('data', (chunk) => (stderr += chunk));
    const timer = setTimeout(() => {
      timedOut = true;
      child.kill('SIGKILL');
    }, options.timeoutMs);
    child.on('error', (err) => {
      clearTimeout(timer);
      resolve({ code: null, stdout, stderr: `${stderr}${err.message}`, timedOut });
    });
    child.on('close', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr, timedOut });
    });
  });
}

const tail = (text: string, lines = 5): string => text.trim().split('\n').slice(-lines).join(' | ');

/**
 * A Chromium executable: on PATH (or `CHROMIUM_PATH`), else Debian's `chromium` package installed
 * with apt-get (as root only; `apt-get update` and a second try when the first install fails).
 * When none can be had, `path` is null and `reason` says why, for the caller to report loudly.
 */
export async function ensureChromium(log: Log = console.log, options: { installTimeoutMs?: number } = {}): Promise<ChromiumResult> {
  const found = findChromium();
  if (found) return { path: found, installed: false, seconds: 0 };

  const apt = which('apt-get');
  if (!apt) return { path: null, reason: `no ${CHROMIUM_NAMES.join('/')} on PATH and no apt-get to install Debian's chromium package` };
  if (typeof process.getuid === 'function' && process.getuid() !== 0) {
    return {
      path: null,
      reason: `no ${CHROMIUM_NAMES.join('/')} on PATH and not root, so apt-get cannot install chromium (run: sudo apt-get install -y chromium)`,
    };
  }

  const started = Date.now();
  const timeoutMs = options.installTimeoutMs ?? 10 * 60_000;
  const env = { ...process.env, DEBIAN_FRONTEND: 'noninteractive' };
  // Waits for a concurrent apt run instead of failing on its lock.
  const install = () => run(apt, ['-o', 'DPkg::Lock::Timeout=180', 'install', '-y', 'chromium'], { timeoutMs, env });
  log('chromium not found on PATH: apt-get install -y chromium');
  let result = await install();
  if (result.code !== 0) {
    log(`apt-get install failed (${tail(result.stderr || result.stdout, 2)}); running apt-get update and retrying`);
    const update = await run(apt, ['-o', 'DPkg::Lock::Timeout=180', 'update'], { timeoutMs, env });
    if (update.code !== 0) return { path: null, reason: `apt-get update failed: ${tail(update.stderr || update.stdout)}` };
    result = await install();
  }
  const seconds = Math.round((Date.now() - started) / 100) / 10;
  if (result.code !== 0) {
    return {
      path: null,
      reason: `apt-get install -y chromium failed${result.timedOut ? ' (timed out)' : ''}: ${tail(result.stderr || result.stdout)}`,
    };
  }
  const installed = findChromium();
  if (!installed) return { path: null, reason: 'apt-get installed chromium but no chromium executable is on PATH' };
  log(`chromium installed in ${seconds}s: ${installed}`);
  return { path: installed, installed: true, seconds };
}

/**
 * Loads `url` in headless Chromium, lets its scripts run (virtual time) and returns the
 * serialized DOM. A throwaway profile directory keeps runs independent.
 */
export async function dumpDom(
  chromium: string,
  url: string,
  options: { timeoutMs?: number; virtualTimeBudgetMs?: number } = {},
): Promise<string> {
  const profile = fs.mkdtempSync(path.join(os.tmpdir(), 'chromium-profile-'));
  try {
    const result = await run(
      chromium,
      [...CHROMIUM_FLAGS, `--user-data-dir=${profile}`, `--virtual-time-budget=${options.virtualTimeBudgetMs ?? 5000}`, '--dump-dom', url],
      { timeoutMs: options.timeoutMs ?? 60_000 },
    );
    if (result.code !== 0 || !result.stdout.trim()) {
      throw new Error(
        `chromium --dump-dom ${url} failed (exit ${result.code}${result.timedOut ? ', timed out' : ''}): ${tail(result.stderr, 10)}`,
      );
    }
    return result.stdout;
  } finally {
    fs.rmSync(profile, { recursive: true, force: true });
  }
}

if (require.main === module) {
  (async () => {
    const result = await ensureChromium((m) => console.error(`[chromium] ${m}`));
    if (result.path === null) {
      console.error(`[chromium] unavailable: ${result.reason}`);
      process.exit(1);
    }
    const url = process.argv[2];
    console.log(url ? await dumpDom(result.path, url) : result.path);
  })().catch((err) => {
    console.error(err);
    process.exit(1);
  });
}
