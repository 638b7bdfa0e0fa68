import type { Knex } from 'knex';
import { z } from 'zod';
import { type Db, type KeyRing, openText, type Resealer, sealText } from '../platform';
import { ApiError, notFound, iso, HTTP_URL } from '../kernel';

/** What the `integer` columns hold: a larger value is 400 VALIDATION, not a database error. */
const INT_MAX = 2_147_483_647;

/** A plan limit the operator may leave unlimited (null). */
const limit = z.number().int().min(0).max(INT_MAX).nullable();

/**
 * Defaults of the plan limits on counts a tenant controls itself (how many automations and
 * webhook subscriptions it makes, how many runs they start): such a limit always has a value,
 * never unlimited, since one tenant's unbounded count slows every other tenant's dispatch
 * (docs/reliability.md). The migrations 20261126200100_plan_limit_defaults and
 * 20261127060100_media_storage_limit set the same column defaults.
 */
export const PLAN_DEFAULTS = { automationLimit: 100, webhookQuota: 10, automationRunsPerMinute: 600, mediaStorageMb: 10_240 } as const;

/** A limit on a count the tenant controls: a number (null, unlimited, is 400 VALIDATION); absent on creation, its default. */
const boundedLimit = (field: keyof typeof PLAN_DEFAULTS) =>
  z
    .number({
      error: (issue) =>
        issue.input === null ? `must be a number (this limit is never unlimited; default ${PLAN_DEFAULTS[field]})` : undefined,
    })
    .int()
    .min(0)
    .max(INT_MAX)
    .meta({
      description: `Never unlimited: null is refused (400 VALIDATION). Default ${PLAN_DEFAULTS[field]}.`,
      default: PLAN_DEFAULTS[field],
    });

/**
 * Plan limits of a workspace. Absent: the default (the limits below) or unlimited (the others);
 * null means unlimited where the operator may choose it.
 */
export const planSchema = z
  .object({
    dealLimit: limit,
    dailyMessageQuota: limit,
    broadcastLimit: limit,
    inboundWebhookQuota: limit,
    webhookQuota: boundedLimit('webhookQuota'),
    automationLimit: boundedLimit('automationLimit'),
    automationRunsPerMinute: boundedLimit('automationRunsPerMinute'),
    mediaStorageMb: boundedLimit('mediaStorageMb'),
    apiAccess: z.boolean(),
    active: z.boolean(),
  })
  .partial();
export type PlanInput = z.infer<typeof planSchema>;

const PLAN_COLUMNS = {
  dealLimit: 'deal_limit',
  dailyMessageQuota: 'daily_message_quota',
  broadcastLimit: 'broadcast_limit',
  inboundWebhookQuota: 'inbound_webhook_quota',
  webhookQuota: 'webhook_quota',
  automationLimit: 'automation_limit',
  automationRunsPerMinute: 'automation_runs_per_minute',
  mediaStorageMb: 'media_storage_mb',
  apiAccess: 'api_access',
  active: 'active',
} as const;

/**
 * The workspace's language model for the AI-derived insight (domain/insights): off unless
 * `enabled`; what it leaves null the deployment's AI_BASE_URL, AI_API_KEY and AI_MODEL fill in.
 * `baseUrl` is operator configuration (like an instance's): no anti-SSRF check. The key is stored
 * sealed and never shown (`apiKeySet` says whether there is one).
 */
export const aiSchema = z
  .object({
    enabled: z.boolean(),
    baseUrl: z
      .url({ protocol: /^https?$/ })
      .max(2048)
      .meta({ pattern: HTTP_URL })
      .nullable(),
    apiKey: z.string().min(1).max(4096).nullable(),
    model: z.string().min(1).max(200).nullable(),
    dailyTokenBudget: z.number().int().min(1).max(INT_MAX).nullable().describe('Tokens a São Paulo day; null: no daily limit.'),
  })
  .partial();
export type AiInput = z.infer<typeof aiSchema>;
const AI_COLUMNS = {
  enabled: 'ai_enabled',
  baseUrl: 'ai_base_url',
  apiKey: 'ai_api_key',
  model: 'ai_model',
  dailyTokenBudget: 'ai_daily_token_budget',
} as const;
const aiKeyBinding = (workspaceId: string) => ({ workspaceId, purpose: 'workspace.aiApiKey' as const });

