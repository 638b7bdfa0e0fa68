/**
 * Production runs the compiled service (Dockerfile, docker-compose.yml): `npm run build`, then
 * `node dist/...`, with the workflow bundle prebuilt into dist/workflow-bundle.js. No Docker engine
 * runs here, so this file runs the same commands the image does, on the test stack: the build, the
 * compiled migration job, worker and API, and a send through them end to end (the send workflow
 * runs from the prebuilt bundle).
 */
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import { builtinModules } from 'node:module';
import path from 'node:path';
import { ALL_SCOPES } from '../domain/access/scopes';
import { Child, ROOT, freePort, startChild, waitForHttp, waitForWorker } from '../scripts/stack';
import { createWorkspace, startApi, TestApi } from './helpers';
import { uniqueMobile } from './phones';
import { LOG_DIR, cloudInstance, emulator } from './stack-fixtures';

const DIST = path.join(ROOT, 'dist');
const BUNDLE = path.join(DIST, 'workflow-bundle.js');
const TASK_QUEUE = `crm-compiled-${process.pid}`;

/** Runs a command from the checkout; its exit code and output, whatever they are. */
function run(command: string, args: string[], env: NodeJS.ProcessEnv = {}): Promise<{ code: number | null; output: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, { cwd: ROOT, env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
    let output = '';
    child.stdout.on('data', (c: Buffer) => (output += c.toString()));
    child.stderr.on('data', (c: Buffer) => (output += c.toString()));
    child.once('error', reject);
    child.once('exit', (code) => resolve({ code, output }));
  });
}

/** A compiled entry point run as the image runs it (`node dist/<entry>`), its output in the stack's logs. */
function compiled(name: string, entry: string, env: Record<string, string>): Child {
  return startChild({ name, command: process.execPath, args: [path.join(DIST, entry)], env, logFile: path.join(LOG_DIR, `${name}.log`) });
}

/** Every .js file under `dir`. */
function jsFiles(dir: string): string[] {
  return fs
    .readdirSync(dir, { withFileTypes: true, recursive: true })
    .filter((e) => e.isFile() && e.name.endsWith('.js'))
    .map((e) => path.join(e.parentPath, e.name));
}

const started: Child[] = [];
let api: TestApi | undefined;

beforeAll(async () => {
  // What the Dockerfile's build stage runs.
  const since = Date.now();
  const build = await run('npm', ['run', 'build']);
  if (build.code !== 0) throw new Error(`npm run build exited with ${build.code}:\n${build.output.slice(-4000)}`);
  console.log(`npm run build: ${((Date.now() - since) / 1000).toFixed(1)} s`);
}, 300_000);

afterAll(async () => {
  await Promise.all(started.map((child) => child.stop()));
  await api?.close();
});

describe('npm run build', () => {
  it('compiles what production runs, with the workflow bundle, and nothing only development needs', () => {
    for (const entry of ['api/server.js', 'workers/main.js', 'scripts/migrate.js', 'scripts/search-hash.js', 'knexfile.js'])
      expect(fs.existsSync(path.join(DIST, entry))).toBe(true);
    const migrations = fs.readdirSync(path.join(ROOT, 'migrations')).filter((f) => f.endsWith('.ts'));
    expect(fs.readdirSync(path.join(DIST, 'migrations')).sort()).toEqual(migrations.map((f) => f.replace(/\.ts$/, '.js')).sort());
    for (const left of ['test', 'emulator', 'scripts/bench', 'scripts/stack.js']) expect(fs.existsSync(path.join(DIST, left))).toBe(false);
    const bundle = fs.readFileSync(BUNDLE, 'utf8');
    for (const workflow of ['sendMessageWorkflow', 'webhookDeliveryWorkflow', 'automationRunWorkflow']) expect(bundle).toContain(workflow);
  });

  it('loads only packages the runtime image installs (npm ci --omit=dev)', () => {
    const { dependencies } = JSON.parse(fs.readFileSync(path.join(ROOT, 'package.json'), 'utf8')) as {
      dependencies: Record<string, string>;
    };
    const loaded = new Set<string>();
    for (const file of jsFiles(DIST).filter((f) => f !== BUNDLE)) {
      for (const [, specifier] of fs.readFileSync(file, 'utf8').matchAll(/require(?:\.resolve)?\(\s*["']([^"']+)["']\s*\)/g)) {
        if (specifier.startsWith('.') || specifier.startsWith('node:') || builtinModules.includes(specifier)) continue;
        loaded.add(specifier.startsWith('@') ? specifier.split('/').slice(0, 2).join('/') : specifier.split('/')[0]);
      }
    }
    expect(loaded.size).toBeGreaterThan(10);
    expect([...loaded].filter((name) => !(name in dependencies))).toEqual([]);
  });
});

