import type { Db } from '../platform';
import { ApiError, iso } from '../kernel';

export const BROADCAST_STATUSES = ['draft', 'scheduled', 'in_progress', 'paused', 'completed', 'cancelled'] as const;

/**
 * Records a broadcast and the tags it uses, all of the workspace (an unknown tag is 404
 * NOT_FOUND); a `scheduled`, `in_progress` or `paused` one blocks deleting those tags (deleteTag).
 * The admin API's record for operators' tests: it starts no workflow (see resource.ts for the public one).
 */
export async function createBroadcast(
  db: Db,
  workspaceId: string,
  input: { tagIds: string[]; status: (typeof BROADCAST_STATUSES)[number] },
) {
  const tagIds = [...new Set(input.tagIds)];
  return db.transaction(async (trx) => {
    const found = await trx('tags').where({ workspace_id: workspaceId }).whereIn('id', tagIds).pluck('id');
    if (found.length !== tagIds.length) throw new ApiError('NOT_FOUND', 'Tag not found in this workspace');
    const [row] = await trx('broadcasts').insert({ workspace_id: workspaceId, status: input.status }).returning('*');
    if (tagIds.length) {
      await trx('broadcast_tags').insert(tagIds.map((tagId) => ({ workspace_id: workspaceId, broadcast_id: row.id, tag_id: tagId })));
    }
    return { id: row.id, status: row.status, tagIds, createdAt: iso(row.created_at) };
  });
}