export interface WorkspaceRow {
  id: string;
  name: string;
  ai_enabled: boolean;
  ai_base_url: string | null;
  ai_api_key: string | null;
  ai_model: string | null;
  ai_daily_token_budget: number | null;
  deal_limit: number | null;
  daily_message_quota: number | null;
  broadcast_limit: number | null;
  inbound_webhook_quota: number | null;
  webhook_quota: number;
  automation_limit: number;
  automation_runs_per_minute: number;
  media_storage_mb: number;
  api_access: boolean;
  active: boolean;
  created_at: Date;
  updated_at: Date;
}

/** The columns the given fields map to (`columns`: field -> column), with their values; fields not given are left out. */
function columnsOf(columns: Record<string, string>, input: object = {}): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [field, column] of Object.entries(columns)) {
    const value = (input as Record<string, unknown>)[field];
    if (value !== undefined) out[column] = value;
  }
  return out;
}

export function planColumns(plan: PlanInput = {}): Record<string, unknown> {
  return columnsOf(PLAN_COLUMNS, plan);
}

/** The workspace with its plan: each field of PLAN_COLUMNS (in its order) with its column's value. */
export function serializeWorkspace(row: WorkspaceRow) {
  const plan = Object.fromEntries(Object.entries(PLAN_COLUMNS).map(([field, column]) => [field, row[column]]));
  return {
    id: row.id,
    name: row.name,
    plan: plan as { [F in keyof typeof PLAN_COLUMNS]: WorkspaceRow[(typeof PLAN_COLUMNS)[F]] },
    ai: {
      enabled: row.ai_enabled,
      baseUrl: row.ai_base_url,
      model: row.ai_model,
      dailyTokenBudget: row.ai_daily_token_budget,
      apiKeySet: row.ai_api_key !== null,
    },
    createdAt: iso(row.created_at),
    updatedAt: iso(row.updated_at),
  };
}

/** A plan or standing column of the workspace row (WorkspaceRow less its identity and timestamps). */
export type PlanColumn = Exclude<keyof WorkspaceRow, 'id' | 'name' | 'created_at' | 'updated_at' | `ai_${string}`>;

/**
 * The workspace's row as a query of its own, for an area that reads plan columns beside its own
 * (a sub-select of its rows in the same statement: domain/messaging's stored media room).
 */
export function workspaceQuery(db: Db, workspaceId: string): Knex.QueryBuilder {
  return db('workspaces').where({ id: workspaceId });
}

/**
 * Plan and standing columns of a workspace (undefined when it does not exist). `lock`: the row
 * locked FOR NO KEY UPDATE first, so concurrent creations of a counted thing (deals, webhook
 * subscriptions, automations, broadcasts) count one by one against the plan without blocking
 * inserts that reference the workspace.
 */
export async function workspacePlan<C extends PlanColumn>(
  db: Db,
  workspaceId: string,
  columns: readonly C[],
  options: { lock?: boolean } = {},
): Promise<Pick<WorkspaceRow, C> | undefined> {
  const q = workspaceQuery(db, workspaceId);
  if (options.lock) q.forNoKeyUpdate();
  return (await q.first(...columns)) as Pick<WorkspaceRow, C> | undefined;
}

/**
 * Plan and standing columns of many workspaces in one statement, each row with its `id` (a
 * workspace that does not exist has none): domain/automations reads a trigger batch's plans once.
 */
export async function workspacePlans<C extends PlanColumn>(
  db: Db,
  workspaceIds: readonly string[],
  columns: readonly C[],
): Promise<(Pick<WorkspaceRow, C> & { id: string })[]> {
  return (await db('workspaces')
    .whereIn('id', workspaceIds)
    .select('id', ...columns)) as (Pick<WorkspaceRow, C> & { id: string })[];
}

/**
 * Joins another area's rows to their workspace, in the caller's own statement: `alias` names the
 * workspace (its columns are then `alias.<column>`), `workspaceIdColumn` is the caller's
 * workspace id column (domain/automations: an inbound webhook's automation and its workspace's
 * standing and run rate, found by token in one statement).
 */
export function joinWorkspace(query: Knex.QueryBuilder, alias: string, workspaceIdColumn: string): Knex.QueryBuilder {
  return query.join(`workspaces as ${alias}`, `${alias}.id`, workspaceIdColumn);
}

/** Locks the workspace row FOR NO KEY UPDATE (see workspacePlan): creations counted against the plan queue one by one. */
export async function lockWorkspace(trx: Knex.Transaction, workspaceId: string): Promise<void> {
  await workspaceQuery(trx, workspaceId).forNoKeyUpdate().first('id');
}

