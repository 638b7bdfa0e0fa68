import type { Knex } from 'knex';
import type { Db } from '../platform';
import { ApiError, isPgError, notFound, Page, pageWithTotal, likeContains, isUuid, iso } from '../kernel';

export const DEFAULT_TAG_COLOR = '#6b7280';
/** `#rrggbb`; stored and returned in lower case. */
export const TAG_COLOR = /^#[0-9a-fA-F]{6}$/;

export interface TagRow {
  id: string;
  workspace_id: string;
  name: string;
  color: string;
  created_at: Date;
}

export function serializeTag(row: TagRow) {
  return { id: row.id, name: row.name, color: row.color, createdAt: iso(row.created_at) };
}

const nameTaken = (name: string) =>
  new ApiError('CONFLICT', `A tag named "${name}" already exists in this workspace`, { hint: 'Tag names are unique regardless of case.' });

/** Tags of the workspace ordered by name (case-insensitive) then id; `q` matches part of the name. */
export async function listTags(db: Db, workspaceId: string, input: Page & { q?: string }) {
  const scope = db('tags').where({ workspace_id: workspaceId });
  if (input.q) scope.whereRaw(`lower(name) LIKE ? ESCAPE '\\'`, [likeContains(input.q)]);
  const { rows, total } = await pageWithTotal<TagRow>(scope, input, (q) => q.orderByRaw('lower(name), id').select('*'));
  return { rows: rows.map(serializeTag), total };
}

export async function getTag(db: Db, workspaceId: string, tagId: string) {
  if (!isUuid(tagId)) throw notFound('Tag');
  const row: TagRow | undefined = await db('tags').where({ workspace_id: workspaceId, id: tagId }).first();
  if (!row) throw notFound('Tag');
  return serializeTag(row);
}

/** A new tag; a name already used in the workspace (any case) is 409 CONFLICT, also under concurrency. */
export async function createTag(db: Db, workspaceId: string, input: { name: string; color?: string }) {
  const { rows } = await db.raw(
    `INSERT INTO tags (workspace_id, name, color) VALUES (?, ?, ?)
     ON CONFLICT (workspace_id, lower(name)) DO NOTHING RETURNING *`,
    [workspaceId, input.name, (input.color ?? DEFAULT_TAG_COLOR).toLowerCase()],
  );
  if (rows.length === 0) throw nameTaken(input.name);
  return serializeTag(rows[0]);
}

export async function updateTag(db: Db, workspaceId: string, tagId: string, input: { name?: string; color?: string }) {
  if (!isUuid(tagId)) throw notFound('Tag');
  const changes: Record<string, string> = {};
  if (input.name !== undefined) changes.name = input.name;
  if (input.color !== undefined) changes.color = input.color.toLowerCase();
  const rows: TagRow[] = await db('tags')
    .where({ workspace_id: workspaceId, id: tagId })
    .update(changes)
    .returning('*')
    .catch((err) => {
      throw isPgError(err, '23505') ? nameTaken(input.name ?? '') : err;
    });
  if (rows.length === 0) throw notFound('Tag');
  return serializeTag(rows[0]);
}

/**
 * The ids among `tagIds` that are tags of the workspace. `lock: 'share'`: those tags share-locked
 * until commit, so none is deleted while the caller records a reference to it (a broadcast's).
 */
export async function existingTagIds(db: Db, workspaceId: string, tagIds: string[], options: { lock?: 'share' } = {}): Promise<string[]> {
  const q = db('tags').where({ workspace_id: workspaceId }).whereIn('id', tagIds);
  if (options.lock === 'share') q.forShare();
  return q.pluck('id');
}

/**
 * Refuses to delete a tag another area still uses (409 TAG_IN_USE): given by the caller, run in
 * the deletion's transaction once the tag row is locked (domain/broadcasts refuseTagInUse: leads
 * cannot import broadcasts).
 */
export type TagDeletionGuard = (trx: Knex.Transaction, workspaceId: string, tagId: string) => Promise<void>;

/**
 * Deletes a tag unless `guard` refuses it (the API's: a broadcast that has not finished uses it,
 * 409 TAG_IN_USE). The tag row is locked first (which blocks a concurrent insert of a row
 * referencing it: the foreign-key check needs a share lock on the tag), then the guard runs.
 * Contact assignments go with the tag (ON DELETE CASCADE) without `contact.tag_removed` events:
 * deleting a tag is not a per-contact removal.
 */
export async function deleteTag(
  db: Db,
  workspaceId: string,
  tagId: string,
  guard: TagDeletionGuard,
): Promise<{ id: string; deleted: true }> {
  if (!isUuid(tagId)) throw notFound('Tag');
  return db.transaction(async (trx) => {
    const tag = await trx('tags').where({ workspace_id: workspaceId, id: tagId }).forUpdate().first('id');
    if (!tag) throw notFound('Tag');
    await guard(trx, workspaceId, tagId);
    await trx('tags').where({ workspace_id: workspaceId, id: tagId }).delete();
    return { id: tagId, deleted: true as const };
  });
}
