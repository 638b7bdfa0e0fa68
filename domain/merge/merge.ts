import type { Knex } from 'knex';
import type { Db } from '../platform';
import { ApiError } from '../kernel';
import { finishMerge, lockMergePair, moveLeadRecords } from '../leads';
import { moveContactDeals, moveContactTasks } from '../sales';

/**
 * A human merges a duplicate into another contact in the panel. The survivor takes the
 * duplicate's deals, tasks, notes, list memberships, tags, its insight and conversations (when it
 * has none of its own), and its name or e-mail where its own is empty; a conversation on an
 * instance where the survivor already has one gives its messages to the survivor's. The duplicate
 * stays as a merged row (never listed again; `contact.merged` names the survivor). Counts follow
 * by their triggers. The duplicate's phone is not carried over: a message from it later creates
 * a new contact. Each area moves its own rows, in one transaction.
 */
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

/**
 * The duplicate's conversations and messages (domain/messaging's rows). One conversation per
 * contact and instance: where the survivor has one, it takes the messages; the others become the
 * survivor's. Written here until domain/messaging exports it (allow-listed in
 * test/unit/architecture.test.ts): then this calls messaging's.
 */
async function moveContactConversations(trx: Knex.Transaction, workspaceId: string, duplicateId: string, intoId: string): Promise<void> {
  const { rows: joined } = await trx.raw(
    `UPDATE messages m SET conversation_id = mine.id
       FROM conversations theirs JOIN conversations mine ON mine.instance_id = theirs.instance_id AND mine.contact_id = ?
      WHERE m.conversation_id = theirs.id AND theirs.workspace_id = ? AND theirs.contact_id = ?
     RETURNING mine.id`,
    [intoId, workspaceId, duplicateId],
  );
  const survivorConversations = [...new Set((joined as { id: string }[]).map((r) => r.id))];
  if (survivorConversations.length) {
    await trx.raw(
      `UPDATE conversations c SET updated_at = now(),
              last_message_at = (SELECT max(timestamp) FROM messages WHERE conversation_id = c.id),
              last_inbound_at = greatest(c.last_inbound_at, (SELECT max(timestamp) FROM messages WHERE conversation_id = c.id AND direction = 'in'))
        WHERE c.id = ANY(?::uuid[])`,
      [survivorConversations],
    );
  }
  await trx.raw(
    `UPDATE conversations SET contact_id = ?, updated_at = now()
      WHERE workspace_id = ? AND contact_id = ? AND instance_id NOT IN (SELECT instance_id FROM conversations WHERE contact_id = ?)`,
    [intoId, workspaceId, duplicateId, intoId],
  );
}
