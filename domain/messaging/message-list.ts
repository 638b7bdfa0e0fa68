import type { Knex } from 'knex';
import { type Db, SyncRead, syncPage } from '../platform';
import { iso, listEnvelope, Page, pageWithTotal } from '../kernel';
import { messageColumns, type MessageRow, serializeMessages, visibleConversations } from './conversations';

/**
 * Every message of a workspace in one list (`GET /api/v1/messages`, docs/messaging.md "Reading
 * every message"): offset pages newest first, or an incremental sync in (updatedAt, id) order, so
 * a warehouse mirrors every conversation, statuses and media included, without reading each one.
 * A message's updated_at moves with its status, its media and its conversation (migration
 * 20261127050100).
 */

export const MESSAGE_DIRECTIONS = ['in', 'out'] as const;

/** The filters both modes take (cursor paging too: they select on what updated_at covers). */
export interface MessageFilters {
  conversationId?: string;
  direction?: (typeof MESSAGE_DIRECTIONS)[number];
}

/** The list's filters by their query names (syncRead's `filters`). */
export const MESSAGE_SYNC_FILTERS = ['conversationId', 'direction'] as const;

interface ListedMessageRow extends MessageRow {
  conversation_id: string;
  updated_at: Date;
}

const COLUMNS = [...messageColumns('m.'), 'm.conversation_id', 'm.updated_at'];

/**
 * The workspace's messages an integration may see: those of its visible conversations (the one
 * rule of conversations.ts: no group chat, merged or deleted contact, archived connection), with
 * the filters. A conversation id of another workspace, or of none, matches nothing.
 */
function visibleMessages(db: Db, workspaceId: string, filters: MessageFilters): Knex.QueryBuilder {
  const q = visibleConversations(db, workspaceId)
    .join('messages as m', function joinMessages() {
      this.on('m.conversation_id', '=', 'c.id').andOn('m.workspace_id', '=', 'c.workspace_id');
    })
    .where('m.workspace_id', workspaceId);
  if (filters.conversationId !== undefined) q.where('m.conversation_id', filters.conversationId);
  if (filters.direction !== undefined) q.where('m.direction', filters.direction);
  return q;
}

async function serialize(db: Db, workspaceId: string, rows: ListedMessageRow[]) {
  return (await serializeMessages(db, workspaceId, rows)).map(({ row, message }) => ({
    ...message,
    conversationId: row.conversation_id,
    updatedAt: iso(row.updated_at) as string,
  }));
}
export type ListedMessage = Awaited<ReturnType<typeof serialize>>[number];

/**
 * The exact number of visible messages under `filters`, from the conversations' own counts
 * (`messages_in`, `messages_out`, kept by triggers on messages: migration 20261127090100): a sum
 * over the workspace's visible conversations, never a count of its messages.
 */
function countedMessages(db: Db, workspaceId: string, filters: MessageFilters): Knex.QueryBuilder {
  const counted =
    filters.direction === 'in' ? 'c.messages_in' : filters.direction === 'out' ? 'c.messages_out' : 'c.messages_in + c.messages_out';
  const q = visibleConversations(db, workspaceId).select(db.raw(`COALESCE(SUM(${counted}), 0) AS total`));
  if (filters.conversationId !== undefined) q.where('c.id', filters.conversationId);
  return q;
}

/**
 * One offset page, newest first (`timestamp` descending, then id descending, as a conversation's
 * messages), and the exact total under the same filters; `updatedAfter` is inclusive. Without
 * `updatedAfter` the total comes from the conversations' counts; with it, the messages since then
 * are counted (the (workspace, updated_at) index bounds that to them).
 */
export async function listMessages(db: Db, workspaceId: string, filters: MessageFilters & { updatedAfter?: Date }, page: Page) {
  const scope = visibleMessages(db, workspaceId, filters);
  if (filters.updatedAfter !== undefined) scope.where('m.updated_at', '>=', filters.updatedAfter);
  const { rows, total } = await pageWithTotal<ListedMessageRow>(
    scope,
    page,
    (q) => q.orderByRaw('m.timestamp DESC, m.id DESC').select(COLUMNS),
    filters.updatedAfter === undefined ? countedMessages(db, workspaceId, filters) : undefined,
  );
  return listEnvelope(await serialize(db, workspaceId, rows), total, page);
}

/** One sync page of the visible messages under the filters. */
export async function syncMessages(db: Db, workspaceId: string, filters: MessageFilters, read: SyncRead) {
  const source = { scope: visibleMessages(db, workspaceId, filters), updatedAt: 'm.updated_at', id: 'm.id', columns: COLUMNS };
  const { rows, pagination } = await syncPage<ListedMessageRow>(db, 'messages', source, read);
  return { data: await serialize(db, workspaceId, rows), pagination };
}
