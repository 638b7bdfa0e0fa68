/**
 * `npm start`: the whole stack on one machine. PostgreSQL (DATABASE_URL or embedded), Temporal
 * (TEMPORAL_ADDRESS or the CLI dev server), migrations, the provider emulator, the worker and the
 * API, then a one-time demo seed. Prints one line per step; the processes' own output goes to
 * .data/logs/ (`npm start -- --verbose` prints it instead). SIGINT, SIGTERM or SIGHUP (Ctrl-C)
 * stops everything it started; the next start reuses .data/ (STACK_DATA_DIR).
 */
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { assertAdminToken, createDb, ensureSearchAttributes, parseKeyRing } from '../domain/platform';
import { connectEmulatorWebhooks, seedDemo } from './seed';
import {
  Child,
  ROOT,
  Running,
  ensureDatabase,
  ensureTemporalCli,
  migrateLatest,
  nodeTs,
  portInUse,
  seconds,
  stackEncryptionKeys,
  startChild,
  startEmbeddedPostgres,
  startTemporalDevServer,
  stopLiveChildren,
  stopOnSignal,
  waitForHttp,
  waitForWorker,
  NODE_PROCESS_ENV,
  apiFromSources,
  workerFromSources,
} from './stack';

const DATA_DIR = process.env.STACK_DATA_DIR ? path.resolve(process.env.STACK_DATA_DIR) : path.join(ROOT, '.data');
const LOG_DIR = path.join(DATA_DIR, 'logs');
const VERBOSE = process.argv.includes('--verbose');
const log = (message: string): void => console.log(`[start] ${message}`);
const shown = (file: string): string => (file.startsWith(`${ROOT}${path.sep}`) ? path.relative(ROOT, file) : file);

/** Thrown by a step that finishes after a signal asked the stack to stop. */
class Stopping extends Error {}

/** This run's log files; the previous run's move to logs/previous/, so a crash's logs survive one restart. */
function rotateLogs(): void {
  fs.mkdirSync(LOG_DIR, { recursive: true });
  const previous = path.join(LOG_DIR, 'previous');
  fs.rmSync(previous, { recursive: true, force: true });
  fs.mkdirSync(previous);
  for (const name of fs.readdirSync(LOG_DIR)) {
    if (name.endsWith('.log')) fs.renameSync(path.join(LOG_DIR, name), path.join(previous, name));
  }
}

