import type { Knex } from 'knex';
import { ApiError } from './errors';
import type { Db } from './db';
import { recordEvent, recordTrigger } from './outbox';
import { parsePhone, Phone } from './phone';
import { iso } from './time';
import { canonical, isUuid } from './refs';


export function requirePhone(input: string): Phone {
  const parsed = parsePhone(input);
  if (!parsed.ok) throw new ApiError('INVALID_PHONE', `Invalid phone: ${parsed.reason}`, { hint: 'Use 55 + area code + number, e.g. +55 11 98765-4321.' });
  return parsed.phone;
}

export interface ContactRow {
  id: string;
  workspace_id: string;
  name: string;
  phone: string;
  email: string | null;
  notes: string;
  created_at: Date;
  updated_at: Date;
}

export async function tagsOf(db: Db | Knex.Transaction, contactIds: string[]) {
  if (contactIds.length === 0) return new Map<string, { id: string; name: string; color: string }[]>();
  const rows = await db('contact_tags as ct')
    .join('tags as t', 't.id', 'ct.tag_id')
    .whereIn('ct.contact_id', contactIds)
    .orderBy([{ column: 't.name' }])
    .select('ct.contact_id', 't.id', 't.name', 't.color');
  const map = new Map<string, { id: string; name: string; color: string }[]>();
  for (const r of rows) map.set(r.contact_id, [...(map.get(r.contact_id) ?? []), { id: r.id, name: r.name, color: r.color }]);
  return map;
}

export function serializeLead(row: ContactRow, tags: { id: string; name: string; color: string }[]) {
  return {
    id: row.id,
    name: row.name,
    phone: row.phone,
    email: row.email,
    notes: row.notes,
    tags,
    createdAt: iso(row.created_at),
    updatedAt: iso(row.updated_at),
  };
}

/** Resolves tag ids or names (case-insensitive) of the workspace; an unknown one is 404. */
export async function resolveTags(trx: Db | Knex.Transaction, workspaceId: string, refs: string[]): Promise<{ id: string; name: string }[]> {
  const unique = [...new Set(refs)];
  if (unique.length === 0) return [];
  const rows: { id: string; name: string }[] = await trx('tags')
    .where({ workspace_id: workspaceId })
    .where((q) => {
      const ids = unique.filter(isUuid);
      if (ids.length) q.whereIn('id', ids);
      q.orWhereIn(trx.raw('lower(name)') as never, unique.map((r) => r.toLowerCase()));
    })
    .select('id', 'name');
  for (const ref of unique) {
    if (!rows.some((t) => t.id === ref || t.name.toLowerCase() === ref.toLowerCase())) throw new ApiError('NOT_FOUND', `Tag "${ref}" not found`);
  }
  return rows;
}

export interface PanelContactInput {
  name?: string;
  email?: string | null;
  phone?: string;
  notes?: string;
  tags?: string[];
}

/**
 * A human's edit in the CRM panel: emits contact.created / contact.updated, tag events with
 * source `manual`, and the contact_updated trigger with the changed fields, all in the
 * transaction of the change.
 */
export async function panelCreateContact(db: Db, workspaceId: string, input: PanelContactInput & { phone: string }) {
  const phone = requirePhone(input.phone);
  return db.transaction(async (trx) => {
    const existing = await canonical(trx('contacts').where({ workspace_id: workspaceId, phone_key: phone.key })).first('id');
    if (existing) throw new ApiError('CONFLICT', 'A contact with this phone already exists', { hint: `Contact ${existing.id}.` });
    const [row]: ContactRow[] = await trx('contacts')
      .insert({ workspace_id: workspaceId, name: input.name ?? '', phone: phone.digits, phone_key: phone.key, email: input.email ?? null, notes: input.notes ?? '' })
      .returning('*');
    const tags = await resolveTags(trx, workspaceId, input.tags ?? []);
    if (tags.length) await trx('contact_tags').insert(tags.map((t) => ({ workspace_id: workspaceId, contact_id: row.id, tag_id: t.id })));
    await recordEvent(trx, workspaceId, 'contact.created', { contact_id: row.id, name: row.name, phone: row.phone, email: row.email });
    for (const tag of tags) {
      await recordEvent(trx, workspaceId, 'contact.tag_added', {
        contact_id: row.id, contact_name: row.name, phone: row.phone, tag: { id: tag.id, name: tag.name }, source: 'manual',
      });
    }
    return serializeLead(row, (await tagsOf(trx, [row.id])).get(row.id) ?? []);
  });
}