export async function createWorkspace(db: Db, name: string, plan: PlanInput = {}): Promise<WorkspaceRow> {
  const [row] = await db('workspaces')
    .insert({ name, ...planColumns(plan) })
    .returning('*');
  return row;
}

/** Admin routes name their workspace in the path: an unknown one is 404 NOT_FOUND before anything is written. */
export async function requireWorkspace(db: Db, workspaceId: string): Promise<void> {
  const found = await db('workspaces').where({ id: workspaceId }).first('id');
  if (!found) throw notFound('Workspace');
}

export async function getWorkspace(db: Db, workspaceId: string) {
  const row: WorkspaceRow | undefined = await db('workspaces').where({ id: workspaceId }).first();
  if (!row) throw notFound('Workspace');
  return serializeWorkspace(row);
}

/** Changes the name, the plan fields and the AI settings given; the others keep their values. */
export async function updateWorkspace(
  db: Db,
  ring: KeyRing,
  workspaceId: string,
  input: { name?: string; plan?: PlanInput; ai?: AiInput },
) {
  const ai = columnsOf(AI_COLUMNS, input.ai);
  // The key is stored sealed (null clears it).
  if (typeof ai.ai_api_key === 'string') ai.ai_api_key = sealText(ring, ai.ai_api_key, aiKeyBinding(workspaceId));
  const changes = { ...(input.name ? { name: input.name } : {}), ...planColumns(input.plan), ...ai };
  const [row]: WorkspaceRow[] = await db('workspaces')
    .where({ id: workspaceId })
    .update({ ...changes, updated_at: db.fn.now() })
    .returning('*');
  if (!row) throw notFound('Workspace');
  return serializeWorkspace(row);
}

/**
 * What a suspended workspace still does, for every path that acts for it. An inactive
 * subscription stops everything that acts: the REST API, the inbound automation receiver,
 * automation runs and sends (an automation's too). API access off stops only the REST API. What
 * the workspace's customers send is still recorded (provider webhooks), so no message is lost
 * while it is suspended; its events are still delivered to its webhook subscriptions.
 */
export type WorkspacePath = 'api' | 'inboundWebhook' | 'automationRun' | 'send';

export function suspension(standing: { active: boolean; api_access: boolean }, path: WorkspacePath): ApiError | null {
  if (!standing.active) return new ApiError('SUBSCRIPTION_INACTIVE', 'The workspace subscription is inactive');
  if (path === 'api' && !standing.api_access)
    return new ApiError('API_ACCESS_DISABLED', 'API access is not available on the workspace plan');
  return null;
}

/** The AI settings a derivation uses: the workspace's own, its key opened; undefined for no such workspace. */
export async function workspaceAi(db: Db, ring: KeyRing, workspaceId: string) {
  const row: Pick<WorkspaceRow, 'ai_enabled' | 'ai_base_url' | 'ai_api_key' | 'ai_model' | 'ai_daily_token_budget'> | undefined =
    await workspaceQuery(db, workspaceId).first('ai_enabled', 'ai_base_url', 'ai_api_key', 'ai_model', 'ai_daily_token_budget');
  if (!row) return undefined;
  return {
    enabled: row.ai_enabled,
    baseUrl: row.ai_base_url,
    apiKey: row.ai_api_key === null ? null : openText(ring, row.ai_api_key, aiKeyBinding(workspaceId)),
    model: row.ai_model,
    dailyTokenBudget: row.ai_daily_token_budget,
  };
}

/** Whether the workspace derives insights (a sub-select: its row's flag). */
export async function aiEnabled(db: Db, workspaceId: string): Promise<boolean> {
  const row = await workspaceQuery(db, workspaceId).first('ai_enabled');
  return row?.ai_enabled === true;
}

/** The maintenance pass's re-seal of the workspaces' AI keys (domain/maintenance sealStoredSecrets): each not sealed with the current key and bound. */
export async function resealAiKeys(db: Db, ring: KeyRing, reseal: Resealer): Promise<number> {
  const rows: { id: string; value: string }[] = await db('workspaces')
    .whereNotNull('ai_api_key')
    .whereRaw(`ai_api_key NOT LIKE ? || id || ':%'`, [`enc:v2:${ring.current.id}:workspace.aiApiKey:`])
    .select('id', 'ai_api_key as value');
  let count = 0;
  for (const row of rows) {
    const sealed = reseal(row.value, aiKeyBinding(row.id));
    if (sealed === null) continue;
    await db('workspaces').where({ id: row.id, ai_api_key: row.value }).update({ ai_api_key: sealed });
    count++;
  }
  return count;
}
