/**
 * Contract test: Schemathesis reads the OpenAPI document the API serves, generates requests from
 * it (valid ones and ones the document says are invalid), sends them to a real API with a real API
 * key and the admin token, and checks every answer against the document: no server error, only
 * declared statuses, headers and bodies, valid requests accepted, invalid ones refused, 405 with
 * Allow for undeclared methods, authentication enforced. Settings and the documented exclusions:
 * test/schemathesis/schemathesis.toml and hooks.py, explained in docs/clients.md#contract-testing.
 */
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { ROUTES } from '../api/app';
import { ALL_SCOPES } from '../domain/access/scopes';
import { ensureSchemathesis } from '../scripts/stack';
import { createWorkspace, Receiver, seedMember, startApi, startReceiver, TestApi, uniqueIp } from './helpers';

const HERE = path.join(__dirname, 'schemathesis');
/** Test cases per operation and phase: the whole run stays within about two minutes on two slow cores. */
const MAX_EXAMPLES = 5;

let api: TestApi;
let receiver: Receiver;

beforeAll(async () => {
  ensureSchemathesis((message) => console.log(`[schemathesis] ${message}`));
  // One client sends thousands of requests a minute from one IP: every limit is scaled up (the
  // 429 answers stay declared, and other suites test the limits themselves).
  api = await startApi({ config: { rateLimitScale: 1000 } });
  receiver = await startReceiver();
}, 300_000);

afterAll(async () => {
  await Promise.allSettled([api?.close(), receiver?.close()]);
});

/** Runs `st` to completion: its exit code and everything it printed. */
function runSchemathesis(
  st: string,
  args: string[],
  env: NodeJS.ProcessEnv,
  cwd: string,
): Promise<{ code: number | null; output: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(st, args, { cwd, env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
    let output = '';
    child.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
    child.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()));
    child.on('error', reject);
    child.on('close', (code) => resolve({ code, output }));
  });
}

describe('the API against its own OpenAPI document (Schemathesis)', () => {
  it('answers every generated request as the document says', async () => {
    const st = ensureSchemathesis(() => undefined);
    // Its generated creations would meet the plan's default caps (10 subscriptions, 100 automations), a
    // 402 no request can avoid: raised far above what a run makes, as the limits are (other suites test them).
    const ws = await createWorkspace(api, {
      scopes: [...ALL_SCOPES],
      rateLimitPerMinute: 1000,
      name: 'Schemathesis',
      plan: { webhookQuota: 100_000, automationLimit: 100_000, automationRunsPerMinute: 1_000_000 },
    });
    const member = await seedMember(api, ws.id, 'Ana Schemathesis');
    const emulator = process.env.EMULATOR_URL!;
    // A web gateway connection on the provider emulator, so generated sends really go out (and stay on this machine).
    const instance = await api.admin('POST', `/admin/v1/workspaces/${ws.id}/instances`, {
      name: 'Gateway',
      channel: 'whatsapp',
      provider: 'web',
      connected: true,
      config: { baseUrl: emulator, accessToken: 'schemathesis', appSecret: 'schemathesis', instanceName: `st-${ws.id}` },
    });
    expect(instance.status).toBe(201);

    // Its working directory (Schemathesis and Hypothesis keep their caches there): outside the repository.
    const workDir = fs.mkdtempSync(path.join(os.tmpdir(), 'schemathesis-'));
    const { code, output } = await runSchemathesis(
      st,
      [
        '--config-file',
        path.join(HERE, 'schemathesis.toml'),
        'run',
        `${api.url}/api/v1/openapi.json`,
        '--url',
        api.url,
        '--max-examples',
        String(MAX_EXAMPLES),
        '--phases',
        'examples,coverage,fuzzing,stateful',
        // Its thousands of requests count against a client IP of its own: from 127.0.0.1 they filled
        // that address's per-IP buckets, which every test file's unforwarded requests share (the
        // typed client's program, run as documented, was refused 429 IP_RATE_LIMITED in the same minute).
        '--header',
        `X-Forwarded-For: ${uniqueIp()}`,
        '--no-color',
      ],
      {
        ST_API_KEY: ws.key,
        ST_ADMIN_TOKEN: api.config.adminToken,
        ST_MEMBER_ID: member.id,
        ST_WEBHOOK_URL: `${receiver.url}/ok/schemathesis`,
        ST_MEDIA_URL: `${emulator}/__emulator/media/1024/photo.jpg`,
        ST_PROVIDER_URL: emulator,
        SCHEMATHESIS_HOOKS: 'hooks',
        PYTHONPATH: HERE,
      },
      workDir,
    );
    const log = path.join(workDir, 'output.txt');
    fs.writeFileSync(log, output);
    // On failure the assertion shows Schemathesis's own report: each failure, its response and a curl line to reproduce it.
    const failures = output.indexOf('=== FAILURES ===');
    const report = output.slice(failures >= 0 ? failures : Math.max(0, output.length - 4000)).slice(0, 30_000);
    expect({ exitCode: code, report: code === 0 ? 'passed' : `(full output: ${log})\n${report}` }).toEqual({
      exitCode: 0,
      report: 'passed',
    });
    // Every operation of the document was exercised, none skipped for a schema it could not read.
    const operations = new Set(ROUTES.map((r) => `${r.method} ${r.path}`)).size;
    expect(output).toContain(`Tested: ${operations}\n`);
    fs.rmSync(workDir, { recursive: true, force: true });
  }, 420_000);
});
