import type { Db } from './db';

export const CUSTOM_FIELD_TYPES = ['text', 'number', 'date', 'boolean', 'select', 'multiselect', 'url', 'email', 'phone'] as const;

export interface PipelineInput {
  name: string;
  stages: { name: string }[];
  customFields: { key: string; label: string; type: (typeof CUSTOM_FIELD_TYPES)[number] }[];
}

/** Creates a pipeline at the end of the display order, its stages in funnel order and its custom fields. */
export async function createPipeline(db: Db, workspaceId: string, input: PipelineInput): Promise<string> {
  return db.transaction(async (trx) => {
    // Serialise position allocation per workspace.
    await trx.raw('SELECT pg_advisory_xact_lock(hashtext(?))', [`pipelines:${workspaceId}`]);
    const { next } = await trx('pipelines').where({ workspace_id: workspaceId }).first(trx.raw('coalesce(max(position) + 1, 0)::int AS next'));
    const [pipeline] = await trx('pipelines').insert({ workspace_id: workspaceId, name: input.name, position: next }).returning('id');
    if (input.stages.length) {
      await trx('stages').insert(
        input.stages.map((s, i) => ({ workspace_id: workspaceId, pipeline_id: pipeline.id, name: s.name, position: i })),
      );
    }
    if (input.customFields.length) {
      await trx('custom_fields').insert(
        input.customFields.map((f, i) => ({ workspace_id: workspaceId, pipeline_id: pipeline.id, key: f.key, label: f.label, type: f.type, position: i })),
      );
    }
    return pipeline.id as string;
  });
}

/**
 * Pipelines in display order with stages in funnel order and the custom fields accepted on each
 * (its own and the workspace's global ones). Three queries whatever the number of pipelines.
 */
export async function listPipelines(db: Db, workspaceId: string) {
  const [pipelines, stages, fields] = await Promise.all([
    db('pipelines').where({ workspace_id: workspaceId }).orderBy([{ column: 'position' }, { column: 'created_at' }]).select('id', 'name', 'position'),
    db('stages').where({ workspace_id: workspaceId }).orderBy([{ column: 'pipeline_id' }, { column: 'position' }]).select('id', 'pipeline_id', 'name', 'position'),
    db('custom_fields').where({ workspace_id: workspaceId }).orderBy([{ column: 'position' }, { column: 'key' }]).select('id', 'pipeline_id', 'key', 'label', 'type'),
  ]);
  return pipelines.map((p) => ({
    id: p.id,
    name: p.name,
    order: p.position,
    stages: stages.filter((s) => s.pipeline_id === p.id).map((s) => ({ id: s.id, name: s.name, order: s.position })),
    customFields: fields
      .filter((f) => f.pipeline_id === p.id || f.pipeline_id === null)
      .map((f) => ({ id: f.id, key: f.key, label: f.label, type: f.type })),
  }));
}
