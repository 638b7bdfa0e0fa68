import { z } from 'zod';
import { apiKey, route } from '../route';
import { Deleted, IdParams, Lead, listOf, pageOf, single } from '../schemas';
import {
  addContactsToList,
  createList,
  deleteList,
  getList,
  listContactsOfList,
  listLists,
  MAX_LIST_ADD,
  removeContactFromList,
  renameList,
} from '../../domain/leads';
import { pageQuery, trimmedText } from '../../domain/kernel';

const List = z
  .object({ id: z.string(), name: z.string(), contactCount: z.number(), createdAt: z.string(), updatedAt: z.string() })
  .openapi('List');

const name = trimmedText(120);
const COUNT_RULE =
  '`contactCount` is exact and counts canonical contacts only: a contact that is deleted, merged into another or a group chat ' +
  'stays a member but is neither counted nor listed.';

export const listRoutes = [
  route({
    method: 'get',
    path: '/api/v1/lists',
    operationId: 'listLists',
    ...apiKey('Lists', 'lists:read', 'read'),
    summary: 'List contact lists',
    description: `Newest first. ${COUNT_RULE}`,
    query: pageQuery(),
    response: listOf(List),
    handler: async (ctx, { query }) => pageOf(listLists(ctx.deps.db, ctx.state.auth!.workspaceId, query), query),
  }),
  route({
    method: 'post',
    path: '/api/v1/lists',
    operationId: 'createList',
    ...apiKey('Lists', 'lists:write', 'write'),
    summary: 'Create a contact list',
    description: '`name`: 1 to 120 characters, trimmed. Names need not be unique. Add contacts with `POST /api/v1/lists/{id}/contacts`.',
    status: 201,
    body: z.object({ name }),
    response: single(List),
    handler: async (ctx, { body }) => ({ data: await createList(ctx.deps.db, ctx.state.auth!.workspaceId, body) }),
  }),
  route({
    method: 'get',
    path: '/api/v1/lists/{id}',
    operationId: 'getList',
    ...apiKey('Lists', 'lists:read', 'read'),
    summary: 'Get a contact list',
    description: COUNT_RULE,
    params: IdParams,
    response: single(List),
    handler: async (ctx, { params }) => ({ data: await getList(ctx.deps.db, ctx.state.auth!.workspaceId, params.id) }),
  }),
  route({
    method: 'patch',
    path: '/api/v1/lists/{id}',
    operationId: 'renameList',
    ...apiKey('Lists', 'lists:write', 'write'),
    summary: 'Rename a contact list',
    description: '`name` is required: 1 to 120 characters, trimmed.',
    params: IdParams,
    body: z.object({ name }),
    response: single(List),
    handler: async (ctx, { params, body }) => ({ data: await renameList(ctx.deps.db, ctx.state.auth!.workspaceId, params.id, body) }),
  }),
  route({
    method: 'delete',
    path: '/api/v1/lists/{id}',
    operationId: 'deleteList',
    ...apiKey('Lists', 'lists:write', 'delete'),
    summary: 'Delete a contact list',
    description: 'The contacts themselves are not touched.',
    params: IdParams,
    response: Deleted,
    handler: async (ctx, { params }) => ({ data: await deleteList(ctx.deps.db, ctx.state.auth!.workspaceId, params.id) }),
  }),
  route({
    method: 'get',
    path: '/api/v1/lists/{id}/contacts',
    operationId: 'listListContacts',
    ...apiKey('Lists', 'lists:read', 'read'),
    summary: 'List the contacts of a list',
    description: 'Leads (as `GET /api/v1/leads` returns them), most recently added first; only canonical contacts.',
    params: IdParams,
    query: pageQuery(),
    response: listOf(Lead),
    handler: async (ctx, { params, query }) =>
      pageOf(listContactsOfList(ctx.deps.db, ctx.state.auth!.workspaceId, params.id, query), query),
  }),
  route({
    method: 'post',
    path: '/api/v1/lists/{id}/contacts',
    operationId: 'addListContacts',
    ...apiKey('Lists', 'lists:write', 'write'),
    summary: 'Add contacts to a list',
    description:
      `\`contactIds\`: 1 to ${MAX_LIST_ADD} contact ids. All or nothing: if any id is not a contact of the workspace ` +
      '(unknown, deleted, merged, group chat) the answer is 404 `CONTACT_NOT_FOUND` (the hint names the ids) and nothing is added. ' +
      'A contact already in the list is a no-op. Answers 200 with `added` (memberships created) and the new `contactCount`.',
    params: IdParams,
    body: z.object({ contactIds: z.array(z.string().max(100)).min(1).max(MAX_LIST_ADD) }),
    response: single(z.object({ listId: z.string(), added: z.number(), contactCount: z.number() })),
    errors: ['CONTACT_NOT_FOUND'],
    handler: async (ctx, { params, body }) => ({
      data: await addContactsToList(ctx.deps.db, ctx.state.auth!.workspaceId, params.id, body.contactIds),
    }),
  }),
  route({
    method: 'delete',
    path: '/api/v1/lists/{id}/contacts/{contactId}',
    operationId: 'removeListContact',
    ...apiKey('Lists', 'lists:write', 'delete'),
    summary: 'Remove a contact from a list',
    description:
      '`removed` is false when the contact was not in the list. An unknown list is 404 `NOT_FOUND`; a contact that is not a contact of the workspace is 404 `CONTACT_NOT_FOUND`.',
    params: z.object({ id: z.uuid(), contactId: z.string().max(100) }),
    response: single(z.object({ listId: z.string(), contactId: z.string(), removed: z.boolean() })),
    errors: ['CONTACT_NOT_FOUND'],
    handler: async (ctx, { params }) => ({
      data: await removeContactFromList(ctx.deps.db, ctx.state.auth!.workspaceId, params.id, params.contactId),
    }),
  }),
];
