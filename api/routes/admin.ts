import type { Payload } from '@temporalio/common';
import { z } from 'zod';
import {
  CODEC_SESSION_COOKIE,
  CODEC_SESSION_PAGE_PATH,
  CODEC_SESSION_PATH,
  CODEC_SESSION_TTL_MS,
  codecSessionSecure,
  EncryptionCodec,
  issueCodecSession,
} from '../../domain/platform';
import { ApiError, emailAddress, trimmedText } from '../../domain/kernel';
import { AnyObject, AnyRoute, route, RouteDef } from '../route';
import { IdParams, single } from '../schemas';
import {
  addMember,
  ALL_SCOPES,
  createApiKey,
  createWorkspace,
  getWorkspace,
  PLAN_DEFAULTS,
  planSchema,
  aiSchema,
  requireMember,
  requireWorkspace,
  revokeApiKey,
  serializeWorkspace,
  setApiKeyRateLimit,
  updateWorkspace,
} from '../../domain/access';
import { createGlobalCustomField, createPipeline, customFieldSchema, listPipelines, MAX_CUSTOM_FIELDS } from '../../domain/sales';
import { MAX_PHONE_INPUT, panelCreateContact, panelUpdateContact, PHONE_PATTERN, setInsight } from '../../domain/leads';
import { createInstance, createTemplate, instanceConfigSchema, PROVIDERS, TEMPLATE_STATUSES, updateInstance } from '../../domain/messaging';
import { BROADCAST_STATUSES, createBroadcast } from '../../domain/broadcasts';
import { mergeContacts } from '../../domain/merge';

/**
 * The operator API (what the CRM panel would do), behind ADMIN_TOKEN: docs/api-conventions.md.
 * Every route is scoped to the workspace in its path.
 */
/** Every admin endpoint: admin token, the `admin` per-IP profile, documented under Admin. */
function adminRoute<P extends AnyObject = z.ZodObject<{}>, Q extends AnyObject = z.ZodObject<{}>, B extends z.ZodType = z.ZodUndefined>(
  def: Omit<RouteDef<P, Q, B>, 'tag' | 'auth' | 'ipProfile'>,
): AnyRoute {
  return route<P, Q, B>({ ...def, tag: 'Admin', auth: 'admin', ipProfile: 'admin' });
}

/**
 * An admin endpoint that creates something in the workspace of its path: an unknown workspace is
 * 404 NOT_FOUND before the body is acted on (an insert would otherwise fail on its foreign key).
 */
function workspaceRoute<P extends z.ZodObject<{ id: z.ZodUUID }>, B extends z.ZodType = z.ZodUndefined>(
  def: Omit<RouteDef<P, z.ZodObject<{}>, B>, 'tag' | 'auth' | 'ipProfile'> & { params: P },
): AnyRoute {
  return adminRoute<P, z.ZodObject<{}>, B>({
    ...def,
    handler: async (ctx, input) => {
      await requireWorkspace(ctx.deps.db, input.params.id);
      return def.handler(ctx, input);
    },
  });
}

/** The plan's fields as the workspace routes describe them. */
const PLAN_DOC =
  `Limits on counts the tenant controls always hold a number, never unlimited: \`automationLimit\` (default ${PLAN_DEFAULTS.automationLimit}; ` +
  `creating one more automation is 402 \`AUTOMATION_LIMIT_REACHED\`), \`webhookQuota\` (webhook subscriptions, default ${PLAN_DEFAULTS.webhookQuota}; ` +
  `402 \`WEBHOOK_LIMIT_REACHED\`), \`automationRunsPerMinute\` (runs started by triggers and by the inbound receiver, default ` +
  `${PLAN_DEFAULTS.automationRunsPerMinute}) and \`mediaStorageMb\` (the inbound media files kept, in MB, default ${PLAN_DEFAULTS.mediaStorageMb}; ` +
  `a file that would pass it is not kept: its media is \`unavailable\` with the reason); null for them is 400 \`VALIDATION\`. Lowering one below what the workspace has refuses only new ones. ` +
  'The other limits (`dealLimit`, `dailyMessageQuota`, `broadcastLimit`, `inboundWebhookQuota`) are unlimited when null or absent.';
