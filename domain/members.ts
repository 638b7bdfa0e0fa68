import type { Db } from './db';
import { ApiError } from './errors';
import { iso } from './time';

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
