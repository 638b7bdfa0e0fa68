/**
 * The README's five-minute tour, run as printed: the ```sh block under "A five-minute tour", with
 * bash (set -euo pipefail), curl, jq and openssl, against a stack like `npm start`'s: a real API
 * process (api/server.ts) on its own port, the suite's worker and emulator, and the demo workspace
 * seeded by scripts/seed.ts into a demo.json of the test's own (the tour's DEMO). Each step's
 * printed outcome is checked, so a README that drifts from the API fails here.
 */
import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { createDb, Db } from '../domain/platform/db';
import { parseKeyRing } from '../domain/platform/encryption';
import { connectEmulatorWebhooks, seedDemo } from '../scripts/seed';
import { Child, ROOT, freePort, nodeTs, startChild, waitForHttp } from '../scripts/stack';

const TOOLS = ['bash', 'curl', 'jq', 'openssl'];

/** The tour's shell block, exactly as the README prints it. */
function tourScript(): string {
  const readme = fs.readFileSync(path.join(ROOT, 'README.md'), 'utf8');
  const section = readme.indexOf('\n## A five-minute tour');
  if (section < 0) throw new Error('README.md has no "## A five-minute tour" section');
  const open = readme.indexOf('\n```sh\n', section);
  const close = readme.indexOf('\n```\n', open + 1);
  if (open < 0 || close < 0 || readme.lastIndexOf('\n## ', open) !== section)
    throw new Error('the tour section of README.md has no ```sh block');
  return readme.slice(open + '\n```sh\n'.length, close + 1);
}

function runBash(
  script: string,
  opts: { cwd: string; env: NodeJS.ProcessEnv; timeoutMs: number },
): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const child = spawn('bash', ['-c', `set -euo pipefail\n${script}`], {
      cwd: opts.cwd,
      env: opts.env,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (c: Buffer) => (stdout += c.toString()));
    child.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
    const timer = setTimeout(() => {
      stderr += `\n[test] the tour ran longer than ${opts.timeoutMs} ms: killed`;
      child.kill('SIGKILL');
    }, opts.timeoutMs);
    child.on('close', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
  });
}

let dir: string;
let api: Child | undefined;
let db: Db | undefined;

beforeAll(async () => {
  const missing = TOOLS.filter((tool) => spawnSync('sh', ['-c', `command -v ${tool}`]).status !== 0);
  if (missing.length) {
    throw new Error(
      `The README tour test needs ${missing.join(', ')} on PATH, like a reader of the tour; it installs nothing. Install ${missing.join(', ')} and run it again.`,
    );
  }
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'crm-tour-'));
  // The API as npm start runs it: its own process and port, PUBLIC_BASE_URL naming that port (the
  // inbound automation URL the tour posts to), private URLs allowed (the tour's local receiver).
  const port = await freePort();
  const apiUrl = `http://127.0.0.1:${port}`;
  api = startChild({
    name: 'tour-api',
    ...nodeTs('api/server.ts'),
    env: { PORT: String(port), PUBLIC_BASE_URL: apiUrl, ALLOW_PRIVATE_URLS: 'true' },
    logFile: path.join(dir, 'api.log'),
  });
  await waitForHttp(`${apiUrl}/health`, api);
  db = createDb(process.env.DATABASE_URL!, { max: 2 });
  const ring = parseKeyRing(process.env.ENCRYPTION_KEYS!);
  const emulatorUrl = process.env.EMULATOR_URL!;
  const seed = await seedDemo(db, { stateFile: path.join(dir, 'demo.json'), emulatorUrl, apiUrl, ring });
  // This workspace's instance only: other test files' instances on the same emulator keep their own webhooks.
  await connectEmulatorWebhooks(db, { emulatorUrl, apiUrl, ring, workspaceId: seed.workspaceId });
}, 120_000);

afterAll(async () => {
  await api?.stop();
  await db?.destroy();
  if (dir) fs.rmSync(dir, { recursive: true, force: true });
});

