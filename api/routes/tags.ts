import { z } from 'zod';
import { apiKey, route } from '../route';
import { Deleted, IdParams, listOf, pageOf, single, Tag } from '../schemas';
import { createTag, DEFAULT_TAG_COLOR, deleteTag, getTag, listTags, TAG_COLOR, updateTag } from '../../domain/leads';
import { atLeastOne, pageQuery, trimmedText } from '../../domain/kernel';
import { refuseTagInUse } from '../../domain/broadcasts';

const TagRecord = Tag.extend({ createdAt: z.string() });
const name = trimmedText(100);
const color = z.string().regex(TAG_COLOR, 'expected a #rrggbb colour');

export const tagRoutes = [
  route({
    method: 'get',
    path: '/api/v1/tags',
    operationId: 'listTags',
    ...apiKey('Tags', 'tags:read', 'read'),
    summary: 'List tags',
    description: 'Ordered by name (case-insensitive), then id. `q` matches part of the name, case-insensitively.',
    query: pageQuery().extend({ q: z.string().trim().max(100).optional() }),
    response: listOf(TagRecord),
    handler: async (ctx, { query }) => pageOf(listTags(ctx.deps.db, ctx.state.auth!.workspaceId, query), query),
  }),
  route({
    method: 'post',
    path: '/api/v1/tags',
    operationId: 'createTag',
    ...apiKey('Tags', 'tags:write', 'write'),
    summary: 'Create a tag',
    description:
      `\`name\` (1 to 100 characters, trimmed) is unique in the workspace regardless of case: a taken name is 409 \`CONFLICT\`. ` +
      `\`color\` is \`#rrggbb\` (stored in lower case), default \`${DEFAULT_TAG_COLOR}\`.`,
    status: 201,
    body: z.object({ name, color: color.optional() }),
    response: single(TagRecord),
    errors: ['CONFLICT'],
    handler: async (ctx, { body }) => ({ data: await createTag(ctx.deps.db, ctx.state.auth!.workspaceId, body) }),
  }),
  route({
    method: 'get',
    path: '/api/v1/tags/{id}',
    operationId: 'getTag',
    ...apiKey('Tags', 'tags:read', 'read'),
    summary: 'Get a tag',
    params: IdParams,
    response: single(TagRecord),
    handler: async (ctx, { params }) => ({ data: await getTag(ctx.deps.db, ctx.state.auth!.workspaceId, params.id) }),
  }),
  route({
    method: 'patch',
    path: '/api/v1/tags/{id}',
    operationId: 'updateTag',
    ...apiKey('Tags', 'tags:write', 'write'),
    summary: 'Rename a tag or change its colour',
    description: 'At least one of `name` and `color`. Same rules as on create; contacts keep the tag.',
    params: IdParams,
    body: atLeastOne(z.object({ name: name.optional(), color: color.optional() }), 'expected name and/or color'),
    response: single(TagRecord),
    errors: ['CONFLICT'],
    handler: async (ctx, { params, body }) => ({ data: await updateTag(ctx.deps.db, ctx.state.auth!.workspaceId, params.id, body) }),
  }),
  route({
    method: 'delete',
    path: '/api/v1/tags/{id}',
    operationId: 'deleteTag',
    ...apiKey('Tags', 'tags:write', 'delete'),
    summary: 'Delete a tag',
    description:
      'Fails with 409 `TAG_IN_USE` while a broadcast in progress uses the tag (checked and deleted atomically). ' +
      'The tag disappears from every contact that had it; this is not a per-contact removal, so no ' +
      '`contact.tag_removed` events are emitted (use `DELETE /api/v1/leads/{id}/tags/{tagId}` for that).',
    params: IdParams,
    response: Deleted,
    errors: ['TAG_IN_USE'],
    handler: async (ctx, { params }) => ({ data: await deleteTag(ctx.deps.db, ctx.state.auth!.workspaceId, params.id, refuseTagInUse) }),
  }),
];