async function main(): Promise<void> {
  fs.mkdirSync(DATA_DIR, { recursive: true });
  rotateLogs();
  const logFile = (name: string): string | undefined => (VERBOSE ? undefined : path.join(LOG_DIR, `${name}.log`));
  const running: Running[] = [];
  // One stop, however many ask for it (a signal, a failed step, a child that died): each caller waits for all of it.
  let stop: Promise<void> | undefined;
  const stopping = (): boolean => stop !== undefined;
  const stopChildren = (): Promise<void> =>
    (stop ??= (async () => {
      log('stopping ...');
      for (const part of running.reverse()) await part.stop().catch((err) => log(`stop failed: ${err.message}`));
      // A child started but not yet handed back (the dev server still starting when the signal came).
      await stopLiveChildren();
      log('stopped');
    })());
  const stopAll = async (code: number): Promise<never> => {
    await stopChildren();
    process.exit(code);
  };
  /** Keeps a started part for the stop, or stops it at once when a signal came while it started. */
  const keep = async <T extends Running>(part: T): Promise<T> => {
    if (stopping()) {
      await part.stop();
      throw new Stopping();
    }
    running.push(part);
    return part;
  };
  const notStopping = (): void => {
    if (stopping()) throw new Stopping();
  };
  stopOnSignal(stopChildren);
  // This process is the stack's supervisor: whatever kills it must not leave its children running.
  // An output that went away (`npm start | head`, a closed pipe) or an error nothing caught stops the stack first.
  for (const stream of [process.stdout, process.stderr]) stream.on('error', () => void stopAll(1));
  process.on('uncaughtException', (err) => {
    if (!stopping()) console.error(`[start] failed: ${err.stack ?? err.message}`);
    void stopAll(1);
  });

  try {
    // Before anything starts: a short ADMIN_TOKEN would stop the API and the worker anyway.
    assertAdminToken(process.env.ADMIN_TOKEN ?? '');
    const port = Number(process.env.PORT ?? 3000);
    const emulatorPort = Number(process.env.EMULATOR_PORT ?? 3100);
    const uiPort = Number(process.env.TEMPORAL_UI_PORT ?? 8233);
    for (const [name, p] of [
      ['API (PORT)', port],
      ['emulator (EMULATOR_PORT)', emulatorPort],
    ] as const) {
      if (await portInUse(p))
        throw new Error(`port ${p} for the ${name} is already in use; set ${name.match(/\((.+)\)/)![1]} to another port`);
    }

    // Database: the user's data, so PostgreSQL keeps its durable defaults (fsync on).
    let databaseUrl = process.env.DATABASE_URL;
    if (databaseUrl) {
      log('PostgreSQL: using DATABASE_URL');
    } else {
      const pgPort = Number(process.env.EMBEDDED_PG_PORT ?? 54329);
      const pg = await keep(await startEmbeddedPostgres(path.join(DATA_DIR, 'postgres'), pgPort, log));
      databaseUrl = await ensureDatabase(pg.adminUrl, 'crm');
    }
    await migrateLatest(databaseUrl, log);
    notStopping();

    // Temporal
    let temporalAddress = process.env.TEMPORAL_ADDRESS;
    const namespace = process.env.TEMPORAL_NAMESPACE ?? 'default';
    let temporalUi = process.env.TEMPORAL_UI_URL ?? '(your Temporal cluster UI)';
    const ownTemporal = !temporalAddress;
    if (temporalAddress) {
      log(`Temporal: using TEMPORAL_ADDRESS=${temporalAddress}`);
    } else {
      const cli = await ensureTemporalCli(log);
      notStopping();
      const temporalPort = Number(process.env.TEMPORAL_PORT ?? 7233);
      if (await portInUse(temporalPort))
        throw new Error(`port ${temporalPort} for Temporal is in use; set TEMPORAL_PORT or TEMPORAL_ADDRESS`);
      const temporal = await keep(
        await startTemporalDevServer(cli, {
          dbFile: path.join(DATA_DIR, 'temporal.sqlite'),
          port: temporalPort,
          uiPort,
          logFile: logFile('temporal'),
          log,
        }),
      );
      temporalAddress = temporal.address;
      temporalUi = `http://localhost:${uiPort}`;
    }
    await ensureSearchAttributes(temporalAddress, namespace);
    notStopping();

    // Secrets for the local stack, kept across restarts
    const tokenFile = path.join(DATA_DIR, 'admin-token');
    let adminToken = process.env.ADMIN_TOKEN;
    if (!adminToken) {
      if (!fs.existsSync(tokenFile)) fs.writeFileSync(tokenFile, randomBytes(24).toString('base64url'), { mode: 0o600 });
      adminToken = fs.readFileSync(tokenFile, 'utf8').trim();
    }

    const env = {
      DATABASE_URL: databaseUrl,
      TEMPORAL_ADDRESS: temporalAddress,
      TEMPORAL_NAMESPACE: namespace,
      ADMIN_TOKEN: adminToken,
      // The codec endpoint answers credentialed calls from this UI only: our own dev server's (on
      // uiPort), or the origin of TEMPORAL_UI_URL for your own cluster's.
      TEMPORAL_UI_ORIGIN:
        process.env.TEMPORAL_UI_ORIGIN ??
        (ownTemporal
          ? `http://localhost:${uiPort}`
          : /^https?:\/\//.test(temporalUi) && URL.canParse(temporalUi)
            ? new URL(temporalUi).origin
            : ''),
      ENCRYPTION_KEYS: process.env.ENCRYPTION_KEYS ?? stackEncryptionKeys(DATA_DIR),
      PORT: String(port),
      PUBLIC_BASE_URL: process.env.PUBLIC_BASE_URL ?? `http://localhost:${port}`,
      // A local development stack: webhook and media URLs may point at this machine or the LAN
      // (a receiver on localhost, the emulator). Link-local and metadata addresses stay refused.
      ALLOW_PRIVATE_URLS: process.env.ALLOW_PRIVATE_URLS ?? 'true',
    };

    const emulatorUrl = `http://127.0.0.1:${emulatorPort}`;
    let started = Date.now();
    const emulator: Child = await keep(
      startChild({
        name: 'emulator',
        ...nodeTs('emulator/server.ts'),
        env: { ...env, EMULATOR_PORT: String(emulatorPort) },
        logFile: logFile('emulator'),
      }),
    );
    await waitForHttp(`${emulatorUrl}/health`, emulator);
    log(`emulator ready on ${emulatorUrl} (${seconds(started)})`);
    notStopping();

    started = Date.now();
    const worker = await keep(
      startChild({ name: 'worker', ...workerFromSources(), env: { ...env, ...NODE_PROCESS_ENV }, logFile: logFile('worker') }),
    );
    const api = await keep(startChild({ name: 'api', ...apiFromSources(), env: { ...env, ...NODE_PROCESS_ENV }, logFile: logFile('api') }));
    await Promise.all([
      waitForWorker(worker).then(() => log(`worker ready (${seconds(started)})`)),
      waitForHttp(`http://127.0.0.1:${port}/health`, api).then(() => log(`API ready on http://localhost:${port} (${seconds(started)})`)),
    ]);
    notStopping();

    started = Date.now();
    const base = `http://localhost:${port}`;
    const db = createDb(databaseUrl, { max: 2 });
    const ring = parseKeyRing(env.ENCRYPTION_KEYS);
    const stateFile = path.join(DATA_DIR, 'demo.json');
    const seed = await seedDemo(db, { stateFile, emulatorUrl, apiUrl: base, ring })
      .then(async (result) => {
        await connectEmulatorWebhooks(db, { emulatorUrl, apiUrl: `http://127.0.0.1:${port}`, ring });
        return result;
      })
      .finally(() => db.destroy());
    log(`${seed.created ? 'demo workspace seeded' : 'demo workspace ready'} (${seconds(started)})`);

    console.log(`
  Sales CRM is running.

    API            ${base}/api/v1
    Docs           ${base}/docs   (OpenAPI: ${base}/api/v1/openapi.json)
    Temporal UI    ${temporalUi}
    Emulator       ${emulatorUrl}   (WhatsApp Cloud API wire format)
    Admin token    ${adminToken}
    Demo API key   ${seed.apiKey}   (workspace ${seed.workspaceId}, all scopes)
    Demo instance  ${seed.instanceId ?? '(none)'}   (phone number id ${seed.phoneNumberId ?? '-'}, app secret ${seed.appSecret ?? '-'})
    Demo values    ${shown(stateFile)}   (the demo key, instance and addresses, for scripts: the README tour reads it)
    Logs           ${VERBOSE ? '(printed here: --verbose)' : `${shown(LOG_DIR)}/   (api, worker, emulator${ownTemporal ? ', temporal' : ''})`}
    Private URLs   ${env.ALLOW_PRIVATE_URLS === 'true' ? 'allowed for webhooks and media (a local stack; ALLOW_PRIVATE_URLS=false to refuse)' : 'refused (ALLOW_PRIVATE_URLS)'}

  Try:
    curl -s -H "Authorization: Bearer ${seed.apiKey}" ${base}/api/v1/pipelines

  Ctrl-C stops everything; data stays in ${shown(DATA_DIR)}/ for the next start.
`);
    // Any child dying on its own takes the stack down loudly rather than leaving half of it running.
    for (const [name, child] of [
      ['emulator', emulator],
      ['worker', worker],
      ['api', api],
    ] as const) {
      child.process.once('exit', (code, signal) => {
        if (!stopping()) {
          const tail = child.output().trimEnd().split('\n').slice(-20).join('\n');
          log(`the ${name} exited unexpectedly (${signal ?? `code ${code}`}); stopping the stack. Its last output:\n${tail}`);
          void stopAll(1);
        }
      });
    }
  } catch (err) {
    // A step cut short by the stop: whoever started the stop (the exit hook on a signal) exits.
    if (err instanceof Stopping || stopping()) return;
    console.error(`[start] failed: ${(err as Error).message}`);
    await stopAll(1);
  }
}

void main();
