import type { Knex } from 'knex';
import { ApiError, constraintConflict, iso, isUuid } from '../kernel';
import { type Db, BatchInput, instantSql, ItemAnswer, refused, sameWorkspaceSql } from '../platform';
import { Cause, recordEvent, recordEvents, recordTrigger } from '../webhooks';
import { parsePhone, Phone } from './phone';
import { canonical, requireContact } from './contact-refs';
import { moveContactIdentities } from './identities';

type Trx = Knex.Transaction;

/**
 * Where a change to a contact comes from. It decides the events: only a human's edit in the
 * panel emits contact.updated, and tag events carry the matching `source`.
 */
export type ChangeOrigin = 'panel' | 'api' | 'automation';
const TAG_SOURCE: Record<ChangeOrigin, 'manual' | 'api' | 'automation'> = { panel: 'manual', api: 'api', automation: 'automation' };

export interface ChangeOptions {
  origin: ChangeOrigin;
  /** The automation run that made the change, if one did (loop protection). */
  cause?: Cause;
}

export function requirePhone(input: string | undefined): Phone {
  if (input === undefined || input.trim() === '') throw new ApiError('PHONE_REQUIRED', 'phone is required');
  const parsed = parsePhone(input);
  if (!parsed.ok)
    throw new ApiError('INVALID_PHONE', `Invalid phone: ${parsed.reason}`, {
      hint: 'Use 55 + area code + number, e.g. +55 11 98765-4321.',
    });
  return parsed.phone;
}

export interface ContactRow {
  id: string;
  workspace_id: string;
  name: string;
  /** Null (and `phone_key` too) for a contact met on Instagram (identities.ts). */
  phone: string | null;
  phone_key: string | null;
  email: string | null;
  notes: string;
  opted_out: boolean;
  /** The contact's latest Instagram identity, repeated on its row (identities.ts). */
  instagram_id: string | null;
  instagram_username: string | null;
  created_at: Date;
  updated_at: Date;
}

/** The columns of a ContactRow, for statements that name their result columns (prepared ones: see `prepared`). */
export const CONTACT_ROW_COLUMNS = [
  'id',
  'workspace_id',
  'name',
  'phone',
  'phone_key',
  'email',
  'notes',
  'opted_out',
  'instagram_id',
  'instagram_username',
  'created_at',
  'updated_at',
] as const satisfies readonly (keyof ContactRow)[];

type ContactFields = Pick<ContactRow, 'id' | 'name' | 'phone' | 'email'>;
/** What contact.updated, contact.deleted and contact.merged say about the contact. */
const contactFields = (row: ContactFields) => ({ contact_id: row.id, contact_name: row.name, phone: row.phone, email: row.email });
/** What lead.created and contact.created say about the new contact. */
const createdFields = (row: ContactFields) => ({ contact_id: row.id, name: row.name, phone: row.phone, email: row.email });

export interface TagRef {
  id: string;
  name: string;
  color: string;
}

/** Tags of many contacts in one query (a lead page is a constant number of queries). */
export async function tagsOf(db: Db, contactIds: string[]): Promise<Map<string, TagRef[]>> {
  const map = new Map<string, TagRef[]>();
  if (contactIds.length === 0) return map;
  const rows = await db('contact_tags as ct')
    .join('tags as t', 't.id', 'ct.tag_id')
    .whereIn('ct.contact_id', contactIds)
    .orderBy([{ column: 't.name' }, { column: 't.id' }])
    .select('ct.contact_id', 't.id', 't.name', 't.color');
  for (const r of rows) map.set(r.contact_id, [...(map.get(r.contact_id) ?? []), { id: r.id, name: r.name, color: r.color }]);
  return map;
}

/**
 * The lead (serializeLead's record, the same fields in the same order) as PostgreSQL writes it from
 * a row `r` of a lead page (CONTACT_ROW_COLUMNS and tagListColumn): the lead list's pages are
 * written by PostgreSQL (jsonPage). test/hot-path.test.ts holds the two to the same answer.
 */
export const LEAD_RECORD_SQL = `json_build_object('id', r.id, 'name', r.name, 'phone', r.phone, 'email', r.email,
  'instagram', CASE WHEN r.instagram_id IS NULL THEN NULL ELSE json_build_object('id', r.instagram_id, 'username', r.instagram_username) END,
  'notes', r.notes, 'tags', r.tag_list, 'optedOut', r.opted_out,
  'createdAt', ${instantSql('r.created_at')}, 'updatedAt', ${instantSql('r.updated_at')})`;

