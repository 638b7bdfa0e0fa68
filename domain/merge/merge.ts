import type { Db } from '../platform';
import { ApiError } from '../kernel';
import { finishMerge, instagramContactsOf, lockMergePair, moveLeadRecords } from '../leads';
import { moveContactDeals, moveContactTasks } from '../sales';
import { moveContactConversations } from '../messaging';

/**
 * A human merges a duplicate into another contact in the panel. The survivor takes the
 * duplicate's deals, tasks, notes, list memberships, tags, its insight and conversations (when it
 * has none of its own), and its name or e-mail where its own is empty; a conversation on an
 * instance where the survivor already has one gives its messages to the survivor's. The duplicate
 * stays as a merged row (never listed again; `contact.merged` names the survivor). Counts follow
 * by their triggers. The duplicate's phone is not carried over: a message from it later creates
 * a new contact. Each area moves its own rows, in one transaction.
 */
/**
 * A lead upserted with the phone and the `instagramId` of a person first met on Instagram: each
 * phoneless contact of that Instagram id is merged into the lead (the contact with the phone
 * survives, by the merge's rules). Answers whether any was.
 */
export async function joinInstagramContacts(db: Db, workspaceId: string, leadId: string, instagramId: string): Promise<boolean> {
  const phoneless = (await instagramContactsOf(db, workspaceId, instagramId)).filter((id) => id !== leadId);
  for (const id of phoneless) await mergeContacts(db, workspaceId, id, leadId);
  return phoneless.length > 0;
}

export async function mergeContacts(db: Db, workspaceId: string, duplicateRef: string, intoRef: string) {
  // Ids compared and ordered as PostgreSQL reads them: a uuid in capitals names the same row.
  const [duplicateId, intoId] = [duplicateRef.toLowerCase(), intoRef.toLowerCase()];
  if (duplicateId === intoId)
    throw new ApiError('VALIDATION', 'A contact cannot be merged into itself', { hint: 'intoId must name another contact.' });
  return db.transaction(async (trx) => {
    const { duplicate, into } = await lockMergePair(trx, workspaceId, duplicateId, intoId);
    await moveContactDeals(trx, workspaceId, duplicate.id, into.id);
    await moveContactTasks(trx, workspaceId, duplicate.id, into.id);
    await moveLeadRecords(trx, workspaceId, duplicate.id, into.id);
    await moveContactConversations(trx, workspaceId, duplicate.id, into.id);
    return finishMerge(trx, workspaceId, duplicate, into);
  });
}
