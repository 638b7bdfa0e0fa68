import type { Knex } from 'knex';
import { searchHash, type Db, type KeyRing } from '../../platform';
import { ApiError } from '../../kernel';
import { suspension, workspacePlan } from '../../access';
import { findOrCreateContact, requirePhone } from '../../leads';
import type { MessageContent, PreparedSend, SendInput, SendRequest, TemplateWireComponent } from '../../../types/messaging';
import {
  chooseInstance,
  dailyLimitRefusalOf,
  dailyUnits,
  refuseByPhone,
  refuseUnsupported,
  refuseForRecipient,
  refuseOnInstance,
  saoPauloDay,
  type SendableTemplate,
  type SendInstance,
} from '../sending';
import { sendCandidates, type Provider } from '../instances';
import { approvedTemplate } from '../templates';
import { conversationForSend, conversationsOn, findOrCreateConversations } from '../conversations';
import { sendRequestOf } from '../send-requests';
import { findPreparations, recordPreparations } from './ledger';
import { dailyLimitOf, takeDailyUnitsAtCommit } from './daily';

/** What a send looks at on its workspace: the daily plan and the standing (access suspension). */
export async function sendingPlan(trx: Db, workspaceId: string) {
  return workspacePlan(trx, workspaceId, ['daily_message_quota', 'broadcast_limit', 'active', 'api_access']);
}

/** A contact a send goes to, as its caller already knows it (a broadcast's recipient). */
export interface SendContact {
  id: string;
  /** Null for a contact met on Instagram: only a conversation reaches it. */
  phone: string | null;
  opted_out: boolean;
  wa_id: string | null;
}

export interface PrepareItem {
  /** Names the preparation and the one provider attempt (a send workflow's run, a broadcast recipient). */
  reference: string;
  /** An existing conversation (a reply), a number found or created (a cold send), or a known contact (a broadcast). */
  to: { conversationId: string } | { phone: string } | { contact: SendContact };
  message: MessageContent;
}

/**
 * What prepare decided for one send, kept in send_preparations under its reference. `components`:
 * a template's at the provider's wire format, as checked now.
 */
export type Prepared = PreparedSend & {
  provider: Provider;
  phoneHash?: string;
  components?: TemplateWireComponent[];
};

export type PrepareResult =
  | { prepared: Prepared }
  /**
   * `about`: `send` when what every item shares refused it (the workspace's standing, the
   * instance, the template's approval), `recipient` when the item's own contact or values did.
   */
  | { refused: ApiError; about: 'send' | 'recipient' };

export interface PreparedPage {
  /** By reference, in the items' order; an item after a stop has none. */
  results: Map<string, PrepareResult>;
}

/**
 * Everything before the provider call of one or many sends, inside the caller's transaction:
 * the workspace's standing, the instance (the conversation's, or the one asked for, or the
 * workspace's only WhatsApp one), the contact (found or created by phone), the send rules of
 * sending.ts, the conversations found or created, the preparations recorded and, last, the daily
 * units (one message each, one cold conversation per conversation opened), all or none.
 * `stopsAt`: a refusal after which nothing more is prepared (a broadcast's wait and cancel codes).
 */
