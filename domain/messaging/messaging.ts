import type { Knex } from 'knex';
import type { Db } from '../platform';
import { type Phone, canonical } from '../leads';
import { recordEvent } from '../webhooks';

type Writer = Db | Knex.Transaction;

/**
 * Shared by every path that meets a phone number through a channel: the cold send, the
 * conversation send and inbound provider traffic. Each finds or creates with one
 * INSERT ... ON CONFLICT, so concurrent arrivals of one number (in either ninth-digit form)
 * make one contact and one conversation.
 */
export async function findOrCreateContact(
  trx: Writer,
  workspaceId: string,
  phone: Phone,
  options: { name?: string; waId?: string } = {},
): Promise<{
  contact: { id: string; name: string; phone: string; email: string | null; opted_out: boolean; wa_id: string | null };
  created: boolean;
}> {
  const inserted = await trx.raw(
    `INSERT INTO contacts (workspace_id, name, phone, phone_key, wa_id)
     VALUES (?, ?, ?, ?, ?)
     ON CONFLICT (workspace_id, phone_key) WHERE merged_into_id IS NULL AND deleted_at IS NULL DO NOTHING
     RETURNING id, name, phone, email, opted_out, wa_id`,
    [workspaceId, (options.name ?? '').slice(0, 200), phone.e164, phone.key, options.waId ?? null],
  );
  if (inserted.rows[0]) return { contact: inserted.rows[0], created: true };
  const existing = await canonical(trx('contacts').where({ workspace_id: workspaceId, phone_key: phone.key })).first(
    'id',
    'name',
    'phone',
    'email',
    'opted_out',
    'wa_id',
  );
  // The conflicting contact was deleted or merged between the two statements: a retry resolves it.
  if (!existing) throw new Error('The contact changed while it was being resolved; retrying');
  return { contact: existing, created: false };
}

export async function findOrCreateConversation(
  trx: Writer,
  workspaceId: string,
  contactId: string,
  instance: { id: string; channel: string },
): Promise<{ conversation: { id: string; last_inbound_at: Date | null }; created: boolean }> {
  const inserted = await trx.raw(
    `INSERT INTO conversations (workspace_id, contact_id, instance_id, channel)
     VALUES (?, ?, ?, ?)
     ON CONFLICT (instance_id, contact_id) DO NOTHING
     RETURNING id, last_inbound_at`,
    [workspaceId, contactId, instance.id, instance.channel],
  );
  if (inserted.rows[0]) return { conversation: inserted.rows[0], created: true };
  const existing = await trx('conversations')
    .where({ workspace_id: workspaceId, instance_id: instance.id, contact_id: contactId })
    .first('id', 'last_inbound_at');
  return { conversation: existing, created: false };
}

/**
 * findOrCreateConversation for many contacts of one instance at once (a broadcast's page): one
 * INSERT ... ON CONFLICT for all, then one read of those that existed. `created`: this call made it.
 */
export async function findOrCreateConversations(
  trx: Writer,
  workspaceId: string,
  contactIds: string[],
  instance: { id: string; channel: string },
): Promise<Map<string, { id: string; created: boolean }>> {
  const out = new Map<string, { id: string; created: boolean }>();
  if (contactIds.length === 0) return out;
  const inserted = await trx.raw<{ rows: { id: string; contact_id: string }[] }>(
    `INSERT INTO conversations (workspace_id, contact_id, instance_id, channel)
     SELECT ?, c, ?, ? FROM unnest(?::uuid[]) AS c
     ON CONFLICT (instance_id, contact_id) DO NOTHING
     RETURNING id, contact_id`,
    [workspaceId, instance.id, instance.channel, contactIds],
  );
  for (const row of inserted.rows) out.set(row.contact_id, { id: row.id, created: true });
  const existed = contactIds.filter((id) => !out.has(id));
  if (existed.length) {
    const rows: { id: string; contact_id: string }[] = await trx('conversations')
      .where({ workspace_id: workspaceId, instance_id: instance.id })
      .whereIn('contact_id', existed)
      .select('id', 'contact_id');
    for (const row of rows) out.set(row.contact_id, { id: row.id, created: false });
  }
  return out;
}

export type DailyCounter = 'messages' | 'cold_conversations';

/**
 * Takes one unit of a daily counter if it stays within `cap` (null: unlimited, still counted).
 * One conditional upsert: concurrent takers can never overshoot the cap.
 */
