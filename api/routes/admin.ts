import { z } from 'zod';
import { ApiError, notFound } from '../../domain/errors';
import { AnyObject, AnyRoute, route, RouteDef } from '../route';
import { generateApiKey } from '../../domain/api-keys';
import { createPipeline, CUSTOM_FIELD_TYPES, listPipelines } from '../../domain/pipelines';
import { ALL_SCOPES } from '../../domain/scopes';
import { DEFAULT_KEY_LIMIT } from '../../domain/rate-limit';
import { iso } from '../../domain/time';
import { serializeInsight } from '../../domain/insights';
import { createWorkspace, planColumns, planSchema, serializeWorkspace } from '../../domain/workspaces';
import { instanceConfigSchema, serializeInstanceForAdmin } from '../../domain/instances';
import type { Db } from '../../domain/db';
import { panelCreateContact, panelUpdateContact } from '../../domain/contacts';

/**
 * The operator API of CONTRACT.md (what the CRM panel would do), behind ADMIN_TOKEN.
 * Every route is scoped to the workspace in its path.
 */
/** Every admin endpoint: admin token, the `admin` per-IP profile, documented under Admin. */
function adminRoute<P extends AnyObject = z.ZodObject<{}>, Q extends AnyObject = z.ZodObject<{}>, B extends z.ZodType = z.ZodUndefined>(
  def: Omit<RouteDef<P, Q, B>, 'tag' | 'auth' | 'ipProfile'>,
): AnyRoute {
  return route<P, Q, B>({ ...def, tag: 'Admin', auth: 'admin', ipProfile: 'admin' });
}
const ws = z.object({ id: z.uuid() });
const wsAnd = <K extends string>(key: K) => z.object({ id: z.uuid(), [key]: z.uuid() } as { id: z.ZodUUID } & Record<K, z.ZodUUID>);

async function requireWorkspace(db: Db, id: string): Promise<void> {
  const found = await db('workspaces').where({ id }).first('id');
  if (!found) throw notFound('Workspace');
}

const keyRow = (row: Record<string, unknown>) => ({
  id: row.id,
  name: row.name,
  prefix: row.key_prefix,
  scopes: row.scopes,
  rateLimitPerMinute: row.rate_limit_per_minute,
  expiresAt: iso(row.expires_at as Date | null),
  revokedAt: iso(row.revoked_at as Date | null),
  createdAt: iso(row.created_at as Date),
});

