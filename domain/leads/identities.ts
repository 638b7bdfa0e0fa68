import type { Knex } from 'knex';
import { lockUntilCommit, type Db } from '../platform';
import type { ContactForSend } from './contacts';
import { FOR_SEND_COLUMNS } from './contacts';

/**
 * Contacts met through a channel that has no phone number: Instagram, where a person is an
 * Instagram-scoped id (IGSID) per business account. Such a contact is keyed by (instance, IGSID)
 * in `contact_identities`; its row has no phone and repeats its latest identity (`instagram_id`,
 * `instagram_username`) where the lead record and the search read them.
 */

export interface InstagramPerson {
  instanceId: string;
  /** The person's Instagram-scoped id for this instance's account (digits). */
  igsid: string;
  /** From the Graph API's profile, when it gave one. */
  username?: string;
  name?: string;
}

/**
 * The contact of an Instagram person on an instance, found or created (phone null), one at a time
 * per (instance, IGSID): concurrent deliveries of a first DM make one contact. A contact merged
 * since is followed to the one it was merged into (the merge moves identities there). A username
 * the profile gives later is recorded on the identity and the contact.
 */
export async function findOrCreateInstagramContact(
  trx: Knex.Transaction,
  workspaceId: string,
  person: InstagramPerson,
): Promise<{ contact: ContactForSend; created: boolean }> {
  await lockUntilCommit(trx, `identity:${person.instanceId}:${person.igsid}`);
  const found = (await trx('contact_identities as ci')
    .join('contacts as c', 'c.id', 'ci.contact_id')
    .where({ 'ci.workspace_id': workspaceId, 'ci.instance_id': person.instanceId, 'ci.external_id': person.igsid })
    .first('ci.id as identity_id', 'ci.username', 'c.deleted_at', ...FOR_SEND_COLUMNS.map((column) => `c.${column}`))) as
    (ContactForSend & { identity_id: string; username: string | null; deleted_at: Date | null }) | undefined;
  if (found && !found.deleted_at) {
    const { identity_id: identityId, username, deleted_at: _deleted, ...contact } = found;
    if (person.username && person.username !== username) {
      await trx('contact_identities').where({ id: identityId }).update({ username: person.username, updated_at: trx.fn.now() });
      await trx('contacts')
        .where({ workspace_id: workspaceId, id: contact.id })
        .update({ instagram_id: person.igsid, instagram_username: person.username, updated_at: trx.fn.now() });
    }
    return { contact, created: false };
  }
  // New, or its contact was deleted: the person writing again is a new contact, and the identity moves to it.
  const [contact] = (await trx('contacts')
    .insert({
      workspace_id: workspaceId,
      name: (person.name ?? person.username ?? '').slice(0, 200),
      phone: null,
      phone_key: null,
      instagram_id: person.igsid,
      instagram_username: person.username ?? null,
    })
    .returning(FOR_SEND_COLUMNS)) as ContactForSend[];
  const identity = { contact_id: contact.id, username: person.username ?? found?.username ?? null, updated_at: trx.fn.now() };
  if (found) await trx('contact_identities').where({ id: found.identity_id }).update(identity);
  else
    await trx('contact_identities').insert({
      ...identity,
      workspace_id: workspaceId,
      instance_id: person.instanceId,
      channel: 'instagram',
      external_id: person.igsid,
    });
  return { contact, created: true };
}

/** Whether this person is already a contact on this instance (a first DM is worth a profile lookup; a known one is not). */
export async function knownInstagramPerson(db: Db, workspaceId: string, instanceId: string, igsid: string): Promise<boolean> {
  const row = await db('contact_identities').where({ workspace_id: workspaceId, instance_id: instanceId, external_id: igsid }).first('id');
  return row !== undefined;
}

/**
 * The IGSID of a contact on an instance (a send's recipient on Instagram), as a scalar sub-query
 * of another area's statement: both are the caller's column names.
 */
export function instagramIdOn(db: Db, instanceIdColumn: string, contactIdColumn: string): Knex.QueryBuilder {
  return db('contact_identities as ci')
    .whereRaw('ci.instance_id = ??', [instanceIdColumn])
    .whereRaw('ci.contact_id = ??', [contactIdColumn])
    .select('ci.external_id')
    .limit(1);
}

/** The canonical phoneless contacts that wrote as this Instagram id (on any of the workspace's instances). */
export async function instagramContactsOf(db: Db, workspaceId: string, instagramId: string): Promise<string[]> {
  const rows = await db('contact_identities as ci')
    .join('contacts as c', 'c.id', 'ci.contact_id')
    .where({ 'ci.workspace_id': workspaceId, 'ci.external_id': instagramId })
    .whereNull('c.phone')
    .whereNull('c.merged_into_id')
    .whereNull('c.deleted_at')
    .distinct('c.id');
  return rows.map((r: { id: string }) => r.id);
}

/** The identities of a contact merged into another follow it (domain/merge): the person's next DM reaches the surviving contact. */
export async function moveContactIdentities(trx: Knex.Transaction, workspaceId: string, fromId: string, intoId: string): Promise<void> {
  await trx('contact_identities')
    .where({ workspace_id: workspaceId, contact_id: fromId })
    .update({ contact_id: intoId, updated_at: trx.fn.now() });
}
