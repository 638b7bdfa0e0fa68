import { z } from 'zod';
import { apiKey, route } from '../route';
import { Deleted, IdParams, Lead, LeadTombstone, listOrSyncOf, pageOf, single, syncPageOf, Tag } from '../schemas';
import {
  addTag,
  getInsight,
  LeadInput,
  leadListQuery,
  listLeads,
  PHONE_INTEGER_SCHEMA,
  PHONE_TEXT_SCHEMA,
  removeTag,
  requireContact,
  serializeLeads,
  softDeleteContact,
  syncLeads,
  updateContact,
  upsertLead,
  upsertLeadChunk,
} from '../../domain/leads';
import { BATCH_CHUNK, BATCH_MAX, syncDescription, syncRead } from '../../domain/platform';
import { answerBatch, batchAnswer, batchBody, BATCH_IDEMPOTENCY_TEXT } from '../batch';
import { atLeastOne, emailAddress, trimmedText } from '../../domain/kernel';
import { matchingDealsOfContact } from '../../domain/sales';
import { joinInstagramContacts } from '../../domain/merge';

const Insight = z
  .object({
    interest: z.string().nullable(),
    products: z.unknown(),
    objections: z.unknown(),
    nextStep: z.string().nullable(),
    qualification: z.unknown(),
    summary: z.string().nullable(),
    source: z
      .object({
        model: z.string().describe('The model named in the request'),
        messageCount: z.number().int().describe('Messages the model read'),
        lastMessageAt: z.string().nullable().describe('The newest of them'),
      })
      .nullable()
      .describe('Where a derived insight came from; null for one a person wrote (the admin PUT).'),
    updatedAt: z.string(),
  })
  .openapi('Insight');

const phoneInput = z
  .union([z.string().max(200), z.number().int().nonnegative()])
  .transform(String)
  .meta({
    anyOf: [PHONE_TEXT_SCHEMA, PHONE_INTEGER_SCHEMA],
    description: 'Brazilian phone: 55, the area code and the number; `+`, spaces, parentheses and dashes are ignored.',
  });
const leadFields = {
  name: z.string().trim().max(200).optional(),
  email: emailAddress().nullable().optional(),
  notes: z.string().max(10_000).optional(),
  optedOut: z
    .boolean()
    .optional()
    .openapi({ description: '`true` records that the contact asked not to be messaged (sends answer 403 OPTED_OUT); `false` clears it.' }),
};
/** The upsert's body: one lead by phone (POST /api/v1/leads, and each item of its batch). */
const LeadUpsert = z
  .object({
    phone: phoneInput.optional(),
    ...leadFields,
    tags: z.array(trimmedText(100)).max(50).optional(),
    instagramId: z
      .string()
      .regex(/^\d{1,32}$/)
      .optional()
      .describe(
        "The person's Instagram-scoped id (a lead's `instagram.id`): a contact first met on Instagram with that id and no phone is merged into this lead, which keeps its phone.",
      ),
  })
  .meta({ required: ['phone'] });

