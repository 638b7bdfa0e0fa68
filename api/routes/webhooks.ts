import { randomUUID } from 'node:crypto';
import { WorkflowExecutionAlreadyStartedError, WorkflowIdReusePolicy, WorkflowNotFoundError } from '@temporalio/client';
import { z } from 'zod';
import { ApiError, atLeastOne, HTTP_URL, pageQuery } from '../../domain/kernel';
import {
  ALL_EVENTS,
  createSubscription,
  deleteSubscription,
  deliveryWorkflowId,
  getDelivery,
  getSubscription,
  listDeliveries,
  listSubscriptions,
  PING_EVENT,
  postWebhook,
  reopenDelivery,
  restoreDelivery,
  serializeDelivery,
  SUBSCRIBABLE_EVENTS,
  subscriptionTarget,
  updateSubscription,
  WEBHOOK_EVENTS,
} from '../../domain/webhooks';
import { workspacePriority } from '../../domain/platform';
import { WEBHOOK_MAX_ATTEMPTS, WEBHOOK_RETRY_SCHEDULE_SECONDS, type DeliveryInput } from '../../types/webhooks';
import { webhookDeliveryWorkflow } from '../../workflows/webhook-delivery';
import { withTemporal } from '../context';
import { apiKey, route } from '../route';
import { Deleted, IdParams, listOf, pageOf, single } from '../schemas';

const Subscription = z
  .object({
    id: z.string(),
    url: z.string(),
    events: z.array(z.string()),
    active: z.boolean(),
    disabledReason: z.string().nullable(),
    createdAt: z.string(),
    updatedAt: z.string(),
  })
  .openapi('WebhookSubscription');

const Delivery = z
  .object({
    id: z.string(),
    event: z.string(),
    status: z.enum(['pending', 'succeeded', 'failed']),
    attempts: z.number().int(),
    lastStatusCode: z.number().int().nullable(),
    lastError: z.string().nullable(),
    lastAttemptAt: z.string().nullable(),
    nextAttemptAt: z.string().nullable(),
    createdAt: z.string(),
    deliveredAt: z.string().nullable(),
  })
  .openapi('WebhookDelivery');

const url = z.string().min(1).max(2048).meta({ pattern: HTTP_URL });
const events = z
  .array(z.enum(SUBSCRIBABLE_EVENTS))
  .min(1)
  .max(SUBSCRIBABLE_EVENTS.length)
  // `"*"` (every event) stands alone (domain/webhooks/webhooks).
  .meta({ anyOf: [{ maxItems: 1 }, { items: { not: { const: ALL_EVENTS } } }] });
const DeliveryParams = z.object({ id: z.uuid(), deliveryId: z.uuid() });

/** How long a manual retry waits for its attempt (10 s receiver timeout + DNS + recording). */
const RETRY_WAIT_MS = 20_000;

const schedule = WEBHOOK_RETRY_SCHEDULE_SECONDS.map((s) => (s < 60 ? `${s} s` : s < 3600 ? `${s / 60} min` : `${s / 3600} h`)).join(', ');