export const adminRoutes: AnyRoute[] = [
  adminRoute({
    method: 'post',
    path: '/admin/v1/workspaces',
    summary: 'Create a workspace with its plan',
    status: 201,
    body: z.object({ name: z.string().trim().min(1).max(200), plan: planSchema.optional() }),
    handler: async (ctx, { body }) => ({ data: serializeWorkspace(await createWorkspace(ctx.deps.db, body.name, body.plan)) }),
  }),
  adminRoute({
    method: 'get',
    path: '/admin/v1/workspaces/{id}',
    summary: 'Get a workspace and its plan',
    params: ws,
    handler: async (ctx, { params }) => {
      const row = await ctx.deps.db('workspaces').where({ id: params.id }).first();
      if (!row) throw notFound('Workspace');
      return { data: serializeWorkspace(row) };
    },
  }),
  adminRoute({
    method: 'patch',
    path: '/admin/v1/workspaces/{id}',
    summary: 'Change the name or plan of a workspace',
    params: ws,
    body: z.object({ name: z.string().trim().min(1).max(200).optional(), plan: planSchema.optional() }),
    handler: async (ctx, { params, body }) => {
      const changes = { ...(body.name ? { name: body.name } : {}), ...planColumns(body.plan) };
      const [row] = await ctx.deps
        .db('workspaces')
        .where({ id: params.id })
        .update({ ...changes, updated_at: ctx.deps.db.fn.now() })
        .returning('*');
      if (!row) throw notFound('Workspace');
      return { data: serializeWorkspace(row) };
    },
  }),
  adminRoute({
    method: 'post',
    path: '/admin/v1/workspaces/{id}/api-keys',
    summary: 'Create an API key (the key is shown only in this response)',
    status: 201,
    params: ws,
    body: z.object({
      name: z.string().trim().min(1).max(200),
      scopes: z.array(z.enum(ALL_SCOPES)).max(ALL_SCOPES.length),
      rateLimitPerMinute: z.number().int().min(1).max(1000).optional(),
      // A Date, not the text: PostgreSQL refuses offsets beyond ±15:59 and year 0, which ISO 8601 (and zod) accept.
      expiresAt: z.iso.datetime({ offset: true }).transform((value) => new Date(value)).optional(),
    }),
    handler: async (ctx, { params, body }) => {
      await requireWorkspace(ctx.deps.db, params.id);
      const { key, hash, prefix } = generateApiKey();
      const [row] = await ctx.deps
        .db('api_keys')
        .insert({
          workspace_id: params.id,
          name: body.name,
          key_hash: hash,
          key_prefix: prefix,
          scopes: [...new Set(body.scopes)],
          rate_limit_per_minute: body.rateLimitPerMinute ?? DEFAULT_KEY_LIMIT,
          expires_at: body.expiresAt ?? null,
        })
        .returning('*');
      return { data: { ...keyRow(row), key } };
    },
  }),
  adminRoute({
    method: 'patch',
    path: '/admin/v1/workspaces/{id}/api-keys/{keyId}',
    summary: "Change a key's per-minute rate limit",
    params: wsAnd('keyId'),
    body: z.object({ rateLimitPerMinute: z.number().int().min(1).max(1000) }),
    handler: async (ctx, { params, body }) => {
      const [row] = await ctx.deps
        .db('api_keys')
        .where({ id: params.keyId, workspace_id: params.id })
        .update({ rate_limit_per_minute: body.rateLimitPerMinute })
        .returning('*');
      if (!row) throw notFound('API key');
      return { data: keyRow(row) };
    },
  }),
  adminRoute({
    method: 'delete',
    path: '/admin/v1/workspaces/{id}/api-keys/{keyId}',
    summary: 'Revoke an API key',
    params: wsAnd('keyId'),
    handler: async (ctx, { params }) => {
      const [row] = await ctx.deps
        .db('api_keys')
        .where({ id: params.keyId, workspace_id: params.id })
        .update({ revoked_at: ctx.deps.db.raw('coalesce(revoked_at, now())') })
        .returning('id');
      if (!row) throw notFound('API key');
      return { data: { id: row.id, deleted: true } };
    },
  }),
  adminRoute({
    method: 'post',
    path: '/admin/v1/workspaces/{id}/members',
    summary: 'Add a member to the workspace',
    status: 201,
    params: ws,
    errors: ['CONFLICT'],
    body: z.object({ name: z.string().trim().min(1).max(200), email: z.email().max(320) }),
    handler: async (ctx, { params, body }) => {
      await requireWorkspace(ctx.deps.db, params.id);
      const [row] = await ctx.deps
        .db('members')
        .insert({ workspace_id: params.id, name: body.name, email: body.email })
        .returning('*');
      return { data: { id: row.id, name: row.name, email: row.email, createdAt: iso(row.created_at) } };
    },
  }),
  adminRoute({
    method: 'post',
    path: '/admin/v1/workspaces/{id}/pipelines',
    summary: 'Create a pipeline with its stages (funnel order) and custom fields',
    status: 201,
    params: ws,
    errors: ['CONFLICT'],
    body: z.object({
      name: z.string().trim().min(1).max(200),
      stages: z.array(z.object({ name: z.string().trim().min(1).max(200) })).max(100).default([]),
      customFields: z
        .array(
          z.object({
            key: z.string().regex(/^[A-Za-z][A-Za-z0-9_]{0,63}$/, 'letters, digits and _, starting with a letter'),
            label: z.string().trim().min(1).max(200),
            type: z.enum(CUSTOM_FIELD_TYPES),
          }),
        )
        .max(200)
        .default([]),
    }),
    handler: async (ctx, { params, body }) => {
      await requireWorkspace(ctx.deps.db, params.id);
      const id = await createPipeline(ctx.deps.db, params.id, body);
      const pipeline = (await listPipelines(ctx.deps.db, params.id)).find((p) => p.id === id);
      return { data: pipeline };
    },
  }),
  adminRoute({
    method: 'post',
    path: '/admin/v1/workspaces/{id}/instances',
    summary: 'Create a connection (instance)',
    status: 201,
    params: ws,
    body: z.object({
      name: z.string().trim().min(1).max(200),
      channel: z.enum(['whatsapp', 'instagram']),
      provider: z.enum(['cloud', 'web']),
      connected: z.boolean().default(false),
      archived: z.boolean().default(false),
      config: instanceConfigSchema.default({}),
    }),
    handler: async (ctx, { params, body }) => {
      await requireWorkspace(ctx.deps.db, params.id);
      const [row] = await ctx.deps
        .db('instances')
        .insert({ workspace_id: params.id, ...body, config: JSON.stringify(body.config) })
        .returning('*');
      return { data: serializeInstanceForAdmin(row) };
    },
  }),
  adminRoute({
    method: 'patch',
    path: '/admin/v1/workspaces/{id}/instances/{instanceId}',
    summary: 'Change connected, archived or config of an instance (config keys are merged)',
    params: wsAnd('instanceId'),
    body: z.object({
      connected: z.boolean().optional(),
      archived: z.boolean().optional(),
      config: instanceConfigSchema.optional(),
    }),
    handler: async (ctx, { params, body }) => {
      const db = ctx.deps.db;
      const [row] = await db('instances')
        .where({ id: params.instanceId, workspace_id: params.id })
        .update({
          ...(body.connected !== undefined ? { connected: body.connected } : {}),
          ...(body.archived !== undefined ? { archived: body.archived } : {}),
          ...(body.config ? { config: db.raw('config || ?::jsonb', [JSON.stringify(body.config)]) } : {}),
          updated_at: db.fn.now(),
        })
        .returning('*');
      if (!row) throw new ApiError('INSTANCE_NOT_FOUND', 'Instance not found');
      return { data: serializeInstanceForAdmin(row) };
    },
    errors: ['INSTANCE_NOT_FOUND'],
  }),
  adminRoute({
    method: 'post',
    path: '/admin/v1/workspaces/{id}/templates',
    summary: 'Register a message template of an instance (`approved` is sendable)',
    status: 201,
    params: ws,
    errors: ['INSTANCE_NOT_FOUND', 'CONFLICT'],
    body: z.object({
      instanceId: z.uuid(),
      name: z.string().trim().min(1).max(512),
      language: z.string().min(2).max(15),
      variableCount: z.number().int().min(0).max(20).default(0),
      status: z.enum(['approved', 'pending', 'rejected', 'paused', 'disabled']).default('approved'),
    }),
    handler: async (ctx, { params, body }) => {
      const instance = await ctx.deps.db('instances').where({ id: body.instanceId, workspace_id: params.id }).first('id');
      if (!instance) throw new ApiError('INSTANCE_NOT_FOUND', 'Instance not found in this workspace');
      const [row] = await ctx.deps
        .db('templates')
        .insert({
          workspace_id: params.id,
          instance_id: body.instanceId,
          name: body.name,
          language: body.language,
          variable_count: body.variableCount,
          status: body.status,
        })
        .returning('*');
      return {
        data: {
          id: row.id,
          instanceId: row.instance_id,
          name: row.name,
          language: row.language,
          variableCount: row.variable_count,
          status: row.status,
          createdAt: iso(row.created_at),
        },
      };
    },
  }),
  adminRoute({
    method: 'post',
    path: '/admin/v1/workspaces/{id}/broadcasts',
    summary: 'Record a broadcast using tags (`in_progress` blocks deleting those tags)',
    status: 201,
    params: ws,
    body: z.object({
      tagIds: z.array(z.uuid()).max(100).default([]),
      status: z.enum(['draft', 'scheduled', 'in_progress', 'completed', 'cancelled']),
    }),
    handler: async (ctx, { params, body }) => {
      await requireWorkspace(ctx.deps.db, params.id);
      const tagIds = [...new Set(body.tagIds)];
      return ctx.deps.db.transaction(async (trx) => {
        const found = await trx('tags').where({ workspace_id: params.id }).whereIn('id', tagIds).pluck('id');
        if (found.length !== tagIds.length) throw new ApiError('NOT_FOUND', 'Tag not found in this workspace');
        const [row] = await trx('broadcasts').insert({ workspace_id: params.id, status: body.status }).returning('*');
        if (tagIds.length) {
          await trx('broadcast_tags').insert(tagIds.map((tagId) => ({ workspace_id: params.id, broadcast_id: row.id, tag_id: tagId })));
        }
        return { data: { id: row.id, status: row.status, tagIds, createdAt: iso(row.created_at) } };
      });
    },
  }),
  adminRoute({
    method: 'put',
    path: '/admin/v1/workspaces/{id}/contacts/{contactId}/insight',
    summary: "Set a contact's AI sales insight",
    params: wsAnd('contactId'),
    errors: ['CONTACT_NOT_FOUND'],
    body: z.object({
      interest: z.string().max(5000).nullable().optional(),
      products: z.unknown().optional(),
      objections: z.unknown().optional(),
      nextStep: z.string().max(5000).nullable().optional(),
      qualification: z.unknown().optional(),
      summary: z.string().max(20000).nullable().optional(),
    }),
    handler: async (ctx, { params, body }) => {
      const db = ctx.deps.db;
      const contact = await db('contacts')
        .where({ id: params.contactId, workspace_id: params.id })
        .whereNull('deleted_at')
        .whereNull('merged_into_id')
        .first('id');
      if (!contact) throw new ApiError('CONTACT_NOT_FOUND', 'Contact not found');
      const json = (v: unknown) => (v === undefined ? null : JSON.stringify(v));
      const values = {
        contact_id: params.contactId,
        workspace_id: params.id,
        interest: body.interest ?? null,
        products: json(body.products),
        objections: json(body.objections),
        next_step: body.nextStep ?? null,
        qualification: json(body.qualification),
        summary: body.summary ?? null,
        updated_at: db.fn.now(),
      };
      const [row] = await db('insights').insert(values).onConflict('contact_id').merge().returning('*');
      return { data: serializeInsight(row) };
    },
  }),
];