export async function prepareSends(
  trx: Knex.Transaction,
  workspaceId: string,
  items: PrepareItem[],
  options: { keys: KeyRing; instanceId?: string; stopsAt?: (refused: ApiError, about: 'send' | 'recipient') => boolean },
): Promise<PreparedPage> {
  const results = new Map<string, PrepareResult>();
  if (items.length === 0) return { results };
  const now = new Date();
  const day = saoPauloDay(now);
  const plan = await sendingPlan(trx, workspaceId);
  let shared: SendInstance | ApiError | undefined;
  const instanceAsked = async (): Promise<SendInstance> => {
    if (!shared) {
      try {
        // A named instance of another channel is found, then refused as unsupported; the default is the WhatsApp one.
        shared = chooseInstance(await sendCandidates(trx, workspaceId, options.instanceId), options.instanceId);
      } catch (err) {
        if (!(err instanceof ApiError)) throw err;
        shared = err;
      }
    }
    if (shared instanceof ApiError) throw shared;
    return shared;
  };
  const templates = new Map<string, SendableTemplate | undefined>();
  const templateOn = async (instance: SendInstance, message: MessageContent) => {
    if (message.type !== 'template') return undefined;
    const key = `${instance.id}\n${message.templateName}\n${message.templateLanguage}`;
    if (!templates.has(key))
      templates.set(key, await approvedTemplate(trx, workspaceId, instance.id, message.templateName!, message.templateLanguage!));
    return templates.get(key);
  };

  type Passed = {
    item: PrepareItem;
    instance: SendInstance;
    contact: SendContact;
    conversation?: { id: string };
    createdContact: boolean;
    components?: TemplateWireComponent[];
    recipient?: string;
  };
  const passed: Passed[] = [];
  for (const item of items) {
    let about: 'send' | 'recipient' = 'send';
    try {
      const suspended = plan && suspension(plan, 'send');
      if (suspended) throw suspended;
      let instance: SendInstance;
      let contact: SendContact;
      let conversation: { id: string; last_inbound_at: Date | null } | undefined;
      let createdContact = false;
      // Instagram: the person's IGSID on the conversation's instance.
      let recipient: string | undefined;
      if ('conversationId' in item.to) {
        const row = await conversationForSend(trx, workspaceId, item.to.conversationId);
        if (!row) throw new ApiError('NOT_FOUND', 'Conversation not found');
        instance = { id: row.instance_id, channel: row.channel, provider: row.provider, connected: row.connected };
        contact = { id: row.contact_id, phone: row.phone, opted_out: row.opted_out, wa_id: row.wa_id };
        recipient = row.instagram_id ?? undefined;
        conversation = { id: row.id, last_inbound_at: row.last_inbound_at };
      } else if ('phone' in item.to) {
        about = 'recipient';
        const phone = requirePhone(item.to.phone);
        about = 'send';
        instance = await instanceAsked();
        refuseByPhone(instance);
        const found = await findOrCreateContact(trx, workspaceId, phone);
        contact = found.contact;
        createdContact = found.created;
      } else {
        instance = await instanceAsked();
        refuseByPhone(instance);
        contact = item.to.contact;
        if (contact.phone === null) {
          about = 'recipient';
          throw new ApiError('PHONE_REQUIRED', 'The contact has no phone number (met on Instagram): a send by phone cannot reach it');
        }
      }
      // What the instance cannot carry at all (a template on Instagram) is refused before any template lookup.
      refuseUnsupported(instance, item.message);
      const template = await templateOn(instance, item.message);
      refuseOnInstance({ instance, message: item.message, template });
      about = 'recipient';
      // Only a message outside a template needs the window, which an existing conversation holds.
      if (!conversation && item.message.type !== 'template')
        conversation = (await conversationsOn(trx, workspaceId, instance.id, [contact.id])).get(contact.id);
      const components = refuseForRecipient({
        instance,
        contact,
        conversation: conversation ?? { last_inbound_at: null },
        message: item.message,
        template,
        now,
      });
      if (instance.provider === 'instagram' && !recipient)
        throw new ApiError('NOT_FOUND', 'The Instagram person of this conversation is unknown');
      passed.push({ item, instance, contact, conversation, createdContact, components, recipient });
    } catch (err) {
      if (!(err instanceof ApiError)) throw err;
      results.set(item.reference, { refused: err, about });
      if (options.stopsAt?.(err, about)) break;
    }
  }

  // The conversations of the new sends, found or created for all of an instance's at once.
  const opened = new Map<string, { id: string; created: boolean }>();
  for (const instance of new Map(passed.map((p) => [p.instance.id, p.instance])).values()) {
    const mine = passed.filter((p) => p.instance.id === instance.id && !p.conversation?.id);
    const found = await findOrCreateConversations(
      trx,
      workspaceId,
      mine.map((p) => p.contact.id),
      instance,
    );
    for (const p of mine) opened.set(p.item.reference, found.get(p.contact.id)!);
  }
  const prepared: Prepared[] = passed.map((p) => {
    const conversation = opened.get(p.item.reference) ?? { id: p.conversation!.id, created: false };
    return {
      reference: p.item.reference,
      workspaceId,
      instanceId: p.instance.id,
      provider: p.instance.provider,
      contactId: p.contact.id,
      conversationId: conversation.id,
      // Cloud API recipients are addressed by the provider's wa_id once known; Instagram's by IGSID.
      to: p.recipient ?? p.contact.wa_id ?? p.contact.phone!,
      phone: p.contact.phone,
      createdContact: p.createdContact,
      createdConversation: conversation.created,
      day,
      tookCold: conversation.created,
      ...(p.contact.phone ? { phoneHash: searchHash(options.keys, 'phone', workspaceId, p.contact.phone) } : {}),
      ...(p.components ? { components: p.components } : {}),
    };
  });
  // A concurrent duplicate of a preparation conflicts here and rolls its transaction back; its retry reads the row.
  await recordPreparations(trx, workspaceId, prepared);
  for (const p of prepared) results.set(p.reference, { prepared: p });
  // The daily units, taken at the commit: their counter rows are the workspace's (every send takes
  // them), so their locks are held for the commit alone. Units that do not fit fail the commit.
  const openedCount = prepared.filter((p) => p.createdConversation).length;
  if (prepared.length > 0) {
    const takes = dailyUnits(plan!, openedCount > 0).map(({ counter, cap }) => ({
      counter,
      cap,
      n: counter === 'cold_conversations' ? openedCount : prepared.length,
    }));
    await takeDailyUnitsAtCommit(trx, workspaceId, day, takes);
  }
  // In the items' order.
  const inOrder = items
    .filter((item) => results.has(item.reference))
    .map((item): [string, PrepareResult] => [item.reference, results.get(item.reference)!]);
  return { results: new Map(inOrder) };
}

