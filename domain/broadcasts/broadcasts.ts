import type { Knex } from 'knex';
import type { Db } from '../platform';
import { ApiError, iso } from '../kernel';
import { existingTagIds } from '../leads';
import { TAG_BLOCKING_STATUSES } from './resource';

export const BROADCAST_STATUSES = ['draft', 'scheduled', 'in_progress', 'paused', 'completed', 'cancelled'] as const;

/**
 * Records a broadcast and the tags it uses, all of the workspace (an unknown tag is 404
 * NOT_FOUND); a `scheduled`, `in_progress` or `paused` one blocks deleting those tags (refuseTagInUse).
 * The admin API's record for operators' tests: it starts no workflow (see resource.ts for the public one).
 */
export async function createBroadcast(
  db: Db,
  workspaceId: string,
  input: { tagIds: string[]; status: (typeof BROADCAST_STATUSES)[number] },
) {
  const tagIds = [...new Set(input.tagIds)];
  return db.transaction(async (trx) => {
    const found = await existingTagIds(trx, workspaceId, tagIds);
    if (found.length !== tagIds.length) throw new ApiError('NOT_FOUND', 'Tag not found in this workspace');
    const [row] = await trx('broadcasts').insert({ workspace_id: workspaceId, status: input.status }).returning('*');
    if (tagIds.length) {
      await trx('broadcast_tags').insert(tagIds.map((tagId) => ({ workspace_id: workspaceId, broadcast_id: row.id, tag_id: tagId })));
    }
    return { id: row.id, status: row.status, tagIds, createdAt: iso(row.created_at) };
  });
}

/**
 * A tag used by a broadcast that has not finished (scheduled, in progress or paused) cannot be
 * deleted: 409 TAG_IN_USE. The guard of domain/leads deleteTag, run once the tag row is locked
 * (which blocks a concurrent insert of a broadcast_tags row referencing it: the foreign-key check
 * needs a share lock on the tag); the broadcasts using it are then share-locked, so a broadcast
 * being switched to `in_progress` concurrently is either seen as in progress or waits until the
 * tag is gone.
 */
export async function refuseTagInUse(trx: Knex.Transaction, workspaceId: string, tagId: string): Promise<void> {
  const { rows } = await trx.raw(
    `SELECT b.id, b.status FROM broadcasts b
       JOIN broadcast_tags bt ON bt.broadcast_id = b.id
      WHERE bt.workspace_id = ? AND bt.tag_id = ?
      FOR SHARE OF b`,
    [workspaceId, tagId],
  );
  const blocking: readonly string[] = TAG_BLOCKING_STATUSES;
  const inProgress = (rows as { id: string; status: string }[]).filter((b) => blocking.includes(b.status));
  if (inProgress.length) {
    throw new ApiError('TAG_IN_USE', 'The tag is used by a broadcast in progress', {
      hint: `Broadcast${inProgress.length > 1 ? 's' : ''} ${inProgress
        .slice(0, 5)
        .map((b) => b.id)
        .join(', ')}; retry when finished.`,
    });
  }
}
