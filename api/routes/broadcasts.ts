import { z } from 'zod';
import { WorkflowIdReusePolicy } from '@temporalio/client';
import { apiKey, route } from '../route';
import { IdParams, listOf, pageOf, single } from '../schemas';
import { withTemporal } from '../context';
import { broadcastWorkflow, BROADCAST_WAKE_SIGNAL } from '../../workflows/broadcast';
import {
  broadcastWorkflowId,
  createPublicBroadcast,
  DEFAULT_RATE_PER_SECOND,
  discardBroadcast,
  getPublicBroadcast,
  listPublicBroadcasts,
  listRecipients,
  MAX_AUDIENCE_LEADS,
  MAX_AUDIENCE_TAGS,
  MAX_ACTIVE_BROADCASTS,
  MAX_RATE_PER_SECOND,
  MIN_RATE_PER_SECOND,
  moveBroadcast,
  PUBLIC_BROADCAST_STATUSES,
  RECIPIENT_STATUSES,
} from '../../domain/broadcasts';
import { MESSAGE_CONTENT_FIELDS, TEMPLATE_BUTTONS, TEMPLATE_HEADER } from '../../domain/messaging';
import { assertSafeUrlSyntax, workspacePriority } from '../../domain/platform';
import { atLeastOne, isoInstant, pageQuery, trimmedText } from '../../domain/kernel';
import type { Context } from 'koa';

const Counts = z.object({
  total: z.number().int(),
  pending: z.number().int(),
  sent: z.number().int(),
  delivered: z.number().int(),
  read: z.number().int(),
  failed: z.number().int(),
  skipped: z.number().int(),
});

const Audience = z.object({
  tagIds: z.array(z.string()).optional(),
  listId: z.string().optional(),
  leadIds: z.array(z.string()).optional(),
});

const BroadcastRecord = z
  .object({
    id: z.string(),
    name: z.string(),
    status: z.enum(PUBLIC_BROADCAST_STATUSES),
    instanceId: z.string().nullable(),
    audience: Audience,
    template: z
      .object({
        name: z.string(),
        language: z.string(),
        variables: z.array(z.string()).optional(),
        header: z.object({ text: z.string().optional(), mediaUrl: z.string().optional() }).optional(),
        buttons: z.array(z.object({ index: z.number().int(), urlVariable: z.string() })).optional(),
      })
      .nullable(),
    scheduledAt: z.string().nullable(),
    startedAt: z.string().nullable(),
    finishedAt: z.string().nullable(),
    waitingUntil: z
      .string()
      .nullable()
      .describe('While it waits (the daily counters, its instance, the subscription, the template): until when'),
    code: z
      .string()
      .nullable()
      .describe(
        'Why it waits (`MESSAGE_LIMIT_REACHED`, `COLD_LIMIT_REACHED`, `INSTANCE_DISCONNECTED`, `SUBSCRIPTION_INACTIVE`, ' +
          '`TEMPLATE_INVALID`), or why the service cancelled it (`BROADCAST_LIMIT_REACHED`, `INSTANCE_NOT_FOUND`, ...); else null',
      ),
    ratePerSecond: z.number().int(),
    counts: Counts,
    createdAt: z.string(),
    updatedAt: z.string(),
  })
  .openapi('Broadcast');

const Recipient = z
  .object({
    contactId: z.string(),
    phone: z.string().nullable(),
    status: z.enum(RECIPIENT_STATUSES),
    code: z.string().nullable(),
    messageId: z.string().nullable(),
    conversationId: z.string().nullable(),
    sentAt: z.string().nullable(),
  })
  .openapi('BroadcastRecipient');

const SERVICE = 'The broadcast service';

/** Wakes the broadcast's workflow to look at its row now (it looks on its own within a minute anyway). */
async function wake(ctx: Context, workspaceId: string, broadcastId: string): Promise<void> {
  await withTemporal(ctx, SERVICE, (client) =>
    client.workflow.getHandle(broadcastWorkflowId(workspaceId, broadcastId)).signal(BROADCAST_WAKE_SIGNAL),
  ).catch(() => undefined);
}

const MOVES = [
  {
    move: 'pause' as const,
    operationId: 'pauseBroadcast',
    summary: 'Pause a scheduled broadcast or one in progress',
    description:
      'A `scheduled` or `in_progress` broadcast can be paused (else 409 `INVALID_STATE`); a scheduled one does not start until ' +
      'resumed. The answer already says `paused`: the batch ' +
      'sending it reads the status before each recipient, so no provider call starts more than a second after this answer. ' +
      'A recipient whose call had started is recorded as it ends.',
  },
  {
    move: 'resume' as const,
    operationId: 'resumeBroadcast',
    summary: 'Resume a paused broadcast',
    description:
      'Only a `paused` broadcast can be resumed (else 409 `INVALID_STATE`); it carries on with the recipients still pending. ' +
      'One paused before it started is `scheduled` again, and starts at `scheduledAt` (at once if that has passed).',
  },
  {
    move: 'cancel' as const,
    operationId: 'cancelBroadcast',
    summary: 'Cancel a broadcast',
    description:
      'A `scheduled`, `in_progress` or `paused` broadcast can be cancelled (else 409 `INVALID_STATE`). The answer already says ' +
      '`cancelled`; recipients not yet sent stay `pending` and are never sent (the daily units of any prepared and not sent are given back).',
  },
];

