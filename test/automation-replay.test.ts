/**
 * Automation run histories replay on the current code: a run a worker started before a change to
 * the run workflow (a day's `wait` can span a deploy) finishes on the new worker instead of
 * failing with a nondeterminism error.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { ALL_SCOPES } from '../domain/access/scopes';
import { runWorkflowId } from '../domain/automations/automations';
import { loadConfig } from '../domain/platform/config';
import { temporalClientFactory } from '../domain/platform/temporal';
import { createWorkspace, eventually, startApi, TestApi } from './helpers';
import { countEvents, localActivityMarkers, replayHistories, saveHistory } from './histories';
import { uniqueMobile } from './phones';

const FIXTURES = path.join(__dirname, 'fixtures');
const temporal = temporalClientFactory(loadConfig());
let api: TestApi;
let dir: string;

beforeAll(async () => {
  api = await startApi();
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'crm-run-replay-'));
});
afterAll(async () => {
  await api.close();
  await temporal.close();
  fs.rmSync(dir, { recursive: true, force: true });
});

it('replays runs started before the run steps became local activities (startRun, runAction, finishRun as ordinary activities)', async () => {
  // Recorded by the code of 123f7b7 (an inbound run: tag, wait, task; and one whose automation was deactivated), payloads decoded.
  const files = ['automation-run-history-activities.json', 'automation-run-history-activities-failed.json'].map((f) =>
    path.join(FIXTURES, f),
  );
  const { code, out } = await replayHistories(files);
  expect(out).toContain('automation-run-history-activities.json: replays');
  expect(out).toContain('automation-run-history-activities-failed.json: replays');
  expect(code).toBe(0);
}, 120_000);

it('runs an inbound run of database actions as local activities, no activity task, and replays it', async () => {
  const ws = await createWorkspace(api, { scopes: [...ALL_SCOPES] });
  const created = await api.request('POST', '/api/v1/automations', {
    key: ws.key,
    body: {
      name: 'Orders',
      trigger: { type: 'webhook_received', mapping: { phone: 'customer.phone', externalId: 'order.id' } },
      actions: [
        { type: 'add_tag', tag: 'buyer' },
        { type: 'wait', seconds: 60 },
        { type: 'create_task', title: 'Call about order {{webhook.order.id}}', dueInMinutes: 60 },
      ],
    },
  });
  expect(created.status).toBe(201);
  const automation = created.body.data;
  const phone = uniqueMobile('41');
  const hook = await api.request('POST', new URL(automation.webhookUrl).pathname, {
    rawBody: JSON.stringify({ customer: { phone }, order: { id: 'R-1' } }),
    headers: { 'content-type': 'application/json' },
  });
  expect(hook.status).toBe(202);
  const runId = hook.body.data.runId;
  await eventually('the run finished', async () => {
    const run = await api.db('automation_runs').where({ id: runId }).first('status');
    return run?.status !== 'running' && run;
  });
  expect(await api.db('automation_runs').where({ id: runId }).first('status', 'error')).toEqual({ status: 'completed', error: null });
  expect(await api.db('tasks').where({ workspace_id: ws.id }).pluck('title')).toEqual(['Call about order R-1']);

  const file = path.join(dir, 'inbound-run.json');
  const history = await saveHistory(await temporal.get(), runWorkflowId(ws.id, automation.id, { runId }), file);
  // startRun, two actions and finishRun inside the run's workflow tasks (before and after the
  // wait's timer), none through the activity task queue.
  expect(countEvents(history, 'EVENT_TYPE_ACTIVITY_TASK_SCHEDULED')).toBe(0);
  expect(countEvents(history, 'EVENT_TYPE_TIMER_STARTED')).toBe(1);
  expect(localActivityMarkers(history)).toHaveLength(4);
  const { code, out } = await replayHistories([file]);
  expect(out).toContain('inbound-run.json: replays');
  expect(code).toBe(0);
}, 120_000);