export function serializeLead(row: ContactRow, tags: TagRef[]) {
  return {
    id: row.id,
    name: row.name,
    phone: row.phone,
    email: row.email,
    instagram: row.instagram_id ? { id: row.instagram_id, username: row.instagram_username } : null,
    notes: row.notes,
    tags,
    optedOut: row.opted_out,
    createdAt: iso(row.created_at),
    updatedAt: iso(row.updated_at),
  };
}

/**
 * The contact's tags as a column of the same statement (`tag_list`, ordered like tagsOf): a page
 * of leads and their tags in one round trip instead of two. Each tag is read by its key (OFFSET 0
 * keeps the planner from hashing the whole tags table once per lead).
 */
export function tagListColumn(db: Db): Knex.Raw {
  return db.raw(
    `(SELECT coalesce(json_agg(json_build_object('id', t.id, 'name', t.name, 'color', t.color) ORDER BY t.name, t.id), '[]'::json)
        FROM contact_tags ct CROSS JOIN LATERAL (SELECT id, name, color FROM tags WHERE tags.id = ct.tag_id OFFSET 0) t
       WHERE ct.contact_id = "contacts".id) AS tag_list`,
  );
}

export async function serializeLeads(db: Db, rows: ContactRow[]) {
  const tags = await tagsOf(
    db,
    rows.map((r) => r.id),
  );
  return rows.map((r) => serializeLead(r, tags.get(r.id) ?? []));
}

/**
 * Tag ids or names (case-insensitive) of the workspace. An unknown one is 404 NOT_FOUND, unless
 * `create` is set: then an unknown name is created (an unknown id is still 404).
 */
export async function resolveTags(trx: Db, workspaceId: string, refs: string[], options: { create?: boolean } = {}): Promise<TagRef[]> {
  const [resolved] = await resolveTagSets(trx, workspaceId, [refs], options);
  if (resolved instanceof ApiError) throw resolved;
  return resolved;
}

/**
 * resolveTags for several sets at once (a batch's items): one lookup for all, and one insert of
 * the new names, each created once whatever the number of sets naming it. A set resolveTags would
 * refuse answers that error instead, and creates nothing.
 */
export async function resolveTagSets(
  trx: Db,
  workspaceId: string,
  sets: string[][],
  options: { create?: boolean } = {},
): Promise<(TagRef[] | ApiError)[]> {
  const uniques = sets.map((refs) => [...new Set(refs.map((r) => r.trim()))]);
  const all = [...new Set(uniques.flat())];
  if (all.length === 0) return sets.map(() => []);
  const find = (): Promise<TagRef[]> =>
    trx('tags')
      .where({ workspace_id: workspaceId })
      .where((q) => {
        const ids = all.filter(isUuid);
        if (ids.length) q.whereIn('id', ids);
        q.orWhereIn(
          trx.raw('lower(name)') as never,
          all.map((r) => r.toLowerCase()),
        );
      })
      .select('id', 'name', 'color');
  const matches = (rows: TagRef[], ref: string) => rows.some((t) => t.id === ref || t.name.toLowerCase() === ref.toLowerCase());
  let rows = await find();
  const refusals = uniques.map((unique): ApiError | undefined => {
    const missing = unique.filter((ref) => !matches(rows, ref));
    if (missing.length === 0) return undefined;
    if (!options.create) return new ApiError('NOT_FOUND', `Tag "${missing[0]}" not found`);
    if (missing.some((ref) => !isUuid(ref) && (ref.length === 0 || ref.length > 100)))
      return new ApiError('VALIDATION', 'Invalid tag name: 1 to 100 characters');
    const unknownId = missing.find(isUuid);
    return unknownId === undefined ? undefined : new ApiError('NOT_FOUND', `Tag "${unknownId}" not found`);
  });
  if (options.create) {
    // The first spelling of a name wins; the names go in in one order, so concurrent batches creating the same ones queue instead of deadlocking.
    const names = new Map<string, string>();
    uniques.forEach((unique, i) => {
      if (refusals[i]) return;
      for (const ref of unique) if (!isUuid(ref) && !matches(rows, ref) && !names.has(ref.toLowerCase())) names.set(ref.toLowerCase(), ref);
    });
    if (names.size) {
      // Concurrent creations of one name end with one tag.
      await trx.raw(
        `INSERT INTO tags (workspace_id, name) SELECT ?, unnest(?::text[]) ON CONFLICT (workspace_id, lower(name)) DO NOTHING`,
        [workspaceId, [...names].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)).map(([, name]) => name)],
      );
      rows = await find();
    }
  }
  return uniques.map((unique, i) => refusals[i] ?? rows.filter((t) => unique.some((ref) => matches([t], ref))));
}

