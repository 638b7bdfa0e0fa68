import type { Knex } from 'knex';
import { assertSafeUrlSyntax, type Db, sameWorkspaceSql, SyncRead, syncPage } from '../platform';
import { ApiError, listEnvelope, newestFirst, Page, pageWithTotal, Pagination, isUuid, iso } from '../kernel';
import { instagramIdOn, joinCanonicalContact } from '../leads';
import { mediaOfMessages, type MediaRecord } from './media';
import { windowOpen } from './sending';
import type { MessageContent } from '../../types/messaging';

export const CONVERSATION_STATUSES = ['open', 'waiting', 'snoozed', 'closed'] as const;
export type ConversationStatus = (typeof CONVERSATION_STATUSES)[number];

export const MESSAGE_STATUSES = ['sent', 'delivered', 'received', 'read', 'failed'] as const;

/** A conversation row joined with the columns of its contact that the API shows. */
interface ConversationRow {
  id: string;
  contact_id: string;
  contact_name: string;
  contact_phone: string;
  instance_id: string;
  channel: 'whatsapp' | 'instagram';
  status: ConversationStatus;
  last_message_at: Date | null;
  created_at: Date;
  updated_at: Date;
}

/** The columns of a message row the API shows (MESSAGE_COLUMNS). */
export interface MessageRow {
  id: string;
  direction: 'in' | 'out';
  type: string;
  body: string;
  media_url: string | null;
  timestamp: Date;
  status: (typeof MESSAGE_STATUSES)[number];
}

/**
 * The conversations an integration may see, in one statement with their contact: only those of
 * the workspace whose contact is canonical (not a group chat, not merged, not soft-deleted) and
 * whose connection is not archived (group chats and archived connections never appear).
 * Lists, totals, single reads and updates all start from here, so they cannot disagree.
 */
export function visibleConversations(db: Db, workspaceId: string): Knex.QueryBuilder {
  const q = db('conversations as c')
    .join('instances as i', function joinInstance() {
      this.on('i.id', '=', 'c.instance_id').andOn('i.workspace_id', '=', 'c.workspace_id');
    })
    .where('c.workspace_id', workspaceId)
    .where('i.archived', false);
  return joinCanonicalContact(q, 'ct', { id: 'c.contact_id', workspaceId: 'c.workspace_id' });
}

const COLUMNS = [
  'c.id',
  'c.contact_id',
  'ct.name as contact_name',
  'ct.phone as contact_phone',
  'c.instance_id',
  'c.channel',
  'c.status',
  'c.last_message_at',
  'c.created_at',
  'c.updated_at',
];

export function serializeConversation(row: ConversationRow) {
  return {
    id: row.id,
    contact: { id: row.contact_id, name: row.contact_name, phone: row.contact_phone },
    instanceId: row.instance_id,
    channel: row.channel,
    status: row.status,
    lastMessageAt: iso(row.last_message_at),
    createdAt: iso(row.created_at) as string,
    updatedAt: iso(row.updated_at) as string,
  };
}
export type Conversation = ReturnType<typeof serializeConversation>;

/**
 * A media URL is shown only when it is an external https URL: internal storage references
 * (`media_ref`, `s3://`, relative keys, `http:`), URLs carrying credentials and URLs that point
 * at the service's own network (localhost, private or reserved addresses) are never exposed.
 */
export function externalMediaUrl(value: string | null | undefined): string | undefined {
  if (!value) return undefined;
  try {
    // The same rule as media URLs accepted on send (no DNS here: a stored URL is only shown or not).
    assertSafeUrlSyntax(value, { allowPrivate: false });
    return value;
  } catch {
    return undefined;
  }
}

/**
 * A message as the API shows it. `media`: the stored inbound file's state (domain/messaging/media.ts),
 * null for a message without one (text, and outbound media, which keep their `mediaUrl`).
 */
export function serializeMessage(row: MessageRow, media: MediaRecord | null = null) {
  const mediaUrl = externalMediaUrl(row.media_url);
  return {
    id: row.id,
    direction: row.direction,
    type: row.type,
    body: row.body,
    timestamp: iso(row.timestamp) as string,
    status: row.status,
    ...(mediaUrl ? { mediaUrl } : {}),
    media,
  };
}

