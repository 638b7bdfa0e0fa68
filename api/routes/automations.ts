import type { Context } from 'koa';
import { z } from 'zod';
import {
  ActionSchema,
  assertActionMediaUrls,
  AutomationBody,
  type AutomationView,
  CHAIN_RUN_BUDGET,
  createAutomation,
  deleteAutomation,
  deliveryChain,
  findInboundAutomationAndCount,
  usableInboundAutomation,
  getAutomationRow,
  listAutomations,
  listRuns,
  MAX_CHAIN_DEPTH,
  receiveInboundWebhook,
  regenerateToken,
  removeToken,
  serializeAutomation,
  TriggerSchema,
  updateAutomation,
  WEBHOOK_IN_MAX_BYTES,
} from '../../domain/automations';
import { ApiError, atLeastOne, pageQuery, trimmedText } from '../../domain/kernel';
import { rawBody, requestBody } from '../middleware/body';
import { record, scaled, scaledLimit } from '../middleware/rate-limit';
import { apiKey, route } from '../route';
import { Deleted, IdParams, listOf, pageOf, single } from '../schemas';
import { grants } from '../../domain/access';

const Automation = z
  .object({
    id: z.string(),
    name: z.string(),
    active: z.boolean(),
    trigger: z.record(z.string(), z.unknown()),
    actions: z.array(z.record(z.string(), z.unknown())),
    webhookUrl: z.string().nullable().meta({
      description:
        'The inbound webhook URL, a bearer credential: shown only to a key holding `automations:write`; `null` for any other key, and when the automation has no token.',
    }),
    webhookToken: z
      .boolean()
      .meta({ description: 'Whether the automation has an inbound webhook token (whatever the key may see of it).' }),
    createdAt: z.string(),
    updatedAt: z.string(),
  })
  .openapi('Automation');

const Run = z
  .object({
    id: z.string(),
    status: z.enum(['running', 'completed', 'failed', 'filtered', 'duplicate']),
    trigger: z.record(z.string(), z.unknown()),
    externalId: z.string().nullable(),
    error: z.string().nullable(),
    createdAt: z.string(),
    finishedAt: z.string().nullable(),
  })
  .openapi('AutomationRun');

const view = (ctx: Context): AutomationView => ({ baseUrl: ctx.deps.config.publicBaseUrl, ring: ctx.deps.config.encryptionKeys! });

/**
 * The automation as this key may see it: the inbound URL is a bearer credential (it creates leads
 * and sends messages), so only a key that may change automations (`automations:write`) sees it;
 * any other key learns only whether a token exists.
 */
function forKey<T extends { webhookUrl: string | null }>(ctx: Context, automation: T): T & { webhookToken: boolean } {
  const webhookToken = automation.webhookUrl !== null;
  const sees = grants(ctx.state.auth?.scopes ?? [], ['automations:write']);
  return { ...automation, webhookUrl: sees ? automation.webhookUrl : null, webhookToken };
}

const ACTIONS_DOC =
  'Actions run in order: `add_tag {tag}`, `remove_tag {tag}`, `update_contact {fields: {name?, email?, phone?, notes?}}`, ' +
  '`create_deal {pipeline, stage?, name?, value?}`, `move_deal {stage}`, `set_deal_status {status, lostReason?}`, ' +
  '`create_task {title, taskType?, dueInMinutes, assignedTo?}`, `add_note {body}`, ' +
  '`send_message {instanceId?, messageType?, text?, mediaUrl?, caption?, fileName?, templateName?, templateLanguage?, templateVariables?, templateHeader?, templateButtons?}` ' +
  '(`messageType` because `type` names the action; the other fields follow the rules of `POST /api/v1/messages`, and a literal ' +
  '`templateHeader.mediaUrl` is checked when the automation is saved), `wait {seconds}`. String params may use `{{contact.name}}`, `{{contact.email}}`, ' +
  '`{{contact.phone}}`, `{{deal.name}}`, `{{deal.value}}`, `{{webhook.<field>}}`, `{{changedFields}}`, `{{pipelineId}}`.';