/** Adds and removes tags of contacts and records a tag event per actual change: the additions in one statement, the events in one. */
async function applyTagChanges(
  trx: Trx,
  workspaceId: string,
  changes: { contact: ContactRow; add?: TagRef[]; remove?: TagRef[] }[],
  options: ChangeOptions,
): Promise<{ added: TagRef[]; removed: TagRef[] }[]> {
  const event = (contact: ContactRow, tag: TagRef) => ({
    contact_id: contact.id,
    contact_name: contact.name,
    phone: contact.phone,
    tag: { id: tag.id, name: tag.name },
    source: TAG_SOURCE[options.origin],
  });
  const pairs = changes.flatMap(({ contact, add }) =>
    (add ?? []).map((t) => ({ workspace_id: workspaceId, contact_id: contact.id, tag_id: t.id })),
  );
  const inserted: { contact_id: string; tag_id: string }[] = pairs.length
    ? await trx('contact_tags').insert(pairs).onConflict(['contact_id', 'tag_id']).ignore().returning(['contact_id', 'tag_id'])
    : [];
  const applied: { added: TagRef[]; removed: TagRef[] }[] = [];
  for (const { contact, add, remove } of changes) {
    const added = (add ?? []).filter((t) => inserted.some((r) => r.contact_id === contact.id && r.tag_id === t.id));
    let removed: TagRef[] = [];
    if (remove?.length) {
      const deleted: { tag_id: string }[] = await trx('contact_tags')
        .where({ workspace_id: workspaceId, contact_id: contact.id })
        .whereIn(
          'tag_id',
          remove.map((t) => t.id),
        )
        .delete()
        .returning('tag_id');
      removed = remove.filter((t) => deleted.some((r) => r.tag_id === t.id));
    }
    applied.push({ added, removed });
  }
  await recordEvents(
    trx,
    workspaceId,
    changes.flatMap(({ contact }, i) => [
      ...applied[i].added.map((tag) => ({ event: 'contact.tag_added' as const, fields: event(contact, tag) })),
      ...applied[i].removed.map((tag) => ({ event: 'contact.tag_removed' as const, fields: event(contact, tag) })),
    ]),
    options.cause,
  );
  return applied;
}

export interface ContactChanges {
  name?: string;
  email?: string | null;
  phone?: string;
  notes?: string;
  /** The contact asked not to be messaged (or no longer does). */
  optedOut?: boolean;
  /** The full tag set (panel edit). */
  tags?: string[];
  /** Tags to add, keeping the others (API upsert, automation). */
  addTags?: string[];
}

/**
 * Applies changes to a locked, canonical contact inside the caller's transaction and records what
 * the change means: tag events, contact.updated (panel only) and the contact_updated trigger with
 * the changed fields (only when something changed). `resolvedTags`: the tags to add or remove,
 * already resolved (the lead upsert resolves all its leads' tags at once; addTag, removeTag).
 * Answers `before` itself when nothing changed.
 */
async function changeContact(
  trx: Trx,
  workspaceId: string,
  before: ContactRow,
  input: ContactChanges,
  options: ChangeOptions,
  resolvedTags?: { add?: TagRef[]; remove?: TagRef[] },
): Promise<ContactRow> {
  const changes: Record<string, unknown> = {};
  const changed: string[] = [];
  for (const field of ['name', 'email', 'notes'] as const) {
    if (input[field] !== undefined && input[field] !== before[field]) {
      changes[field] = input[field];
      changed.push(field);
    }
  }
  // Not one of the contact_updated trigger's fields: it changes the record, fires nothing.
  if (input.optedOut !== undefined && input.optedOut !== before.opted_out) changes.opted_out = input.optedOut;
  if (input.phone !== undefined) {
    const phone = requirePhone(input.phone);
    if (phone.e164 !== before.phone) {
      const clash = await canonical(
        trx('contacts').where({ workspace_id: workspaceId, phone_key: phone.key }).whereNot({ id: before.id }),
      ).first('id');
      if (clash) throw new ApiError('CONFLICT', 'Another contact has this phone', { hint: `Contact ${clash.id}.` });
      Object.assign(changes, { phone: phone.e164, phone_key: phone.key });
      changed.push('phone');
    }
  }
  let after: ContactRow = before;
  if (Object.keys(changes).length) {
    [after] = await trx('contacts')
      .where({ id: before.id })
      .update({ ...changes, updated_at: trx.fn.now() })
      .returning('*');
  }

  let tagChange: { add?: TagRef[]; remove?: TagRef[] } = {};
  if (input.tags !== undefined) {
    const wanted = await resolveTags(trx, workspaceId, input.tags);
    const current: TagRef[] = (await tagsOf(trx, [before.id])).get(before.id) ?? [];
    tagChange = {
      add: wanted.filter((t) => !current.some((c) => c.id === t.id)),
      remove: current.filter((c) => !wanted.some((t) => t.id === c.id)),
    };
  } else if (resolvedTags) {
    tagChange = resolvedTags;
  } else if (input.addTags?.length) {
    tagChange = { add: await resolveTags(trx, workspaceId, input.addTags, { create: options.origin !== 'panel' }) };
  }
  const [{ added, removed }] = await applyTagChanges(trx, workspaceId, [{ contact: after, ...tagChange }], options);
  if (added.length || removed.length) {
    changed.push('tags');
    // A tags-only change still marks the contact as updated.
    if (!Object.keys(changes).length)
      [after] = await trx('contacts').where({ id: before.id }).update({ updated_at: trx.fn.now() }).returning('*');
  }
  if (options.origin === 'panel' && after !== before) {
    await recordEvent(trx, workspaceId, 'contact.updated', contactFields(after), options.cause);
  }
  if (changed.length)
    await recordTrigger(trx, workspaceId, 'contact_updated', { contactId: after.id, changedFields: changed.join(',') }, options.cause);
  return after;
}