export const leadRoutes = [
  route({
    method: 'get',
    path: '/api/v1/leads',
    operationId: 'listLeads',
    ...apiKey('Leads', 'leads:read', 'read'),
    summary: 'List and search leads',
    description:
      '`q` searches name, phone and e-mail (case-insensitive substring; a phone typed with separators matches its digits). `tag`: ' +
      'tag id or name. `pipelineId`, `stageId` and `status` together describe ONE deal of the lead that satisfies all of them. ' +
      '`createdAfter` and `updatedAfter` are inclusive, `createdBefore` exclusive (ISO 8601; a date-time without a zone is UTC). ' +
      '`sort`: `createdAt` (default), `updatedAt` or `name`; `order`: `desc` (default) or `asc`. Merged, deleted and group contacts ' +
      "never appear, except as tombstones in a sync with `includeDeleted=true` (a tombstone also means the lead's deals and " +
      'conversations left with it).\n\n' +
      syncDescription(', `updatedAfter` (first page) and `includeDeleted`'),
    query: leadListQuery,
    response: listOrSyncOf(Lead, z.union([Lead, LeadTombstone])),
    handler: async (ctx, { query }) => {
      const workspaceId = ctx.state.auth!.workspaceId;
      const read = syncRead(ctx.query, query, Object.keys(leadListQuery.shape), ['includeDeleted']);
      if (read) return syncPageOf(syncLeads(ctx.deps.db, workspaceId, read, { includeDeleted: query.includeDeleted === true }));
      return pageOf(listLeads(ctx.deps.db, workspaceId, query, matchingDealsOfContact), query);
    },
  }),
  route({
    method: 'post',
    path: '/api/v1/leads',
    operationId: 'upsertLead',
    ...apiKey('Leads', 'leads:write', 'write'),
    status: 201,
    alsoStatus: [200],
    summary: 'Create or update a lead by phone (upsert)',
    description:
      'The phone is canonicalised like messaging: `+`, spaces, parentheses and dashes are ignored, `55` and the area code are ' +
      'required, and a mobile with and without its ninth digit is the same lead. A new phone answers 201 and records ' +
      '`lead.created`; a known one answers 200 with the lead updated (only the fields sent; `tags` are added, never removed, and ' +
      'unknown tag names are created, each recording `contact.tag_added` with source `api`). Updating fires the `contact_updated` ' +
      'trigger with the changed fields, but not the `contact.updated` webhook, which is for edits made by a person in the CRM.',
    body: LeadUpsert,
    response: single(Lead),
    errors: ['PHONE_REQUIRED', 'INVALID_PHONE', 'NOT_FOUND'],
    handler: async (ctx, { body }) => {
      const workspaceId = ctx.state.auth!.workspaceId;
      const { instagramId, ...input } = body;
      const { created, lead } = await upsertLead(ctx.deps.db, workspaceId, input, { origin: 'api' });
      if (!created) ctx.status = 200;
      if (instagramId && (await joinInstagramContacts(ctx.deps.db, workspaceId, lead.id, instagramId))) {
        const row = await requireContact(ctx.deps.db, workspaceId, lead.id);
        return { data: (await serializeLeads(ctx.deps.db, [row as never]))[0] };
      }
      return { data: lead };
    },
  }),
  route({
    method: 'post',
    path: '/api/v1/leads/batch',
    operationId: 'upsertLeadBatch',
    ...apiKey('Leads', 'leads:write', 'write'),
    summary: 'Create or update up to 100 leads by phone (batch upsert)',
    description:
      `\`leads\`: 1 to ${BATCH_MAX} items, each exactly the body of \`POST /api/v1/leads\` with the same rules and events. The answer ` +
      'is 200 with one entry per item, in request order: `index`, the `status` the single upsert would answer (201 created, 200 ' +
      'updated) with its `data`, or its 4xx with `error: { code, message, hint? }` (an invalid item is its own 400 `VALIDATION` ' +
      'naming `body.leads.<index>...`, and never fails the others). A phone given twice (with or without its ninth digit) is ' +
      `one lead: the first item creates it, the next update it. Items run in transactions of at most ${BATCH_CHUNK}, each item ` +
      'atomic: the batch is not, and the items of a committed transaction stay when a later one fails. ' +
      BATCH_IDEMPOTENCY_TEXT,
    body: batchBody('leads', LeadUpsert),
    batch: { field: 'leads' },
    idempotent: 'batch',
    response: batchAnswer('LeadBatchItem', Lead, ['VALIDATION', 'PHONE_REQUIRED', 'INVALID_PHONE', 'NOT_FOUND', 'CONFLICT']),
    errors: ['IN_PROGRESS', 'IDEMPOTENCY_KEY_REUSED'],
    handler: async (ctx, { items }) =>
      answerBatch<LeadInput>(ctx, 'upsertLeadBatch', items, (trx, chunk) =>
        upsertLeadChunk(trx, ctx.state.auth!.workspaceId, chunk, { origin: 'api' }),
      ),
  }),
  route({
    method: 'get',
    path: '/api/v1/leads/{id}',
    operationId: 'getLead',
    ...apiKey('Leads', 'leads:read', 'read'),
    summary: 'Get a lead with its tags',
    params: IdParams,
    response: single(Lead),
    errors: ['CONTACT_NOT_FOUND'],
    handler: async (ctx, { params }) => {
      const row = await requireContact(ctx.deps.db, ctx.state.auth!.workspaceId, params.id);
      return { data: (await serializeLeads(ctx.deps.db, [row as never]))[0] };
    },
  }),
  route({
    method: 'patch',
    path: '/api/v1/leads/{id}',
    operationId: 'updateLead',
    ...apiKey('Leads', 'leads:write', 'write'),
    summary: "Change a lead's name, e-mail, phone, notes or opt-out",
    description:
      'At least one field. A phone already used by another lead is 409 CONFLICT. Fires the `contact_updated` trigger with the ' +
      'changed fields (nothing when nothing changed); the `contact.updated` webhook is reserved to edits in the CRM panel.',
    params: IdParams,
    body: atLeastOne(z.object({ phone: phoneInput.optional(), ...leadFields }), 'send at least one of name, email, phone, notes, optedOut'),
    response: single(Lead),
    errors: ['CONTACT_NOT_FOUND', 'INVALID_PHONE', 'PHONE_REQUIRED', 'CONFLICT'],
    handler: async (ctx, { params, body }) => ({
      data: await updateContact(ctx.deps.db, ctx.state.auth!.workspaceId, params.id, body, { origin: 'api' }),
    }),
  }),
  route({
    method: 'delete',
    path: '/api/v1/leads/{id}',
    operationId: 'deleteLead',
    ...apiKey('Leads', 'leads:write', 'delete'),
    summary: 'Delete a lead (soft delete)',
    description: 'The lead disappears from every list, lookup, filter and count, its deals and conversations with it; nothing is erased.',
    params: IdParams,
    response: Deleted,
    errors: ['CONTACT_NOT_FOUND'],
    handler: async (ctx, { params }) => {
      await softDeleteContact(ctx.deps.db, ctx.state.auth!.workspaceId, params.id);
      return { data: { id: params.id, deleted: true } };
    },
  }),
  route({
    method: 'post',
    path: '/api/v1/leads/{id}/tags',
    operationId: 'addLeadTag',
    ...apiKey('Leads', 'tags:write', 'write'),
    summary: 'Apply a tag to a lead, by tag id or name',
    description:
      'An unknown name creates the tag; an unknown id is 404 NOT_FOUND. `added` is false when the lead already had the tag. ' +
      'Records `contact.tag_added` with source `api` and fires `contact_updated` (changedFields `tags`) only when added.',
    params: IdParams,
    body: z.object({ tag: trimmedText(100) }),
    response: single(z.object({ contactId: z.string(), tag: Tag, added: z.boolean() })),
    errors: ['CONTACT_NOT_FOUND', 'NOT_FOUND'],
    handler: async (ctx, { params, body }) => ({
      data: await addTag(ctx.deps.db, ctx.state.auth!.workspaceId, params.id, body.tag, { origin: 'api' }),
    }),
  }),
  route({
    method: 'delete',
    path: '/api/v1/leads/{id}/tags/{tagId}',
    operationId: 'removeLeadTag',
    ...apiKey('Leads', 'tags:write', 'delete'),
    summary: 'Remove a tag from a lead',
    description: '`removed` is false when the tag was not applied. Records `contact.tag_removed` with source `api` only when removed.',
    params: z.object({ id: z.uuid(), tagId: z.uuid() }),
    response: single(z.object({ contactId: z.string(), tagId: z.string(), removed: z.boolean() })),
    errors: ['CONTACT_NOT_FOUND', 'NOT_FOUND'],
    handler: async (ctx, { params }) => ({
      data: await removeTag(ctx.deps.db, ctx.state.auth!.workspaceId, params.id, params.tagId, { origin: 'api' }),
    }),
  }),
  route({
    method: 'get',
    path: '/api/v1/leads/{id}/insight',
    operationId: 'getLeadInsight',
    ...apiKey('Leads', 'insights:read', 'read'),
    summary: "A lead's AI-derived sales insight (null data when none exists yet)",
    params: IdParams,
    response: single(Insight.nullable()),
    errors: ['CONTACT_NOT_FOUND'],
    handler: async (ctx, { params }) => ({ data: await getInsight(ctx.deps.db, ctx.state.auth!.workspaceId, params.id) }),
  }),
];