test('the README tour runs top to bottom as printed, and each step shows what its comment says', async () => {
  const env = { PATH: process.env.PATH, HOME: process.env.HOME ?? dir, LANG: 'C.UTF-8', DEMO: path.join(dir, 'demo.json') };
  const run = await runBash(tourScript(), { cwd: dir, env, timeoutMs: 150_000 });
  const report = `exit ${run.code}\n--- stdout\n${run.stdout}\n--- stderr\n${run.stderr}`;
  if (run.code !== 0) throw new Error(`the tour failed: ${report}\n--- API log (end)\n${api!.output().slice(-3000)}`);
  const lines = run.stdout.trimEnd().split('\n');

  // Each expectation is the next line (after the previous one) that matches; the order is the tour's.
  const expected: [string, RegExp][] = [
    ['1. the Sales pipeline and its stages', /^\{"name":"Sales","stages":\["New","Qualified","Proposal","Negotiation"\]\}$/],
    ['2. the shorter mobile is the same lead', /^\{"sameLead":true\}$/],
    ['2. a tag applied by a new name', /^\{"tag":"trade-fair","added":true\}$/],
    ['3. the lead added to a new list', /^\{"added":1,"contactCount":1\}$/],
    ['3. the list holds her', /^\{"list":\["Maria Souza"\]\}$/],
    ['4. the deal moved to Proposal', /^\{"inProposal":true\}$/],
    ['4. the deal won, with its close time', /^\{"status":"won","closedAt":"\d{4}-\d\d-\d\dT[^"]+"\}$/],
    ['4. the stage change in the deal activities', /^\{"type":"stage_changed",.*"meta":\{"from":"Qualified","to":"Proposal"\}\}$/],
    ['5. the note', /^\{"body":"Asked for a demo on Friday","authorName":"[^"]+"\}$/],
    ['5. the task', /^\{"title":"Call back about the proposal","dueDate":"2030-03-01T15:00:00.000Z"\}$/],
    ['5. the search finds her', /^\{"total":1,"lead":"Maria Souza"\}$/],
    ['6. the replayed send answers 200', /^HTTP\/[\d.]+ 200/],
    ['6. ... marked as replayed', /^Idempotent-Replayed: true\s*$/i],
    ['6. the provider got the template', /^\{"type":"template","outcome":"ok"\}$/],
    ['6. free text outside the window is refused', /^\{"code":"WINDOW_CLOSED"\}$/],
    ['7. the signed provider webhook is accepted', /^\{"received":1,"duplicates":0,/],
    ['7. free text inside the window is sent', /^\{"status":"sent"\}$/],
    ['7. her answer in the conversation', /^\{"direction":"in","type":"text","status":"received","body":"Oi! Quero saber mais\."\}$/],
    ['8. the inbound automation call is accepted', /^\{"runId":"[0-9a-f-]{36}","status":"accepted"\}$/],
    ['8. the automation run completed', /^\{"status":"completed","error":null\}$/],
    ['8. the lead now has the automation tag', /^\{"tags":\[.*"buyer".*\]\}$/],
    ['9. the ping reached the local receiver', /^\{"event":"test.ping","delivered":true,"statusCode":200\}$/],
    ['9. a new lead', /^\{"name":"João Lima"\}$/],
    ['9. the received lead.created verifies with the secret', /^signature ok: \{"event":"lead.created","name":"João Lima"\}$/],
    ['9. the delivery log shows the 2xx', /^\{"event":"lead.created","status":"succeeded","lastStatusCode":200\}$/],
    [
      '10. the batch answers each row, the typo with its own code',
      /^\[\{"index":0,"status":201,"code":null\},\{"index":1,"status":201,"code":null\},\{"index":2,"status":400,"code":"INVALID_PHONE"\}\]$/,
    ],
    ['10. João deleted', /^\{"id":"[0-9a-f-]{36}","deleted":true\}$/],
    // One statement wrote both batch leads: the same updatedAt, so their order is their ids'.
    ['10. the next sync run: the batch leads changed ...', /^\{"changed":"(Ana Costa|Bruno Dias)"\}$/],
    ['10. ...', /^\{"changed":"(Ana Costa|Bruno Dias)"\}$/],
    ['10. ... and João to remove', /^\{"removed":"[0-9a-f-]{36}"\}$/],
    ['10. the deletion in the events feed', /^\{"type":"contact.deleted","name":"João Lima"\}$/],
    [
      '11. the broadcast to the hot tag completed, none pending or failed',
      /^\{"status":"completed","total":[1-9]\d*,"pending":0,"failed":0\}$/,
    ],
    [
      '12. delivered, then read: one event each',
      /^\[\{"previous_status":"sent","status":"delivered"\},\{"previous_status":"delivered","status":"read"\}\]$/,
    ],
    ['12. her photo, stored', /^\{"type":"image","body":"A foto","media":\{"status":"stored","mimeType":"image\/jpeg","size":48000\}\}$/],
    ['12. the download is byte for byte her photo', /^photo downloaded, identical$/],
    ['13. the signed Instagram DM is accepted', /^\{"received":1,"duplicates":0,/],
    ['13. a lead without a phone, found by username', /^\{"name":"Bia","phone":null,"instagram":"bia\.doces\d+"\}$/],
    ['13. the reply is sent', /^\{"status":"sent"\}$/],
    ['13. Instagram got it in the Graph API format', /^\{"messaging_type":"RESPONSE","text":"Oi Bia! Entregamos sim\."\}$/],
  ];
  let at = 0;
  for (const [step, pattern] of expected) {
    const found = lines.findIndex((line, i) => i >= at && pattern.test(line));
    if (found < 0) throw new Error(`tour step "${step}": no line matching ${pattern} after line ${at + 1}\n${report}`);
    at = found + 1;
  }
  expect(lines.find((line) => line.startsWith('{"tags":'))).toMatch(/"hot"/);
  expect(lines.filter((line) => line.startsWith('{"changed":')).sort()).toEqual(['{"changed":"Ana Costa"}', '{"changed":"Bruno Dias"}']);
}, 180_000);
