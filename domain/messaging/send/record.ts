import type { Knex } from 'knex';
import type { Db } from '../../platform';
import { findOrCreateContact, recordContactCreated, recordWaIds, requirePhone } from '../../leads';
import { recordEvent } from '../../webhooks';
import type { SentMessage } from '../../../types/messaging';
import { findOrCreateConversations, lockConversations, touchConversations } from '../conversations';
import { instanceChannel } from '../instances';
import { lockAttemptStatuses } from './ledger';

/** One message the provider accepted, to record in the conversation its send prepared. */
export interface SentItem {
  prepared: {
    instanceId: string;
    contactId: string;
    conversationId: string;
    /** The number a cold send found or created its contact by: found again if that contact went meanwhile. */
    phone?: string | null;
    /** The send created the contact: `contact.created` is recorded with the message, not before. */
    createdContact?: boolean;
  };
  sent: SentMessage;
  message: { type: string; body: string; mediaUrl: string | null };
}

export interface Recorded {
  id: string;
  timestamp: Date;
  /** This call made the message row (a retry finds the one its earlier run made). */
  inserted: boolean;
  contactId: string;
  conversationId: string;
}

/**
 * After the provider accepted: each message in its conversation (status `sent`, or the status a
 * callback that came first left on the attempt), once per provider message id; the conversations'
 * clocks; the provider's identity of each number; and only now the business events. One
 * transaction for all (a single send, or a broadcast's page); `also` adds the caller's own
 * records to it (a broadcast's recipients marked sent). Results in the order of `items`.
 */
export async function recordSent(
  db: Db,
  workspaceId: string,
  items: SentItem[],
  also?: (trx: Knex.Transaction, recorded: Recorded[]) => Promise<void>,
): Promise<Recorded[]> {
  if (items.length === 0) return [];
  return db.transaction(async (trx) => {
    // A conversation may have gone since prepare (a concurrent failed send to the same new number
    // compensated it away, a merge, a deletion): the message exists, so it is found or made again.
    const live = await lockConversations(
      trx,
      workspaceId,
      items.map((i) => i.prepared.conversationId),
    );
    const placed = [];
    for (const item of items) {
      if (live.has(item.prepared.conversationId)) {
        placed.push({ ...item, contactId: item.prepared.contactId, conversationId: item.prepared.conversationId });
        continue;
      }
      const instance = await instanceChannel(trx, workspaceId, item.prepared.instanceId);
      const contactId = item.prepared.phone
        ? (await findOrCreateContact(trx, workspaceId, requirePhone(item.prepared.phone))).contact.id
        : item.prepared.contactId;
      const conversation = (await findOrCreateConversations(trx, workspaceId, [contactId], instance)).get(contactId)!;
      placed.push({ ...item, contactId, conversationId: conversation.id });
    }
    // A status callback that beat us here is kept on the attempt (domain/messaging/inbound.ts); the
    // lock makes one arriving now wait until the message row exists.
    const statuses = await lockAttemptStatuses(
      trx,
      workspaceId,
      placed.map((p) => p.sent.providerMessageId),
    );
    const rows = await recordOutboundMessages(
      trx,
      workspaceId,
      placed.map((p) => ({
        conversationId: p.conversationId,
        ...p.message,
        status: statuses.get(p.sent.providerMessageId) ?? 'sent',
        providerMessageId: p.sent.providerMessageId,
      })),
    );
    const recorded = placed.map((p) => ({
      ...rows.get(p.sent.providerMessageId)!,
      contactId: p.contactId,
      conversationId: p.conversationId,
    }));
    const inserted = placed.filter((_, i) => recorded[i].inserted);
    await touchConversations(
      trx,
      workspaceId,
      recorded.filter((r) => r.inserted).map((r) => ({ id: r.conversationId, lastMessageAt: r.timestamp })),
    );
    await recordWaIds(
      trx,
      workspaceId,
      inserted.filter((p) => p.sent.waId).map((p) => ({ contactId: p.contactId, waId: p.sent.waId! })),
    );
    for (const p of inserted) if (p.prepared.createdContact) await recordContactCreated(trx, workspaceId, p.contactId);
    await also?.(trx, recorded);
    return recorded;
  });
}
/**
 * `message.status_updated`: an outbound message moved forward (sent → delivered → read, or
 * failed). Deliveries are not ordered: `previous_status` and `timestamp` (the provider's) say where
 * this one stands. The initial `sent` is never announced: the send's answer says it.
 */
