/**
 * What an operator sees of a send in Temporal, and the send profile of the conversation endpoint.
 */
import { loadConfig } from '../domain/platform/config';
import { searchHash, temporalClientFactory } from '../domain/platform/temporal';
import { resetClock } from '../domain/kernel/clock';
import { createWorkspace, expectError, pinRateClock, startApi, TestApi } from './helpers';
import { uniqueMobile } from './phones';

const EMULATOR = process.env.EMULATOR_URL!;
let api: TestApi;
const temporal = temporalClientFactory(loadConfig());
const mobile = (): string => uniqueMobile('21');

beforeAll(async () => {
  api = await startApi();
});
afterAll(async () => {
  await api.close();
  await temporal.close();
});
afterEach(() => resetClock());

async function workspaceWithInstance() {
  const ws = await createWorkspace(api, { scopes: ['conversations:send'] });
  const instance = await api.admin('POST', `/admin/v1/workspaces/${ws.id}/instances`, {
    name: 'Main',
    channel: 'whatsapp',
    provider: 'cloud',
    connected: true,
    config: { baseUrl: EMULATOR, phoneNumberId: `PN-${ws.id.slice(0, 8)}`, accessToken: 'super-secret-token-xyz', appSecret: 's' },
  });
  await api.admin('POST', `/admin/v1/workspaces/${ws.id}/templates`, {
    instanceId: instance.body.data.id,
    name: 'hello',
    language: 'pt_BR',
    variableCount: 0,
  });
  return { ws, instanceId: instance.body.data.id as string };
}

it('shows a stuck send in Temporal: found by its search attributes, the provider error in plain words, no token', async () => {
  const { ws, instanceId } = await workspaceWithInstance();
  const phone = mobile();
  await fetch(`${EMULATOR}/__emulator/script`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ to: phone, behaviour: 'error', code: 131056, httpStatus: 429, times: 2 }),
  });
  const key = `stuck-${phone}`;
  const pending = api.request('POST', '/api/v1/messages', {
    key: ws.key,
    body: { phone, type: 'template', templateName: 'hello', templateLanguage: 'pt_BR' },
    headers: { 'Idempotency-Key': key },
  });

  const client = await temporal.get();
  const handle = client.workflow.getHandle(`send/${ws.id}/key/${key}`);
  let failure: string | undefined;
  let attributes: Record<string, unknown> = {};
  for (let i = 0; i < 100 && !failure; i++) {
    await new Promise((r) => setTimeout(r, 100));
    const description = await handle.describe().catch(() => undefined);
    if (!description) continue;
    attributes = description.searchAttributes;
    failure = description.raw.pendingActivities?.[0]?.lastFailure?.message ?? undefined;
  }
  expect(failure).toContain('131056');
  expect(failure).not.toContain('super-secret-token-xyz');
  expect(attributes).toMatchObject({
    WorkspaceId: [ws.id],
    IdempotencyKey: [key],
    PhoneHash: [searchHash(api.config.encryptionKeys!, 'phone', ws.id, phone)],
    InstanceId: [instanceId],
  });

  // While it retries, the same key is 409 IN_PROGRESS naming the workflow; then it completes.
  const again = await api.request('POST', '/api/v1/messages', {
    key: ws.key,
    body: { phone, type: 'template', templateName: 'hello', templateLanguage: 'pt_BR' },
    headers: { 'Idempotency-Key': key },
  });
  expectError(again, 409, 'IN_PROGRESS');
  expect(again.body.hint).toContain(`send/${ws.id}/key/${key}`);
  expect((await pending).status).toBe(201);
}, 30_000);

it('limits conversation sends to 15 per minute per key (SEND_RATE_LIMITED)', async () => {
  const { ws } = await workspaceWithInstance();
  const path = '/api/v1/conversations/00000000-0000-4000-8000-000000000000/messages';
  pinRateClock(5);
  const statuses: number[] = [];
  for (let i = 0; i < 15; i++) statuses.push((await api.request('POST', path, { key: ws.key, body: { text: 'x' } })).status);
  expect(new Set(statuses)).toEqual(new Set([404]));
  const blocked = await api.request('POST', path, { key: ws.key, body: { text: 'x' } });
  expectError(blocked, 429, 'SEND_RATE_LIMITED');
  expect(blocked.headers.get('retry-after')).toBe('55');
});