const panelContact = z.object({
  name: z.string().trim().max(200).optional(),
  email: z.email().max(320).nullable().optional(),
  phone: z.string().max(32).optional(),
  notes: z.string().max(10000).optional(),
  tags: z.array(z.string().min(1).max(100)).max(100).optional(),
  memberId: z.uuid().optional(),
});

async function requireMember(db: Db, workspaceId: string, memberId: string | undefined): Promise<void> {
  if (!memberId) return;
  const member = await db('members').where({ workspace_id: workspaceId, id: memberId }).first('id');
  if (!member) throw new ApiError('VALIDATION', 'memberId is not a member of this workspace', { hint: 'body.memberId' });
}

adminRoutes.push(
  adminRoute({
    method: 'post',
    path: '/admin/v1/workspaces/{id}/contacts',
    summary: "A human creates a contact in the panel (emits contact.created)",
    status: 201,
    params: ws,
    errors: ['INVALID_PHONE', 'PHONE_REQUIRED', 'CONFLICT'],
    body: panelContact,
    handler: async (ctx, { params, body }) => {
      await requireWorkspace(ctx.deps.db, params.id);
      if (!body.phone) throw new ApiError('PHONE_REQUIRED', 'phone is required');
      await requireMember(ctx.deps.db, params.id, body.memberId);
      return { data: await panelCreateContact(ctx.deps.db, params.id, { ...body, phone: body.phone }) };
    },
  }),
  adminRoute({
    method: 'patch',
    path: '/admin/v1/workspaces/{id}/contacts/{contactId}',
    summary: 'A human edits a contact in the panel (emits contact.updated and the contact_updated trigger)',
    params: wsAnd('contactId'),
    errors: ['INVALID_PHONE', 'CONTACT_NOT_FOUND', 'CONFLICT'],
    body: panelContact,
    handler: async (ctx, { params, body }) => {
      await requireMember(ctx.deps.db, params.id, body.memberId);
      return { data: await panelUpdateContact(ctx.deps.db, params.id, params.contactId, body) };
    },
  }),
);