/** The columns serializeMessage reads, as selected from `messages` (or `messages as m`, with the prefix). */
export const messageColumns = (prefix = ''): string[] =>
  ['id', 'direction', 'type', 'body', 'media_url', 'timestamp', 'status'].map((c) => `${prefix}${c}`);

/** Messages as the API shows them, with their media (one query for the page's inbound media messages). */
export async function serializeMessages<Row extends MessageRow>(
  db: Db,
  workspaceId: string,
  rows: Row[],
): Promise<{ row: Row; message: ReturnType<typeof serializeMessage> }[]> {
  const media = await mediaOfMessages(
    db,
    workspaceId,
    rows.filter((r) => r.direction === 'in' && r.type !== 'text').map((r) => r.id),
  );
  return rows.map((row) => ({ row, message: serializeMessage(row, media.get(row.id) ?? null) }));
}

export interface ConversationFilters {
  instanceId?: string;
  status?: ConversationStatus;
  contactId?: string;
  updatedAfter?: Date;
}

/**
 * One page of visible conversations, newest activity first (never-messaged ones last, id as
 * the tiebreak), and the exact total under the same filters: two queries whatever the page size.
 * An id filter that cannot name a record of the workspace (malformed, or another tenant's)
 * simply matches nothing.
 */
export async function listConversations(db: Db, workspaceId: string, filters: ConversationFilters, page: Page) {
  if (
    (filters.instanceId !== undefined && !isUuid(filters.instanceId)) ||
    (filters.contactId !== undefined && !isUuid(filters.contactId))
  ) {
    return listEnvelope<Conversation>([], 0, page);
  }
  const scope = visibleConversations(db, workspaceId);
  if (filters.instanceId !== undefined) scope.where('c.instance_id', filters.instanceId);
  if (filters.contactId !== undefined) scope.where('c.contact_id', filters.contactId);
  if (filters.status !== undefined) scope.where('c.status', filters.status);
  if (filters.updatedAfter !== undefined) scope.where('c.updated_at', '>=', filters.updatedAfter);
  const { rows, total } = await pageWithTotal<ConversationRow>(scope, page, (q) =>
    q.orderByRaw('c.last_message_at DESC NULLS LAST, c.id ASC').select(COLUMNS),
  );
  return listEnvelope(rows.map(serializeConversation), total, page);
}

/** One sync page of visible conversations (a deleted lead's leave with it: its tombstone says so). */
export async function syncConversations(db: Db, workspaceId: string, read: SyncRead) {
  const source = { scope: visibleConversations(db, workspaceId), updatedAt: 'c.updated_at', id: 'c.id', columns: COLUMNS };
  const { rows, pagination } = await syncPage<ConversationRow>(db, 'conversations', source, read);
  return { data: rows.map(serializeConversation), pagination };
}

/** A visible conversation of the workspace, or 404 NOT_FOUND (foreign, group, merged, deleted, archived). */
export async function requireConversation(db: Db, workspaceId: string, id: string): Promise<Conversation> {
  const row: ConversationRow | undefined = isUuid(id)
    ? await visibleConversations(db, workspaceId).where('c.id', id).first(COLUMNS)
    : undefined;
  if (!row) throw new ApiError('NOT_FOUND', 'Conversation not found');
  return serializeConversation(row);
}

/** The conversation with one page of its messages, newest first; the pagination describes the messages. */
export async function getConversationWithMessages(
  db: Db,
  workspaceId: string,
  id: string,
  page: Page,
): Promise<{ data: Conversation & { messages: ReturnType<typeof serializeMessage>[] }; pagination: Pagination }> {
  const conversation = await requireConversation(db, workspaceId, id);
  const messages = db('messages').where({ workspace_id: workspaceId, conversation_id: conversation.id });
  const { rows, total } = await pageWithTotal<MessageRow>(messages, page, (q) =>
    q.orderBy(newestFirst('timestamp')).select(messageColumns()),
  );
  const serialized = (await serializeMessages(db, workspaceId, rows)).map((m) => m.message);
  const { data, pagination } = listEnvelope(serialized, total, page);
  return { data: { ...conversation, messages: data }, pagination };
}

