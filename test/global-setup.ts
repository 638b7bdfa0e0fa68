/**
 * Provisions the test stack once per `npm test`: its own PostgreSQL (embedded, or a fresh database
 * on TEST_DATABASE_URL's server), its own Temporal dev server, the worker and the provider emulator.
 * Never the user's data: everything lives under .data/test and is recreated on every run.
 */
import fs from 'node:fs';
import path from 'node:path';
import {
  Child,
  ROOT,
  NO_FSYNC_FLAGS,
  Running,
  ensureDatabase,
  ensureTemporalCli,
  freePort,
  migrateLatest,
  nodeTs,
  startChild,
  startEmbeddedPostgres,
  stackEncryptionKeys,
  seconds,
  startTemporalDevServer,
  stopLiveChildren,
  stopOnSignal,
  waitForHttp,
  waitForWorker,
  NODE_PROCESS_ENV,
  workerFromSources,
} from '../scripts/stack';

// TEST_STACK_DIR lets two suites run side by side on one machine (each needs its own stack).
const TEST_DIR = process.env.TEST_STACK_DIR ? path.resolve(process.env.TEST_STACK_DIR) : path.join(ROOT, '.data', 'test');
const log = (message: string): void => console.log(`[test-setup] ${message}`);

declare global {
  var __TEST_STACK__: Running[] | undefined;
}

export default async function globalSetup(): Promise<void> {
  const started = Date.now();
  const running: Running[] = [];
  globalThis.__TEST_STACK__ = running;
  // Ctrl-C or a SIGTERM to the run stops the stack too (jest itself would leave it running).
  let stop: Promise<void> | undefined;
  stopOnSignal(
    () =>
      (stop ??= (async () => {
        for (const part of [...running].reverse()) await part.stop().catch(() => undefined);
        await stopLiveChildren();
      })()),
  );
  fs.rmSync(TEST_DIR, { recursive: true, force: true });
  fs.mkdirSync(path.join(TEST_DIR, 'logs'), { recursive: true });
  console.log('');

  let adminUrl = process.env.TEST_DATABASE_URL;
  if (adminUrl) {
    log('PostgreSQL: TEST_DATABASE_URL server, fresh database crm_test');
  } else {
    const pg = await startEmbeddedPostgres(path.join(TEST_DIR, 'postgres'), await freePort(), log, NO_FSYNC_FLAGS);
    running.push(pg);
    adminUrl = pg.adminUrl;
  }
  const databaseUrl = await ensureDatabase(adminUrl, 'crm_test', true);
  await migrateLatest(databaseUrl, log);

  const cli = await ensureTemporalCli(log);
  const temporal = await startTemporalDevServer(cli, {
    dbFile: path.join(TEST_DIR, 'temporal.sqlite'),
    port: await freePort(),
    logFile: path.join(TEST_DIR, 'logs', 'temporal.log'),
    log,
  });
  running.push(temporal);

  const emulatorPort = await freePort();
  const env: Record<string, string> = {
    DATABASE_URL: databaseUrl,
    TEST_ADMIN_DATABASE_URL: adminUrl,
    TEMPORAL_ADDRESS: temporal.address,
    TEMPORAL_NAMESPACE: 'default',
    TEMPORAL_TASK_QUEUE: 'crm-test',
    ADMIN_TOKEN: 'test-admin-token-of-32-characters',
    ENCRYPTION_KEYS: stackEncryptionKeys(TEST_DIR),
    ALLOW_PRIVATE_URLS: 'true',
    WEBHOOK_RETRY_SCALE: '0.001',
    DELIVERY_SWEEP_MS: '1000',
    // A send an API process began and never settled is handed to its workflow after 15 s (test/send-crash.test.ts), not a minute.
    SEND_SWEEP_AFTER_MS: '15000',
    AUTOMATION_WAIT_SCALE: '0.00001',
    // A conversation is quiet for its insight after 1 s (test/insights.test.ts), not 2 minutes.
    INSIGHT_DEBOUNCE_SECONDS: '1',
    EMULATOR_URL: `http://127.0.0.1:${emulatorPort}`,
    LOG_LEVEL: 'info',
  };
  Object.assign(process.env, env);

  const emulator: Child = startChild({
    name: 'emulator',
    ...nodeTs('emulator/server.ts'),
    env: { ...env, EMULATOR_PORT: String(emulatorPort) },
    logFile: path.join(TEST_DIR, 'logs', 'emulator.log'),
  });
  running.push(emulator);
  const worker: Child = startChild({
    name: 'worker',
    ...workerFromSources(),
    env: { ...env, ...NODE_PROCESS_ENV },
    logFile: path.join(TEST_DIR, 'logs', 'worker.log'),
  });
  running.push(worker);
  const childrenStarted = Date.now();
  await Promise.all([
    waitForHttp(`${env.EMULATOR_URL}/health`, emulator).then(() => log(`emulator ready (${seconds(childrenStarted)})`)),
    waitForWorker(worker).then(() => log(`worker ready (${seconds(childrenStarted)})`)),
  ]);
  const logs = path.join(TEST_DIR, 'logs');
  log(`stack ready in ${seconds(started)} (logs in ${logs.startsWith(`${ROOT}${path.sep}`) ? path.relative(ROOT, logs) : logs})`);
}