/**
 * A send workflow's prepare (the cold send and the conversation send, whatever started them: the
 * API or an automation's send_message): its request (loaded here unless the caller has it),
 * prepareSends for it alone, in one transaction so a refusal leaves nothing behind. Retried after
 * its commit, it answers the first run's preparation, never a second quota unit. Refusals are
 * thrown. The preparation keeps a template's components: what goes to a workflow is `forWorkflow`'s.
 * `fresh`: the reference was made for this call (the API's own attempt, named by its new request
 * id), so no earlier preparation is looked for.
 */
export async function prepareSend(
  db: Db,
  keys: KeyRing,
  input: SendInput,
  reference: string,
  given: { loaded?: SendRequest; fresh?: boolean } = {},
): Promise<Prepared> {
  try {
    return await db.transaction(async (trx) => {
      const done = given.fresh ? undefined : (await findPreparations<Prepared>(trx, input.workspaceId, [reference])).get(reference);
      if (done) return done;
      const request = given.loaded ?? (await sendRequestOf(trx, input));
      const to = request.conversationId ? { conversationId: request.conversationId } : { phone: request.phone! };
      const { results } = await prepareSends(trx, input.workspaceId, [{ reference, to, message: request.message }], {
        keys,
        instanceId: request.conversationId ? undefined : request.instanceId,
      });
      const result = results.get(reference)!;
      if ('refused' in result) throw result.refused;
      return result.prepared;
    });
  } catch (err) {
    // The commit refused the daily units (the cold cap or the message quota): nothing was kept.
    const full = dailyLimitOf(err);
    throw full ? dailyLimitRefusalOf(full) : err;
  }
}

/**
 * What a send workflow is told of its preparation: ids and flags, never the message's content
 * (the template's personalised components stay in send_preparations: an operator who can read
 * Temporal's history reads ids, not messages). Its provider call reads the content again.
 */
export function forWorkflow({ components: _content, ...prepared }: Prepared): Prepared {
  return prepared;
}