async function withTags(trx: Db, row: ContactRow) {
  return serializeLead(row, (await tagsOf(trx, [row.id])).get(row.id) ?? []);
}

export interface LeadInput {
  phone?: string;
  name?: string;
  email?: string | null;
  notes?: string;
  tags?: string[];
  optedOut?: boolean;
}

/**
 * Lead upsert by phone: the phone is canonicalised like messaging (a mobile with and
 * without its ninth digit is one contact). A new phone creates the contact and records
 * lead.created (through the lead API; contact.created for an automation's intake); a known one is updated (given fields only; tags are added, unknown tag names
 * created). One INSERT ... ON CONFLICT decides, so concurrent upserts of one phone make one contact.
 */
export async function upsertLead(db: Db, workspaceId: string, input: LeadInput, options: ChangeOptions) {
  const phone = requirePhone(input.phone);
  return db.transaction(async (trx) => {
    const [outcome] = await upsertLeads(trx, workspaceId, [{ input, phone }], options);
    // Thrown inside: the transaction rolls back whatever the refused lead began.
    if ('error' in outcome) throw outcome.error;
    return outcome;
  });
}

export type LeadOutcome = { created: boolean; lead: ReturnType<typeof serializeLead> } | { error: ApiError };

/**
 * The lead upsert of several leads in the caller's transaction: the single upsert is one, a batch
 * chunk up to 25, with the same rules and events either way. The work is set-based, so a chunk
 * costs a few statements, not a few per lead: the tags of every lead are resolved together, the new
 * phones go in with one INSERT ... ON CONFLICT (the first lead of each phone), their lead.created
 * and tag events in one statement each. A lead the rules refuse (its tags) is refused before
 * anything is written, and answers its error; the others go on. The rest, known phones and repeats
 * of a phone, are locked in phone order and each changed as a single update, in a savepoint of its
 * own when there are several. Leads are taken in the given order: sorted by phone key, concurrent
 * chunks lock their contacts (and create their tags) in the same order.
 */
