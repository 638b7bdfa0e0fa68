import type { Context } from 'koa';
import { z } from 'zod';
import { apiKey, route } from '../route';
import { runSend } from '../send';
import { MESSAGE_TYPES, type MessageContent } from '../../types/messaging';
import { MAX_PHONE_INPUT, PHONE_PATTERN, requirePhone } from '../../domain/leads';
import { ApiError, isUuid, pageQuery } from '../../domain/kernel';
import {
  listMessages,
  MESSAGE_CONTENT_FIELDS,
  MESSAGE_DIRECTIONS,
  MESSAGE_SYNC_FILTERS,
  messageContent,
  messageRequirements,
  missingFields,
  panelReply,
  syncMessages,
} from '../../domain/messaging';
import { requireMember } from '../../domain/access';
import { assertSafeUrlSyntax, syncDescription, syncParams, syncRead, updatedAfterParam } from '../../domain/platform';
import { IdParams, listOrSyncOf, single } from '../schemas';
import { Message } from './conversations';

/** The message fields of both send endpoints (the rule of each type: domain/messaging/sending.ts). */
const content = {
  type: z.enum(MESSAGE_TYPES).default('text'),
  ...MESSAGE_CONTENT_FIELDS,
};

const contentSchema = z.object(content);
type ContentInput = z.infer<typeof contentSchema>;

/** What each type needs: a missing field is 400 VALIDATION naming it. */
function requireForType(body: ContentInput, zctx: z.RefinementCtx): void {
  for (const field of missingFields(body))
    zctx.addIssue({ code: 'custom', path: [field], message: `required when type is "${body.type}"` });
}

/**
 * The message as it travels on. A media URL passes the anti-SSRF syntax check first (400
 * INVALID_URL) even when the type does not carry it (a text drops it): the document states the
 * field's pattern for every type, so a request breaking it is refused, never quietly accepted.
 */
function messageOf(ctx: Context, body: ContentInput): MessageContent {
  const policy = { allowPrivate: ctx.deps.config.allowPrivateUrls };
  if (body.mediaUrl !== undefined) assertSafeUrlSyntax(body.mediaUrl, policy, { field: 'mediaUrl' });
  if (body.templateHeader?.mediaUrl !== undefined)
    assertSafeUrlSyntax(body.templateHeader.mediaUrl, policy, { field: 'templateHeader.mediaUrl' });
  return messageContent(body);
}

const SendResult = z
  .object({
    id: z.string(),
    status: z.literal('sent'),
    type: z.enum(MESSAGE_TYPES),
    conversationId: z.string(),
    contactId: z.string(),
    created: z.object({ contact: z.boolean(), conversation: z.boolean() }),
  })
  .openapi('SendResult');

const SEND_ERRORS = [
  'OPTED_OUT',
  'INSTANCE_DISCONNECTED',
  'CHANNEL_UNSUPPORTED',
  'WINDOW_CLOSED',
  'TEMPLATE_INVALID',
  'TEMPLATE_UNSUPPORTED',
  'MEDIA_TOO_LARGE',
  'INVALID_URL',
  'IN_PROGRESS',
  'SEND_OUTCOME_UNKNOWN',
  'IDEMPOTENCY_KEY_REUSED',
  'MESSAGE_LIMIT_REACHED',
  'SEND_FAILED',
  'UNAVAILABLE',
] as const;

const IDEMPOTENCY =
  'Header `Idempotency-Key` (optional, 1..255 visible characters, scoped to the workspace; without one the send gets a key, ' +
  'returned in the response header): while a send with the key runs, the same key gets 409 IN_PROGRESS; after a success, the ' +
  'same key within 10 minutes gets the same body with status 200 and `Idempotent-Replayed: true`; a failed send (502 ' +
  'SEND_FAILED, or a refusal) frees the key. A key names one request: reused on another body or the other send endpoint it is ' +
  '422 IDEMPOTENCY_KEY_REUSED. A send the provider may have accepted without our knowing (no answer in time) is 409 ' +
  'SEND_OUTCOME_UNKNOWN, never sent twice, and its key keeps that answer: check the conversation before sending again.';

/** The list and sync of every message (docs/messaging.md, "Reading every message"). */
const ListedMessage = z
  .object({
    ...Message.shape,
    conversationId: z.string(),
    updatedAt: z.string().describe('Moves with the status, the media and a move to another conversation (a lead merge)'),
  })
  .openapi('ListedMessage');

const MessageListQuery = pageQuery().extend({
  conversationId: z.uuid().optional().meta({
    description: "Only this conversation's messages (another workspace's conversation, or one not listed, gives an empty list)",
  }),
  direction: z.enum(MESSAGE_DIRECTIONS).optional().meta({ description: '`in` received, `out` sent' }),
  updatedAfter: updatedAfterParam,
  ...syncParams('messages'),
});

