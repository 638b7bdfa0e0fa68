import { z } from 'zod';
import type { Db } from './db';
import { ApiError, notFound } from './errors';
import { iso } from './time';

/** A plan limit: what the `integer` column holds (a larger one is 400 VALIDATION, not a database error); null is unlimited. */
const limit = z.number().int().min(0).max(2_147_483_647).nullable();

/** Plan limits of a workspace; null (or absent) means unlimited. */
export const planSchema = z
  .object({
    dealLimit: limit,
    dailyMessageQuota: limit,
    broadcastLimit: limit,
    inboundWebhookQuota: limit,
    webhookQuota: limit,
    automationLimit: limit,
    automationRunsPerMinute: limit,
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
  apiAccess: 'api_access',
  active: 'active',
} as const;

export interface WorkspaceRow {
  id: string;
  name: string;
  deal_limit: number | null;
  daily_message_quota: number | null;
  broadcast_limit: number | null;
  inbound_webhook_quota: number | null;
  webhook_quota: number | null;
  automation_limit: number | null;
  automation_runs_per_minute: number | null;
  api_access: boolean;
  active: boolean;
  created_at: Date;
  updated_at: Date;
}

export function planColumns(plan: PlanInput = {}): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [field, column] of Object.entries(PLAN_COLUMNS)) {
    const value = plan[field as keyof PlanInput];
    if (value !== undefined) out[column] = value;
  }
  return out;
}

export function serializeWorkspace(row: WorkspaceRow) {
  return {
    id: row.id,
    name: row.name,
    plan: {
      dealLimit: row.deal_limit,
      dailyMessageQuota: row.daily_message_quota,
      broadcastLimit: row.broadcast_limit,
      inboundWebhookQuota: row.inbound_webhook_quota,
      webhookQuota: row.webhook_quota,
      automationLimit: row.automation_limit,
      automationRunsPerMinute: row.automation_runs_per_minute,
      apiAccess: row.api_access,
      active: row.active,
    },
    createdAt: iso(row.created_at),
    updatedAt: iso(row.updated_at),
  };
}

export async function createWorkspace(db: Db, name: string, plan: PlanInput = {}): Promise<WorkspaceRow> {
  const [row] = await db('workspaces').insert({ name, ...planColumns(plan) }).returning('*');
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

/** Changes the name and the plan fields given; the others keep their values. */
export async function updateWorkspace(db: Db, workspaceId: string, input: { name?: string; plan?: PlanInput }) {
  const changes = { ...(input.name ? { name: input.name } : {}), ...planColumns(input.plan) };
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
  if (path === 'api' && !standing.api_access) return new ApiError('API_ACCESS_DISABLED', 'API access is not available on the workspace plan');
  return null;
}
