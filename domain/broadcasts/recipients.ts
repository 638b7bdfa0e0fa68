import type { Knex } from 'knex';
import type { Db } from '../platform';
import { statusPastSent } from '../messaging';
import { contactCustomValues } from '../sales';

import type { BroadcastTemplate, RecipientStatus } from './broadcasts';

/**
 * A broadcast's recipients: the rows its audience was frozen into, read in pages, locked, settled
 * and marked sent; each recipient's personalised template; and the run's own state (waiting, the
 * last call, the instance's shared slots).
 */

export interface RecipientRow {
  contact_id: string;
  phone: string | null;
  position: number;
  reference: string;
  status: RecipientStatus;
}

/**
 * The next recipients still to send after `after` (a position; -1: from the first), by position:
 * what a batch sends, and what a cancelled broadcast looks through for sends prepared and never called.
 */
export async function nextPendingRecipients(
  db: Db,
  workspaceId: string,
  broadcastId: string,
  after: number,
  limit: number,
): Promise<RecipientRow[]> {
  return db('broadcast_recipients')
    .where({ workspace_id: workspaceId, broadcast_id: broadcastId, status: 'pending' })
    .where('position', '>', after)
    .orderBy('position')
    .limit(limit)
    .select('contact_id', 'phone', 'position', 'reference', 'status');
}

/** lockPendingRecipient for a page of recipients, in position order: the contact ids still pending. */
export async function lockPendingRecipients(
  trx: Knex.Transaction,
  workspaceId: string,
  broadcastId: string,
  contactIds: string[],
): Promise<Set<string>> {
  if (contactIds.length === 0) return new Set();
  const rows: { contact_id: string; status: string }[] = await trx('broadcast_recipients')
    .where({ workspace_id: workspaceId, broadcast_id: broadcastId })
    .whereIn('contact_id', contactIds)
    .orderBy('position')
    .forUpdate()
    .select('contact_id', 'status');
  return new Set(rows.filter((r) => r.status === 'pending').map((r) => r.contact_id));
}

/** `{{contact.<field>}}` in a template variable: the contact's own fields, or a custom field key (its pattern). */
const CONTACT_VARIABLE = /\{\{\s*contact\.([A-Za-z][A-Za-z0-9_]{0,63})\s*\}\}/g;
const CONTACT_FIELDS = ['name', 'phone', 'email'];

/** The custom field keys the variables use (`{{contact.<key>}}` other than name, phone, email), each once. */
export function customVariableKeys(variables: string[]): string[] {
  const keys = variables.flatMap((v) => [...v.matchAll(CONTACT_VARIABLE)].map((m) => m[1]));
  return [...new Set(keys.filter((k) => !CONTACT_FIELDS.includes(k)))];
}

/** A custom value as text in a message: a list's items joined by commas; nothing for null. */
function asText(value: unknown): string {
  if (value === null || value === undefined) return '';
  if (Array.isArray(value)) return value.filter((v) => v !== null && v !== undefined).join(', ');
  return String(value);
}

/**
 * The template variables with `{{contact.name}}`, `{{contact.phone}}`, `{{contact.email}}` and
 * `{{contact.<custom field key>}}` filled from the recipient's contact and its custom values
 * (contactCustomValues). Null when one of them has nothing to fill in: the message would go out
 * with a hole (or be refused by the provider), so the recipient is skipped (VARIABLE_EMPTY).
 */
export function personalise(
  variables: string[],
  contact: { name: string; phone: string; email: string | null },
  customValues: Record<string, unknown> = {},
): string[] | null {
  let empty = false;
  const filled = variables.map((variable) =>
    variable.replace(CONTACT_VARIABLE, (_, field: string) => {
      const value = CONTACT_FIELDS.includes(field) ? asText(contact[field as 'name' | 'phone' | 'email']) : asText(customValues[field]);
      if (value.trim() === '') empty = true;
      return value;
    }),
  );
  return empty ? null : filled;
}

/**
 * A recipient's template: its variables, header text and button URL variables personalised
 * (personalise over all of them; its custom values read only when one uses them); null when one
 * has nothing to fill in (VARIABLE_EMPTY).
 */
export async function recipientTemplate(
  db: Db,
  workspaceId: string,
  contact: { id: string; name: string; phone: string; email: string | null },
  template: BroadcastTemplate,
): Promise<BroadcastTemplate | null> {
  const texts = personalTexts(template);
  const filled = personalise(texts, contact, await contactCustomValues(db, workspaceId, contact.id, customVariableKeys(texts)));
  if (!filled) return null;
  const variables = filled.splice(0, template.variables?.length ?? 0);
  const header = template.header?.text !== undefined ? { text: filled.shift()! } : template.header;
  const buttons = template.buttons?.map((b, i) => ({ index: b.index, urlVariable: filled[i] }));
  return { ...template, variables, ...(header ? { header } : {}), ...(buttons ? { buttons } : {}) };
}

