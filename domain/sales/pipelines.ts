import type { Knex } from 'knex';
import { z } from 'zod';
import { lockUntilCommit, prepared, type Db } from '../platform';
import { ApiError, trimmedText } from '../kernel';

export const CUSTOM_FIELD_TYPES = ['text', 'number', 'date', 'boolean', 'select', 'multiselect', 'url', 'email', 'phone'] as const;

/** A custom field as the admin API takes it, a pipeline's or a global one. */
export const customFieldSchema = z.object({
  key: z.string().regex(/^[A-Za-z][A-Za-z0-9_]{0,63}$/, 'letters, digits and _, starting with a letter'),
  label: trimmedText(200),
  type: z.enum(CUSTOM_FIELD_TYPES),
});

/** The most custom fields a pipeline is created with, and the most global fields a workspace holds. */
export const MAX_CUSTOM_FIELDS = 200;

export interface PipelineInput {
  name: string;
  stages: { name: string }[];
  customFields: { key: string; label: string; type: (typeof CUSTOM_FIELD_TYPES)[number] }[];
}

/** Creates a pipeline at the end of the display order, its stages in funnel order and its custom fields. */
export async function createPipeline(db: Db, workspaceId: string, input: PipelineInput): Promise<string> {
  return db.transaction(async (trx) => {
    // Serialise position allocation per workspace, and custom field keys against global fields.
    await lockFields(trx, workspaceId);
    await refuseTakenKeys(
      trx,
      workspaceId,
      input.customFields.map((f) => f.key),
      'global',
    );
    const { next } = await trx('pipelines')
      .where({ workspace_id: workspaceId })
      .first(trx.raw('coalesce(max(position) + 1, 0)::int AS next'));
    const [pipeline] = await trx('pipelines').insert({ workspace_id: workspaceId, name: input.name, position: next }).returning('id');
    if (input.stages.length) {
      await trx('stages').insert(
        input.stages.map((s, i) => ({ workspace_id: workspaceId, pipeline_id: pipeline.id, name: s.name, position: i })),
      );
    }
    if (input.customFields.length) {
      await trx('custom_fields').insert(
        input.customFields.map((f, i) => ({
          workspace_id: workspaceId,
          pipeline_id: pipeline.id,
          key: f.key,
          label: f.label,
          type: f.type,
          position: i,
        })),
      );
    }
    return pipeline.id as string;
  });
}

type Trx = Knex.Transaction;

/** One lock per workspace for pipelines and custom fields: a key is checked and inserted under it. */
function lockFields(trx: Trx, workspaceId: string) {
  return lockUntilCommit(trx, `pipelines:${workspaceId}`);
}

/**
 * A key names one field on every pipeline it reaches (a deal's customValues are keyed by it), so a
 * pipeline's own field and a global one never share a key: 409 CONFLICT, whichever comes second.
 * `among`: the global fields (a new pipeline's keys), or every field (a new global key).
 */
async function refuseTakenKeys(trx: Trx, workspaceId: string, keys: string[], among: 'global' | 'all'): Promise<void> {
  if (keys.length === 0) return;
  const taken = await trx('custom_fields')
    .where({ workspace_id: workspaceId })
    .whereIn('key', keys)
    .modify((q) => (among === 'global' ? q.whereNull('pipeline_id') : q))
    .first('key', 'pipeline_id');
  if (!taken) return;
  throw new ApiError('CONFLICT', `A custom field with the key "${taken.key}" already exists`, {
    hint: taken.pipeline_id
      ? `Pipeline ${taken.pipeline_id} has it; a global field's key must differ from every pipeline's own keys.`
      : 'A global field has it, and global fields apply to every pipeline.',
  });
}

/**
 * A global custom field: accepted in every pipeline's `customFields` (those created later too) and
 * in every deal's `customValues`. Its key is unique among all the workspace's fields (see
 * refuseTakenKeys); a workspace holds at most MAX_CUSTOM_FIELDS global fields (400 VALIDATION).
 */
export async function createGlobalCustomField(db: Db, workspaceId: string, input: z.infer<typeof customFieldSchema>) {
  return db.transaction(async (trx) => {
    await lockFields(trx, workspaceId);
    await refuseTakenKeys(trx, workspaceId, [input.key], 'all');
    const { count, next } = await trx('custom_fields')
      .where({ workspace_id: workspaceId })
      .whereNull('pipeline_id')
      .first(trx.raw('count(*)::int AS count'), trx.raw('coalesce(max(position) + 1, 0)::int AS next'));
    if (count >= MAX_CUSTOM_FIELDS) {
      throw new ApiError('VALIDATION', `A workspace holds at most ${MAX_CUSTOM_FIELDS} global custom fields`);
    }
    const [field] = await trx('custom_fields')
      .insert({ workspace_id: workspaceId, pipeline_id: null, key: input.key, label: input.label, type: input.type, position: next })
      .returning(['id', 'key', 'label', 'type']);
    return { id: field.id as string, key: field.key as string, label: field.label as string, type: field.type as string };
  });
}

/**
 * Pipelines in display order with stages in funnel order and the custom fields accepted on each
 * (its own and the workspace's global ones). One statement whatever the number of pipelines: each
 * pipeline carries its stages and fields as JSON columns.
 */
export async function listPipelines(db: Db, workspaceId: string) {
  const { rows } = await prepared(
    db.raw<{ rows: { id: string; name: string; position: number; stages: unknown[]; custom_fields: unknown[] }[] }>(
      `SELECT p.id, p.name, p.position,
            coalesce((SELECT json_agg(json_build_object('id', s.id, 'name', s.name, 'order', s.position) ORDER BY s.position)
                        FROM stages s WHERE s.workspace_id = p.workspace_id AND s.pipeline_id = p.id), '[]'::json) AS stages,
            coalesce((SELECT json_agg(json_build_object('id', f.id, 'key', f.key, 'label', f.label, 'type', f.type) ORDER BY f.position, f.key)
                        FROM custom_fields f WHERE f.workspace_id = p.workspace_id AND (f.pipeline_id = p.id OR f.pipeline_id IS NULL)), '[]'::json) AS custom_fields
       FROM pipelines p
      WHERE p.workspace_id = ?
      ORDER BY p.position, p.created_at`,
      [workspaceId],
    ),
  );
  return rows.map((p) => ({ id: p.id, name: p.name, order: p.position, stages: p.stages, customFields: p.custom_fields }));
}
