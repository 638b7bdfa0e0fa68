/**
 * Fixtures on the test stack's provider emulator and Temporal workers, shared by the files that
 * send through a Cloud API number and by those that run a worker of their own.
 */
import path from 'node:path';
import { Child, ROOT, startChild, waitForWorker, workerFromSources } from '../scripts/stack';
import type { TestApi } from './helpers';

const EMULATOR = process.env.EMULATOR_URL!;
/** The test stack's log directory (where the suite's own children log). */
export const LOG_DIR = path.join(
  process.env.TEST_STACK_DIR ? path.resolve(process.env.TEST_STACK_DIR) : path.join(ROOT, '.data', 'test'),
  'logs',
);

/** A control route of the emulator: GET without a body, POST with one; its JSON answer (a control route never fails). */
export async function emulator(pathname: string, body?: unknown): Promise<any> {
  const res = await fetch(
    `${EMULATOR}${pathname}`,
    body === undefined ? {} : { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) },
  );
  if (!res.ok) throw new Error(`emulator ${pathname}: ${res.status} ${await res.text()}`);
  return res.json();
}

let numbers = 0;

/**
 * A connected Cloud API instance of `workspaceId` on the emulator, with a phone-number id of its
 * own (so its calls are counted apart), its status callbacks sent to `api`'s webhook, and the
 * given templates (default: `welcome`, pt_BR, one variable, approved).
 */
export async function cloudInstance(
  api: TestApi,
  workspaceId: string,
  options: { label?: string; templates?: { name: string; status: string }[] } = {},
): Promise<{ instanceId: string; phoneNumberId: string }> {
  const phoneNumberId = `PN-${options.label ?? 't'}-${workspaceId.slice(0, 8)}-${++numbers}`;
  const appSecret = `secret-${workspaceId.slice(0, 8)}`;
  const instance = await api.admin('POST', `/admin/v1/workspaces/${workspaceId}/instances`, {
    name: 'Main',
    channel: 'whatsapp',
    provider: 'cloud',
    connected: true,
    config: { baseUrl: EMULATOR, phoneNumberId, accessToken: 'token-never-logged', appSecret },
  });
  if (instance.status !== 201) throw new Error(`instance: ${instance.status} ${instance.text}`);
  const instanceId = instance.body.data.id as string;
  for (const { name, status } of options.templates ?? [{ name: 'welcome', status: 'approved' }]) {
    const t = await api.admin('POST', `/admin/v1/workspaces/${workspaceId}/templates`, {
      instanceId,
      name,
      language: 'pt_BR',
      variableCount: 1,
      status,
    });
    if (t.status !== 201) throw new Error(`template: ${t.status} ${t.text}`);
  }
  await emulator('/__emulator/webhook', { phoneNumberId, url: `${api.url}/webhooks/whatsapp/${instanceId}`, appSecret });
  return { instanceId, phoneNumberId };
}

/** Instagram-scoped ids (digits) no other test uses: a business account's IG user id, a person's IGSID. */
export const uniqueIgId = (): string =>
  `178${Date.now().toString().slice(-9)}${String(++numbers).padStart(4, '0')}${Math.floor(Math.random() * 1000)}`;

/**
 * A connected Instagram instance of the workspace on the emulator's Graph API, its webhook pointed
 * at the service's `/webhooks/instagram/{instanceId}` with its app secret.
 */
export async function instagramInstance(
  api: TestApi,
  workspaceId: string,
): Promise<{ instanceId: string; igUserId: string; appSecret: string }> {
  const igUserId = uniqueIgId();
  const appSecret = `ig-secret-${workspaceId.slice(0, 8)}`;
  const instance = await api.admin('POST', `/admin/v1/workspaces/${workspaceId}/instances`, {
    name: 'Instagram',
    channel: 'instagram',
    provider: 'instagram',
    connected: true,
    config: { baseUrl: EMULATOR, igUserId, accessToken: 'ig-token-never-logged', appSecret, verifyToken: 'ig-verify' },
  });
  if (instance.status !== 201) throw new Error(`instance: ${instance.status} ${instance.text}`);
  const instanceId = instance.body.data.id as string;
  await emulator('/__emulator/instagram/webhook', { igUserId, url: `${api.url}/webhooks/instagram/${instanceId}`, appSecret });
  return { instanceId, igUserId, appSecret };
}

/**
 * A connected web gateway instance of `workspaceId` on the emulator (its own instance name), whose
 * gateway posts its events (messages.upsert, messages.update) to `api`'s webhook with the right apikey.
 */
export async function webInstance(api: TestApi, workspaceId: string, label = 'gw'): Promise<{ instanceId: string; instanceName: string }> {
  const instanceName = `${label}-${workspaceId.slice(0, 8)}-${++numbers}`;
  const created = await api.admin('POST', `/admin/v1/workspaces/${workspaceId}/instances`, {
    name: 'Gateway',
    channel: 'whatsapp',
    provider: 'web',
    connected: true,
    config: { baseUrl: EMULATOR, instanceName, accessToken: 'gateway-key' },
  });
  if (created.status !== 201) throw new Error(`web instance: ${created.status} ${created.text}`);
  const instanceId = created.body.data.id as string;
  await emulator('/__emulator/web/webhook', { instanceName, url: `${api.url}/webhooks/web/${instanceId}`, apikey: 'gateway-key' });
  return { instanceId, instanceName };
}

let workers = 0;

/**
 * A worker process of the file's own on its own task queue, for tests that kill or reconfigure
 * it (the suite's worker must be neither). No outbox dispatcher: it would lease the other files'
 * events and start their automation runs on this queue. Its log: `<stack>/logs/worker-<queue>-<n>.log`.
 */
export async function ownWorker(taskQueue: string, env: Record<string, string> = {}): Promise<Child> {
  workers += 1;
  const child = startChild({
    name: `worker-${taskQueue}-${workers}`,
    ...workerFromSources(),
    env: { TEMPORAL_TASK_QUEUE: taskQueue, OUTBOX_DISPATCHER: 'false', ...env },
    logFile: path.join(LOG_DIR, `worker-${taskQueue}-${workers}.log`),
  });
  await waitForWorker(child);
  return child;
}

/** SIGKILLs a worker (no shutdown of any kind) and waits for it to be gone. */
export async function killWorker(child: Child): Promise<void> {
  const exited = new Promise<void>((resolve) => child.process.once('exit', () => resolve()));
  child.process.kill('SIGKILL');
  await exited;
  if (child.process.signalCode !== 'SIGKILL') throw new Error(`worker ended with ${child.process.signalCode}, not SIGKILL`);
  await child.stop();
}
