import type { Knex } from 'knex';
import { aiEnabled } from '../access';
import { recordOutbox } from '../webhooks';

/**
 * A message went in or out of these contacts' conversations: in a workspace that derives AI
 * insights, the internal `conversation_activity` trigger, in the caller's transaction (the
 * dispatcher signals each contact's insight workflow, domain/insights). Nothing elsewhere. A
 * broadcast's messages do not count: its template says nothing of the contact; the reply will.
 * `aiOn`: the workspace's flag when the caller read it already (once for a whole provider delivery).
 */
export async function recordConversationActivity(
  trx: Knex.Transaction,
  workspaceId: string,
  contactIds: string[],
  aiOn?: boolean,
): Promise<void> {
  if (contactIds.length === 0 || !(aiOn ?? (await aiEnabled(trx, workspaceId)))) return;
  await recordOutbox(
    trx,
    workspaceId,
    [...new Set(contactIds)].map((contactId) => ({ trigger: 'conversation_activity' as const, variables: { contactId } })),
  );
}
