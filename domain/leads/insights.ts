import type { Knex } from 'knex';
import type { Db } from '../platform';
import { ApiError, iso } from '../kernel';
import { recordOutbox } from '../webhooks';
import { requireContact } from './contact-refs';

export interface InsightRow {
  interest: string | null;
  products: unknown;
  objections: unknown;
  next_step: string | null;
  qualification: unknown;
  summary: string | null;
  /** Where a derived insight came from (domain/insights); null for one a person wrote. */
  source: { model: string; messageCount: number; lastMessageAt: string | null } | null;
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
    source: row.source ?? null,
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

/**
 * A contact's insight written whole (created or replaced): a field not given is cleared. `source`:
 * where a derived one came from; null for a person's, which overrides a derived one until the next
 * derivation.
 */
async function writeInsight(trx: Db, workspaceId: string, contactId: string, input: InsightInput, source: InsightRow['source']) {
  const json = (v: unknown) => (v === undefined ? null : JSON.stringify(v));
  const [row]: InsightRow[] = await trx('insights')
    .insert({
      contact_id: contactId,
      workspace_id: workspaceId,
      interest: input.interest ?? null,
      products: json(input.products),
      objections: json(input.objections),
      next_step: input.nextStep ?? null,
      qualification: json(input.qualification),
      summary: input.summary ?? null,
      source: source === null ? null : JSON.stringify(source),
      updated_at: trx.fn.now(),
    })
    .onConflict('contact_id')
    .merge()
    .returning('*');
  return row;
}

/** Sets (creates or replaces) a contact's insight; a field not sent is cleared. */
export async function setInsight(db: Db, workspaceId: string, contactId: string, input: InsightInput) {
  const contact = await db('contacts')
    .where({ id: contactId, workspace_id: workspaceId })
    .whereNull('deleted_at')
    .whereNull('merged_into_id')
    .first('id');
  if (!contact) throw new ApiError('CONTACT_NOT_FOUND', 'Contact not found');
  return serializeInsight(await writeInsight(db, workspaceId, contactId, input, null));
}

/** A derived insight (domain/insights): its fields, and where it came from. */
export interface DerivedInsightInput {
  interest: string | null;
  products: string[];
  objections: string[];
  nextStep: string | null;
  qualification: { score: number; temperature: 'cold' | 'warm' | 'hot' };
  summary: string;
  source: NonNullable<InsightRow['source']>;
}

/**
 * Stores a contact's derived insight (replacing the one it had) with `contact.insight_updated` and
 * the `insight_updated` trigger, in the caller's transaction. False when the contact is no longer
 * canonical (deleted or merged while the model thought): nothing is stored.
 */
export async function storeDerivedInsight(trx: Knex.Transaction, workspaceId: string, contactId: string, input: DerivedInsightInput) {
  const contact = await trx('contacts')
    .where({ id: contactId, workspace_id: workspaceId })
    .whereNull('deleted_at')
    .whereNull('merged_into_id')
    .forShare()
    .first('id', 'name');
  if (!contact) return false;
  const { source, ...fields } = input;
  await writeInsight(trx, workspaceId, contactId, fields, source);
  const { temperature, score } = input.qualification;
  await recordOutbox(trx, workspaceId, [
    { event: 'contact.insight_updated', fields: { contact_id: contactId, temperature, score, summary: input.summary } },
    { trigger: 'insight_updated', variables: { contactId, temperature, score } },
  ]);
  return true;
}
