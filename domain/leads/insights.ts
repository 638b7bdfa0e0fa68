import type { Db } from '../platform';
import { ApiError, iso } from '../kernel';
import { requireContact } from './contact-refs';

export interface InsightRow {
  interest: string | null;
  products: unknown;
  objections: unknown;
  next_step: string | null;
  qualification: unknown;
  summary: string | null;
  updated_at: Date | string;
}

/** A contact's AI sales insight as the API exposes it. */
export function serializeInsight(row: InsightRow) {
  return {
    interest: row.interest,
    products: row.products,
    objections: row.objections,
    nextStep: row.next_step,
    qualification: row.qualification,
    summary: row.summary,
    updatedAt: iso(row.updated_at),
  };
}

/** A canonical contact's insight, or null when none exists yet; an unknown contact is 404 CONTACT_NOT_FOUND. */
export async function getInsight(db: Db, workspaceId: string, contactId: string) {
  const contact = await requireContact(db, workspaceId, contactId);
  const row: InsightRow | undefined = await db('insights').where({ workspace_id: workspaceId, contact_id: contact.id }).first();
  return row ? serializeInsight(row) : null;
}

export interface InsightInput {
  interest?: string | null;
  products?: unknown;
  objections?: unknown;
  nextStep?: string | null;
  qualification?: unknown;
  summary?: string | null;
}

/** Sets (creates or replaces) a contact's insight; a field not sent is cleared. */
export async function setInsight(db: Db, workspaceId: string, contactId: string, input: InsightInput) {
  const contact = await db('contacts')
    .where({ id: contactId, workspace_id: workspaceId })
    .whereNull('deleted_at')
    .whereNull('merged_into_id')
    .first('id');
  if (!contact) throw new ApiError('CONTACT_NOT_FOUND', 'Contact not found');
  const json = (v: unknown) => (v === undefined ? null : JSON.stringify(v));
  const values = {
    contact_id: contactId,
    workspace_id: workspaceId,
    interest: input.interest ?? null,
    products: json(input.products),
    objections: json(input.objections),
    next_step: input.nextStep ?? null,
    qualification: json(input.qualification),
    summary: input.summary ?? null,
    updated_at: db.fn.now(),
  };
  const [row]: InsightRow[] = await db('insights').insert(values).onConflict('contact_id').merge().returning('*');
  return serializeInsight(row);
}
