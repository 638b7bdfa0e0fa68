/**
 * Automation runs carried out by the worker's outbox dispatcher (activities/automations.ts
 * createRunHere): a run of database actions needs no workflow; one that waits or sends, and one
 * whose step failed in a way a retry may fix, is its workflow's; a dispatcher that dies mid-run and
 * whose row is taken again applies nothing twice.
 */
import { WorkflowNotFoundError } from '@temporalio/client';
import { ALL_SCOPES } from '../domain/access/scopes';
import { runWorkflowId } from '../domain/automations/automations';
import { createRunHere } from '../activities/automations';
import { loadConfig } from '../domain/platform/config';
import { createDb } from '../domain/platform/db';
import { temporalClientFactory } from '../domain/platform/temporal';
import { automationRunWorkflow } from '../workflows/automation-run';
import { createWorkspace, eventually, seedContact, startApi, TestApi, Workspace } from './helpers';
import { uniqueMobile } from './phones';

const config = loadConfig();
const temporal = temporalClientFactory(config);
let api: TestApi;
beforeAll(async () => {
  api = await startApi();
});
afterAll(async () => {
  await api.close();
  await temporal.close();
});

async function automation(ws: Workspace, body: Record<string, unknown>) {
  const res = await api.request('POST', '/api/v1/automations', { key: ws.key, body: { name: 'flow', ...body } });
  expect(res.status).toBe(201);
  return res.body.data as { id: string; webhookUrl: string };
}

async function finished(runId: string) {
  return eventually('the run to finish', async () => {
    const run = await api.db('automation_runs').where({ id: runId }).first('status', 'error');
    return run?.status !== 'running' && run;
  });
}

/** Whether the run has a workflow in Temporal. */
async function hasWorkflow(ws: Workspace, automationId: string, runId: string): Promise<boolean> {
  const client = await temporal.get();
  return client.workflow
    .getHandle(runWorkflowId(ws.id, automationId, { runId }))
    .describe()
    .then(
      () => true,
      (err) => {
        if (err instanceof WorkflowNotFoundError) return false;
        throw err;
      },
    );
}

/** A workspace with the contact Rita and an automation that makes a task to call her, then does `then`. */
async function callRita(then: Record<string, unknown>) {
  const ws = await createWorkspace(api, { scopes: [...ALL_SCOPES] });
  const contact = await seedContact(api, ws.id, { phone: uniqueMobile('41'), name: 'Rita' });
  const flow = await automation(ws, {
    trigger: { type: 'webhook_received' },
    actions: [{ type: 'create_task', title: 'Call {{contact.name}}', dueInMinutes: 5 }, then],
  });
  return { ws, contact, flow };
}

/** The names of the tags a workspace's contacts carry. */
async function tagNames(ws: Workspace): Promise<string[]> {
  const names = await api
    .db('contact_tags as ct')
    .join('tags as t', 't.id', 'ct.tag_id')
    .where({ 'ct.workspace_id': ws.id })
    .pluck('t.name');
  return names.sort();
}

/** A running run of `flow` for `contactId`, as the trigger handler records one (not yet begun). */
async function pendingRun(ws: Workspace, automationId: string, contactId: string): Promise<string> {
  const [run] = await api
    .db('automation_runs')
    .insert({ workspace_id: ws.id, automation_id: automationId, status: 'running', trigger: JSON.stringify({ type: 'test', contactId }) })
    .returning('id');
  return run.id;
}

it('carries out an inbound run of database actions without a workflow; a run that waits is a workflow', async () => {
  const ws = await createWorkspace(api, { scopes: [...ALL_SCOPES] });
  const direct = await automation(ws, {
    trigger: { type: 'webhook_received', mapping: { phone: 'customer.phone' } },
    actions: [
      { type: 'add_tag', tag: 'buyer' },
      { type: 'create_task', title: 'Call about order {{webhook.order.id}}', dueInMinutes: 60 },
    ],
  });
  const waits = await automation(ws, {
    trigger: { type: 'webhook_received', mapping: { phone: 'customer.phone' } },
    actions: [
      { type: 'wait', seconds: 60 },
      { type: 'add_tag', tag: 'waited' },
    ],
  });
  const phone = uniqueMobile('41');
  const call = async (flow: { webhookUrl: string }, order: string) => {
    const res = await api.request('POST', new URL(flow.webhookUrl).pathname, {
      rawBody: JSON.stringify({ customer: { phone }, order: { id: order } }),
      headers: { 'content-type': 'application/json' },
    });
    expect(res.status).toBe(202);
    return res.body.data.runId as string;
  };
  const directRun = await call(direct, 'R-1');
  const waitingRun = await call(waits, 'R-2');
  expect(await finished(directRun)).toEqual({ status: 'completed', error: null });
  expect(await finished(waitingRun)).toEqual({ status: 'completed', error: null });
  expect(await api.db('tasks').where({ workspace_id: ws.id }).pluck('title')).toEqual(['Call about order R-1']);
  expect(await tagNames(ws)).toEqual(['buyer', 'waited']);
  expect(await hasWorkflow(ws, direct.id, directRun)).toBe(false);
  expect(await hasWorkflow(ws, waits.id, waitingRun)).toBe(true);
});

