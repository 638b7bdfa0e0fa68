/**
 * Workflow histories replay on the current code: a send a worker started before a change to the
 * saga finishes on the new worker instead of failing with a nondeterminism error. Each history
 * goes through Temporal's replayer (scripts/replay-histories.ts, in a child process), as before a
 * deploy.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { loadConfig } from '../domain/platform/config';
import { temporalClientFactory } from '../domain/platform/temporal';
import { createWorkspace, startApi, TestApi, Workspace } from './helpers';
import { countEvents as count, localActivityMarkers, replayHistories as replay, saveHistory as save } from './histories';
import { uniqueMobile } from './phones';

const EMULATOR = process.env.EMULATOR_URL!;
const FIXTURES = path.join(__dirname, 'fixtures');
const temporal = temporalClientFactory(loadConfig());
/** Sends that are workflows from the start (SEND_FIRST_ATTEMPT=workflow); `here` makes the first attempt itself and hands over the rest. */
let api: TestApi;
let here: TestApi;
let dir: string;
const mobile = (): string => uniqueMobile('31');

beforeAll(async () => {
  api = await startApi({ config: { sendFirstAttempt: 'workflow' } });
  here = await startApi();
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'crm-replay-'));
});
afterAll(async () => {
  await api.close();
  await here.close();
  await temporal.close();
  fs.rmSync(dir, { recursive: true, force: true });
});

const saveHistory = async (workflowId: string, file: string) => save(await temporal.get(), workflowId, file);

async function coldSend(ws: Workspace, phone: string, key: string, through = api): Promise<string> {
  const res = await through.request('POST', '/api/v1/messages', {
    key: ws.key,
    body: { phone, type: 'template', templateName: 'welcome', templateLanguage: 'pt_BR', templateVariables: ['Ana'] },
    headers: { 'Idempotency-Key': key },
  });
  expect(res.status).toBe(201);
  return `send/${ws.id}/key/${key}`;
}

it('replays a send started before its first provider call became a local activity (the call an ordinary activity)', async () => {
  // Recorded from a cold template send by the code of 94c8b80, payloads decoded.
  const fixture = path.join(FIXTURES, 'send-history-provider-activity.json');
  const { code, out } = await replay([fixture]);
  expect(out).toContain('send-history-provider-activity.json: replays');
  expect(code).toBe(0);
}, 120_000);

it('replays sends started before their three steps became one local activity (prepare, first call and record one by one)', async () => {
  // Recorded by the code of da95a19 (a send accepted at once; one whose first call was refused, 429), payloads decoded.
  const files = ['send-history-local-steps.json', 'send-history-local-steps-retried.json'].map((f) => path.join(FIXTURES, f));
  const { code, out } = await replay(files);
  expect(out).toContain('send-history-local-steps.json: replays');
  expect(out).toContain('send-history-local-steps-retried.json: replays');
  expect(code).toBe(0);
}, 120_000);

it('replays the sends of the current code: one accepted at once (one workflow task), one whose first call the provider refused for a while, one the API began and handed over', async () => {
  const ws = await createWorkspace(api, { scopes: ['conversations:send'] });
  const instance = await api.admin('POST', `/admin/v1/workspaces/${ws.id}/instances`, {
    name: 'Main',
    channel: 'whatsapp',
    provider: 'cloud',
    connected: true,
    config: { baseUrl: EMULATOR, phoneNumberId: `PN-replay-${ws.id.slice(0, 8)}`, accessToken: 'token', appSecret: 'secret' },
  });
  expect(instance.status).toBe(201);
  await api.admin('POST', `/admin/v1/workspaces/${ws.id}/templates`, {
    instanceId: instance.body.data.id,
    name: 'welcome',
    language: 'pt_BR',
    variableCount: 1,
    status: 'approved',
  });

  const atOnce = path.join(dir, 'accepted-at-once.json');
  const accepted = await saveHistory(await coldSend(ws, mobile(), 'replay-at-once'), atOnce);
  // Prepare, the provider call and record in the workflow task that started it, as one local
  // activity (one marker), with no activity task.
  expect(count(accepted, 'EVENT_TYPE_WORKFLOW_TASK_COMPLETED')).toBe(1);
  expect(count(accepted, 'EVENT_TYPE_ACTIVITY_TASK_SCHEDULED')).toBe(0);
  expect(localActivityMarkers(accepted)).toHaveLength(1);

  const throttledPhone = mobile();
  const script = await fetch(`${EMULATOR}/__emulator/script`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ to: throttledPhone, behaviour: 'error', code: 131056, httpStatus: 429, times: 1 }),
  });
  expect(script.ok).toBe(true);
  const afterRefusal = path.join(dir, 'after-a-refused-first-call.json');
  const retried = await saveHistory(await coldSend(ws, throttledPhone, 'replay-retried'), afterRefusal);
  // The local first call was refused (429): a timer, then the call again as an ordinary activity.
  expect(count(retried, 'EVENT_TYPE_TIMER_STARTED')).toBe(1);
  expect(count(retried, 'EVENT_TYPE_ACTIVITY_TASK_SCHEDULED')).toBe(1);

  // The same refusal met by the API's own first attempt: the workflow starts from its outcome (no local activity), waits, calls again.
  const handedPhone = mobile();
  await fetch(`${EMULATOR}/__emulator/script`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ to: handedPhone, behaviour: 'error', code: 131056, httpStatus: 429, times: 1 }),
  });
  const handedOver = path.join(dir, 'handed-over-by-the-api.json');
  const carried = await saveHistory(await coldSend(ws, handedPhone, 'replay-handed-over', here), handedOver);
  // Its only local activity is the record after the retry: no sendAtOnce (the API made that step).
  const localTypes = localActivityMarkers(carried).map(
    (e) => JSON.parse(Buffer.from(e.markerRecordedEventAttributes!.details!.data!.payloads![0].data!).toString('utf8')).activity_type,
  );
  expect(localTypes).toEqual(['recordSent']);
  expect(count(carried, 'EVENT_TYPE_TIMER_STARTED')).toBe(1);
  expect(count(carried, 'EVENT_TYPE_ACTIVITY_TASK_SCHEDULED')).toBe(1);

  const { code, out } = await replay([atOnce, afterRefusal, handedOver]);
  expect(out).toContain('accepted-at-once.json: replays');
  expect(out).toContain('after-a-refused-first-call.json: replays');
  expect(out).toContain('handed-over-by-the-api.json: replays');
  expect(code).toBe(0);
}, 120_000);
