import type { Context } from 'koa';
import { z } from 'zod';
import { apiKey, route } from '../route';
import { IdParams, listOf, listOrSyncOf, pageOf, single } from '../schemas';
import type { Actor } from '../../domain/access';
import {
  createDeal,
  customValuesSchema,
  DEAL_STATUSES,
  DealBatchInput,
  dealChunk,
  dealValue,
  findDeal,
  listDealActivities,
  listDeals,
  serializeDeal,
  syncDeals,
  updateDeal,
} from '../../domain/sales';
import { BATCH_CHUNK, BATCH_MAX, syncDescription, syncParams, syncRead, updatedAfterParam } from '../../domain/platform';
import { pageQuery, trimmedText } from '../../domain/kernel';
import { answerBatch, batchAnswer, batchBody, BATCH_IDEMPOTENCY_TEXT } from '../batch';

const Deal = z
  .object({
    id: z.string(),
    name: z.string(),
    status: z.enum(DEAL_STATUSES),
    lostReason: z.string().nullable(),
    closedAt: z.string().nullable(),
    value: z.number().nullable(),
    pipelineId: z.string(),
    stageId: z.string(),
    contactId: z.string(),
    productId: z.string().nullable(),
    source: z.string(),
    assignedTo: z.object({ id: z.string(), name: z.string() }).nullable(),
    customValues: z.record(z.string(), z.unknown()),
    createdAt: z.string(),
    updatedAt: z.string(),
  })
  .openapi('Deal');

const Activity = z
  .object({
    id: z.string(),
    type: z.string().openapi({ example: 'stage_changed' }),
    actorName: z.string(),
    meta: z
      .object({ outcome: z.unknown(), attemptNo: z.unknown(), from: z.unknown(), to: z.unknown() })
      .partial()
      .nullable()
      .openapi({ example: { from: 'Qualified', to: 'Proposal' } }),
    createdAt: z.string(),
  })
  .openapi('Activity');

const text = trimmedText;

/** POST /api/v1/deals's body, and a deal batch's create item. */
const DealCreate = z.object({
  contactId: z.string().min(1),
  pipeline: text(200),
  stage: text(200).optional(),
  name: text(200).optional(),
  value: dealValue.nullable().optional(),
  product: text(200).optional(),
  source: text(64).optional(),
  assignedTo: text(200).optional(),
  customValues: customValuesSchema.optional(),
});

const dealChanges = {
  name: text(200).optional(),
  value: dealValue.nullable().optional(),
  stageId: z.string().min(1).max(100).optional(),
  assignedTo: z.string().min(1).max(100).nullable().optional(),
  status: z.enum(DEAL_STATUSES).optional(),
  lostReason: text(1000).optional(),
  customValues: customValuesSchema.optional(),
};

/** `lostReason` is required with `status: "lost"`: checked, and stated in the document (if/then). */
function lostNeedsReason<T extends z.ZodObject<typeof dealChanges>>(schema: T) {
  return schema
    .superRefine((body, zctx) => {
      if (body.status === 'lost' && body.lostReason === undefined) {
        zctx.addIssue({ code: 'custom', path: ['lostReason'], message: 'required when status is "lost"' });
      }
    })
    .meta({
      if: { properties: { status: { const: 'lost' } }, required: ['status'] },
      then: { properties: { lostReason: {} }, required: ['lostReason'] },
    });
}

/** PATCH /api/v1/deals/{id}'s body, and (with the deal's `id`) a deal batch's update item. */
const DealChanges = lostNeedsReason(z.object(dealChanges));
const DealUpdateItem = lostNeedsReason(
  z.object({
    id: z.string().min(1).max(100).openapi({ description: 'The deal to change; without `id` the item creates a deal.' }),
    ...dealChanges,
  }),
);

const DealQuery = pageQuery().extend({
  pipelineId: z.uuid().optional(),
  stageId: z.uuid().optional(),
  status: z.enum(DEAL_STATUSES).optional(),
  contactId: z.uuid().optional(),
  assignedTo: z.uuid().optional(),
  updatedAfter: updatedAfterParam,
  ...syncParams('deals'),
});

/** What the API key does is recorded under its name (activities expose actors by name only). */
const apiActor = (ctx: Context): Actor => ({ memberId: null, name: ctx.state.auth!.keyName });