export async function upsertLeads(
  trx: Trx,
  workspaceId: string,
  leads: { input: LeadInput; phone: Phone }[],
  options: ChangeOptions,
): Promise<LeadOutcome[]> {
  const tagSets = await resolveTagSets(
    trx,
    workspaceId,
    leads.map(({ input }) => input.tags ?? []),
    { create: true },
  );
  const results: ({ created: boolean; row: ContactRow } | { error: ApiError } | undefined)[] = tagSets.map((tags) =>
    tags instanceof ApiError ? { error: tags } : undefined,
  );
  const tagsOfLead = (i: number) => tagSets[i] as TagRef[];

  // New phones: the first lead of each phone; a known one (or one created meanwhile) inserts nothing.
  const firstOfPhone = new Map<string, number>();
  leads.forEach(({ phone }, i) => {
    if (!results[i] && !firstOfPhone.has(phone.key)) firstOfPhone.set(phone.key, i);
  });
  const fresh = [...firstOfPhone.values()];
  const column = <T>(pick: (input: LeadInput, phone: Phone) => T) => fresh.map((i) => pick(leads[i].input, leads[i].phone));
  const inserted: ContactRow[] = fresh.length
    ? (
        await trx.raw(
          `INSERT INTO contacts (workspace_id, name, phone, phone_key, email, notes, opted_out)
           SELECT ?, name, phone, phone_key, email, notes, opted_out
             FROM unnest(?::text[], ?::text[], ?::text[], ?::text[], ?::text[], ?::boolean[]) WITH ORDINALITY
                  AS lead(name, phone, phone_key, email, notes, opted_out, n)
            ORDER BY n
           ON CONFLICT (workspace_id, phone_key) WHERE merged_into_id IS NULL AND deleted_at IS NULL DO NOTHING
           RETURNING *`,
          [
            workspaceId,
            column((input) => input.name ?? ''),
            column((_, phone) => phone.e164),
            column((_, phone) => phone.key),
            column((input) => input.email ?? null),
            column((input) => input.notes ?? ''),
            column((input) => input.optedOut ?? false),
          ] as unknown as Knex.RawBinding[],
        )
      ).rows
    : [];
  const created = new Map(inserted.map((row) => [row.phone_key, row]));
  // lead.created is the lead API's event only (POST /api/v1/leads and its batch); a contact an
  // automation's lead intake creates is contact.created, like any other way in.
  const creationEvent = options.origin === 'api' ? ('lead.created' as const) : ('contact.created' as const);
  const newLeads = fresh.filter((i) => created.has(leads[i].phone.key));
  for (const i of newLeads) results[i] = { created: true, row: created.get(leads[i].phone.key)! };
  await recordEvents(
    trx,
    workspaceId,
    newLeads.map((i) => ({ event: creationEvent, fields: createdFields(created.get(leads[i].phone.key)!) })),
    options.cause,
  );
  await applyTagChanges(
    trx,
    workspaceId,
    newLeads.filter((i) => tagsOfLead(i).length).map((i) => ({ contact: created.get(leads[i].phone.key)!, add: tagsOfLead(i) })),
    options,
  );

  // Known phones and repeats: locked in phone order, then each updated like the single upsert updates.
  const rest = leads.map((_, i) => i).filter((i) => !results[i]);
  if (rest.length) {
    const keys = [...new Set(rest.map((i) => leads[i].phone.key))];
    const locked: ContactRow[] = await canonical(trx('contacts').where({ workspace_id: workspaceId }).whereIn('phone_key', keys))
      .orderBy('phone_key')
      .forUpdate()
      .select('*');
    const current = new Map(locked.map((row) => [row.phone_key, row]));
    for (const i of rest) {
      const { input, phone } = leads[i];
      const before = current.get(phone.key);
      if (!before) {
        results[i] = { error: new ApiError('CONFLICT', 'The contact changed while it was being saved', { hint: 'Retry the request.' }) };
        continue;
      }
      const change = (t: Trx) =>
        changeContact(
          t,
          workspaceId,
          before,
          { name: input.name, email: input.email, notes: input.notes, optedOut: input.optedOut, addTags: input.tags },
          options,
          { add: tagsOfLead(i) },
        );
      try {
        // Alone, the caller's transaction is the lead's; among others, a savepoint lets it fail alone.
        const after = leads.length > 1 ? await trx.transaction(change) : await change(trx);
        current.set(phone.key, after);
        results[i] = { created: false, row: after };
      } catch (err) {
        // Refused in its savepoint (among others): that lead's answer, as the single call's would be.
        const refusal = err instanceof ApiError ? err : leads.length > 1 ? constraintConflict(err) : undefined;
        if (!refusal) throw err;
        results[i] = { error: refusal };
      }
    }
  }

  // Tags of the answers in one statement; a new lead given no tag has none to read.
  const tagged = results.flatMap((r, i) => (r && 'row' in r && (!r.created || tagsOfLead(i).length) ? [r.row.id] : []));
  const tags = await tagsOf(trx, tagged);
  return results.map((r) => (r && 'row' in r ? { created: r.created, lead: serializeLead(r.row, tags.get(r.row.id) ?? []) } : r!));
}

/**
 * One chunk of a batch upsert (POST /api/v1/leads/batch): the upsert of its leads, taken in
 * phone-key order so concurrent batches lock their contacts in the same order and queue instead
 * of deadlocking. Repeats of one phone keep request order among themselves: the first creates the
 * lead (201), the next update it (200).
 */
export async function upsertLeadChunk(
  trx: Trx,
  workspaceId: string,
  chunk: BatchInput<LeadInput>[],
  options: ChangeOptions,
): Promise<ItemAnswer[]> {
  const answers: ItemAnswer[] = [];
  const leads: { index: number; input: LeadInput; phone: Phone }[] = [];
  for (const { index, input } of chunk) {
    try {
      leads.push({ index, input, phone: requirePhone(input.phone) });
    } catch (err) {
      if (!(err instanceof ApiError)) throw err;
      answers.push(refused(index, err));
    }
  }
  leads.sort((a, b) => (a.phone.key < b.phone.key ? -1 : a.phone.key > b.phone.key ? 1 : a.index - b.index));
  const outcomes = await upsertLeads(trx, workspaceId, leads, options);
  outcomes.forEach((outcome, i) =>
    answers.push(
      'error' in outcome
        ? refused(leads[i].index, outcome.error)
        : { index: leads[i].index, status: outcome.created ? 201 : 200, data: outcome.lead },
    ),
  );
  return answers;
}