export async function recordStatusEvent(
  trx: Knex.Transaction,
  workspaceId: string,
  moved: {
    messageId: string;
    conversationId: string;
    contactId: string;
    instanceId: string;
    status: string;
    previous: string;
    errorCode: string | null;
    timestamp: Date;
  },
): Promise<void> {
  await recordEvent(trx, workspaceId, 'message.status_updated', {
    message_id: moved.messageId,
    conversation_id: moved.conversationId,
    contact_id: moved.contactId,
    instance_id: moved.instanceId,
    status: moved.status,
    previous_status: moved.previous,
    error_code: moved.status === 'failed' ? moved.errorCode : null,
    timestamp: moved.timestamp.toISOString(),
  });
}

/**
 * The outbound message rows of many messages at once (a broadcast's page), each once per provider
 * message id; keyed by provider message id. `inserted`: this call made the row.
 */
export async function recordOutboundMessages(
  trx: Knex.Transaction,
  workspaceId: string,
  messages: { conversationId: string; type: string; body: string; mediaUrl: string | null; status: string; providerMessageId: string }[],
): Promise<Map<string, { id: string; timestamp: Date; inserted: boolean }>> {
  const out = new Map<string, { id: string; timestamp: Date; inserted: boolean }>();
  if (messages.length === 0) return out;
  const column = <K extends keyof (typeof messages)[number]>(k: K) => messages.map((m) => m[k]);
  const inserted = await trx.raw<{ rows: { id: string; timestamp: Date; provider_message_id: string }[] }>(
    `INSERT INTO messages (workspace_id, conversation_id, direction, type, body, media_url, status, provider_message_id)
     SELECT ?, m.conversation_id, 'out', m.type, m.body, m.media_url, m.status, m.provider_message_id
       FROM unnest(?::uuid[], ?::text[], ?::text[], ?::text[], ?::text[], ?::text[])
            AS m(conversation_id, type, body, media_url, status, provider_message_id)
     ON CONFLICT (workspace_id, provider_message_id) WHERE provider_message_id IS NOT NULL DO NOTHING
     RETURNING id, timestamp, provider_message_id`,
    [
      workspaceId,
      column('conversationId'),
      column('type'),
      column('body'),
      column('mediaUrl') as string[],
      column('status'),
      column('providerMessageId'),
    ],
  );
  for (const row of inserted.rows) out.set(row.provider_message_id, { id: row.id, timestamp: row.timestamp, inserted: true });
  const earlier = messages.map((m) => m.providerMessageId).filter((id) => !out.has(id));
  if (earlier.length) {
    const rows: { id: string; timestamp: Date; provider_message_id: string }[] = await trx('messages')
      .where({ workspace_id: workspaceId })
      .whereIn('provider_message_id', earlier)
      .select('id', 'timestamp', 'provider_message_id');
    for (const row of rows) out.set(row.provider_message_id, { id: row.id, timestamp: row.timestamp, inserted: false });
  }
  // A status callback that came before the message was recorded is announced now, from `sent`.
  const early = messages.filter((m) => m.status !== 'sent' && out.get(m.providerMessageId)?.inserted);
  if (early.length) {
    const conversations: { id: string; contact_id: string; instance_id: string }[] = await trx('conversations')
      .where({ workspace_id: workspaceId })
      .whereIn(
        'id',
        early.map((m) => m.conversationId),
      )
      .select('id', 'contact_id', 'instance_id');
    const byId = new Map(conversations.map((c) => [c.id, c]));
    for (const m of early) {
      const conversation = byId.get(m.conversationId)!;
      await recordStatusEvent(trx, workspaceId, {
        messageId: out.get(m.providerMessageId)!.id,
        conversationId: m.conversationId,
        contactId: conversation.contact_id,
        instanceId: conversation.instance_id,
        status: m.status,
        previous: 'sent',
        errorCode: null,
        timestamp: new Date(),
      });
    }
  }
  return out;
}

/** What a sent message's row says: its text or caption, or for a template `[template] <name>`. */
export function messageBody(message: { text?: string; caption?: string; templateName?: string }): string {
  return message.text ?? message.caption ?? (message.templateName ? `[template] ${message.templateName}` : '');
}
