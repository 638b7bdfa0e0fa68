import { z } from 'zod';
import { AnyRoute, apiKey, route } from '../route';
import { IdParams, listOrSyncOf, Pagination, single } from '../schemas';
import {
  CONVERSATION_STATUSES,
  getConversationWithMessages,
  listConversations,
  MESSAGE_STATUSES,
  syncConversations,
  updateConversationStatus,
} from '../../domain/messaging';
import { pageQuery } from '../../domain/kernel';
import { syncDescription, syncParams, syncRead, updatedAfterParam } from '../../domain/platform';

const MessageMedia = z
  .object({
    status: z
      .enum(['pending', 'stored', 'unavailable'])
      .describe('`pending` while being fetched, `stored` once downloadable, `unavailable` when it could not be fetched (see `reason`)'),
    mimeType: z.string().nullable(),
    size: z.number().int().nullable().describe('Bytes; null until stored'),
    fileName: z.string().nullable(),
    sha256: z.string().nullable().describe('Hex SHA-256 of the stored bytes; null until stored'),
    reason: z.string().nullable().describe('Why the file is unavailable; null otherwise'),
  })
  .openapi('MessageMedia');

export const Message = z
  .object({
    id: z.string(),
    direction: z.enum(['in', 'out']).describe('`in` received, `out` sent'),
    type: z.string().describe('For example `text`, `image`'),
    body: z.string(),
    timestamp: z.string(),
    status: z.enum(MESSAGE_STATUSES),
    mediaUrl: z
      .string()
      .optional()
      .describe('Present only when the media has an external https URL; internal storage references are never exposed'),
    media: MessageMedia.nullable().describe(
      'The file of an inbound image, audio, video, document or sticker, fetched from the provider and stored ' +
        '(download: `GET /api/v1/messages/{id}/media`); null for a message without one.',
    ),
  })
  .openapi('Message');

const conversationFields = {
  id: z.string(),
  contact: z.object({ id: z.string(), name: z.string(), phone: z.string().nullable() }),
  instanceId: z.string(),
  channel: z.enum(['whatsapp', 'instagram']),
  status: z.enum(CONVERSATION_STATUSES),
  lastMessageAt: z.string().nullable(),
  createdAt: z.string(),
  updatedAt: z.string(),
};
const Conversation = z.object(conversationFields).openapi('Conversation');
const ConversationWithMessages = z.object({ ...conversationFields, messages: z.array(Message) }).openapi('ConversationWithMessages');

const EXCLUSIONS =
  'Group chats, merged or deleted contacts and archived connections never appear: their conversations are ' +
  'neither listed nor counted, and reading or changing one answers 404 `NOT_FOUND`.';

const ConversationQuery = pageQuery().extend({
  instanceId: z.string().max(64).optional(),
  status: z.enum(CONVERSATION_STATUSES).optional(),
  contactId: z.string().max(64).optional(),
  updatedAfter: updatedAfterParam,
  ...syncParams('conversations'),
});

export const conversationRoutes: AnyRoute[] = [
  route({
    method: 'get',
    path: '/api/v1/conversations',
    operationId: 'listConversations',
    ...apiKey('Conversations', 'conversations:read', 'read'),
    summary: 'List conversations, most recent activity first',
    description:
      'Ordered by `lastMessageAt` descending (conversations without messages last). Filters: `instanceId`, `status`, ' +
      '`contactId` (an id of another workspace, or one that names nothing, gives an empty list), `updatedAfter`. ' +
      EXCLUSIONS +
      " A new message, a status change, or a change of the contact's name or phone moves `updatedAt`.\n\n" +
      syncDescription(' and `updatedAfter` (first page)') +
      " A deleted lead's conversations leave without a tombstone of their own (the lead's says so); so do those of a " +
      'connection being archived.',
    query: ConversationQuery,
    response: listOrSyncOf(Conversation),
    handler: async (ctx, { query }) => {
      const workspaceId = ctx.state.auth!.workspaceId;
      const read = syncRead(ctx.query, query, Object.keys(ConversationQuery.shape));
      if (read) return syncConversations(ctx.deps.db, workspaceId, read);
      const { limit, offset, instanceId, status, contactId, updatedAfter } = query;
      return listConversations(ctx.deps.db, workspaceId, { instanceId, status, contactId, updatedAfter }, { limit, offset });
    },
  }),
  route({
    method: 'get',
    path: '/api/v1/conversations/{id}',
    operationId: 'getConversation',
    ...apiKey('Conversations', 'conversations:read', 'read'),
    summary: 'Get a conversation with its messages, newest first',
    description: 'Message paging: `limit` 1 to 100 (default 100) and `offset`; `pagination` describes the messages. ' + EXCLUSIONS,
    params: IdParams,
    query: pageQuery({ defaultLimit: 100, maxLimit: 100 }),
    response: z.object({ data: ConversationWithMessages, pagination: Pagination }),
    errors: ['NOT_FOUND'],
    handler: async (ctx, { params, query }) => getConversationWithMessages(ctx.deps.db, ctx.state.auth!.workspaceId, params.id, query),
  }),
  route({
    method: 'patch',
    path: '/api/v1/conversations/{id}',
    operationId: 'updateConversation',
    ...apiKey('Conversations', 'conversations:write', 'write'),
    summary: 'Change the status of a conversation',
    description: '`status` is one of `open`, `waiting`, `snoozed`, `closed`. ' + EXCLUSIONS,
    params: IdParams,
    body: z.object({ status: z.enum(CONVERSATION_STATUSES) }),
    response: single(Conversation),
    errors: ['NOT_FOUND'],
    handler: async (ctx, { params, body }) => ({
      data: await updateConversationStatus(ctx.deps.db, ctx.state.auth!.workspaceId, params.id, body.status),
    }),
  }),
];
