import type { Knex } from 'knex';
import type { Db } from '../platform';
import { ApiError, newestFirst, notFound, Page, pageWithTotal, isUuid, iso } from '../kernel';
import { canonical, requireContact } from './contact-refs';
import { ContactRow, serializeLeads } from './contacts';

export const MAX_LIST_ADD = 1000;

interface ListRow {
  id: string;
  name: string;
  created_at: Date;
  updated_at: Date;
  contact_count: number;
}

export function serializeList(row: ListRow) {
  return { id: row.id, name: row.name, contactCount: row.contact_count, createdAt: iso(row.created_at), updatedAt: iso(row.updated_at) };
}

/**
 * The exact number of canonical contacts in the list of the outer row `lists`, as a correlated
 * subquery: a page of lists gets all its counts in the same single statement.
 */
function contactCount(db: Db): Knex.Raw {
  return db.raw(
    `(SELECT count(*) FROM list_members lm JOIN contacts c ON c.id = lm.contact_id
       WHERE lm.list_id = lists.id
         AND c.merged_into_id IS NULL AND c.deleted_at IS NULL AND NOT c.is_group)::int AS contact_count`,
  );
}

const columns = (db: Db) => ['lists.id', 'lists.name', 'lists.created_at', 'lists.updated_at', contactCount(db)];

/** Newest first (then id); two statements whatever the page size. */
export async function listLists(db: Db, workspaceId: string, page: Page) {
  const scope = db('lists').where({ workspace_id: workspaceId });
  const { rows, total } = await pageWithTotal<ListRow>(scope, page, (q) => q.orderBy(newestFirst()).select(columns(db)));
  return { rows: rows.map(serializeList), total };
}

export async function getList(db: Db, workspaceId: string, listId: string) {
  if (!isUuid(listId)) throw notFound('List');
  const row: ListRow | undefined = await db('lists').where({ workspace_id: workspaceId, id: listId }).first(columns(db));
  if (!row) throw notFound('List');
  return serializeList(row);
}

export async function createList(db: Db, workspaceId: string, input: { name: string }) {
  const [row] = await db('lists')
    .insert({ workspace_id: workspaceId, name: input.name })
    .returning(['id', 'name', 'created_at', 'updated_at']);
  return serializeList({ ...row, contact_count: 0 });
}

export async function renameList(db: Db, workspaceId: string, listId: string, input: { name: string }) {
  if (!isUuid(listId)) throw notFound('List');
  // An unknown list updates nothing, and getList answers 404 for it.
  await db('lists').where({ workspace_id: workspaceId, id: listId }).update({ name: input.name, updated_at: db.fn.now() });
  return getList(db, workspaceId, listId);
}

/** Deletes the list and its memberships (the contacts stay). */
export async function deleteList(db: Db, workspaceId: string, listId: string): Promise<{ id: string; deleted: true }> {
  if (!isUuid(listId)) throw notFound('List');
  const deleted = await db('lists').where({ workspace_id: workspaceId, id: listId }).delete().returning('id');
  if (deleted.length === 0) throw notFound('List');
  return { id: listId, deleted: true };
}

/** The list row share-locked for the transaction, so it cannot be deleted under a membership change. */
async function lockList(trx: Knex.Transaction, workspaceId: string, listId: string): Promise<void> {
  if (!isUuid(listId)) throw notFound('List');
  const found = await trx('lists').where({ workspace_id: workspaceId, id: listId }).forShare().first('id');
  if (!found) throw notFound('List');
}

/**
 * Adds canonical contacts of the workspace to a list, all or nothing: one id that is not such a
 * contact (unknown, malformed, deleted, merged, group, other workspace) is 404 CONTACT_NOT_FOUND
 * and nothing is added. A contact already in the list is left as it is.
 */
export async function addContactsToList(db: Db, workspaceId: string, listId: string, contactIds: string[]) {
  const unique = [...new Set(contactIds)];
  return db.transaction(async (trx) => {
    await lockList(trx, workspaceId, listId);
    const ids = unique.filter(isUuid);
    // Share locks keep the contacts canonical until the memberships are written.
    const found: string[] = ids.length
      ? await canonical(trx('contacts').where({ workspace_id: workspaceId }).whereIn('id', ids))
          .forShare()
          .pluck('id')
      : [];
    if (found.length !== unique.length) {
      const missing = unique.filter((id) => !found.includes(id));
      throw new ApiError('CONTACT_NOT_FOUND', `${missing.length} contact${missing.length > 1 ? 's' : ''} not found; nothing was added`, {
        hint: `Not found: ${missing.slice(0, 10).join(', ')}${missing.length > 10 ? ', ...' : ''}`,
      });
    }
    const inserted = await trx('list_members')
      .insert(unique.map((contactId) => ({ workspace_id: workspaceId, list_id: listId, contact_id: contactId })))
      .onConflict(['list_id', 'contact_id'])
      .ignore()
      .returning('contact_id');
    if (inserted.length) await trx('lists').where({ id: listId }).update({ updated_at: trx.fn.now() });
    const list = await getList(trx, workspaceId, listId);
    return { listId, added: inserted.length, contactCount: list.contactCount };
  });
}

/** Removes one canonical contact from a list; `removed` is false when it was not in the list. */
export async function removeContactFromList(db: Db, workspaceId: string, listId: string, contactId: string) {
  return db.transaction(async (trx) => {
    await lockList(trx, workspaceId, listId);
    await requireContact(trx, workspaceId, contactId);
    const deleted = await trx('list_members').where({ workspace_id: workspaceId, list_id: listId, contact_id: contactId }).delete();
    if (deleted) await trx('lists').where({ id: listId }).update({ updated_at: trx.fn.now() });
    return { listId, contactId, removed: deleted > 0 };
  });
}

/**
 * The canonical contacts of a list as Leads, most recently added first. Four statements per page
 * (list check, page, total, tags of the page) whatever the page size.
 */
export async function listContactsOfList(db: Db, workspaceId: string, listId: string, page: Page) {
  if (!(await listExists(db, workspaceId, listId))) throw notFound('List');
  const scope = canonical(
    db('list_members as lm')
      .join('contacts', 'contacts.id', 'lm.contact_id')
      .where({ 'lm.workspace_id': workspaceId, 'lm.list_id': listId, 'contacts.workspace_id': workspaceId }),
  );
  const { rows, total } = await pageWithTotal<ContactRow>(scope, page, (q) =>
    q.orderBy(newestFirst('lm.created_at', 'lm.contact_id')).select('contacts.*'),
  );
  return { rows: await serializeLeads(db, rows), total };
}

/** Whether `listId` is a list of the workspace (a malformed id is none). */
export async function listExists(db: Db, workspaceId: string, listId: string): Promise<boolean> {
  return isUuid(listId) && !!(await db('lists').where({ workspace_id: workspaceId, id: listId }).first('id'));
}