/** Changes the status of a visible conversation; anything not visible is 404 and is left untouched. */
export async function updateConversationStatus(db: Db, workspaceId: string, id: string, status: ConversationStatus): Promise<Conversation> {
  if (!isUuid(id)) throw new ApiError('NOT_FOUND', 'Conversation not found');
  const updated = await db('conversations')
    .where({ workspace_id: workspaceId, id })
    .whereIn('id', visibleConversations(db, workspaceId).where('c.id', id).select('c.id'))
    .update({ status, updated_at: db.fn.now() })
    .returning('id');
  if (updated.length === 0) throw new ApiError('NOT_FOUND', 'Conversation not found');
  return requireConversation(db, workspaceId, id);
}

/** A visible conversation with its instance and contact, locked for a send into it. */
export async function conversationForSend(trx: Knex.Transaction, workspaceId: string, conversationId: string) {
  return visibleConversations(trx, workspaceId)
    .where('c.id', conversationId)
    .forUpdate('c')
    .first(
      'c.id',
      'c.last_inbound_at',
      'c.contact_id',
      'i.id as instance_id',
      'i.channel',
      'i.provider',
      'i.connected',
      'ct.name',
      'ct.phone',
      'ct.opted_out',
      'ct.wa_id',
      instagramIdOn(trx, 'i.id', 'c.contact_id').as('instagram_id'),
    );
}

/**
 * A contact's latest messages over all its visible conversations (WhatsApp and Instagram alike),
 * oldest first: at most `limit` messages and `chars` characters of text, whichever is reached
 * first, counted from the newest (the AI insight's reading, domain/insights). A media message
 * without a caption reads as its type in brackets.
 */
export async function contactTranscript(
  db: Db,
  workspaceId: string,
  contactId: string,
  bounds: { limit: number; chars: number },
): Promise<{ direction: 'in' | 'out'; text: string; timestamp: Date }[]> {
  const rows: { direction: 'in' | 'out'; type: string; body: string | null; timestamp: Date }[] = await visibleConversations(
    db,
    workspaceId,
  )
    .join('messages as m', function joinMessages() {
      this.on('m.workspace_id', '=', 'c.workspace_id').andOn('m.conversation_id', '=', 'c.id');
    })
    .where('c.contact_id', contactId)
    .orderBy([
      { column: 'm.timestamp', order: 'desc' },
      { column: 'm.id', order: 'desc' },
    ])
    .limit(bounds.limit)
    .select('m.direction', 'm.type', 'm.body', 'm.timestamp');
  const out = [];
  let used = 0;
  for (const row of rows) {
    const text = row.body || `[${row.type}]`;
    if (used + text.length > bounds.chars) {
      if (out.length === 0) out.push({ direction: row.direction, text: text.slice(text.length - bounds.chars), timestamp: row.timestamp });
      break;
    }
    used += text.length;
    out.push({ direction: row.direction, text, timestamp: row.timestamp });
  }
  return out.reverse();
}

/**
 * The conversation a send to a contact without a phone (met on Instagram) replies in: on
 * `instanceId` when given, else the latest one; undefined when it has none.
 */
export async function replyConversationOf(
  db: Db,
  workspaceId: string,
  contactId: string,
  instanceId?: string,
): Promise<string | undefined> {
  const q = visibleConversations(db, workspaceId).where('c.contact_id', contactId);
  if (instanceId) q.where('c.instance_id', instanceId);
  const row = await q.orderByRaw('c.last_message_at DESC NULLS LAST').first('c.id');
  return row?.id;
}

/**
 * A person's text reply from the panel, as its send carries it: on Instagram past the 24-hour
 * window it is a human agent's reply, which Instagram takes for 7 days with the HUMAN_AGENT tag
 * (the send rules refuse it after that: 422 WINDOW_CLOSED). 404 NOT_FOUND for a conversation the
 * workspace cannot see.
 */
export async function panelReply(db: Db, workspaceId: string, conversationId: string, text: string): Promise<MessageContent> {
  const row = isUuid(conversationId)
    ? await visibleConversations(db, workspaceId).where('c.id', conversationId).first('i.provider', 'c.last_inbound_at')
    : undefined;
  if (!row) throw new ApiError('NOT_FOUND', 'Conversation not found');
  const humanAgent = row.provider === 'instagram' && !windowOpen(row.last_inbound_at, new Date());
  return { type: 'text', text, ...(humanAgent ? { humanAgent: true } : {}) };
}

