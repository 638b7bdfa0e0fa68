import type { Db } from './db';
import { requireContact } from './refs';
import { iso } from './time';

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