/** Changes a lead's fields (name, email, phone, notes) through the API or an automation. */
export async function updateContact(db: Db, workspaceId: string, contactId: string, input: ContactChanges, options: ChangeOptions) {
  return db.transaction(async (trx) => {
    const before = await requireContact<ContactRow>(trx, workspaceId, contactId, { forUpdate: true });
    return withTags(trx, await changeContact(trx, workspaceId, before, input, options));
  });
}

/**
 * Soft delete: the contact disappears from every list, lookup, filter and count; rows stay.
 * `contact.deleted` tells subscribers and the events feed, so a synced copy can remove it.
 */
export async function softDeleteContact(db: Db, workspaceId: string, contactId: string): Promise<void> {
  await db.transaction(async (trx) => {
    const [row]: ContactRow[] = await canonical(trx('contacts').where({ workspace_id: workspaceId, id: contactId }))
      .update({ deleted_at: trx.fn.now(), updated_at: trx.fn.now() })
      .returning('*');
    if (!row) throw new ApiError('CONTACT_NOT_FOUND', 'Contact not found');
    await recordEvent(trx, workspaceId, 'contact.deleted', contactFields(row));
  });
}

/**
 * The pair of a merge (domain/merge mergeContacts: a duplicate merged into a survivor), both
 * canonical contacts of the workspace, locked in id order so two merges of one pair, either way
 * round, cannot deadlock; 404 CONTACT_NOT_FOUND for either.
 */
export async function lockMergePair(
  trx: Trx,
  workspaceId: string,
  duplicateId: string,
  intoId: string,
): Promise<{ duplicate: ContactRow; into: ContactRow }> {
  const locked = new Map<string, ContactRow>();
  for (const id of [duplicateId, intoId].sort()) {
    const row = isUuid(id)
      ? await canonical(trx('contacts').where({ workspace_id: workspaceId, id }))
          .forUpdate()
          .first()
      : undefined;
    if (!row) throw new ApiError('CONTACT_NOT_FOUND', id === intoId ? 'The contact to merge into was not found' : 'Contact not found');
    locked.set(id, row);
  }
  return { duplicate: locked.get(duplicateId)!, into: locked.get(intoId)! };
}

/** A merge's rows of leads: the duplicate's notes and list memberships go to the survivor, and its insight when the survivor has none. */
export async function moveLeadRecords(trx: Trx, workspaceId: string, duplicateId: string, intoId: string): Promise<void> {
  await trx('notes').where({ workspace_id: workspaceId, contact_id: duplicateId }).update({ contact_id: intoId });
  await trx.raw(
    `INSERT INTO list_members (workspace_id, list_id, contact_id, created_at)
       SELECT workspace_id, list_id, ?, created_at FROM list_members WHERE workspace_id = ? AND contact_id = ?
       ON CONFLICT DO NOTHING`,
    [intoId, workspaceId, duplicateId],
  );
  await trx('list_members').where({ workspace_id: workspaceId, contact_id: duplicateId }).delete();
  await trx.raw(
    `UPDATE insights SET contact_id = ? WHERE workspace_id = ? AND contact_id = ? AND NOT EXISTS (SELECT 1 FROM insights WHERE contact_id = ?)`,
    [intoId, workspaceId, duplicateId, intoId],
  );
  // The person's Instagram identities follow (their next DM reaches the survivor), and its Instagram where it has none.
  await moveContactIdentities(trx, workspaceId, duplicateId, intoId);
  await trx.raw(
    `UPDATE contacts AS c SET instagram_id = d.instagram_id, instagram_username = d.instagram_username, updated_at = now()
       FROM contacts AS d
      WHERE c.workspace_id = ? AND c.id = ? AND d.workspace_id = c.workspace_id AND d.id = ? AND c.instagram_id IS NULL AND d.instagram_id IS NOT NULL`,
    [workspaceId, intoId, duplicateId],
  );
}

/**
 * A merge's last step, once every area moved its rows: the duplicate stays as a merged row (never
 * listed again; `contact.merged` names the survivor), and the survivor takes its tags, and its
 * name or e-mail where its own is empty. The duplicate's phone is not carried over. Answers the
 * survivor with its tags.
 */
