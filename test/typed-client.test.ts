/**
 * A typed client generated from the document the API serves works: openapi-typescript turns the
 * served OpenAPI document into types, the client program shown in docs/clients.md (openapi-fetch)
 * compiles against them under `strict`, and, run against the API with a real key, it lists leads
 * and creates a deal.
 */
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { promisify } from 'node:util';
import { createKey, createWorkspace, seedContact, seedPipeline, startApi, TestApi } from './helpers';

const run = promisify(execFile);
const ROOT = path.resolve(__dirname, '..');
const bin = (...parts: string[]) => path.join(ROOT, 'node_modules', ...parts);

/** The program of docs/clients.md: the ```ts block after its `typed-client` marker. */
function documentedProgram(): string {
  const doc = fs.readFileSync(path.join(ROOT, 'docs', 'clients.md'), 'utf8');
  const match = /<!-- typed-client:[^>]*-->\s*```ts\n([\s\S]*?)```/.exec(doc);
  if (!match) throw new Error('docs/clients.md has no ```ts block after its <!-- typed-client: --> marker');
  return match[1];
}

let api: TestApi;
let dir: string;

beforeAll(async () => {
  api = await startApi();
  // Inside the checkout (under the ignored .data/), so the program resolves openapi-fetch and the
  // Node types from the project's node_modules like any project that installed them.
  fs.mkdirSync(path.join(ROOT, '.data'), { recursive: true });
  dir = fs.mkdtempSync(path.join(ROOT, '.data', 'typed-client-'));
});

afterAll(async () => {
  await api.close();
  fs.rmSync(dir, { recursive: true, force: true });
});

describe('a client generated from the served OpenAPI document', () => {
  it('compiles under strict and lists leads and creates a deal', async () => {
    const ws = await createWorkspace(api, { scopes: ['leads:read', 'deals:write'] });
    const lead = await seedContact(api, ws.id, { phone: '5511987001122', name: 'Maria Typed' });
    await seedPipeline(api, ws.id, { name: 'Sales', stages: ['New', 'Qualified'] });

    const served = await api.request('GET', '/api/v1/openapi.json');
    expect(served.status).toBe(200);
    fs.writeFileSync(path.join(dir, 'openapi.json'), served.text);
    fs.writeFileSync(path.join(dir, 'package.json'), JSON.stringify({ type: 'module', private: true }));
    fs.writeFileSync(path.join(dir, 'client.ts'), documentedProgram());
    await run(
      process.execPath,
      [bin('openapi-typescript', 'bin', 'cli.js'), path.join(dir, 'openapi.json'), '-o', path.join(dir, 'crm-api.ts')],
      { cwd: dir },
    );

    // The generated types are compiled and checked too (a .ts file, not a skipped .d.ts).
    const tsc = [
      bin('typescript', 'bin', 'tsc'),
      '--strict',
      '--target',
      'ES2022',
      '--module',
      'node16',
      '--moduleResolution',
      'node16',
      '--types',
      'node',
      '--outDir',
      'dist',
      'client.ts',
      'crm-api.ts',
    ];
    const compiled = await run(process.execPath, tsc, { cwd: dir }).then(
      () => 'compiled',
      (err: { stdout?: string }) => err.stdout ?? String(err),
    );
    expect(compiled).toBe('compiled');

    const { stdout } = await run(process.execPath, [path.join(dir, 'dist', 'client.js')], {
      cwd: dir,
      env: { ...process.env, CRM_BASE_URL: api.url, CRM_API_KEY: ws.key },
    });
    const printed = JSON.parse(stdout.trim().split('\n').pop()!);
    expect(printed).toMatchObject({ lead: 'Maria Typed', status: 'open' });
    const reader = await createKey(api, ws.id, ['deals:read']);
    const deal = await api.request('GET', `/api/v1/deals/${printed.deal}`, { key: reader.key });
    expect(deal.status).toBe(200);
    expect(deal.body.data).toMatchObject({ contactId: lead.id, value: 1500, stageId: printed.stageId });
  }, 120_000);
});
