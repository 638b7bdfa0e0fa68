/**
 * "Delivered exactly once", asserted on what the design makes unique instead of on a receiver
 * left alone for a while. An event is one outbox row, written in the business transaction; the
 * dispatcher makes one delivery per (event, subscription) (a unique index, so a re-dispatch after a
 * lease expiry finds the same row); a delivery is posted by the dispatcher's first attempt or by its
 * one workflow (`deliveryWorkflowId`, REJECT_DUPLICATE), each post under the delivery's id
 * (`X-Service-Delivery`) and counted in `attempts`, and only while the delivery is pending
 * (activities/webhooks.ts). So once the workspace's outbox is dispatched, none of its deliveries is
 * pending and no delivery workflow of theirs is running, nothing is left that could post: the
 * receiver's requests are counted then, with no quiet period to wait out.
 */
import { WorkflowNotFoundError, type Client } from '@temporalio/client';
import { deliveryWorkflowId } from '../domain/webhooks/webhooks';
import { eventually, settleOutbox, type ReceivedWebhook, type Receiver, type TestApi } from './helpers';

export interface SettledDelivery {
  id: string;
  subscription_id: string;
  event: string;
  event_id: string;
  status: string;
  attempts: number;
}

/**
 * Waits until the workspace's outbox is dispatched, no delivery of it is pending and the workflow of
 * each delivery to `receiver.url + path` (if it has one) is closed; then checks that every such
 * delivery succeeded at its first attempt, and that the requests to `path` are those deliveries,
 * each id once. Returns the requests (in arrival order) and the deliveries, so the caller asserts
 * which events they are.
 */
export async function deliveredOnce(
  api: TestApi,
  temporal: Client,
  receiver: Receiver,
  workspaceId: string,
  path: string,
): Promise<{ requests: ReceivedWebhook[]; deliveries: SettledDelivery[] }> {
  await settleOutbox(api, workspaceId);
  const deliveries: SettledDelivery[] = await api
    .db('webhook_deliveries as d')
    .join('webhook_subscriptions as s', 's.id', 'd.subscription_id')
    .where({ 'd.workspace_id': workspaceId, 's.url': `${receiver.url}${path}` })
    .orderBy('d.created_at')
    .select('d.id', 'd.subscription_id', 'd.event', 'd.event_id', 'd.status', 'd.attempts');
  for (const d of deliveries.filter((x) => x.event_id !== null)) {
    // A first attempt made by the dispatcher has no workflow; a retried delivery's workflow must have ended.
    await eventually(`the workflow of delivery ${d.id} to be closed (or absent)`, () =>
      temporal.workflow
        .getHandle(deliveryWorkflowId(workspaceId, d.subscription_id, d.event_id))
        .describe()
        .then(
          (run) => run.status.name !== 'RUNNING',
          (err: unknown) => {
            if (err instanceof WorkflowNotFoundError) return true;
            throw err;
          },
        ),
    );
  }
  for (const d of deliveries)
    expect({ id: d.id, status: d.status, attempts: d.attempts }).toEqual({ id: d.id, status: 'succeeded', attempts: 1 });
  const requests = receiver.to(path);
  expect(requests.map((r) => String(r.headers['x-service-delivery'])).sort()).toEqual(deliveries.map((d) => d.id).sort());
  return { requests, deliveries };
}

/** How many outbox rows (events or triggers) of a workspace have this name: the event itself, made once. */
export async function outboxCount(
  api: TestApi,
  workspaceId: string,
  name: string,
  kind: 'webhook' | 'trigger' = 'webhook',
): Promise<number> {
  const row = await api.db('outbox_events').where({ workspace_id: workspaceId, name, kind }).count<{ n: number }[]>({ n: '*' }).first();
  return Number(row!.n);
}