export async function finishMerge(trx: Trx, workspaceId: string, duplicate: ContactRow, into: ContactRow) {
  const [gone]: ContactRow[] = await trx('contacts')
    .where({ id: duplicate.id })
    .update({ merged_into_id: into.id, updated_at: trx.fn.now() })
    .returning('*');
  await recordEvent(trx, workspaceId, 'contact.merged', { ...contactFields(gone), merged_into_id: into.id });
  const tags = ((await tagsOf(trx, [duplicate.id])).get(duplicate.id) ?? []).map((t) => t.id);
  const after = await changeContact(
    trx,
    workspaceId,
    into,
    { name: into.name === '' ? duplicate.name : undefined, email: into.email === null ? duplicate.email : undefined, addTags: tags },
    { origin: 'panel' },
  );
  return withTags(trx, after);
}

/** Applies one tag (id, or name: created when new) to a contact; `added` is false when it was already there. */
export async function addTag(db: Db, workspaceId: string, contactId: string, ref: string, options: ChangeOptions) {
  return db.transaction(async (trx) => {
    const contact = await requireContact<ContactRow>(trx, workspaceId, contactId, { forUpdate: true });
    const [tag] = await resolveTags(trx, workspaceId, [ref], { create: true });
    const after = await changeContact(trx, workspaceId, contact, {}, options, { add: [tag] });
    return { contactId: contact.id, tag, added: after !== contact };
  });
}

/** Removes one tag (by id) from a contact; `removed` is false when it was not applied. */
export async function removeTag(db: Db, workspaceId: string, contactId: string, tagId: string, options: ChangeOptions) {
  return db.transaction(async (trx) => {
    const contact = await requireContact<ContactRow>(trx, workspaceId, contactId, { forUpdate: true });
    const tag: TagRef | undefined = isUuid(tagId)
      ? await trx('tags').where({ workspace_id: workspaceId, id: tagId }).first('id', 'name', 'color')
      : undefined;
    if (!tag) throw new ApiError('NOT_FOUND', 'Tag not found');
    const after = await changeContact(trx, workspaceId, contact, {}, options, { remove: [tag] });
    return { contactId: contact.id, tagId: tag.id, removed: after !== contact };
  });
}

/**
 * A human creates a contact in the CRM panel: contact.created (not lead.created), tag events
 * with source `manual`. A phone already in use is 409 CONFLICT (the panel opens the existing one).
 */
export async function panelCreateContact(db: Db, workspaceId: string, input: LeadInput & { phone: string }) {
  const phone = requirePhone(input.phone);
  return db.transaction(async (trx) => {
    const existing = await canonical(trx('contacts').where({ workspace_id: workspaceId, phone_key: phone.key })).first('id');
    if (existing) throw new ApiError('CONFLICT', 'A contact with this phone already exists', { hint: `Contact ${existing.id}.` });
    const [row]: ContactRow[] = await trx('contacts')
      .insert({
        workspace_id: workspaceId,
        name: input.name ?? '',
        phone: phone.e164,
        phone_key: phone.key,
        email: input.email ?? null,
        notes: input.notes ?? '',
        opted_out: input.optedOut ?? false,
      })
      .returning('*');
    await recordEvent(trx, workspaceId, 'contact.created', createdFields(row));
    const tags = await resolveTags(trx, workspaceId, input.tags ?? []);
    await applyTagChanges(trx, workspaceId, [{ contact: row, add: tags }], { origin: 'panel' });
    return withTags(trx, row);
  });
}

/** A human's edit in the panel: the full tag set, contact.updated and the contact_updated trigger. */
export function panelUpdateContact(db: Db, workspaceId: string, contactId: string, input: ContactChanges) {
  return updateContact(db, workspaceId, contactId, input, { origin: 'panel' });
}

/**
 * Deletes a contact a send created, only if nothing else started using it meanwhile (another
 * send, a note, a tag, a list). One referenced by a deal or a task created in between fails its
 * foreign key: rolled back to a savepoint, it stays (it is someone's contact now). `usedBy`: the
 * caller's own uses of the contact, each a sub-query of its rows whose contact is the column it is
 * given (domain/messaging: its conversations).
 */
export async function deleteUnusedContact(
  trx: Trx,
  workspaceId: string,
  contactId: string,
  usedBy: (contactIdColumn: string) => Knex.QueryBuilder[],
): Promise<void> {
  const unused = (table: string) => trx(table).whereRaw(`${table}.contact_id = contacts.id`).select(trx.raw('1'));
  const others = usedBy('contacts.id');
  await trx.raw('SAVEPOINT undo_contact');
  try {
    const q = trx('contacts').where({ workspace_id: workspaceId, id: contactId });
    for (const other of others) q.whereNotExists(other);
    await q.whereNotExists(unused('notes')).whereNotExists(unused('contact_tags')).whereNotExists(unused('list_members')).delete();
    await trx.raw('RELEASE SAVEPOINT undo_contact');
  } catch {
    await trx.raw('ROLLBACK TO SAVEPOINT undo_contact');
  }
}