export const dealRoutes = [
  route({
    method: 'post',
    path: '/api/v1/deals',
    operationId: 'createDeal',
    ...apiKey('Deals', 'deals:write', 'write'),
    status: 201,
    summary: 'Create a deal (card) for an existing contact',
    description:
      '`pipeline`: id or case-insensitive name; `stage`: id or name, default the first stage. `product`: id or name, an unknown ' +
      'name is created (an unknown id is 404 NOT_FOUND). `assignedTo`: member id or case-insensitive name. `customValues` keeps only keys defined on the pipeline ' +
      '(or globally) and drops the others silently; values are strings, numbers, booleans or arrays of those. Records `card.created` ' +
      'and the `card_created` trigger.',
    body: DealCreate,
    response: single(Deal),
    errors: [
      'CONTACT_NOT_FOUND',
      'PIPELINE_NOT_FOUND',
      'STAGE_NOT_FOUND',
      'PIPELINE_EMPTY',
      'ASSIGNEE_NOT_FOUND',
      'NOT_FOUND',
      'DEAL_LIMIT_REACHED',
    ],
    handler: async (ctx, { body }) => ({ data: await createDeal(ctx.deps.db, ctx.state.auth!.workspaceId, body) }),
  }),
  route({
    method: 'post',
    path: '/api/v1/deals/batch',
    operationId: 'writeDealBatch',
    ...apiKey('Deals', 'deals:write', 'write'),
    summary: 'Create or change up to 100 deals (batch)',
    description:
      `\`deals\`: 1 to ${BATCH_MAX} items. An item without \`id\` creates a deal (the body of \`POST /api/v1/deals\`); an item with ` +
      '`id` changes that deal (the body of `PATCH /api/v1/deals/{id}`), with the same rules and events as the single calls. The ' +
      'answer is 200 with one entry per item, in request order: `index`, the `status` the single call would answer (201 created, ' +
      '200 changed) with its `data`, or its 4xx with `error: { code, message, hint? }` (an invalid item is its own 400 ' +
      "`VALIDATION` naming `body.deals.<index>...`, and never fails the others). The plan's deal quota is taken per created deal: " +
      `the creates past it answer 402 \`DEAL_LIMIT_REACHED\`. Items run in transactions of at most ${BATCH_CHUNK}, each item ` +
      'atomic: the batch is not, and the items of a committed transaction stay when a later one fails. ' +
      BATCH_IDEMPOTENCY_TEXT,
    body: batchBody('deals', z.union([DealCreate, DealUpdateItem])),
    batch: {
      field: 'deals',
      schemaFor: (item) => (item !== null && typeof item === 'object' && 'id' in item ? DealUpdateItem : DealCreate),
    },
    idempotent: 'batch',
    response: batchAnswer('DealBatchItem', Deal, [
      'VALIDATION',
      'ASSIGNEE_NOT_FOUND',
      'DEAL_LIMIT_REACHED',
      'NOT_FOUND',
      'CONTACT_NOT_FOUND',
      'PIPELINE_NOT_FOUND',
      'STAGE_NOT_FOUND',
      'CONFLICT',
      'PIPELINE_EMPTY',
    ]),
    errors: ['IN_PROGRESS', 'IDEMPOTENCY_KEY_REUSED'],
    handler: async (ctx, { items }) =>
      answerBatch<DealBatchInput>(ctx, 'writeDealBatch', items, (trx, chunk) =>
        dealChunk(trx, ctx.state.auth!.workspaceId, chunk, apiActor(ctx)),
      ),
  }),
  route({
    method: 'get',
    path: '/api/v1/deals',
    operationId: 'listDeals',
    ...apiKey('Deals', 'deals:read', 'read'),
    summary: 'List deals, newest first',
    description:
      'Filters combine (AND). A contact, pipeline or member of another workspace gives an empty list. Deals of a deleted or ' +
      'merged lead never appear.\n\n' +
      syncDescription(' and `updatedAfter` (first page)'),
    query: DealQuery,
    response: listOrSyncOf(Deal),
    handler: async (ctx, { query }) => {
      const workspaceId = ctx.state.auth!.workspaceId;
      const read = syncRead(ctx.query, query, Object.keys(DealQuery.shape));
      if (read) return syncDeals(ctx.deps.db, workspaceId, read);
      return pageOf(listDeals(ctx.deps.db, workspaceId, query), query);
    },
  }),
  route({
    method: 'get',
    path: '/api/v1/deals/{id}',
    operationId: 'getDeal',
    ...apiKey('Deals', 'deals:read', 'read'),
    summary: 'Get a deal',
    params: IdParams,
    response: single(Deal),
    errors: ['NOT_FOUND'],
    handler: async (ctx, { params }) => {
      const workspaceId = ctx.state.auth!.workspaceId;
      const row = await findDeal(ctx.deps.db, workspaceId, params.id);
      return { data: serializeDeal(row, row.assignee_name) };
    },
  }),
  route({
    method: 'patch',
    path: '/api/v1/deals/{id}',
    operationId: 'updateDeal',
    ...apiKey('Deals', 'deals:write', 'write'),
    summary: 'Change a deal: rename, value, stage move, assignee, status, custom values',
    description:
      '`status`: any → `won` sets `closedAt` and records `card.won` + `deal_won`; any → `lost` needs `lostReason`, sets `closedAt` ' +
      'and records `card.lost` + `deal_lost`; `won`/`lost` → `open` clears `closedAt` and `lostReason`. `stageId` moves the deal ' +
      '(a stage of another pipeline of the workspace moves it to that pipeline), records a `stage_changed` activity, `card.moved` ' +
      'and `stage_changed`. A request that repeats the current stage or status changes nothing and records nothing, so identical ' +
      'concurrent requests fire each event once. `customValues` are merged into the current ones; `null` removes a key.',
    params: IdParams,
    body: DealChanges,
    response: single(Deal),
    errors: ['NOT_FOUND', 'STAGE_NOT_FOUND', 'ASSIGNEE_NOT_FOUND'],
    handler: async (ctx, { params, body }) => ({
      data: await updateDeal(ctx.deps.db, ctx.state.auth!.workspaceId, params.id, body, apiActor(ctx)),
    }),
  }),
  route({
    method: 'get',
    path: '/api/v1/deals/{id}/activities',
    operationId: 'listDealActivities',
    ...apiKey('Deals', 'activities:read', 'read'),
    summary: "A deal's timeline, newest first",
    description: '`meta` keeps only `outcome`, `attemptNo`, `from` and `to` (null when none is present); the actor is given by name.',
    params: IdParams,
    query: pageQuery(),
    response: listOf(Activity),
    errors: ['NOT_FOUND'],
    handler: async (ctx, { params, query }) =>
      pageOf(listDealActivities(ctx.deps.db, ctx.state.auth!.workspaceId, params.id, query), query),
  }),
];
