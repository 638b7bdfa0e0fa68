import type { Client } from '@temporalio/client';
import { START_DEADLINE_MS, withDeadline, workspacePriority } from '../domain/platform';
import type { OutboxRow } from '../domain/webhooks';
import { conversationActivity, insightWorkflow } from '../workflows/insight';

/** Signals sent at once. */
const SIGNAL_CONCURRENCY = 32;

export const insightWorkflowId = (workspaceId: string, contactId: string): string => `insight/${workspaceId}/${contactId}`;

/**
 * The outbox dispatcher's part for `conversation_activity` rows (recorded only in workspaces with AI
 * on, domain/messaging/activity.ts): each contact's insight workflow is signalled, and started when
 * it is not running (signalWithStart), so a pending derivation outlives any crash: the row stays
 * undispatched until the signal is in Temporal.
 */
export async function signalInsightWorkflows(
  rows: OutboxRow[],
  options: { temporal: () => Promise<Client>; taskQueue: string; debounceSeconds: number },
): Promise<void> {
  const contacts = new Map<string, { workspaceId: string; contactId: string }>();
  for (const row of rows) {
    const contactId = (row.payload as { contactId?: unknown }).contactId;
    if (typeof contactId === 'string')
      contacts.set(insightWorkflowId(row.workspace_id, contactId), { workspaceId: row.workspace_id, contactId });
  }
  if (contacts.size === 0) return;
  const client = await options.temporal();
  const all = [...contacts.entries()];
  for (let i = 0; i < all.length; i += SIGNAL_CONCURRENCY) {
    await Promise.all(
      all.slice(i, i + SIGNAL_CONCURRENCY).map(([workflowId, { workspaceId, contactId }]) =>
        withDeadline(client, START_DEADLINE_MS, () =>
          client.workflow.signalWithStart(insightWorkflow, {
            workflowId,
            taskQueue: options.taskQueue,
            args: [{ workspaceId, contactId, debounceMs: options.debounceSeconds * 1000 }],
            signal: conversationActivity,
            signalArgs: [],
            priority: workspacePriority(workspaceId),
            searchAttributes: { WorkspaceId: [workspaceId] },
          }),
        ),
      ),
    );
  }
}