export const broadcastRoutes = [
  route({
    method: 'post',
    path: '/api/v1/broadcasts',
    operationId: 'createBroadcast',
    ...apiKey('Broadcasts', 'broadcasts:write', 'write'),
    status: 201,
    summary: 'Send an approved template to a segment of leads, paced, once per recipient',
    description:
      'The audience is the union of the leads tagged with any of `tagIds` (at most ' +
      `${MAX_AUDIENCE_TAGS}), the members of \`listId\` and the leads in \`leadIds\` (at most ${MAX_AUDIENCE_LEADS}), each contact once; ` +
      'it is frozen when the broadcast starts (`scheduledAt`, or now when absent or past). Checked in this order, the first ' +
      "failure answering: the body (400; a header `mediaUrl` is checked like a send's, 400 `INVALID_URL`); the instance, with the rules of a send (404 `INSTANCE_NOT_FOUND`, 422 `NO_INSTANCE`, " +
      '`INSTANCE_REQUIRED`, `INSTANCE_DISCONNECTED`, `TEMPLATE_UNSUPPORTED`); the template, approved on that instance and given ' +
      "as many `variables` as it takes, and its `header` and URL `buttons` by the rules of a send's `templateHeader` and " +
      '`templateButtons` (422 `TEMPLATE_INVALID`); the tags and list, of the workspace (404 `NOT_FOUND`); the ' +
      "audience's size against the plan's `broadcastLimit` (402 `BROADCAST_LIMIT_REACHED`, checked again when the audience is " +
      `frozen); then the broadcasts not finished yet, at most ${MAX_ACTIVE_BROADCASTS} per workspace (402 ` +
      '`ACTIVE_BROADCAST_LIMIT_REACHED`). `variables` are positional and may use `{{contact.name}}`, `{{contact.phone}}`, ' +
      "`{{contact.email}}` and `{{contact.<key>}}` for a custom field's key (the value of the contact's latest deal holding it; " +
      'an unknown key is 422 `TEMPLATE_INVALID`), and so may `header.text` and each `buttons[].urlVariable`; a recipient with ' +
      'nothing to fill in is `skipped` `VARIABLE_EMPTY`. ' +
      `\`ratePerSecond\` (${MIN_RATE_PER_SECOND} to ${MAX_RATE_PER_SECOND}, default ${DEFAULT_RATE_PER_SECOND}) bounds the provider ` +
      'calls a second. Each recipient follows the send rules (opted out: `skipped` `OPTED_OUT`; deleted: `skipped` ' +
      '`CONTACT_DELETED`), consumes the daily message quota and, for a new conversation, the cold cap; at either the broadcast ' +
      "waits for the next day (`waitingUntil`) instead of dropping anyone. Broadcast sends do not count against API keys' rate " +
      'limits. Each recipient gets at most one provider call, even across worker crashes and retries.',
    body: z.object({
      name: trimmedText(200),
      instanceId: z.string().max(100).optional(),
      audience: atLeastOne(
        z.object({
          tagIds: z.array(z.uuid()).max(MAX_AUDIENCE_TAGS).optional(),
          listId: z.uuid().optional(),
          leadIds: z.array(z.uuid()).max(MAX_AUDIENCE_LEADS).optional(),
        }),
        'expected tagIds, listId and/or leadIds',
      ),
      template: z.object({
        name: MESSAGE_CONTENT_FIELDS.templateName.unwrap(),
        language: MESSAGE_CONTENT_FIELDS.templateLanguage.unwrap(),
        variables: MESSAGE_CONTENT_FIELDS.templateVariables,
        header: TEMPLATE_HEADER.optional().describe(
          "The template's header parameter, as a send's `templateHeader`: `{ text }` (may use the same `{{contact.*}}` placeholders as " +
            '`variables`) or `{ mediaUrl }`.',
        ),
        buttons: TEMPLATE_BUTTONS.optional().describe(
          "The template's URL button variables, as a send's `templateButtons`; `urlVariable` may use the `{{contact.*}}` placeholders.",
        ),
      }),
      scheduledAt: isoInstant.optional(),
      ratePerSecond: z.number().int().min(MIN_RATE_PER_SECOND).max(MAX_RATE_PER_SECOND).optional(),
    }),
    response: single(BroadcastRecord),
    errors: [
      'INSTANCE_NOT_FOUND',
      'NO_INSTANCE',
      'INSTANCE_REQUIRED',
      'INSTANCE_DISCONNECTED',
      'TEMPLATE_UNSUPPORTED',
      'CHANNEL_UNSUPPORTED',
      'TEMPLATE_INVALID',
      'INVALID_URL',
      'NOT_FOUND',
      'BROADCAST_LIMIT_REACHED',
      'ACTIVE_BROADCAST_LIMIT_REACHED',
      'UNAVAILABLE',
    ],
    handler: async (ctx, { body }) => {
      const workspaceId = ctx.state.auth!.workspaceId;
      const headerUrl = body.template.header?.mediaUrl;
      if (headerUrl !== undefined)
        assertSafeUrlSyntax(headerUrl, { allowPrivate: ctx.deps.config.allowPrivateUrls }, { field: 'template.header.mediaUrl' });
      const data = await createPublicBroadcast(ctx.deps.db, workspaceId, {
        ...body,
        scheduledAt: body.scheduledAt?.toISOString(),
      });
      try {
        await withTemporal(ctx, SERVICE, (client) =>
          client.workflow.start(broadcastWorkflow, {
            workflowId: broadcastWorkflowId(workspaceId, data.id),
            taskQueue: ctx.deps.config.taskQueue,
            args: [{ workspaceId, broadcastId: data.id, scheduledAt: data.scheduledAt ?? undefined }],
            workflowIdReusePolicy: WorkflowIdReusePolicy.REJECT_DUPLICATE,
            priority: workspacePriority(workspaceId),
            searchAttributes: { WorkspaceId: [workspaceId], BroadcastId: [data.id] },
          }),
        );
      } catch (err) {
        // Not started: the broadcast would never run, so it is not kept.
        await discardBroadcast(ctx.deps.db, workspaceId, data.id).catch(() => undefined);
        throw err;
      }
      return { data };
    },
  }),
  route({
    method: 'get',
    path: '/api/v1/broadcasts',
    operationId: 'listBroadcasts',
    ...apiKey('Broadcasts', 'broadcasts:read', 'read'),
    summary: 'List broadcasts',
    description: 'Newest first. `status` filters.',
    query: pageQuery().extend({ status: z.enum(PUBLIC_BROADCAST_STATUSES).optional() }),
    response: listOf(BroadcastRecord),
    handler: async (ctx, { query }) => pageOf(listPublicBroadcasts(ctx.deps.db, ctx.state.auth!.workspaceId, query), query),
  }),
  route({
    method: 'get',
    path: '/api/v1/broadcasts/{id}',
    operationId: 'getBroadcast',
    ...apiKey('Broadcasts', 'broadcasts:read', 'read'),
    summary: 'Get a broadcast with its live counts',
    description:
      '`counts` are computed from the recipients (one per contact of the frozen audience), so they add up to `total`; ' +
      '`delivered`, `read` and `failed` follow the provider’s status callbacks.',
    params: IdParams,
    response: single(BroadcastRecord),
    handler: async (ctx, { params }) => ({ data: await getPublicBroadcast(ctx.deps.db, ctx.state.auth!.workspaceId, params.id) }),
  }),
  route({
    method: 'get',
    path: '/api/v1/broadcasts/{id}/recipients',
    operationId: 'listBroadcastRecipients',
    ...apiKey('Broadcasts', 'broadcasts:read', 'read'),
    summary: "List a broadcast's recipients",
    description:
      'In audience order. `code` says why a recipient failed or was skipped (`OPTED_OUT`, `CONTACT_DELETED`, `VARIABLE_EMPTY`, `SEND_FAILED`, ' +
      '`TEMPLATE_INVALID`, ...). Empty until the broadcast starts.',
    params: IdParams,
    query: pageQuery().extend({ status: z.enum(RECIPIENT_STATUSES).optional() }),
    response: listOf(Recipient),
    handler: async (ctx, { params, query }) => pageOf(listRecipients(ctx.deps.db, ctx.state.auth!.workspaceId, params.id, query), query),
  }),
  ...MOVES.map((m) =>
    route({
      method: 'post',
      path: `/api/v1/broadcasts/{id}/${m.move}`,
      operationId: m.operationId,
      ...apiKey('Broadcasts', 'broadcasts:write', 'write'),
      summary: m.summary,
      description: m.description,
      params: IdParams,
      response: single(BroadcastRecord),
      errors: ['INVALID_STATE'],
      handler: async (ctx, { params }) => {
        const workspaceId = ctx.state.auth!.workspaceId;
        const data = await moveBroadcast(ctx.deps.db, workspaceId, params.id, m.move);
        if (m.move !== 'pause') await wake(ctx, workspaceId, params.id);
        return { data };
      },
    }),
  ),
];