/** Marks a pending recipient skipped or failed with its code (a no-op once it left `pending`). */
export async function settleRecipient(
  db: Db,
  workspaceId: string,
  broadcastId: string,
  contactId: string,
  status: 'skipped' | 'failed',
  code: string,
): Promise<void> {
  await db('broadcast_recipients')
    .where({ workspace_id: workspaceId, broadcast_id: broadcastId, contact_id: contactId, status: 'pending' })
    .update({ status, code: code.slice(0, 100), updated_at: db.fn.now() });
}

/**
 * A page of pending recipients recorded sent, with their messages and conversations. A recipient
 * takes its message's status when the provider's callback moved the message already (it arrived
 * before the record: domain/messaging recordOutboundMessage); later moves reach the row through
 * the trigger on `messages`.
 */
export async function markRecipientsSent(
  trx: Knex.Transaction,
  workspaceId: string,
  broadcastId: string,
  sent: { contactId: string; messageId: string; conversationId: string }[],
): Promise<void> {
  if (sent.length === 0) return;
  await trx.raw(
    `UPDATE broadcast_recipients r
        SET status = coalesce(?, 'sent'),
            code = NULL, message_id = s.message_id, conversation_id = s.conversation_id, sent_at = now(), updated_at = now()
       FROM unnest(?::uuid[], ?::uuid[], ?::uuid[]) AS s(contact_id, message_id, conversation_id)
      WHERE r.workspace_id = ? AND r.broadcast_id = ? AND r.contact_id = s.contact_id AND r.status = 'pending'`,
    [
      statusPastSent(trx, 's.message_id', 'r.workspace_id'),
      sent.map((s) => s.contactId),
      sent.map((s) => s.messageId),
      sent.map((s) => s.conversationId),
      workspaceId,
      broadcastId,
    ],
  );
}

/** When the broadcast's last recipient was recorded sent (null: none yet): a new batch paces its first call from it. */
export async function lastSentAt(db: Db, workspaceId: string, id: string): Promise<Date | null> {
  const row = await db('broadcast_recipients').where({ workspace_id: workspaceId, broadcast_id: id }).max({ at: 'sent_at' }).first();
  return row?.at ?? null;
}

/**
 * The broadcast waits until `until`, and says why (`code`: the daily counter reached, the
 * instance disconnected, the subscription inactive, the template no longer approved); null, null:
 * it does not wait. Only an `in_progress` broadcast: a pause or cancel meanwhile is not undone.
 */
export async function setWaiting(db: Db, workspaceId: string, id: string, until: Date | null, code: string | null): Promise<void> {
  await db('broadcasts')
    .where({ workspace_id: workspaceId, id, status: 'in_progress' })
    .whereRaw('(waiting_until IS DISTINCT FROM ? OR code IS DISTINCT FROM ?)', [until, code])
    .update({ waiting_until: until, code, updated_at: db.fn.now() });
}

/**
 * The service cancels a broadcast it can never finish (its instance removed, or one that cannot
 * carry templates), saying why in `code`; a no-op once it finished. Its status after.
 */
export async function cancelBroadcastFor(db: Db, workspaceId: string, id: string, code: string): Promise<void> {
  await db('broadcasts')
    .where({ workspace_id: workspaceId, id })
    .whereIn('status', ['scheduled', 'in_progress', 'paused'])
    .update({ status: 'cancelled', code, waiting_until: null, finished_at: db.fn.now(), updated_at: db.fn.now() });
}

/**
 * Provider-call slots of an instance's throughput, shared by all its broadcasts: the time of the
 * instance's next free slot is moved on by `count` slots of `intervalMs`, and the first reserved
 * slot returned as milliseconds from now (0: at once); the others follow it `intervalMs` apart. A
 * broadcast's page reserves its calls together (a quarter of a second of its rate at most), so
 * broadcasts of one instance take turns page by page and share its throughput evenly, whatever
 * each one's own rate (a slower one takes fewer turns; the others take the rest).
 */
export async function reserveInstanceSlots(
  db: Db,
  workspaceId: string,
  instanceId: string,
  intervalMs: number,
  count: number,
): Promise<number> {
  const span = intervalMs * count;
  const { rows } = await db.raw<{ rows: { wait_ms: number }[] }>(
    `INSERT INTO broadcast_instance_pacing AS p (workspace_id, instance_id, next_call_at)
     VALUES (?, ?, clock_timestamp() + ? * interval '1 millisecond')
     ON CONFLICT (instance_id) DO UPDATE
       SET next_call_at = greatest(p.next_call_at, clock_timestamp()) + ? * interval '1 millisecond'
     WHERE p.workspace_id = EXCLUDED.workspace_id
     RETURNING greatest(0, extract(epoch FROM (p.next_call_at - clock_timestamp())) * 1000 - ?)::float8 AS wait_ms`,
    [workspaceId, instanceId, span, span, span],
  );
  return rows[0]?.wait_ms ?? 0;
}

/** The texts of a template that `{{contact.*}}` placeholders fill, in order: the variables, the header's text, the buttons' URL variables. */
export function personalTexts(template: BroadcastTemplate): string[] {
  return [
    ...(template.variables ?? []),
    ...(template.header?.text !== undefined ? [template.header.text] : []),
    ...(template.buttons ?? []).map((b) => b.urlVariable),
  ];
}