describe('the compiled service', () => {
  it('the migration job finds the database the sources migrated up to date (migrations keep their .ts names)', async () => {
    const migrate = await run(process.execPath, [path.join(DIST, 'scripts/migrate.js'), 'latest']);
    expect(migrate).toEqual({ code: 0, output: 'schema up to date\n' });
  });

  it('the worker refuses to start without its prebuilt bundle, saying how to make it', async () => {
    const aside = `${BUNDLE}.aside`;
    fs.renameSync(BUNDLE, aside);
    try {
      const worker = compiled('compiled-worker-no-bundle', 'workers/main.js', {
        TEMPORAL_TASK_QUEUE: TASK_QUEUE,
        OUTBOX_DISPATCHER: 'false',
      });
      started.push(worker);
      const code = await new Promise<number | null>((resolve) => worker.process.once('exit', (c) => resolve(c)));
      expect(code).toBe(1);
      expect(worker.output()).toContain(`the prebuilt workflow bundle ${BUNDLE} is missing: \`npm run build\` writes it`);
    } finally {
      fs.renameSync(aside, BUNDLE);
    }
  });

  it('the API answers /ready, and a send through it runs on the compiled processes, from the prebuilt bundle', async () => {
    const port = await freePort();
    // Both on a task queue of their own: the send is for the compiled processes to run, not for the suite's worker.
    const worker = compiled('compiled-worker', 'workers/main.js', { TEMPORAL_TASK_QUEUE: TASK_QUEUE, OUTBOX_DISPATCHER: 'false' });
    const server = compiled('compiled-api', 'api/server.js', { TEMPORAL_TASK_QUEUE: TASK_QUEUE, PORT: String(port) });
    started.push(worker, server);
    const url = `http://127.0.0.1:${port}`;
    await Promise.all([waitForWorker(worker), waitForHttp(`${url}/ready`, server)]);
    const ready = await fetch(`${url}/ready`);
    expect(await ready.json()).toEqual({ status: 'ready', checks: { database: 'ok', temporal: 'ok' } });
    // The reference page reads @scalar/api-reference's bundle through Node's resolution, from dist/ too.
    expect((await fetch(`${url}/docs`)).status).toBe(200);

    api = await startApi();
    const ws = await createWorkspace(api, { scopes: [...ALL_SCOPES] });
    const { phoneNumberId } = await cloudInstance(api, ws.id, { label: 'compiled' });
    const phone = uniqueMobile();
    const sent = await fetch(`${url}/api/v1/messages`, {
      method: 'POST',
      headers: { authorization: `Bearer ${ws.key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ phone, type: 'template', templateName: 'welcome', templateLanguage: 'pt_BR', templateVariables: ['Ana'] }),
    });
    expect(sent.status).toBe(201);
    const { calls } = await emulator(`/__emulator/calls?phoneNumberId=${phoneNumberId}`);
    expect(calls.map((c: { outcome: string; body: any }) => [c.outcome, c.body.template?.name])).toEqual([['ok', 'welcome']]);
  });
});