/**
 * The conversations of these contacts on one instance, found or created: one INSERT ... ON
 * CONFLICT for all, then one read of those that existed (so concurrent arrivals make one).
 * `created`: this call made it.
 */
export async function findOrCreateConversations(
  trx: Db,
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
  const existed = await conversationsOn(
    trx,
    workspaceId,
    instance.id,
    contactIds.filter((id) => !out.has(id)),
  );
  for (const [contactId, { id }] of existed) out.set(contactId, { id, created: false });
  return out;
}

/** The existing conversations of these contacts on one instance (their windows), keyed by contact. */
export async function conversationsOn(
  trx: Db,
  workspaceId: string,
  instanceId: string,
  contactIds: string[],
): Promise<Map<string, { id: string; last_inbound_at: Date | null }>> {
  if (contactIds.length === 0) return new Map();
  const rows: { id: string; contact_id: string; last_inbound_at: Date | null }[] = await trx('conversations')
    .whereRaw(sameWorkspaceSql('workspace_id'), [workspaceId])
    .where({ instance_id: instanceId })
    .whereIn('contact_id', contactIds)
    .select('id', 'contact_id', 'last_inbound_at');
  return new Map(rows.map((r) => [r.contact_id, { id: r.id, last_inbound_at: r.last_inbound_at }]));
}

/** Locks the conversations that still exist (a failed concurrent send may have compensated one away), in one lock order: their ids. */
export async function lockConversations(trx: Knex.Transaction, workspaceId: string, conversationIds: string[]): Promise<Set<string>> {
  if (conversationIds.length === 0) return new Set();
  const rows: { id: string }[] = await trx('conversations')
    .whereRaw(sameWorkspaceSql('workspace_id'), [workspaceId])
    .whereIn('id', conversationIds)
    .orderBy('id')
    .forUpdate()
    .select('id');
  return new Set(rows.map((r) => r.id));
}

/** The conversations' clocks move to their newest messages. */
export async function touchConversations(
  trx: Knex.Transaction,
  workspaceId: string,
  touches: { id: string; lastMessageAt: Date }[],
): Promise<void> {
  if (touches.length === 0) return;
  await trx.raw(
    `UPDATE conversations c SET last_message_at = t.at, updated_at = now()
       FROM unnest(?::uuid[], ?::timestamptz[]) AS t(id, at)
      WHERE ${sameWorkspaceSql('c.workspace_id')} AND c.id = t.id`,
    [touches.map((t) => t.id), touches.map((t) => t.lastMessageAt), workspaceId],
  );
}

/** Deletes the conversation unless it holds a message (a send's compensation). */
export async function deleteEmptyConversation(trx: Knex.Transaction, workspaceId: string, conversationId: string): Promise<void> {
  await trx('conversations')
    .where({ workspace_id: workspaceId, id: conversationId })
    .whereNotExists(trx('messages').whereRaw('messages.conversation_id = conversations.id').select(trx.raw('1')))
    .delete();
}

/** A contact's conversations, as a sub-query on the contact id column a statement gives (leads deleteUnusedContact). */
export function conversationsOfContact(trx: Db) {
  return (contactIdColumn: string) => [trx('conversations').whereRaw(`conversations.contact_id = ${contactIdColumn}`).select(trx.raw('1'))];
}

/**
 * A merge moves the duplicate's conversations and messages (domain/merge): one conversation per
 * contact and instance, so where the survivor has one it takes the messages (its clocks follow);
 * the others become the survivor's.
 */
export async function moveContactConversations(
  trx: Knex.Transaction,
  workspaceId: string,
  duplicateId: string,
  intoId: string,
): Promise<void> {
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

/**
 * A message's status once past `sent` (delivered, read or failed), else null, as a scalar
 * sub-query on the message id and workspace columns a statement gives (a broadcast recipient
 * marked sent takes the status a callback that came first left).
 */
export function statusPastSent(trx: Db, messageIdColumn: string, workspaceIdColumn: string): Knex.Raw {
  return trx.raw(
    `(SELECT m.status FROM messages m WHERE m.id = ${messageIdColumn} AND m.workspace_id = ${workspaceIdColumn} AND m.status IN ('delivered', 'read', 'failed'))`,
  );
}