export const webhookRoutes = [
  route({
    method: 'post',
    path: '/api/v1/webhooks',
    operationId: 'createWebhook',
    noStore: true,
    ...apiKey('Webhooks', 'webhooks:write', 'write'),
    summary: 'Subscribe a URL to events',
    description:
      'The answer carries `secret` (`whsec_...`): it signs every request (`X-Service-Signature`) and is shown **only here**. ' +
      `\`events\`: event names (${WEBHOOK_EVENTS.join(', ')}) or \`["*"]\` for all. ` +
      '`url` must be https and resolve only to public addresses (400 `INVALID_URL`; a temporary DNS failure is 503 `DNS_UNAVAILABLE`). ' +
      'The plan limits the number of subscriptions (402 `WEBHOOK_LIMIT_REACHED`).',
    status: 201,
    body: z.object({ url, events, active: z.boolean().optional() }),
    response: single(Subscription.extend({ secret: z.string() })),
    errors: ['INVALID_URL', 'DNS_UNAVAILABLE', 'WEBHOOK_LIMIT_REACHED'],
    handler: async (ctx, { body }) => ({
      data: await createSubscription(ctx.deps.db, ctx.deps.config.encryptionKeys!, ctx.state.auth!.workspaceId, body, {
        allowPrivate: ctx.deps.config.allowPrivateUrls,
      }),
    }),
  }),
  route({
    method: 'get',
    path: '/api/v1/webhooks',
    operationId: 'listWebhooks',
    ...apiKey('Webhooks', 'webhooks:read', 'read'),
    summary: 'List webhook subscriptions',
    description: 'Oldest first. The secret is never listed.',
    query: pageQuery(),
    response: listOf(Subscription),
    handler: async (ctx, { query }) => pageOf(listSubscriptions(ctx.deps.db, ctx.state.auth!.workspaceId, query), query),
  }),
  route({
    method: 'get',
    path: '/api/v1/webhooks/{id}',
    operationId: 'getWebhook',
    ...apiKey('Webhooks', 'webhooks:read', 'read'),
    summary: 'Get a webhook subscription',
    description:
      '`active: false` with `disabledReason` when the receiver answered 410 Gone (or the subscription was disabled through the API).',
    params: IdParams,
    response: single(Subscription),
    handler: async (ctx, { params }) => ({ data: await getSubscription(ctx.deps.db, ctx.state.auth!.workspaceId, params.id) }),
  }),
  route({
    method: 'patch',
    path: '/api/v1/webhooks/{id}',
    operationId: 'updateWebhook',
    ...apiKey('Webhooks', 'webhooks:write', 'write'),
    summary: 'Change a subscription’s URL, events or active flag',
    description:
      'At least one of `url`, `events`, `active`. A new URL passes the same check as on create. `active: true` re-enables a subscription ' +
      'disabled by a 410; `active: false` stops new deliveries, and deliveries waiting for a retry end `failed` at their next attempt. ' +
      'The next attempt of a pending delivery uses the new URL.',
    params: IdParams,
    body: atLeastOne(
      z.object({ url: url.optional(), events: events.optional(), active: z.boolean().optional() }),
      'expected url, events and/or active',
    ),
    response: single(Subscription),
    errors: ['INVALID_URL', 'DNS_UNAVAILABLE'],
    handler: async (ctx, { params, body }) => ({
      data: await updateSubscription(ctx.deps.db, ctx.state.auth!.workspaceId, params.id, body, {
        allowPrivate: ctx.deps.config.allowPrivateUrls,
      }),
    }),
  }),
  route({
    method: 'delete',
    path: '/api/v1/webhooks/{id}',
    operationId: 'deleteWebhook',
    ...apiKey('Webhooks', 'webhooks:write', 'delete'),
    summary: 'Delete a webhook subscription',
    description: 'Its delivery log goes with it; a delivery waiting for a retry stops.',
    params: IdParams,
    response: Deleted,
    handler: async (ctx, { params }) => ({ data: await deleteSubscription(ctx.deps.db, ctx.state.auth!.workspaceId, params.id) }),
  }),
  route({
    method: 'post',
    path: '/api/v1/webhooks/{id}/ping',
    operationId: 'pingWebhook',
    ...apiKey('Webhooks', 'webhooks:write', 'write'),
    summary: 'Send test.ping now',
    description:
      'Posts `{ event: "test.ping", workspace_id, timestamp, webhook_id }`, signed like every delivery, and answers with the outcome ' +
      '(`delivered`, the receiver’s `statusCode`, `error`, `durationMs`). Works on a disabled subscription too. Not retried and not in the delivery log.',
    params: IdParams,
    response: single(
      z.object({
        event: z.literal(PING_EVENT),
        deliveryId: z.string(),
        delivered: z.boolean(),
        statusCode: z.number().int().nullable(),
        error: z.string().nullable(),
        durationMs: z.number().int(),
      }),
    ),
    handler: async (ctx, { params }) => {
      const workspaceId = ctx.state.auth!.workspaceId;
      const target = await subscriptionTarget(ctx.deps.db, ctx.deps.config.encryptionKeys!, workspaceId, params.id);
      const deliveryId = randomUUID();
      const body = JSON.stringify({
        event: PING_EVENT,
        workspace_id: workspaceId,
        timestamp: new Date().toISOString(),
        webhook_id: target.id,
      });
      const { ok, statusCode, error, durationMs } = await postWebhook({
        url: target.url,
        secret: target.secret,
        event: PING_EVENT,
        deliveryId,
        body,
        policy: { allowPrivate: ctx.deps.config.allowPrivateUrls },
      });
      return { data: { event: PING_EVENT, deliveryId, delivered: ok, statusCode, error, durationMs } };
    },
  }),
  route({
    method: 'get',
    path: '/api/v1/webhooks/{id}/deliveries',
    operationId: 'listWebhookDeliveries',
    ...apiKey('Webhooks', 'webhooks:read', 'read'),
    summary: 'The delivery log of a subscription',
    description:
      'Newest first; `status` filters. One delivery per (event, subscription), stable across retries (it is the `X-Service-Delivery` header): ' +
      `\`pending\` while attempts remain, \`succeeded\` after a 2xx, \`failed\` after a 410 or the last of ${WEBHOOK_MAX_ATTEMPTS} attempts ` +
      `(retries after ${schedule}, ±20%). \`attempts\`, \`lastStatusCode\` and \`lastError\` describe the latest attempt; \`nextAttemptAt\` when the next one runs.`,
    params: IdParams,
    query: pageQuery().extend({ status: z.enum(['pending', 'succeeded', 'failed']).optional() }),
    response: listOf(Delivery),
    handler: async (ctx, { params, query }) => pageOf(listDeliveries(ctx.deps.db, ctx.state.auth!.workspaceId, params.id, query), query),
  }),
  route({
    method: 'post',
    path: '/api/v1/webhooks/{id}/deliveries/{deliveryId}/retry',
    operationId: 'retryWebhookDelivery',
    ...apiKey('Webhooks', 'webhooks:write', 'write'),
    summary: 'Send one delivery again now',
    description:
      'One more attempt of a `succeeded` or `failed` delivery, with the same body and `X-Service-Delivery`, freshly signed; answers with the ' +
      'delivery after it. A delivery still on its retry schedule is 409 `IN_PROGRESS`; one of a disabled subscription is 409 `WEBHOOK_DISABLED` ' +
      '(enable it first). If the attempt takes longer than the wait, the answer shows it `pending` and the attempt completes on its own.',
    params: DeliveryParams,
    response: single(Delivery),
    errors: ['IN_PROGRESS', 'WEBHOOK_DISABLED'],
    handler: async (ctx, { params }) => {
      const { db, config } = ctx.deps;
      const workspaceId = ctx.state.auth!.workspaceId;
      const delivery = await getDelivery(db, workspaceId, params.id, params.deliveryId);
      const target = await subscriptionTarget(db, ctx.deps.config.encryptionKeys!, workspaceId, params.id);
      if (!target.active)
        throw new ApiError('WEBHOOK_DISABLED', 'The subscription is disabled', { hint: 'PATCH it with active: true, then retry.' });

      const service = 'Webhook delivery';
      const workflowId = deliveryWorkflowId(workspaceId, params.id, delivery.event_id ?? delivery.id);
      const running = await withTemporal(ctx, service, (client) => client.workflow.getHandle(workflowId).describe())
        .then((d) => d.status.name === 'RUNNING')
        .catch((err) => {
          if (err instanceof WorkflowNotFoundError) return false;
          throw err;
        });
      const inProgress = () =>
        new ApiError('IN_PROGRESS', 'The delivery is still being attempted on its retry schedule', {
          hint: `Wait until it is succeeded or failed${delivery.next_attempt_at ? ` (next attempt at ${delivery.next_attempt_at.toISOString()})` : ''}. Temporal workflow id: ${workflowId}`,
        });
      if (running) throw inProgress();

      if (!(await reopenDelivery(db, workspaceId, delivery.id))) throw inProgress();
      const input: DeliveryInput = { workspaceId, deliveryId: delivery.id, retryScale: config.webhookRetryScale, maxAttempts: 1 };
      let handle;
      try {
        handle = await withTemporal(ctx, service, (client) =>
          client.workflow.start(webhookDeliveryWorkflow, {
            workflowId,
            taskQueue: config.webhookTaskQueue,
            args: [input],
            workflowIdReusePolicy: WorkflowIdReusePolicy.ALLOW_DUPLICATE,
            priority: workspacePriority(workspaceId),
            searchAttributes: { WorkspaceId: [workspaceId] },
          }),
        );
      } catch (err) {
        if (err instanceof WorkflowExecutionAlreadyStartedError) throw inProgress();
        // Nothing will attempt it.
        await restoreDelivery(db, workspaceId, delivery);
        throw err;
      }
      let timer: NodeJS.Timeout | undefined;
      await Promise.race([
        handle.result().catch(() => undefined), // the log below tells what happened
        new Promise((resolve) => {
          timer = setTimeout(resolve, RETRY_WAIT_MS);
        }),
      ]).finally(() => clearTimeout(timer));
      return { data: serializeDelivery(await getDelivery(db, workspaceId, params.id, delivery.id)) };
    },
  }),
];