export const messageRoutes = [
  route({
    method: 'post',
    path: '/api/v1/messages',
    operationId: 'sendMessage',
    ...apiKey('Messages', 'conversations:send', 'coldSend'),
    keyProfile: 'coldSend',
    status: 201,
    idempotent: 'send',
    summary: 'Send a message to a phone number, creating the contact and conversation when new',
    description:
      'Runs as a durable Temporal workflow (a saga): instance, contact and conversation found or created, opt-out, the ' +
      '24-hour window (a Cloud API number that has not written in 24 hours only accepts an approved template), the daily cap of ' +
      'new numbers (new conversations only) and the daily message quota, then the provider call, then the message is recorded ' +
      'with status `sent`. Any failure after the contact or conversation was created removes them and returns the quota and ' +
      `the daily slot. ${IDEMPOTENCY} The phone accepts \`+\`, spaces, parentheses and dashes; a mobile with and without its ` +
      'ninth digit is one contact. `created` tells whether this request created the contact and the conversation.',
    body: z
      .object({
        phone: z.string().max(MAX_PHONE_INPUT).optional().meta({ pattern: PHONE_PATTERN }),
        instanceId: z.string().max(100).optional(),
        ...content,
      })
      .superRefine(requireForType)
      .meta({ required: ['phone'], ...messageRequirements('type') }),
    response: single(SendResult),
    errors: [
      'PHONE_REQUIRED',
      'INVALID_PHONE',
      'INSTANCE_NOT_FOUND',
      'INSTANCE_REQUIRED',
      'NO_INSTANCE',
      'COLD_LIMIT_REACHED',
      ...SEND_ERRORS,
    ],
    handler: async (ctx, { body }) => {
      const phone = requirePhone(body.phone);
      if (body.instanceId !== undefined && !isUuid(body.instanceId))
        throw new ApiError('INSTANCE_NOT_FOUND', 'Instance not found in this workspace');
      const workspaceId = ctx.state.auth!.workspaceId;
      const message = messageOf(ctx, body);
      const data = await runSend(
        ctx,
        { workspaceId, phone: body.phone, instanceId: body.instanceId, message },
        { kind: 'cold', phone: phone.e164 },
      );
      return { data };
    },
  }),
  route({
    method: 'post',
    path: '/api/v1/conversations/{id}/messages',
    operationId: 'sendConversationMessage',
    ...apiKey('Messages', 'conversations:send', 'send'),
    keyProfile: 'send',
    status: 201,
    idempotent: 'send',
    summary: 'Send a message in an existing conversation',
    description: `The same rules, quota and window as \`POST /api/v1/messages\`, without find-or-create. ${IDEMPOTENCY}`,
    params: IdParams,
    body: contentSchema.superRefine(requireForType).meta(messageRequirements('type')),
    response: single(SendResult.omit({ created: true })),
    errors: ['NOT_FOUND', ...SEND_ERRORS],
    handler: async (ctx, { params, body }) => {
      const workspaceId = ctx.state.auth!.workspaceId;
      const data = await runSend(ctx, { workspaceId, conversationId: params.id, message: messageOf(ctx, body) }, { kind: 'conversation' });
      return { data };
    },
  }),
  route({
    method: 'post',
    path: '/admin/v1/workspaces/{id}/conversations/{conversationId}/messages',
    operationId: 'sendPanelReply',
    tag: 'Admin',
    auth: 'admin',
    ipProfile: 'admin',
    status: 201,
    idempotent: 'send',
    summary: "A person's reply from the panel (on Instagram, a human agent's reply up to 7 days)",
    description:
      'A member of the workspace (`memberId`; not a member: 400 `VALIDATION`) replies with a text in a conversation, with the rules of ' +
      '`POST /api/v1/conversations/{id}/messages`, except on Instagram past the 24-hour window: up to 7 days after the ' +
      "customer's last message the reply is sent with `messaging_type: MESSAGE_TAG`, `tag: HUMAN_AGENT`; after that 422 " +
      `\`WINDOW_CLOSED\`. ${IDEMPOTENCY}`,
    params: z.object({ id: z.uuid(), conversationId: z.uuid() }),
    body: z.object({ memberId: z.uuid(), text: z.string().min(1).max(4096) }),
    response: single(SendResult.omit({ created: true })),
    errors: ['NOT_FOUND', ...SEND_ERRORS],
    handler: async (ctx, { params, body }) => {
      // The conversation first: an unknown workspace or conversation is 404 whoever the member.
      const message = await panelReply(ctx.deps.db, params.id, params.conversationId, body.text);
      await requireMember(ctx.deps.db, params.id, body.memberId);
      const data = await runSend(ctx, { workspaceId: params.id, conversationId: params.conversationId, message }, { kind: 'conversation' });
      return { data };
    },
  }),
  route({
    method: 'get',
    path: '/api/v1/messages',
    operationId: 'listMessages',
    ...apiKey('Conversations', 'conversations:read', 'read'),
    summary: 'List the messages of every conversation, newest first, or sync them',
    description:
      "Every message of the workspace's conversations, as a conversation shows them plus `conversationId` and `updatedAt`: a " +
      'warehouse mirrors every conversation, statuses and media included, without reading each one. Offset pages are ordered ' +
      'by `timestamp` descending, then `id` descending. Filters: `conversationId`, `direction` (`in`, `out`), `updatedAfter`. ' +
      'Messages of group chats, of merged or deleted contacts and of archived connections never appear, like their conversations. ' +
      'A status move, the media stored or unavailable, and a move to another conversation (a lead merge) move `updatedAt`.\n\n' +
      syncDescription(', `updatedAfter` (first page)', MESSAGE_SYNC_FILTERS) +
      " Messages leave with their conversation, without a tombstone of their own (a deleted lead's tombstone says so).",
    query: MessageListQuery,
    response: listOrSyncOf(ListedMessage),
    handler: async (ctx, { query }) => {
      const workspaceId = ctx.state.auth!.workspaceId;
      const read = syncRead(ctx.query, query, Object.keys(MessageListQuery.shape), [], MESSAGE_SYNC_FILTERS);
      const { conversationId, direction, updatedAfter, limit, offset } = query;
      if (read) return syncMessages(ctx.deps.db, workspaceId, { conversationId, direction }, read);
      return listMessages(ctx.deps.db, workspaceId, { conversationId, direction, updatedAfter }, { limit, offset });
    },
  }),
];
