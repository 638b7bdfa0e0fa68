import type { Db } from '../platform';
import { ApiError, isUuid, iso } from '../kernel';

/** A new member of the workspace; an e-mail already used there (any case) is 409 CONFLICT. */
export async function addMember(db: Db, workspaceId: string, input: { name: string; email: string }) {
  const [row] = await db('members').insert({ workspace_id: workspaceId, name: input.name, email: input.email }).returning('*');
  return { id: row.id, name: row.name, email: row.email, createdAt: iso(row.created_at) };
}

/** A `memberId` given in a panel body must be a member of the workspace (400 VALIDATION); none given passes. */
export async function requireMember(db: Db, workspaceId: string, memberId: string | undefined): Promise<void> {
  if (!memberId) return;
  const member = await db('members').where({ workspace_id: workspaceId, id: memberId }).first('id');
  if (!member) throw new ApiError('VALIDATION', 'memberId is not a member of this workspace', { hint: 'body.memberId' });
}

/**
 * A member of the workspace by id, or (when allowed) by case-insensitive name; anything else is
 * 400 ASSIGNEE_NOT_FOUND, the contract's code for an assignee who is not a member.
 */
export async function resolveMember(
  db: Db,
  workspaceId: string,
  ref: string,
  options: { byName?: boolean } = {},
): Promise<{ id: string; name: string }> {
  const q = db('members').where({ workspace_id: workspaceId });
  let rows: { id: string; name: string }[] = [];
  if (isUuid(ref)) rows = await q.clone().where({ id: ref }).select('id', 'name');
  if (rows.length === 0 && options.byName) {
    rows = await q.clone().whereRaw('lower(name) = lower(?)', [ref.trim()]).orderBy('created_at').limit(2).select('id', 'name');
    if (rows.length > 1) {
      throw new ApiError('ASSIGNEE_NOT_FOUND', `More than one member is named "${ref}"`, {
        hint: 'Pass the member id instead of the name.',
      });
    }
  }
  if (rows.length === 0) throw new ApiError('ASSIGNEE_NOT_FOUND', `"${ref}" is not a member of this workspace`);
  return rows[0];
}

/** Members' display names by id, in one query (tasks and deals expose `{ id, name }`). */
export async function memberNames(db: Db, workspaceId: string, ids: (string | null | undefined)[]): Promise<Map<string, string>> {
  const unique = [...new Set(ids.filter((id): id is string => !!id))];
  if (unique.length === 0) return new Map();
  const rows = await db('members').where({ workspace_id: workspaceId }).whereIn('id', unique).select('id', 'name');
  return new Map(rows.map((r) => [r.id, r.name]));
}

/**
 * A member's name as a column of another area's statement, read in the same statement:
 * `(SELECT members.name ...) AS <as>` for the member `memberColumn` names in the workspace
 * `workspaceColumn` names (column references of the caller's query, e.g. `deals.assigned_to`).
 */
export function memberNameSql(workspaceColumn: string, memberColumn: string, as: string): string {
  return `(SELECT members.name FROM members WHERE members.workspace_id = ${workspaceColumn} AND members.id = ${memberColumn}) AS ${as}`;
}

/** Who made a change: recorded by name (activities expose the actor by name, never by id). */
export interface Actor {
  memberId: string | null;
  name: string;
}
