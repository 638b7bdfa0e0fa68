import type { Knex } from 'knex';
import type { Db } from '../platform';
import { canonical } from './contact-refs';

/** Who a message to many is for (domain/broadcasts' audience): tags, a list, leads by id; their union. */
export interface ContactSegment {
  tagIds?: string[];
  listId?: string;
  leadIds?: string[];
}

/**
 * The canonical contacts (not deleted, merged or groups) of a segment: tagged with any of the
 * tags, in the list, or named, each once. A query of `contacts as c`: the caller picks the columns
 * and the order (`c.<column>`).
 */
export function segmentContacts(db: Db, workspaceId: string, segment: ContactSegment): Knex.QueryBuilder {
  const tagIds = segment.tagIds ?? [];
  const leadIds = segment.leadIds ?? [];
  return canonical(db('contacts as c').where('c.workspace_id', workspaceId), 'c').where((q) => {
    q.whereRaw('false');
    if (tagIds.length)
      q.orWhereExists(
        db('contact_tags as ct').whereRaw('ct.contact_id = c.id').where('ct.workspace_id', workspaceId).whereIn('ct.tag_id', tagIds),
      );
    if (segment.listId)
      q.orWhereExists(
        db('list_members as lm').whereRaw('lm.contact_id = c.id').where({ 'lm.workspace_id': workspaceId, 'lm.list_id': segment.listId }),
      );
    if (leadIds.length) q.orWhereIn('c.id', leadIds);
  });
}