export const automationRoutes = [
  route({
    method: 'post',
    path: '/api/v1/automations',
    operationId: 'createAutomation',
    noStore: true,
    ...apiKey('Automations', 'automations:write', 'write'),
    summary: 'Create an automation',
    description:
      'Trigger types: `webhook_received` (with `eventFilter`, `mapping`; gets a `webhookUrl` and takes one unit of the plan’s inbound-webhook ' +
      'quota, 402 `INBOUND_WEBHOOK_LIMIT_REACHED`), `stage_changed`, `deal_won`, `deal_lost`, `card_created` (optional `pipelineId`), ' +
      `\`contact_updated\` (optional \`fields\`), \`insight_updated\` (optional \`temperature\`). The plan's \`automationLimit\` caps the workspace's automations (402 \`AUTOMATION_LIMIT_REACHED\`). ` +
      `A run acts without a key, so the key saving an automation must also hold the scopes its actions need (403 \`INSUFFICIENT_SCOPE\` names them). ${ACTIONS_DOC}`,
    status: 201,
    body: AutomationBody,
    response: single(Automation),
    errors: ['INBOUND_WEBHOOK_LIMIT_REACHED', 'AUTOMATION_LIMIT_REACHED', 'INVALID_URL'],
    handler: async (ctx, { body }) => {
      assertActionMediaUrls(body.actions, { allowPrivate: ctx.deps.config.allowPrivateUrls });
      return {
        data: forKey(ctx, await createAutomation(ctx.deps.db, ctx.state.auth!.workspaceId, body, view(ctx), ctx.state.auth!.scopes)),
      };
    },
  }),
  route({
    method: 'get',
    path: '/api/v1/automations',
    operationId: 'listAutomations',
    noStore: true,
    ...apiKey('Automations', 'automations:read', 'read'),
    summary: 'List automations',
    query: pageQuery(),
    response: listOf(Automation),
    handler: async (ctx, { query }) => {
      const page = await pageOf(listAutomations(ctx.deps.db, ctx.state.auth!.workspaceId, query, view(ctx)), query);
      return { ...page, data: page.data.map((row) => forKey(ctx, row)) };
    },
  }),
  route({
    method: 'get',
    path: '/api/v1/automations/{id}',
    operationId: 'getAutomation',
    noStore: true,
    ...apiKey('Automations', 'automations:read', 'read'),
    summary: 'Get an automation',
    params: IdParams,
    response: single(Automation),
    handler: async (ctx, { params }) => ({
      data: forKey(ctx, serializeAutomation(await getAutomationRow(ctx.deps.db, ctx.state.auth!.workspaceId, params.id), view(ctx))),
    }),
  }),
  route({
    method: 'patch',
    path: '/api/v1/automations/{id}',
    operationId: 'updateAutomation',
    noStore: true,
    ...apiKey('Automations', 'automations:write', 'write'),
    summary: 'Change an automation',
    description:
      'Any of `name`, `active`, `trigger` (same type), `actions`. Runs already started keep the actions they began with. Changing `actions` or `trigger`, or ' +
      'setting `active: true`, needs the scopes the resulting actions need (403 `INSUFFICIENT_SCOPE`); renaming or deactivating does not.',
    params: IdParams,
    body: atLeastOne(
      z.object({
        name: trimmedText(200).optional(),
        active: z.boolean().optional(),
        trigger: TriggerSchema.optional(),
        actions: z.array(ActionSchema).min(1).max(50).optional(),
      }),
      'expected name, active, trigger and/or actions',
    ),
    response: single(Automation),
    errors: ['INVALID_URL'],
    handler: async (ctx, { params, body }) => {
      assertActionMediaUrls(body.actions, { allowPrivate: ctx.deps.config.allowPrivateUrls });
      return {
        data: forKey(
          ctx,
          await updateAutomation(ctx.deps.db, ctx.state.auth!.workspaceId, params.id, body, view(ctx), ctx.state.auth!.scopes),
        ),
      };
    },
  }),
  route({
    method: 'delete',
    path: '/api/v1/automations/{id}',
    operationId: 'deleteAutomation',
    ...apiKey('Automations', 'automations:write', 'delete'),
    summary: 'Delete an automation',
    description: 'Its inbound URL stops working, its quota unit is returned, its run log goes with it.',
    params: IdParams,
    response: Deleted,
    handler: async (ctx, { params }) => ({ data: await deleteAutomation(ctx.deps.db, ctx.state.auth!.workspaceId, params.id) }),
  }),
  route({
    method: 'post',
    path: '/api/v1/automations/{id}/token',
    operationId: 'regenerateAutomationToken',
    noStore: true,
    ...apiKey('Automations', 'automations:write', 'write'),
    summary: 'Regenerate the inbound webhook URL',
    description:
      'A new token (192 random bits): the old URL answers 404 at once. On an automation whose token was removed this takes a quota unit again.',
    params: IdParams,
    response: single(Automation),
    errors: ['INBOUND_WEBHOOK_LIMIT_REACHED'],
    handler: async (ctx, { params }) => ({
      data: forKey(ctx, await regenerateToken(ctx.deps.db, ctx.state.auth!.workspaceId, params.id, view(ctx))),
    }),
  }),
  route({
    method: 'delete',
    path: '/api/v1/automations/{id}/token',
    operationId: 'deleteAutomationToken',
    noStore: true,
    ...apiKey('Automations', 'automations:write', 'delete'),
    summary: 'Remove the inbound webhook URL',
    description: 'The URL answers 404 at once and the inbound-webhook quota unit is returned.',
    params: IdParams,
    response: single(Automation),
    handler: async (ctx, { params }) => ({
      data: forKey(ctx, await removeToken(ctx.deps.db, ctx.state.auth!.workspaceId, params.id, view(ctx))),
    }),
  }),
  route({
    method: 'get',
    path: '/api/v1/automations/{id}/runs',
    operationId: 'listAutomationRuns',
    ...apiKey('Automations', 'automations:read', 'read'),
    summary: 'The run log of an automation',
    description:
      'Newest first; `status` filters. `running`, `completed`, `failed` (with the action and reason in `error`), `filtered` (the eventFilter did ' +
      `not match), \`duplicate\` (an externalId already run). Chains deeper than ${MAX_CHAIN_DEPTH} automations stop with a failed run. ` +
      'In the Temporal UI: `AutomationId = "<id>"`.',
    params: IdParams,
    query: pageQuery().extend({ status: z.enum(['running', 'completed', 'failed', 'filtered', 'duplicate']).optional() }),
    response: listOf(Run),
    handler: async (ctx, { params, query }) => pageOf(listRuns(ctx.deps.db, ctx.state.auth!.workspaceId, params.id, query), query),
  }),
  route({
    method: 'post',
    path: '/api/automations/webhook-in/{token}',
    operationId: 'receiveAutomationWebhook',
    tag: 'Automations',
    auth: 'none',
    ipProfile: 'webhookIn',
    ipCountedByHandler: true,
    summary: 'Inbound webhook receiver (starts an automation)',
    description:
      'Authenticated only by the token in the URL. Any JSON object up to 256 KiB, whatever the Content-Type label (larger: 413 ' +
      '`PAYLOAD_TOO_LARGE`; not a JSON object: 400 `VALIDATION`). Unknown or revoked token: 404. Rate limits per IP (`IP_RATE_LIMITED`) and per token ' +
      "(`TOKEN_RATE_LIMITED`), with `Retry-After`; a run to start takes one from the plan's `automationRunsPerMinute`, shared with triggered runs " +
      '(over it: 429 `RATE_LIMITED` with `Retry-After`, nothing recorded; send the call again then). Answers 202 `{ data: { runId, status } }`: ' +
      '`accepted` (the run started), `filtered` (nothing runs: the eventFilter did not match or the automation is inactive; or loop protection ' +
      'stopped a call made by one of our own webhook deliveries, and the run log shows it `failed` with the reason), `duplicate` (the mapped ' +
      `externalId already ran for this automation). A call carrying our \`X-Service-Delivery\` and a valid \`X-Service-Signature\` continues the chain of ` +
      `the event that delivery carried: at most ${MAX_CHAIN_DEPTH} deep and ${CHAIN_RUN_BUDGET} runs per chain, as for triggers.`,
    params: z.object({ token: z.string().min(1).max(200) }),
    documentedBody: z
      .looseObject({})
      .meta({ additionalProperties: true, description: 'Any JSON object (up to 256 KiB), under any Content-Type.' }),
    status: 202,
    response: single(z.object({ runId: z.string(), status: z.enum(['accepted', 'filtered', 'duplicate']) })),
    errors: ['NOT_FOUND', 'PAYLOAD_TOO_LARGE', 'TOKEN_RATE_LIMITED', 'RATE_LIMITED', 'SUBSCRIPTION_INACTIVE'],
    handler: async (ctx, { params }) => {
      const { db, config } = ctx.deps;
      const raw = rawBody(ctx);
      if (Buffer.byteLength(raw) > WEBHOOK_IN_MAX_BYTES)
        throw new ApiError('PAYLOAD_TOO_LARGE', 'Request body too large', { hint: 'The limit is 256 KiB.' });
      const body = requestBody(ctx);
      if (body === undefined || body === null || typeof body !== 'object' || Array.isArray(body)) {
        throw new ApiError('VALIDATION', 'Invalid body: expected a JSON object', {
          hint: 'Send Content-Type: application/json with an object body.',
        });
      }
      // The IP (the router left it to this statement: ipCountedByHandler) and the token counted
      // where the token's automation is read.
      const [ip] = scaled(ctx, [ctx.state.ipToCount!]);
      const found = await findInboundAutomationAndCount(db, params.token, ip, scaledLimit(ctx, config.inboundTokenLimit));
      ctx.state.ipToCount = undefined;
      record(ctx, found.counted);
      const automation = usableInboundAutomation(found.automation);
      // A call one of our own webhook deliveries made continues that delivery's chain (loop protection across the inbound edge).
      const delivery = ctx.get('x-service-delivery');
      const parent = delivery
        ? await deliveryChain(db, config.encryptionKeys!, { deliveryId: delivery, signature: ctx.get('x-service-signature'), rawBody: raw })
        : null;
      return { data: await receiveInboundWebhook(db, automation, body, parent) };
    },
  }),
];