export async function panelUpdateContact(db: Db, workspaceId: string, contactId: string, input: PanelContactInput) {
  return db.transaction(async (trx) => {
    const before: ContactRow | undefined = await canonical(trx('contacts').where({ workspace_id: workspaceId, id: contactId })).forUpdate().first();
    if (!before) throw new ApiError('CONTACT_NOT_FOUND', 'Contact not found');
    const changes: Record<string, unknown> = {};
    const changed: string[] = [];
    if (input.name !== undefined && input.name !== before.name) (changes.name = input.name), changed.push('name');
    if (input.email !== undefined && input.email !== before.email) (changes.email = input.email), changed.push('email');
    if (input.notes !== undefined && input.notes !== before.notes) (changes.notes = input.notes), changed.push('notes');
    if (input.phone !== undefined) {
      const phone = requirePhone(input.phone);
      if (phone.digits !== before.phone) {
        const clash = await canonical(trx('contacts').where({ workspace_id: workspaceId, phone_key: phone.key }).whereNot({ id: contactId })).first('id');
        if (clash) throw new ApiError('CONFLICT', 'Another contact has this phone', { hint: `Contact ${clash.id}.` });
        Object.assign(changes, { phone: phone.digits, phone_key: phone.key });
        changed.push('phone');
      }
    }
    const after: ContactRow = Object.keys(changes).length
      ? (await trx('contacts').where({ id: contactId }).update({ ...changes, updated_at: trx.fn.now() }).returning('*'))[0]
      : before;

    const tagEvent = (tag: { id: string; name: string }) => ({
      contact_id: after.id, contact_name: after.name, phone: after.phone, tag: { id: tag.id, name: tag.name }, source: 'manual',
    });
    if (input.tags !== undefined) {
      const wanted = await resolveTags(trx, workspaceId, input.tags);
      const current: { id: string; name: string }[] = await trx('contact_tags as ct').join('tags as t', 't.id', 'ct.tag_id').where('ct.contact_id', contactId).select('t.id', 't.name');
      const added = wanted.filter((t) => !current.some((c) => c.id === t.id));
      const removed = current.filter((c) => !wanted.some((t) => t.id === c.id));
      if (added.length) await trx('contact_tags').insert(added.map((t) => ({ workspace_id: workspaceId, contact_id: contactId, tag_id: t.id })));
      if (removed.length) await trx('contact_tags').where({ contact_id: contactId }).whereIn('tag_id', removed.map((t) => t.id)).delete();
      for (const tag of added) await recordEvent(trx, workspaceId, 'contact.tag_added', tagEvent(tag));
      for (const tag of removed) await recordEvent(trx, workspaceId, 'contact.tag_removed', tagEvent(tag));
      if (added.length || removed.length) changed.push('tags');
    }
    if (changed.length) {
      // A tags-only edit still marks the contact as updated.
      if (!Object.keys(changes).length) await trx('contacts').where({ id: contactId }).update({ updated_at: trx.fn.now() });
      await recordEvent(trx, workspaceId, 'contact.updated', { contact_id: after.id, contact_name: after.name, phone: after.phone, email: after.email });
      await recordTrigger(trx, workspaceId, 'contact_updated', { contactId: after.id, changedFields: changed.join(',') });
    }
    const fresh: ContactRow = await trx('contacts').where({ id: contactId }).first();
    return serializeLead(fresh, (await tagsOf(trx, [contactId])).get(contactId) ?? []);
  });
}
