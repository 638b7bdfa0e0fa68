import type { Knex } from 'knex';
import type { Db } from '../platform';
import { type Phone, canonical } from '../leads';

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

/** What a send looks at on its workspace: the daily plan and the standing (domain/access/workspaces.ts suspension). */
export async function sendingPlan(
  trx: Writer,
  workspaceId: string,
): Promise<{ daily_message_quota: number | null; broadcast_limit: number | null; active: boolean; api_access: boolean } | undefined> {
  return trx('workspaces').where({ id: workspaceId }).first('daily_message_quota', 'broadcast_limit', 'active', 'api_access');
}
