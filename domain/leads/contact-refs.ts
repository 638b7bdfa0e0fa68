import type { Knex } from 'knex';
import type { Db } from '../platform';
import { ApiError, ErrorCode, isUuid } from '../kernel';

type Reader = Db | Knex.Transaction;

/** Only canonical contacts are ever visible: not merged, not soft-deleted, not group chats. */
// The same condition keeps contact_counts exact (migration 20261122005900): change both together.
export function canonical(query: Knex.QueryBuilder, alias = 'contacts'): Knex.QueryBuilder {
  // `NOT is_group` as written, not a bound `false`: a prepared statement's generic plan can then use
  // the partial indexes (their predicate is `NOT is_group`), which a parameter would rule out.
  return query
    .whereNull(`${alias}.merged_into_id`)
    .whereNull(`${alias}.deleted_at`)
    .whereRaw('NOT ??', [`${alias}.is_group`]);
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