it('gives up on a provider that stays down: SEND_FAILED after the retries, and the compensation leaves nothing behind', async () => {
  const { ws } = await workspaceWithInstance();
  const phone = mobile();
  await fetch(`${EMULATOR}/__emulator/script`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ to: phone, behaviour: 'ok', down: true }),
  });
  const key = `down-${phone}`;
  // The API answers within its 30 s wait (201, or 409 while the send still retries); the workflow decides.
  const answer = api.request('POST', '/api/v1/messages', {
    key: ws.key,
    body: { phone, type: 'template', templateName: 'hello', templateLanguage: 'pt_BR' },
    headers: { 'Idempotency-Key': key },
  });
  const client = await temporal.get();
  const handle = client.workflow.getHandle(`send/${ws.id}/key/${key}`);
  for (let i = 0; i < 50 && !(await handle.describe().catch(() => undefined)); i++) await new Promise((r) => setTimeout(r, 100));
  const failure: any = await handle.result().then(
    () => undefined,
    (err: any) => err.cause,
  );
  expect(failure).toMatchObject({ type: 'SEND_FAILED' });
  expect(failure.message).toContain('after several attempts');
  const first = await answer;
  if (first.status !== 409) expectError(first, 502, 'SEND_FAILED');
  const calls: any[] = ((await (await fetch(`${EMULATOR}/__emulator/calls?to=${phone}`)).json()) as any).calls;
  // Four calls in all: the first (a local activity), then three retries 0.5, 1 and 2 s apart.
  expect(calls).toHaveLength(4);
  expect(calls.every((c: any) => c.outcome === 'down')).toBe(true);
  const [contacts, conversations, counted] = await Promise.all([
    api.db('contacts').where({ workspace_id: ws.id }).count('* as n').first(),
    api.db('conversations').where({ workspace_id: ws.id }).count('* as n').first(),
    api.db('daily_counters').where({ workspace_id: ws.id }).sum('count as n').first(),
  ]);
  expect([Number(contacts!.n), Number(conversations!.n), Number(counted!.n ?? 0)]).toEqual([0, 0, 0]);
  await fetch(`${EMULATOR}/__emulator/reset`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ to: phone }),
  });
}, 120_000);

it('answers a send the rules refused in the API itself (no workflow to open), and the key stays free for a retry, one at a time', async () => {
  const { ws } = await workspaceWithInstance();
  const phone = mobile();
  const key = `refused-here-${phone}`;
  const body = { phone, type: 'template', templateName: 'no-such-template', templateLanguage: 'pt_BR' };
  const send = () => api.request('POST', '/api/v1/messages', { key: ws.key, body, headers: { 'Idempotency-Key': key } });

  expectError(await send(), 422, 'TEMPLATE_INVALID');
  expectError(await send(), 422, 'TEMPLATE_INVALID');
  const racing = await Promise.all(Array.from({ length: 3 }, send)); // 5 in all: the key's cold-send limit a minute
  for (const res of racing) expect([409, 422]).toContain(res.status);
  expect(racing.filter((r) => r.status === 422).length).toBeGreaterThanOrEqual(1);
  const client = await temporal.get();
  await expect(client.workflow.getHandle(`send/${ws.id}/key/${key}`).describe()).rejects.toThrow(/not found/i);
  expect(await api.db('send_keys').where({ workspace_id: ws.id, key }).first('state')).toEqual({ state: 'refused' });
});

it('with SEND_FIRST_ATTEMPT=workflow, completes a send the rules refused (its reason as the result), so FAILED in Temporal means something went wrong; the key stays free for a retry, one at a time', async () => {
  const byWorkflow = await startApi({ config: { sendFirstAttempt: 'workflow' } });
  const { ws } = await workspaceWithInstance();
  const phone = mobile();
  const key = `refused-${phone}`;
  const body = { phone, type: 'template', templateName: 'no-such-template', templateLanguage: 'pt_BR' };
  const send = () => byWorkflow.request('POST', '/api/v1/messages', { key: ws.key, body, headers: { 'Idempotency-Key': key } });

  expectError(await send(), 422, 'TEMPLATE_INVALID');
  const client = await temporal.get();
  const handle = client.workflow.getHandle(`send/${ws.id}/key/${key}`);
  const first = await handle.describe();
  expect(first.status.name).toBe('COMPLETED');
  expect(await handle.result()).toEqual({ refused: { code: 'TEMPLATE_INVALID', message: expect.stringContaining('no-such-template') } });
  // The operators' to-do list (failed sends of the workspace) does not show it.
  const failed = await client.workflow.count(`WorkspaceId = "${ws.id}" AND ExecutionStatus = "Failed"`);
  expect(failed.count).toBe(0);

  // A refusal frees the key like a failure: the same request runs again (a new run)...
  expectError(await send(), 422, 'TEMPLATE_INVALID');
  const second = await handle.describe();
  expect(second.runId).not.toBe(first.runId);
  // ...and retries racing after one refusal run one send at a time: the others wait (409) or see
  // its answer; one that comes after that send's refusal freed the key again starts the next.
  const racing = await Promise.all(Array.from({ length: 3 }, send)); // 5 in all: the key's cold-send limit a minute
  for (const res of racing) expect([409, 422]).toContain(res.status);
  const seconds = (t: { seconds?: unknown; nanos?: number | null } | null | undefined) => Number(t?.seconds ?? 0) + (t?.nanos ?? 0) / 1e9;
  const runs = async () => {
    const { executions } = await client.workflowService.listWorkflowExecutions({
      namespace: api.config.temporalNamespace,
      query: `IdempotencyKey = "${key}"`,
    });
    return executions.map((e) => ({ start: seconds(e.startTime), close: seconds(e.closeTime) })).sort((a, b) => a.start - b.start);
  };
  let all = await runs();
  for (let i = 0; i < 50 && (all.length < 3 || all.some((r) => r.close === 0)); i++) {
    await new Promise((r) => setTimeout(r, 100));
    all = await runs();
  }
  // The two sequential sends and at least one of the racing retries; never two runs at once.
  expect(all.length).toBeGreaterThanOrEqual(3);
  expect(all.length).toBeLessThanOrEqual(5);
  for (let i = 1; i < all.length; i++) expect(all[i].start).toBeGreaterThanOrEqual(all[i - 1].close);
  expect(racing.filter((r) => r.status === 422).length).toBeGreaterThanOrEqual(all.length - 2);
  await byWorkflow.close();
});