export async function takeDaily(trx: Writer, workspaceId: string, kind: DailyCounter, day: string, cap: number | null): Promise<boolean> {
  const result = await trx.raw(
    `INSERT INTO daily_counters (workspace_id, day, kind, count) VALUES (?, ?, ?, 1)
     ON CONFLICT (workspace_id, day, kind) DO UPDATE SET count = daily_counters.count + 1
       WHERE ?::int IS NULL OR daily_counters.count < ?::int
     RETURNING count`,
    [workspaceId, day, kind, cap, cap],
  );
  if (result.rows.length === 0) return false;
  // A first take when the cap is 0.
  if (cap !== null && result.rows[0].count > cap) {
    await giveBackDaily(trx, workspaceId, kind, day);
    return false;
  }
  return true;
}

/**
 * takeDaily for `n` units at once, all or none (a broadcast's page). False when they do not all fit
 * under `cap`: the caller must then roll its transaction back (a first take over the cap inserted its row).
 */
export async function takeDailyUnits(
  trx: Knex.Transaction,
  workspaceId: string,
  kind: DailyCounter,
  day: string,
  cap: number | null,
  n: number,
): Promise<boolean> {
  if (n === 0) return true;
  const result = await trx.raw<{ rows: { count: number }[] }>(
    `INSERT INTO daily_counters (workspace_id, day, kind, count) VALUES (?, ?, ?, ?)
     ON CONFLICT (workspace_id, day, kind) DO UPDATE SET count = daily_counters.count + EXCLUDED.count
       WHERE ?::int IS NULL OR daily_counters.count + EXCLUDED.count <= ?::int
     RETURNING count`,
    [workspaceId, day, kind, n, cap, cap],
  );
  return result.rows.length === 1 && (cap === null || result.rows[0].count <= cap);
}

/** Returns a unit taken by a send that did not happen (saga compensation). */
export async function giveBackDaily(trx: Writer, workspaceId: string, kind: DailyCounter, day: string): Promise<void> {
  await trx('daily_counters').where({ workspace_id: workspaceId, day, kind }).where('count', '>', 0).decrement('count', 1);
}

/** What a send looks at on its workspace: the daily plan and the standing (domain/access/workspaces.ts suspension). */
export async function sendingPlan(
  trx: Writer,
  workspaceId: string,
): Promise<{ daily_message_quota: number | null; broadcast_limit: number | null; active: boolean; api_access: boolean } | undefined> {
  return trx('workspaces').where({ id: workspaceId }).first('daily_message_quota', 'broadcast_limit', 'active', 'api_access');
}

/**
 * Records an outbound message the provider accepted, once per provider message id. `inserted`:
 * this call made the row (a retry finds the one its earlier run made).
 */
export async function recordOutboundMessage(
  trx: Knex.Transaction,
  workspaceId: string,
  message: { conversationId: string; type: string; body: string; mediaUrl: string | null; status: string; providerMessageId: string },
): Promise<{ id: string; timestamp: Date; inserted: boolean }> {
  const inserted = await trx.raw(
    `INSERT INTO messages (workspace_id, conversation_id, direction, type, body, media_url, status, provider_message_id)
     VALUES (?, ?, 'out', ?, ?, ?, ?, ?)
     ON CONFLICT (workspace_id, provider_message_id) WHERE provider_message_id IS NOT NULL DO NOTHING
     RETURNING id, timestamp`,
    [workspaceId, message.conversationId, message.type, message.body, message.mediaUrl, message.status, message.providerMessageId],
  );
  if (inserted.rows[0]) {
    if (message.status !== 'sent') {
      // Its status callback came before it was recorded (kept on the send attempt): announced now, from `sent`.
      const conversation = await trx('conversations')
        .where({ workspace_id: workspaceId, id: message.conversationId })
        .first('contact_id', 'instance_id');
      await recordStatusEvent(trx, workspaceId, {
        messageId: inserted.rows[0].id,
        conversationId: message.conversationId,
        contactId: conversation.contact_id,
        instanceId: conversation.instance_id,
        status: message.status,
        previous: 'sent',
        errorCode: null,
        timestamp: new Date(),
      });
    }
    return { ...inserted.rows[0], inserted: true };
  }
  const row = await trx('messages')
    .where({ workspace_id: workspaceId, provider_message_id: message.providerMessageId })
    .first('id', 'timestamp');
  return { ...row, inserted: false };
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
 * recordOutboundMessage for many messages at once (a broadcast's page), each once per provider
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
  // As recordOutboundMessage: a status callback that came before the message was recorded is announced now, from `sent`.
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
