import { prepared, type Db } from './db';

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
 * (its own and the workspace's global ones). One statement whatever the number of pipelines: each
 * pipeline carries its stages and fields as JSON columns.
 */
export async function listPipelines(db: Db, workspaceId: string) {
  const { rows } = await prepared(db.raw<{ rows: { id: string; name: string; position: number; stages: unknown[]; custom_fields: unknown[] }[] }>(
    `SELECT p.id, p.name, p.position,
            coalesce((SELECT json_agg(json_build_object('id', s.id, 'name', s.name, 'order', s.position) ORDER BY s.position)
                        FROM stages s WHERE s.workspace_id = p.workspace_id AND s.pipeline_id = p.id), '[]'::json) AS stages,
            coalesce((SELECT json_agg(json_build_object('id', f.id, 'key', f.key, 'label', f.label, 'type', f.type) ORDER BY f.position, f.key)
                        FROM custom_fields f WHERE f.workspace_id = p.workspace_id AND (f.pipeline_id = p.id OR f.pipeline_id IS NULL)), '[]'::json) AS custom_fields
       FROM pipelines p
      WHERE p.workspace_id = ?
      ORDER BY p.position, p.created_at`,
    [workspaceId],
  ));
  return rows.map((p) => ({ id: p.id, name: p.name, order: p.position, stages: p.stages, customFields: p.custom_fields }));
}
