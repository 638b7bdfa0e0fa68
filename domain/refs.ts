import type { Knex } from 'knex';
import { ApiError, ErrorCode } from './errors';
import type { Db } from './db';

type Reader = Db | Knex.Transaction;

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/** References in bodies and filters may be an id or a name; only a uuid-shaped one is tried as an id. */
export function isUuid(value: string): boolean {
  return UUID.test(value);
}

/** Only canonical contacts are ever visible: not merged, not soft-deleted, not group chats. */
// The same condition keeps contact_counts exact (migration 20261122005900): change both together.
export function canonical(query: Knex.QueryBuilder, alias = 'contacts'): Knex.QueryBuilder {
  // `NOT is_group` as written, not a bound `false`: a prepared statement's generic plan can then use
  // the partial indexes (their predicate is `NOT is_group`), which a parameter would rule out.
  return query.whereNull(`${alias}.merged_into_id`).whereNull(`${alias}.deleted_at`).whereRaw('NOT ??', [`${alias}.is_group`]);
}

/**
 * A canonical contact of the workspace, or 404 CONTACT_NOT_FOUND: a deleted, merged, group or
 * foreign contact is indistinguishable from one that never existed.
 */
export async function requireContact<T = { id: string; name: string; phone: string; email: string | null }>(
  db: Reader,
  workspaceId: string,
  contactId: string,
  options: { forUpdate?: boolean; code?: ErrorCode } = {},
): Promise<T> {
  if (!isUuid(contactId)) throw new ApiError(options.code ?? 'CONTACT_NOT_FOUND', 'Contact not found');
  let q = canonical(db('contacts').where({ workspace_id: workspaceId, id: contactId }));
  if (options.forUpdate) q = q.forUpdate();
  const row = await q.first();
  if (!row) throw new ApiError(options.code ?? 'CONTACT_NOT_FOUND', 'Contact not found');
  return row as T;
}

/**
 * A member of the workspace by id, or (when allowed) by case-insensitive name; anything else is
 * 400 ASSIGNEE_NOT_FOUND, the contract's code for an assignee who is not a member.
 */
export async function resolveMember(
  db: Reader,
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
      throw new ApiError('ASSIGNEE_NOT_FOUND', `More than one member is named "${ref}"`, { hint: 'Pass the member id instead of the name.' });
    }
  }
  if (rows.length === 0) throw new ApiError('ASSIGNEE_NOT_FOUND', `"${ref}" is not a member of this workspace`);
  return rows[0];
}

/** Members' display names by id, in one query (tasks and deals expose `{ id, name }`). */
export async function memberNames(db: Reader, workspaceId: string, ids: (string | null | undefined)[]): Promise<Map<string, string>> {
  const unique = [...new Set(ids.filter((id): id is string => !!id))];
  if (unique.length === 0) return new Map();
  const rows = await db('members').where({ workspace_id: workspaceId }).whereIn('id', unique).select('id', 'name');
  return new Map(rows.map((r) => [r.id, r.name]));
}

/** Who made a change: recorded by name (activities expose the actor by name, never by id). */
export interface Actor {
  memberId: string | null;
  name: string;
}