/** Keeps the provider's identity of each contact's number (Cloud API wa_id) where it changed: one UPDATE, so the contacts' statement triggers run once. */
export async function recordWaIds(trx: Trx, workspaceId: string, waIds: { contactId: string; waId: string }[]): Promise<void> {
  if (waIds.length === 0) return;
  await trx.raw(
    `UPDATE contacts c SET wa_id = t.wa_id
       FROM unnest(?::uuid[], ?::text[]) AS t(id, wa_id)
      WHERE ${sameWorkspaceSql('c.workspace_id')} AND c.id = t.id AND c.wa_id IS DISTINCT FROM t.wa_id`,
    [waIds.map((w) => w.contactId), waIds.map((w) => w.waId), workspaceId],
  );
}

/** The contact.created event of a contact made by a send (recorded once the provider accepted it). */
export async function recordContactCreated(trx: Trx, workspaceId: string, contactId: string): Promise<void> {
  const contact = await trx('contacts').where({ workspace_id: workspaceId, id: contactId }).first('id', 'name', 'phone', 'email');
  await recordEvent(trx, workspaceId, 'contact.created', createdFields(contact));
}

/** A contact as a send needs it (domain/broadcasts: a recipient's contact). */
export interface ContactForSend {
  id: string;
  name: string;
  /** Null for a contact met on Instagram (domain/leads/identities.ts). */
  phone: string | null;
  email: string | null;
  opted_out: boolean;
  wa_id: string | null;
}
export const FOR_SEND_COLUMNS = ['id', 'name', 'phone', 'email', 'opted_out', 'wa_id'] as const satisfies readonly (keyof ContactForSend)[];

/**
 * Shared by every path that meets a phone number through a channel (domain/messaging): the cold
 * send, the conversation send and inbound provider traffic. Each finds or creates with one
 * INSERT ... ON CONFLICT, so concurrent arrivals of one number (in either ninth-digit form) make
 * one contact.
 */
export async function findOrCreateContact(
  trx: Db,
  workspaceId: string,
  phone: Phone,
  options: { name?: string; waId?: string } = {},
): Promise<{ contact: ContactForSend; created: boolean }> {
  const inserted = await trx.raw(
    `INSERT INTO contacts (workspace_id, name, phone, phone_key, wa_id)
     VALUES (?, ?, ?, ?, ?)
     ON CONFLICT (workspace_id, phone_key) WHERE merged_into_id IS NULL AND deleted_at IS NULL DO NOTHING
     RETURNING ${FOR_SEND_COLUMNS.join(', ')}`,
    [workspaceId, (options.name ?? '').slice(0, 200), phone.e164, phone.key, options.waId ?? null],
  );
  if (inserted.rows[0]) return { contact: inserted.rows[0], created: true };
  const existing = await canonical(trx('contacts').where({ workspace_id: workspaceId, phone_key: phone.key })).first(...FOR_SEND_COLUMNS);
  // The conflicting contact was deleted or merged between the two statements: a retry resolves it.
  if (!existing) throw new Error('The contact changed while it was being resolved; retrying');
  return { contact: existing, created: false };
}

/**
 * The contact's own word on being messaged (an inbound STOP or START, domain/messaging): its
 * opt-out set, and `updated_at` moved, only when it changes. Not a human edit: no contact.updated.
 */
export async function recordConsent(trx: Trx, workspaceId: string, contactId: string, optedOut: boolean): Promise<void> {
  await trx('contacts')
    .where({ workspace_id: workspaceId, id: contactId })
    .whereNot({ opted_out: optedOut })
    .update({ opted_out: optedOut, updated_at: trx.fn.now() });
}

/**
 * The contact's opt-out as a scalar sub-query of another area's statement (null when no contact of
 * the workspace has that id): `contactId` is a value or a column or sub-query of the caller's
 * statement (domain/messaging: the contact a send prepared).
 */
export function contactOptedOut(db: Db, workspaceId: string, contactId: string | Knex.Raw | Knex.QueryBuilder): Knex.QueryBuilder {
  return db('contacts').where('contacts.workspace_id', workspaceId).where('contacts.id', contactId).select('contacts.opted_out');
}

/** The contacts a send may still use (not deleted or merged), by id. */
export async function contactsForSend(db: Db, workspaceId: string, contactIds: string[]): Promise<Map<string, ContactForSend>> {
  if (contactIds.length === 0) return new Map();
  const rows = await db('contacts')
    .whereRaw(sameWorkspaceSql('workspace_id'), [workspaceId])
    .whereIn('id', contactIds)
    .whereNull('deleted_at')
    .whereNull('merged_into_id')
    .select(FOR_SEND_COLUMNS);
  return new Map(rows.map((c: ContactForSend) => [c.id, c]));
}
