import type { Db } from '../platform';
import { newestFirst, notFound, Page, pageWithTotal, isUuid, iso } from '../kernel';
import { requireContact } from './contact-refs';
import { resolveMember } from '../access';

/** Author of a note written through the API without `authorId`. */
export const API_AUTHOR_NAME = 'API';
export const MAX_NOTE_BODY = 5000;

interface NoteRow {
  id: string;
  body: string;
  author_name: string;
  created_at: Date;
  updated_at: Date;
}

/** The author is exposed by name only: a member id never leaves the service. */
export function serializeNote(row: NoteRow) {
  return { id: row.id, body: row.body, authorName: row.author_name, createdAt: iso(row.created_at), updatedAt: iso(row.updated_at) };
}

const COLUMNS = ['id', 'body', 'author_name', 'created_at', 'updated_at'];

/** Notes of a canonical contact of the workspace (else 404 CONTACT_NOT_FOUND), newest first. */
export async function listNotes(db: Db, workspaceId: string, contactId: string, page: Page) {
  await requireContact(db, workspaceId, contactId);
  const scope = db('notes').where({ workspace_id: workspaceId, contact_id: contactId });
  const { rows, total } = await pageWithTotal<NoteRow>(scope, page, (q) => q.orderBy(newestFirst()).select(COLUMNS));
  return { rows: rows.map(serializeNote), total };
}

export interface NoteInput {
  body: string;
  /** A member of the workspace (400 ASSIGNEE_NOT_FOUND otherwise): the note is theirs. */
  authorId?: string;
  /** Used when there is no `authorId` (an automation passes its own label); default `API`. */
  authorName?: string;
}

/**
 * Adds a note to a canonical contact of the workspace (404 CONTACT_NOT_FOUND otherwise). Takes a
 * transaction or the pool, so a Temporal activity (automation `add_note`) can reuse it.
 */
export async function addNote(db: Db, workspaceId: string, contactId: string, input: NoteInput) {
  await requireContact(db, workspaceId, contactId);
  const author = input.authorId
    ? await resolveMember(db, workspaceId, input.authorId)
    : { id: null, name: input.authorName ?? API_AUTHOR_NAME };
  const [row] = await db('notes')
    .insert({ workspace_id: workspaceId, contact_id: contactId, body: input.body, author_member_id: author.id, author_name: author.name })
    .returning(COLUMNS);
  return serializeNote(row);
}

/** A note of that contact, or 404 NOT_FOUND (a note of another contact or workspace included). */
export async function updateNote(db: Db, workspaceId: string, contactId: string, noteId: string, input: { body: string }) {
  await requireContact(db, workspaceId, contactId);
  if (!isUuid(noteId)) throw notFound('Note');
  const [row] = await db('notes')
    .where({ workspace_id: workspaceId, contact_id: contactId, id: noteId })
    .update({ body: input.body, updated_at: db.fn.now() })
    .returning(COLUMNS);
  if (!row) throw notFound('Note');
  return serializeNote(row);
}

export async function deleteNote(db: Db, workspaceId: string, contactId: string, noteId: string): Promise<{ id: string; deleted: true }> {
  await requireContact(db, workspaceId, contactId);
  if (!isUuid(noteId)) throw notFound('Note');
  const deleted = await db('notes').where({ workspace_id: workspaceId, contact_id: contactId, id: noteId }).delete();
  if (!deleted) throw notFound('Note');
  return { id: noteId, deleted: true };
}