const wsAnd = <K extends string>(key: K) => z.object({ id: z.uuid(), [key]: z.uuid() } as { id: z.ZodUUID } & Record<K, z.ZodUUID>);

/**
 * Temporal's remote codec protocol (what `temporal --codec-endpoint` and the Temporal UI's data
 * encoder call): payloads in proto3 JSON, metadata values and data as base64.
 */
const CODEC_METADATA_MAX = 32;
const CodecPayloads = z.object({
  payloads: z
    .array(
      z.object({
        metadata: z
          .record(z.string().max(256), z.string().max(4096, 'each metadata value is base64 text of at most 4096 characters'))
          .refine((m) => Object.keys(m).length <= CODEC_METADATA_MAX, { message: `at most ${CODEC_METADATA_MAX} metadata entries` })
          .meta({ maxProperties: CODEC_METADATA_MAX })
          .optional(),
        data: z.string().max(1_000_000).optional(),
      }),
    )
    .max(1000),
});
type CodecPayloadsJson = z.infer<typeof CodecPayloads>;

function codecRoute(direction: 'encode' | 'decode'): AnyRoute {
  return adminRoute({
    method: 'post',
    path: `/admin/v1/temporal-codec/${direction}`,
    operationId: `${direction}TemporalPayloads`,
    noStore: true,
    summary:
      direction === 'decode'
        ? 'Decrypt Temporal payloads (codec endpoint for the Temporal CLI and UI)'
        : 'Encrypt Temporal payloads (codec endpoint)',
    description:
      "Every payload in Temporal's history is encrypted (ENCRYPTION_KEYS). Operators read a workflow's inputs and results through this endpoint: " +
      '`temporal workflow show --workflow-id <id> --codec-endpoint <PUBLIC_BASE_URL>/admin/v1/temporal-codec --codec-auth "Bearer <ADMIN_TOKEN>"`. ' +
      'Payloads not encrypted by the service come back unchanged.',
    body: CodecPayloads,
    response: CodecPayloads,
    handler: async (ctx, { body }) => {
      const codec = new EncryptionCodec(ctx.deps.config.encryptionKeys!);
      const payloads: Payload[] = body.payloads.map((p) => ({
        metadata: Object.fromEntries(Object.entries(p.metadata ?? {}).map(([k, v]) => [k, Buffer.from(String(v), 'base64')])),
        data: Buffer.from(p.data ?? '', 'base64'),
      }));
      const done = direction === 'decode' ? await codec.decode(payloads) : await codec.encode(payloads);
      const out: CodecPayloadsJson = {
        payloads: done.map((p) => ({
          metadata: Object.fromEntries(
            Object.entries(p.metadata ?? {}).map(([k, v]) => [k, Buffer.from(v ?? new Uint8Array()).toString('base64')]),
          ),
          data: Buffer.from(p.data ?? new Uint8Array()).toString('base64'),
        })),
      };
      return out;
    },
  });
}

const panelContact = z.object({
  name: z.string().trim().max(200).optional(),
  email: emailAddress().nullable().optional(),
  phone: z.string().max(MAX_PHONE_INPUT).optional().meta({ pattern: PHONE_PATTERN }),
  notes: z.string().max(10000).optional(),
  tags: z.array(z.string().min(1).max(100)).max(100).optional(),
  optedOut: z.boolean().optional(),
  memberId: z.uuid().optional(),
});