it('applies nothing twice when a dispatcher takes a run again, mid-run or after it finished', async () => {
  const { ws, contact, flow } = await callRita({ type: 'add_note', body: 'Called by the flow' });
  const runHere = createRunHere({ db: api.db });
  const runId = await pendingRun(ws, flow.id, contact.id);
  const input = { workspaceId: ws.id, automationId: flow.id, runId, depth: 0, chain: runId };
  expect(await runHere(input)).toBe(true);
  // Taken again after it finished (the dispatcher died before marking its outbox row): left as it is.
  expect(await runHere(input)).toBe(true);
  expect(await api.db('automation_runs').where({ id: runId }).first('status', 'error', 'actions')).toEqual({
    status: 'completed',
    error: null,
    actions: null,
  });
  // Mid-run: the first action applied, the run still running with its plan (as a dispatcher that
  // died between the two actions leaves it); the actions are changed meanwhile, the plan is not.
  const second = await pendingRun(ws, flow.id, contact.id);
  const again = { ...input, runId: second, chain: second };
  await api
    .db('automation_runs')
    .where({ id: second })
    .update({
      actions: JSON.stringify([
        { type: 'create_task', title: 'Call {{contact.name}}', dueInMinutes: 5 },
        { type: 'add_note', body: 'Called by the flow' },
      ]),
      context: JSON.stringify({ contactId: contact.id, vars: {} }),
    });
  await api
    .db('automation_action_effects')
    .insert({ run_id: second, action_index: 0, context: JSON.stringify({ contactId: contact.id, vars: {} }) });
  const changed = await api.request('PATCH', `/api/v1/automations/${flow.id}`, {
    key: ws.key,
    body: { actions: [{ type: 'add_tag', tag: 'changed' }] },
  });
  expect(changed.status).toBe(200);
  expect(await runHere(again)).toBe(true);
  expect(await api.db('automation_runs').where({ id: second }).first('status')).toEqual({ status: 'completed' });
  // One task (the first run's), two notes (one a run), and nothing of the changed actions.
  expect(await api.db('tasks').where({ workspace_id: ws.id }).pluck('title')).toEqual(['Call Rita']);
  expect(await api.db('notes').where({ workspace_id: ws.id }).pluck('body')).toEqual(['Called by the flow', 'Called by the flow']);
  expect(await api.db('contact_tags').where({ workspace_id: ws.id }).count('* as n').first()).toEqual({ n: 0 });
});

it('hands a run whose step failed in a way a retry may fix to its workflow, which goes on from the kept plan', async () => {
  const { ws, contact, flow } = await callRita({ type: 'add_tag', tag: 'called' });
  const runId = await pendingRun(ws, flow.id, contact.id);
  const input = { workspaceId: ws.id, automationId: flow.id, runId, depth: 0, chain: runId };
  // add_tag locks its contact: held by another transaction, the step times out (a retry may fix that).
  const impatient = createDb(config.databaseUrl, { max: 2, statementTimeoutMs: 300 });
  const lock = await api.db.transaction();
  try {
    await lock('contacts').where({ id: contact.id }).forUpdate().first('id');
    expect(await createRunHere({ db: impatient })(input)).toBe(false);
  } finally {
    await lock.rollback();
    await impatient.destroy();
  }
  expect(await api.db('automation_runs').where({ id: runId }).first('status')).toEqual({ status: 'running' });
  // The dispatcher starts its workflow (as workers/automation-triggers.ts does): the task is not created again.
  const client = await temporal.get();
  const result = await client.workflow.execute(automationRunWorkflow, {
    workflowId: runWorkflowId(ws.id, flow.id, { runId }),
    taskQueue: config.taskQueue,
    args: [input],
  });
  expect(result).toEqual({ status: 'completed', error: null });
  expect(await api.db('tasks').where({ workspace_id: ws.id }).pluck('title')).toEqual(['Call Rita']);
  expect(await tagNames(ws)).toEqual(['called']);
});
