import type { Knex } from 'knex';
import type { Db } from '../platform';
import { ApiError, isUuid } from '../kernel';

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
  db: Db,
  workspaceId: string,
  contactId: string,
  options: { forUpdate?: boolean } = {},
): Promise<T> {
  const q = canonical(db('contacts').where({ workspace_id: workspaceId, id: contactId }));
  if (options.forUpdate) q.forUpdate();
  const row = isUuid(contactId) ? await q.first() : undefined;
  if (!row) throw new ApiError('CONTACT_NOT_FOUND', 'Contact not found');
  return row as T;
}

/**
 * The id, name, email and phone of these contacts of the workspace, whatever their state: merged,
 * soft-deleted and group contacts included (domain/automations: a run's `contact.*` variables, and
 * its error cleared of the data of the contacts it named, which may have been deleted since).
 */
export async function contactsPersonalData(
  db: Db,
  workspaceId: string,
  contactIds: string[],
): Promise<{ id: string; name: string | null; email: string | null; phone: string | null }[]> {
  return db('contacts').where({ workspace_id: workspaceId }).whereIn('id', contactIds).select('id', 'name', 'email', 'phone');
}

/** `contacts`, aliased unless the alias is the table's own name (the statement's text then stays as it was). */
const contactsAs = (alias: string) => (alias === 'contacts' ? 'contacts' : `contacts as ${alias}`);

/**
 * Joins another area's rows to their contact, keeping only rows whose contact is canonical (the
 * `canonical` condition on `alias`): `on.id` is the caller's contact id column, `on.workspaceId`
 * (optional) its workspace column, matched too. The contact's columns are then `alias.<column>`.
 */
export function joinCanonicalContact(query: Knex.QueryBuilder, alias: string, on: { id: string; workspaceId?: string }): Knex.QueryBuilder {
  const joined = on.workspaceId
    ? query.join(contactsAs(alias), function joinContact() {
        this.on(`${alias}.id`, '=', on.id).andOn(`${alias}.workspace_id`, '=', on.workspaceId!);
      })
    : query.join(contactsAs(alias), `${alias}.id`, on.id);
  return canonical(joined, alias);
}

/**
 * Joins another area's rows to their contact only when it is canonical (a LEFT JOIN with the
 * `canonical` condition in its ON): a row whose contact was merged, soft-deleted or is a group chat
 * keeps its place with the contact's columns null, so a hidden contact never leaks.
 */
export function leftJoinCanonicalContact(query: Knex.QueryBuilder, alias: string, contactIdColumn: string): Knex.QueryBuilder {
  return query.leftJoin(contactsAs(alias), (j) => {
    j.on(`${alias}.id`, '=', contactIdColumn)
      .andOnNull(`${alias}.merged_into_id`)
      .andOnNull(`${alias}.deleted_at`)
      .andOnVal(`${alias}.is_group`, '=', false);
  });
}