export const adminRoutes: AnyRoute[] = [
  codecRoute('decode'),
  codecRoute('encode'),
  adminRoute({
    method: 'post',
    path: `${CODEC_SESSION_PATH}/session`,
    operationId: 'openTemporalCodecSession',
    noStore: true,
    summary: 'Open a codec session for the Temporal UI (a cookie)',
    description:
      "The Temporal UI decodes payloads from the operator's browser and can send no admin token, only cookies. Called with the admin token " +
      `(the page at GET ${CODEC_SESSION_PAGE_PATH} does it), this sets an HttpOnly, SameSite=Strict cookie valid for 8 hours that ` +
      "authorizes decode and encode only. In the UI's codec settings, set the endpoint to `<PUBLIC_BASE_URL>/admin/v1/temporal-codec` and turn on " +
      '"Include cross-origin credentials". The UI and the API must be on the same site (one registrable domain, or both on localhost).',
    response: single(z.object({ expiresAt: z.iso.datetime() })),
    handler: async (ctx) => {
      const session = issueCodecSession(ctx.deps.config.adminToken!, Date.now());
      // Secure unless the API and the request are both on loopback over http (domain/platform/codec-session.ts).
      const secure = codecSessionSecure(ctx.deps.config.publicBaseUrl, { protocol: ctx.protocol, hostname: ctx.hostname })
        ? '; Secure'
        : '';
      ctx.append(
        'Set-Cookie',
        `${CODEC_SESSION_COOKIE}=${session.value}; Path=${CODEC_SESSION_PATH}; Max-Age=${Math.floor(CODEC_SESSION_TTL_MS / 1000)}; HttpOnly; SameSite=Strict${secure}`,
      );
      return { data: { expiresAt: session.expiresAt.toISOString() } };
    },
  }),
  adminRoute({
    method: 'post',
    path: '/admin/v1/workspaces',
    operationId: 'createWorkspace',
    summary: 'Create a workspace with its plan',
    description: PLAN_DOC,
    status: 201,
    body: z.object({ name: trimmedText(200), plan: planSchema.optional() }),
    handler: async (ctx, { body }) => ({ data: serializeWorkspace(await createWorkspace(ctx.deps.db, body.name, body.plan)) }),
  }),
  adminRoute({
    method: 'get',
    path: '/admin/v1/workspaces/{id}',
    operationId: 'getWorkspace',
    summary: 'Get a workspace and its plan',
    params: IdParams,
    handler: async (ctx, { params }) => ({ data: await getWorkspace(ctx.deps.db, params.id) }),
  }),
  adminRoute({
    method: 'patch',
    path: '/admin/v1/workspaces/{id}',
    operationId: 'updateWorkspace',
    summary: 'Change the name, plan or AI settings of a workspace',
    description:
      `Plan fields not given keep their values. ${PLAN_DOC} ` +
      '`ai` (`enabled`, `baseUrl`, `apiKey`, `model`, `dailyTokenBudget`): the language model that derives the AI insight ' +
      "from the contact's conversations (an OpenAI-compatible `POST {baseUrl}/v1/chat/completions`; docs/insights.md). Off unless " +
      '`enabled`; null fields take the deployment default (AI_BASE_URL, AI_API_KEY, AI_MODEL). The key is stored encrypted and ' +
      'never returned (`apiKeySet`).',
    params: IdParams,
    body: z.object({ name: trimmedText(200).optional(), plan: planSchema.optional(), ai: aiSchema.optional() }),
    handler: async (ctx, { params, body }) => {
      const data = await updateWorkspace(ctx.deps.db, ctx.deps.config.encryptionKeys!, params.id, body);
      ctx.limits.keys.clear(); // a plan change (API access, subscription) applies to this process's keys at once
      return { data };
    },
  }),
  workspaceRoute({
    method: 'post',
    path: '/admin/v1/workspaces/{id}/api-keys',
    operationId: 'createApiKey',
    noStore: true,
    summary: 'Create an API key (the key is shown only in this response)',
    status: 201,
    params: IdParams,
    body: z.object({
      name: trimmedText(200),
      scopes: z.array(z.enum(ALL_SCOPES)).max(ALL_SCOPES.length),
      rateLimitPerMinute: z.number().int().min(1).max(1000).optional(),
      // A Date, not the text: PostgreSQL refuses offsets beyond ±15:59 and year 0, which ISO 8601 (and zod) accept.
      expiresAt: z.iso
        .datetime({ offset: true })
        .transform((value) => new Date(value))
        .optional(),
    }),
    handler: async (ctx, { params, body }) => ({ data: await createApiKey(ctx.deps.db, params.id, body) }),
  }),
  adminRoute({
    method: 'patch',
    path: '/admin/v1/workspaces/{id}/api-keys/{keyId}',
    operationId: 'updateApiKey',
    summary: "Change a key's per-minute rate limit",
    params: wsAnd('keyId'),
    body: z.object({ rateLimitPerMinute: z.number().int().min(1).max(1000) }),
    handler: async (ctx, { params, body }) => {
      const data = await setApiKeyRateLimit(ctx.deps.db, params.id, params.keyId, body.rateLimitPerMinute);
      ctx.limits.keys.clear();
      return { data };
    },
  }),
  adminRoute({
    method: 'delete',
    path: '/admin/v1/workspaces/{id}/api-keys/{keyId}',
    operationId: 'revokeApiKey',
    summary: 'Revoke an API key',
    params: wsAnd('keyId'),
    handler: async (ctx, { params }) => {
      const data = await revokeApiKey(ctx.deps.db, params.id, params.keyId);
      // Refused at once by this process; the others read keys at most a second old.
      ctx.limits.keys.clear();
      return { data };
    },
  }),
  workspaceRoute({
    method: 'post',
    path: '/admin/v1/workspaces/{id}/members',
    operationId: 'createMember',
    summary: 'Add a member to the workspace',
    status: 201,
    params: IdParams,
    errors: ['CONFLICT'],
    body: z.object({ name: trimmedText(200), email: emailAddress() }),
    handler: async (ctx, { params, body }) => ({ data: await addMember(ctx.deps.db, params.id, body) }),
  }),
  workspaceRoute({
    method: 'post',
    path: '/admin/v1/workspaces/{id}/pipelines',
    operationId: 'createPipeline',
    summary: 'Create a pipeline with its stages (funnel order) and custom fields',
    status: 201,
    params: IdParams,
    errors: ['CONFLICT'],
    body: z.object({
      name: trimmedText(200),
      stages: z
        .array(z.object({ name: trimmedText(200) }))
        .max(100)
        .default([]),
      customFields: z.array(customFieldSchema).max(MAX_CUSTOM_FIELDS).default([]),
    }),
    handler: async (ctx, { params, body }) => {
      const id = await createPipeline(ctx.deps.db, params.id, body);
      const pipeline = (await listPipelines(ctx.deps.db, params.id)).find((p) => p.id === id);
      return { data: pipeline };
    },
  }),
  workspaceRoute({
    method: 'post',
    path: '/admin/v1/workspaces/{id}/custom-fields',
    operationId: 'createGlobalCustomField',
    summary: 'Create a global custom field (on every pipeline)',
    description:
      "A field with no pipeline: listed in every pipeline's `customFields` (pipelines created later too) and accepted in every deal's " +
      `\`customValues\`. Same key, label and type rules as a pipeline's fields; a workspace holds at most ${MAX_CUSTOM_FIELDS} global fields ` +
      "(400 `VALIDATION`). A key names one field wherever it applies: a key already used by a global field or by any pipeline's own field " +
      'is 409 `CONFLICT` (and a new pipeline whose fields reuse a global key is 409 `CONFLICT` too).',
    status: 201,
    params: IdParams,
    errors: ['CONFLICT'],
    body: customFieldSchema,
    handler: async (ctx, { params, body }) => ({ data: await createGlobalCustomField(ctx.deps.db, params.id, body) }),
  }),
  workspaceRoute({
    method: 'post',
    path: '/admin/v1/workspaces/{id}/instances',
    operationId: 'createInstance',
    summary: 'Create a connection (instance)',
    status: 201,
    params: IdParams,
    body: z.object({
      name: trimmedText(200),
      channel: z.enum(['whatsapp', 'instagram']),
      provider: z.enum(PROVIDERS),
      connected: z.boolean().default(false),
      archived: z.boolean().default(false),
      config: instanceConfigSchema.default({}),
    }),
    handler: async (ctx, { params, body }) => ({
      data: await createInstance(ctx.deps.db, ctx.deps.config.encryptionKeys!, params.id, body),
    }),
  }),
  adminRoute({
    method: 'patch',
    path: '/admin/v1/workspaces/{id}/instances/{instanceId}',
    operationId: 'updateInstance',
    summary: 'Change connected, archived or config of an instance (config keys are merged)',
    params: wsAnd('instanceId'),
    body: z.object({
      connected: z.boolean().optional(),
      archived: z.boolean().optional(),
      config: instanceConfigSchema.optional(),
    }),
    handler: async (ctx, { params, body }) => ({
      data: await updateInstance(ctx.deps.db, ctx.deps.config.encryptionKeys!, params.id, params.instanceId, body),
    }),
    errors: ['INSTANCE_NOT_FOUND'],
  }),
  adminRoute({
    method: 'post',
    path: '/admin/v1/workspaces/{id}/templates',
    operationId: 'createTemplate',
    summary: 'Register a message template of an instance (status approved is sendable)',
    status: 201,
    params: IdParams,
    errors: ['INSTANCE_NOT_FOUND', 'CONFLICT'],
    body: z.object({
      instanceId: z.uuid(),
      name: trimmedText(512),
      language: z.string().min(2).max(15),
      variableCount: z.number().int().min(0).max(20).default(0),
      status: z.enum(TEMPLATE_STATUSES).default('approved'),
    }),
    handler: async (ctx, { params, body }) => ({ data: await createTemplate(ctx.deps.db, params.id, body) }),
  }),
  workspaceRoute({
    method: 'post',
    path: '/admin/v1/workspaces/{id}/broadcasts',
    operationId: 'recordBroadcast',
    summary: 'Record a broadcast using tags, without sending (a scheduled, in-progress or paused one blocks deleting those tags)',
    status: 201,
    params: IdParams,
    body: z.object({
      tagIds: z.array(z.uuid()).max(100).default([]),
      status: z.enum(BROADCAST_STATUSES),
    }),
    handler: async (ctx, { params, body }) => ({ data: await createBroadcast(ctx.deps.db, params.id, body) }),
  }),
  adminRoute({
    method: 'put',
    path: '/admin/v1/workspaces/{id}/contacts/{contactId}/insight',
    operationId: 'setContactInsight',
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
    handler: async (ctx, { params, body }) => ({ data: await setInsight(ctx.deps.db, params.id, params.contactId, body) }),
  }),
  workspaceRoute({
    method: 'post',
    path: '/admin/v1/workspaces/{id}/contacts',
    operationId: 'createPanelContact',
    summary: 'A human creates a contact in the panel (emits contact.created)',
    status: 201,
    params: IdParams,
    errors: ['INVALID_PHONE', 'PHONE_REQUIRED', 'CONFLICT'],
    body: panelContact.meta({ required: ['phone'] }),
    handler: async (ctx, { params, body }) => {
      if (!body.phone) throw new ApiError('PHONE_REQUIRED', 'phone is required');
      await requireMember(ctx.deps.db, params.id, body.memberId);
      return { data: await panelCreateContact(ctx.deps.db, params.id, { ...body, phone: body.phone }) };
    },
  }),
  adminRoute({
    method: 'patch',
    path: '/admin/v1/workspaces/{id}/contacts/{contactId}',
    operationId: 'updatePanelContact',
    summary: 'A human edits a contact in the panel (emits contact.updated and the contact_updated trigger)',
    params: wsAnd('contactId'),
    errors: ['INVALID_PHONE', 'CONTACT_NOT_FOUND', 'CONFLICT'],
    body: panelContact,
    handler: async (ctx, { params, body }) => {
      await requireMember(ctx.deps.db, params.id, body.memberId);
      return { data: await panelUpdateContact(ctx.deps.db, params.id, params.contactId, body) };
    },
  }),
  adminRoute({
    method: 'post',
    path: '/admin/v1/workspaces/{id}/contacts/{contactId}/merge',
    operationId: 'mergePanelContact',
    summary: 'A human merges a duplicate contact into another in the panel (emits contact.merged)',
    description:
      'The contact in the path is the duplicate; `intoId` survives and is answered. The survivor takes its deals, tasks, notes, ' +
      'list memberships and tags, its insight and conversations where it has none of its own (messages join its conversation on ' +
      'the same instance), and its name or e-mail where its own is empty. The duplicate is never listed again; `contact.merged` ' +
      '(webhooks, events feed) and a tombstone in the incremental lead read tell synced systems.',
    params: wsAnd('contactId'),
    errors: ['CONTACT_NOT_FOUND'],
    body: z.object({ intoId: z.uuid() }),
    handler: async (ctx, { params, body }) => ({ data: await mergeContacts(ctx.deps.db, params.id, params.contactId, body.intoId) }),
  }),
];
