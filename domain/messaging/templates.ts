import type { Knex } from 'knex';
import type { Db } from '../platform';
import { ApiError, iso } from '../kernel';

export const TEMPLATE_STATUSES = ['approved', 'pending', 'rejected', 'paused', 'disabled'] as const;

export interface TemplateInput {
  instanceId: string;
  name: string;
  language: string;
  variableCount: number;
  status: (typeof TEMPLATE_STATUSES)[number];
}

/** Registers a message template of one of the workspace's instances (`approved` is sendable). */
export async function createTemplate(db: Db, workspaceId: string, input: TemplateInput) {
  const instance = await db('instances').where({ id: input.instanceId, workspace_id: workspaceId }).first('id');
  if (!instance) throw new ApiError('INSTANCE_NOT_FOUND', 'Instance not found in this workspace');
  const [row] = await db('templates')
    .insert({
      workspace_id: workspaceId,
      instance_id: input.instanceId,
      name: input.name,
      language: input.language,
      variable_count: input.variableCount,
      status: input.status,
    })
    .returning('*');
  return {
    id: row.id,
    instanceId: row.instance_id,
    name: row.name,
    language: row.language,
    variableCount: row.variable_count,
    status: row.status,
    createdAt: iso(row.created_at),
  };
}

/** The approved template of this name and language on the instance, if any (what a template send needs). */
export async function approvedTemplate(
  trx: Db | Knex.Transaction,
  workspaceId: string,
  instanceId: string,
  name: string | undefined,
  language: string | undefined,
): Promise<{ variable_count: number } | undefined> {
  return trx('templates')
    .where({ workspace_id: workspaceId, instance_id: instanceId, name, language, status: 'approved' })
    .first('variable_count');
}
