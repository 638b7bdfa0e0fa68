import { ApplicationFailure, Context } from '@temporalio/activity';
import type { Knex } from 'knex';
import type { Db } from '../domain/platform/db';
import type { Config } from '../domain/platform/config';
import { ApiError } from '../domain/kernel/errors';
import { withoutPhoneNumbers } from '../domain/platform/temporal';
import { suspension } from '../domain/access/workspaces';
import {
  approvedTemplate,
  attemptOf,
  chooseInstance,
  claimAttempt,
  dailyUnits,
  failAttempt,
  findOrCreateConversation,
  findPreparation,
  instanceChannel,
  liveInstanceConfig,
  lockAttemptStatus,
  lockConversation,
  markAttemptSent,
  noteAttemptError,
  openInstanceConfig,
  readAttempt,
  recordOutboundMessage,
  recordPreparation,
  refuseUnsendable,
  saoPauloDay,
  secondsUntilSaoPauloMidnight,
  sendCandidates,
  sendingPlan,
  standingSincePrepare,
  takeDaily,
  touchConversation,
  touchConversations,
  findOrCreateConversations,
  findPreparations,
  lockAttemptStatuses,
  lockConversations,
  recordOutboundMessages,
  recordPreparations,
  takeDailyUnits,
  attemptQuietFor,
  undoPreparedSend,
  preparedNeverCalled,
  templateComponents,
  type SendInstance,
} from '../domain/messaging';
import { recordWaId, recordWaIds } from '../domain/leads/contacts';
import {
  broadcastForRun,
  completeBroadcast,
  freezeAudience,
  markRecipientSent,
  lockPendingRecipient,
  nextPendingRecipients,
  lockPendingRecipients,
  recipientContacts,
  markRecipientsSent,
  lastSentAt,
  broadcastMessage,
  recipientTemplate,
  recipientContact,
  settleRecipient,
  setWaiting,
  cancelBroadcastFor,
  pendingReferences,
  reserveInstanceSlot,
  MAX_RATE_PER_SECOND,
  type BroadcastRow,
  type RecipientRow,
  type RecipientContact,
} from '../domain/broadcasts';
import { DEFAULT_RECONCILE_WINDOW_MS, PROVIDER_RETRYABLE, type TemplateWireComponent } from '../types/messaging';
import { sendThroughProvider } from './providers';
import { failureCode, mayHaveReachedProvider, ProviderError, type OutboundMessage } from './providers/types';

/** What the broadcast workflow (workflows/broadcast.ts) is told by one batch. */
export type BatchResult =
  | { state: 'more' }
  | { state: 'done' }
  | { state: 'paused' }
  | { state: 'cancelled' }
  | { state: 'completed' }
  /** The daily quota or the cold cap is reached: wait until `until` (the São Paulo reset). */
  | { state: 'waiting'; until: string }
  /** A recipient's earlier provider call may have been accepted: wait a little for its status callback. */
  | { state: 'reconciling' };

export interface BroadcastRef {
  workspaceId: string;
  broadcastId: string;
}

/** How long one batch may run, so it stays well inside its activity timeout (its recipients: BROADCAST_BATCH_SIZE). */
export const BATCH_BUDGET_MS = 30_000;

/** What a broadcast's send of one recipient prepared (recorded in send_preparations under its reference). */
interface PreparedRecipient {
  reference: string;
  instanceId: string;
  provider: 'cloud' | 'web';
  contactId: string;
  conversationId: string;
  to: string;
  day: string;
  createdConversation: boolean;
  tookCold: boolean;
  variables: string[];
  /** The template's components for this recipient (header, body, buttons personalised); absent in a preparation made before headers. */
  components?: TemplateWireComponent[];
}

/** A daily unit (quota or cold cap) refused inside prepare: the transaction rolls back and the broadcast waits. */
class DailyLimit extends Error {
  constructor(readonly code: string) {
    super(code);
  }
}

/**
 * Refusals that are about the broadcast, not the recipient: failing recipient after recipient for
 * them would burn the audience. The broadcast waits (looking again every BLOCKED_RETRY_MS) until
 * the instance is reconnected, the subscription active again, the template approved again.
 */
const WAIT_CODES = new Set(['INSTANCE_DISCONNECTED', 'SUBSCRIPTION_INACTIVE', 'TEMPLATE_INVALID']);
/** Refusals no wait can cure (the instance removed, or one that cannot carry templates): the broadcast is cancelled, saying why. */
const CANCEL_CODES = new Set(['INSTANCE_NOT_FOUND', 'NO_INSTANCE', 'CHANNEL_UNSUPPORTED', 'TEMPLATE_UNSUPPORTED']);
/** A wait for the instance's next slot longer than this re-reads the broadcast before the call (pause and cancel act within 1 s). */
const SLOT_RECHECK_MS = 250;
/**
 * A batch's recipients go in pages: each page prepared in one transaction and recorded in one, its
 * provider calls one by one between (a round trip per statement is what a recipient cost). A page
 * holds a quarter of a second of the broadcast's rate (one recipient at 7 calls a second or less,
 * MAX_PAGE at most), so a slow broadcast prepares nothing ahead of its turn; up to MAX_LANES pages
 * are in flight at once when the rate allows (a lane per LANE_RATE calls a second).
 */
const MAX_PAGE = 25;
const PAGES_PER_SECOND = 4;
const MAX_LANES = 8;
const LANE_RATE = 20;
/** How long a broadcast blocked by a WAIT_CODES refusal waits before it looks again. */
export const BLOCKED_RETRY_MS = 60_000;

/** What stops a batch before a recipient's provider call: wait (until, why) or cancel (why). */
type Blocked = { wait: string; until: Date } | { cancel: string };

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

function heartbeat(): void {
  try {
    Context.current().heartbeat();
  } catch {
    // Outside an activity (never in production): nothing to beat.
  }
}

export function createBroadcastActivities({
  db,
  config,
}: {
  db: Db;
  config: Pick<Config, 'encryptionKeys'> & Partial<Pick<Config, 'sendReconcileWindowMs' | 'broadcastBatchSize' | 'rateLimitScale'>>;
}) {
  const windowMs = config.sendReconcileWindowMs ?? DEFAULT_RECONCILE_WINDOW_MS;
  const batchSize = config.broadcastBatchSize ?? 500;
  /** RATE_LIMIT_SCALE lifts the pacing as it lifts every limit (benchmarks only). */
  const rateScale = config.rateLimitScale ?? 1;
  /** One provider call of an instance's throughput (the Cloud API's default per number: MAX_RATE_PER_SECOND calls a second). */
  const instanceIntervalMs = 1000 / (MAX_RATE_PER_SECOND * rateScale);

  /**
   * Everything before one recipient's provider call, once per recipient (its reference): the
   * contact (deleted: skipped CONTACT_DELETED), the send rules of domain/messaging (opted out:
   * skipped OPTED_OUT; instance, template), the conversation found or created, the cold slot and
   * one message of the daily quota. One transaction: a reached daily unit rolls it all back.
   */
  /**
   * What every recipient of the broadcast is checked against, read once per preparation: the
   * workspace's plan and standing, the instance and the approved template, or the refusal among them.
   */
  async function sendingContext(trx: Knex.Transaction, b: BroadcastRow) {
    const plan = await sendingPlan(trx, b.workspace_id);
    const template = b.template!;
    let shared: { instance: SendInstance; approved: Awaited<ReturnType<typeof approvedTemplate>> } | ApiError;
    try {
      const suspended = plan && suspension(plan, 'send');
      if (suspended) throw suspended;
      const instance = chooseInstance(await sendCandidates(trx, b.workspace_id, b.instance_id ?? undefined), b.instance_id ?? undefined);
      shared = { instance, approved: await approvedTemplate(trx, b.workspace_id, instance.id, template.name, template.language) };
    } catch (err) {
      if (!(err instanceof ApiError)) throw err;
      shared = err;
    }
    return { plan, shared, now: new Date() };
  }

  /**
   * One recipient through the send rules of domain/messaging: its contact gone (skipped
   * CONTACT_DELETED), a refusal about the broadcast (a wait or a cancel, returned), about the
   * recipient (skipped OPTED_OUT, else failed with its code), a variable with nothing to fill in
   * (skipped VARIABLE_EMPTY); else its personalised variables and template components, with its contact and instance.
   */
  async function screen(
    trx: Knex.Transaction,
    b: BroadcastRow,
    r: RecipientRow,
    contact: RecipientContact | undefined,
    context: Awaited<ReturnType<typeof sendingContext>>,
  ): Promise<
    'settled' | Blocked | { variables: string[]; components: TemplateWireComponent[]; contact: RecipientContact; instance: SendInstance }
  > {
    if (!contact) {
      await settleRecipient(trx, b.workspace_id, b.id, r.contact_id, 'skipped', 'CONTACT_DELETED');
      return 'settled';
    }
    const template = b.template!;
    const { shared, now } = context;
    let instance: SendInstance;
    let approved: NonNullable<Exclude<typeof shared, ApiError>['approved']>;
    try {
      if (shared instanceof ApiError) throw shared;
      instance = shared.instance;
      const message = broadcastMessage(template);
      // Templates need no window: the conversation's last inbound does not matter.
      refuseUnsendable({
        instance: shared.instance,
        contact,
        conversation: { last_inbound_at: null },
        message,
        template: shared.approved,
        now,
      });
      approved = shared.approved!;
    } catch (err) {
      if (!(err instanceof ApiError)) throw err;
      if (WAIT_CODES.has(err.code)) return { wait: err.code, until: new Date(now.getTime() + BLOCKED_RETRY_MS) };
      if (CANCEL_CODES.has(err.code)) return { cancel: err.code };
      await settleRecipient(trx, b.workspace_id, b.id, r.contact_id, err.code === 'OPTED_OUT' ? 'skipped' : 'failed', err.code);
      return 'settled';
    }
    const personal = await recipientTemplate(trx, b.workspace_id, contact, template);
    if (!personal) {
      await settleRecipient(trx, b.workspace_id, b.id, r.contact_id, 'skipped', 'VARIABLE_EMPTY');
      return 'settled';
    }
    try {
      // The shape passed above; only this recipient's values are new (a refusal of them is this recipient's alone).
      return {
        variables: personal.variables ?? [],
        components: templateComponents(approved, broadcastMessage(personal)),
        contact,
        instance,
      };
    } catch (err) {
      if (!(err instanceof ApiError)) throw err;
      await settleRecipient(trx, b.workspace_id, b.id, r.contact_id, 'failed', err.code);
      return 'settled';
    }
  }

  async function prepare(b: BroadcastRow, r: RecipientRow): Promise<PreparedRecipient | 'settled' | Blocked> {
    try {
      return await db.transaction(async (trx) => {
        if (!(await lockPendingRecipient(trx, b.workspace_id, b.id, r.contact_id))) return 'settled' as const;
        const done = await findPreparation<PreparedRecipient>(trx, b.workspace_id, r.reference);
        if (done) return done;
        const contact = await recipientContact(trx, b.workspace_id, r.contact_id);
        const context = await sendingContext(trx, b);
        const screened = await screen(trx, b, r, contact, context);
        if (screened === 'settled' || !('variables' in screened)) return screened;
        const { variables, components, instance } = screened;
        const { plan, now } = context;
        const conv = await findOrCreateConversation(trx, b.workspace_id, screened.contact.id, instance);
        const day = saoPauloDay(now);
        const prepared: PreparedRecipient = {
          reference: r.reference,
          instanceId: instance.id,
          provider: instance.provider,
          contactId: screened.contact.id,
          conversationId: conv.conversation.id,
          to: screened.contact.wa_id ?? screened.contact.phone,
          day,
          createdConversation: conv.created,
          tookCold: conv.created,
          variables,
          components,
        };
        await recordPreparation(trx, b.workspace_id, r.reference, prepared);
        // The daily units last, just before the commit: their counter rows are the workspace's (every
        // lane and every send takes them), so their locks are held for one statement and the commit.
        for (const unit of dailyUnits(plan!, conv.created)) {
          if (!(await takeDaily(trx, b.workspace_id, unit.counter, day, unit.cap))) throw new DailyLimit(unit.refusal().code);
        }
        return prepared;
      });
    } catch (err) {
      if (!(err instanceof DailyLimit)) throw err;
      // The counters reset at São Paulo midnight: the broadcast sleeps until then.
      const now = new Date();
      return { wait: err.code, until: new Date(now.getTime() + secondsUntilSaoPauloMidnight(now) * 1000) };
    }
  }

  /** A recipient the provider definitely did not take: its daily units back (once), its empty new conversation removed. */
  async function fail(b: BroadcastRow, p: PreparedRecipient, code: string, status: 'failed' | 'skipped' = 'failed'): Promise<void> {
    await db.transaction(async (trx) => {
      await undoPreparedSend(trx, b.workspace_id, p);
      await settleRecipient(trx, b.workspace_id, b.id, p.contactId, status, code);
    });
  }

  /**
   * The provider call for one recipient, at most once ever: the attempt (send_attempts, keyed by
   * the recipient's reference) is claimed before the call, exactly as the single send does. A
   * claim found `in_flight` (a worker died mid-call, or a call got no answer) is not called again:
   * we wait for the provider's status callback carrying the reference (domain/messaging/inbound.ts
   * records it on the attempt) until the reconciliation window after the attempt's last change;
   * without one by then, the provider did not accept it, and it is claimed and called once more.
   * Returns the provider's message, 'failed' (settled), or 'wait' (the window is still open).
   */
  async function call(
    b: BroadcastRow,
    p: PreparedRecipient,
    deadline: number,
  ): Promise<{ providerMessageId: string; waId?: string } | 'failed' | 'wait' | Blocked> {
    for (;;) {
      const instance = await liveInstanceConfig(db, b.workspace_id, p.instanceId);
      if (!instance) {
        await fail(b, p, 'INSTANCE_NOT_FOUND');
        return 'failed';
      }
      const claimed = await claimAttempt(db, b.workspace_id, p.reference);
      if (!claimed) {
        const previous = await attemptOf(db, p.reference);
        if (previous?.state === 'sent') return { providerMessageId: previous.provider_message_id!, waId: previous.wa_id ?? undefined };
        if (instance.provider !== 'cloud') {
          // No status callback to wait for (web gateway): never twice, so the recipient stops here.
          await settleRecipient(db, b.workspace_id, b.id, p.contactId, 'failed', 'SEND_OUTCOME_UNKNOWN');
          return 'failed';
        }
        const settled = await waitForCallback(b.workspace_id, p.reference, deadline);
        if (settled === 'sent') continue;
        if (settled === 'wait') return 'wait';
        continue; // marked failed: claim it again
      }
      if (!claimed.fresh) {
        // A retry minutes later: an opt-out or a suspension since prepare stops it as it would have stopped the send.
        const standing = await standingSincePrepare(db, b.workspace_id, p.reference);
        const suspended = standing && suspension(standing, 'send');
        if (suspended) {
          // Not the recipient's doing: it stays pending with its units, and the broadcast waits.
          await failAttempt(db, p.reference, suspended.code);
          return { wait: suspended.code, until: new Date(Date.now() + BLOCKED_RETRY_MS) };
        }
        if (standing?.opted_out) {
          await failAttempt(db, p.reference, 'OPTED_OUT');
          await fail(b, p, 'OPTED_OUT', 'skipped');
          return 'failed';
        }
      }
      const template = b.template!;
      const outbound: OutboundMessage = {
        type: 'template',
        templateName: template.name,
        templateLanguage: template.language,
        templateVariables: p.variables,
        ...(p.components ? { templateComponents: p.components } : {}),
        to: p.to,
        reference: p.reference,
      };
      try {
        const sent = await sendThroughProvider(
          {
            instanceId: instance.id,
            provider: instance.provider,
            config: openInstanceConfig(config.encryptionKeys!, instance.config, b.workspace_id),
          },
          outbound,
        );
        await markAttemptSent(db, p.reference, sent);
        return sent;
      } catch (err) {
        const full = err instanceof Error ? err.message : String(err);
        const message = withoutPhoneNumbers(full);
        if (mayHaveReachedProvider(err)) {
          await noteAttemptError(db, p.reference, full.slice(0, 1000));
          continue; // in_flight: the next round waits for the callback
        }
        await failAttempt(db, p.reference, full.slice(0, 1000));
        if (!(err instanceof ProviderError)) throw message === full ? err : new Error(message);
        // Throttling (Cloud API 130429/131056) or an outage: the activity's retries slow the broadcast down; the recipient stays.
        if (err.retryable) throw ApplicationFailure.retryable(message, PROVIDER_RETRYABLE);
        await fail(b, p, failureCode(err.failure));
        return 'failed';
      }
    }
  }

  /**
   * Waits (heartbeating) for an in-flight attempt to be settled by the provider's status callback,
   * until `deadline` (the batch's budget). After the reconciliation window since the attempt's
   * last change, it is marked failed: the provider did not accept it.
   */
  async function waitForCallback(workspaceId: string, reference: string, deadline: number): Promise<'sent' | 'failed' | 'wait'> {
    for (;;) {
      const row = await readAttempt(db, workspaceId, reference);
      if (!row || row.state === 'failed') return 'failed';
      if (row.state === 'sent') return 'sent';
      if (await attemptQuietFor(db, workspaceId, reference, windowMs)) {
        await failAttempt(
          db,
          reference,
          'No status callback from the provider within the reconciliation window: not accepted',
          workspaceId,
        );
        continue;
      }
      if (Date.now() >= deadline) return 'wait';
      heartbeat();
      await sleep(300);
    }
  }

  /** After the provider accepted: the message in the contact's conversation, the recipient `sent`. */
  async function record(b: BroadcastRow, p: PreparedRecipient, sent: { providerMessageId: string; waId?: string }): Promise<void> {
    const template = b.template!;
    await db.transaction(async (trx) => {
      let conversationId = p.conversationId;
      if (!(await lockConversation(trx, b.workspace_id, conversationId))) {
        const instance = await instanceChannel(trx, b.workspace_id, p.instanceId);
        conversationId = (await findOrCreateConversation(trx, b.workspace_id, p.contactId, instance)).conversation.id;
      }
      const attempt = await lockAttemptStatus(trx, b.workspace_id, sent.providerMessageId);
      const row = await recordOutboundMessage(trx, b.workspace_id, {
        conversationId,
        type: 'template',
        body: `[template] ${template.name}`,
        mediaUrl: null,
        status: attempt?.provider_status ?? 'sent',
        providerMessageId: sent.providerMessageId,
      });
      if (row.inserted) {
        await touchConversation(trx, b.workspace_id, conversationId, row.timestamp);
        if (sent.waId) await recordWaId(trx, b.workspace_id, p.contactId, sent.waId);
      }
      await markRecipientSent(trx, b.workspace_id, b.id, p.contactId, { messageId: row.id, conversationId });
    });
  }

  /**
   * prepare() for a page of recipients in one transaction: the recipients still pending locked (in
   * position order), their earlier preparations found, their contacts, the workspace's plan, the
   * instance and the template read once, the send rules (domain/messaging) applied to each as
   * prepare() applies them, the conversations found or made for all, the preparations recorded,
   * and last the page's daily units taken at once. When the units do not all fit, the transaction
   * rolls back and the page goes through prepare() one recipient at a time, which takes what is
   * left and stops at the limit. The prepared recipients come back in position order, with what
   * stopped the page (a wait or a cancel) if anything did.
   */
  async function preparePage(b: BroadcastRow, page: RecipientRow[]): Promise<{ prepared: PreparedRecipient[]; blocked?: Blocked }> {
    if (page.length === 1) {
      const one = await prepare(b, page[0]);
      if (one === 'settled') return { prepared: [] };
      return 'reference' in one ? { prepared: [one] } : { prepared: [], blocked: one };
    }
    try {
      return await db.transaction(async (trx) => {
        const ws = b.workspace_id;
        const pending = await lockPendingRecipients(
          trx,
          ws,
          b.id,
          page.map((r) => r.contact_id),
        );
        const rows = page.filter((r) => pending.has(r.contact_id));
        const done = await findPreparations<PreparedRecipient>(
          trx,
          ws,
          rows.map((r) => r.reference),
        );
        const fresh = rows.filter((r) => !done.has(r.reference));
        const made = new Map<string, PreparedRecipient>();
        let blocked: Blocked | undefined;
        if (fresh.length) {
          const contacts = await recipientContacts(
            trx,
            ws,
            fresh.map((r) => r.contact_id),
          );
          const context = await sendingContext(trx, b);
          const { plan, now } = context;
          const sendable: {
            r: RecipientRow;
            contact: RecipientContact;
            instance: SendInstance;
            variables: string[];
            components: TemplateWireComponent[];
          }[] = [];
          for (const r of fresh) {
            const screened = await screen(trx, b, r, contacts.get(r.contact_id), context);
            if (screened === 'settled') continue;
            if (!('variables' in screened)) {
              blocked = screened;
              break;
            }
            sendable.push({ r, ...screened });
          }
          if (sendable.length) {
            // Every sendable recipient passed the same instance (the page's context).
            const { instance } = sendable[0];
            const conversations = await findOrCreateConversations(
              trx,
              ws,
              sendable.map((x) => x.contact.id),
              instance,
            );
            const day = saoPauloDay(now);
            for (const { r, contact, variables, components } of sendable) {
              const conv = conversations.get(contact.id)!;
              made.set(r.reference, {
                reference: r.reference,
                instanceId: instance.id,
                provider: instance.provider,
                contactId: contact.id,
                conversationId: conv.id,
                to: contact.wa_id ?? contact.phone,
                day,
                createdConversation: conv.created,
                tookCold: conv.created,
                variables,
                components,
              });
            }
            await recordPreparations(
              trx,
              ws,
              [...made.values()].map((p) => ({ reference: p.reference, prepared: p })),
            );
            // The daily units last, just before the commit (their counter rows are the workspace's), all at once.
            const opened = [...made.values()].filter((p) => p.createdConversation).length;
            for (const unit of dailyUnits(plan!, opened > 0)) {
              const n = unit.counter === 'cold_conversations' ? opened : made.size;
              if (!(await takeDailyUnits(trx, ws, unit.counter, day, unit.cap, n))) throw new DailyLimit(unit.refusal().code);
            }
          }
        }
        const prepared = rows.map((r) => done.get(r.reference) ?? made.get(r.reference)).filter((p): p is PreparedRecipient => !!p);
        return { prepared, blocked };
      });
    } catch (err) {
      if (!(err instanceof DailyLimit)) throw err;
    }
    // The page's units do not all fit: one recipient at a time, up to the limit.
    const prepared: PreparedRecipient[] = [];
    for (const r of page) {
      const one = await prepare(b, r);
      if (one === 'settled') continue;
      if (!('reference' in one)) return { prepared, blocked: one };
      prepared.push(one);
    }
    return { prepared };
  }

  /**
   * record() for the recipients of a page the provider accepted, in one transaction: their
   * conversations and attempts locked (in one order each), the messages recorded, the
   * conversations touched, the wa_ids kept, the recipients marked sent. A recipient whose
   * conversation went meanwhile (merged, deleted) goes through record(), which finds or makes one.
   */
  async function recordPage(
    b: BroadcastRow,
    sent: Array<{ p: PreparedRecipient; s: { providerMessageId: string; waId?: string } }>,
  ): Promise<void> {
    if (sent.length === 0) return;
    if (sent.length === 1) return record(b, sent[0].p, sent[0].s);
    const template = b.template!;
    const ws = b.workspace_id;
    const lost = await db.transaction(async (trx) => {
      const live = await lockConversations(
        trx,
        ws,
        sent.map(({ p }) => p.conversationId),
      );
      const here = sent.filter(({ p }) => live.has(p.conversationId));
      const statuses = await lockAttemptStatuses(
        trx,
        ws,
        here.map(({ s }) => s.providerMessageId),
      );
      const rows = await recordOutboundMessages(
        trx,
        ws,
        here.map(({ p, s }) => ({
          conversationId: p.conversationId,
          type: 'template',
          body: `[template] ${template.name}`,
          mediaUrl: null,
          status: statuses.get(s.providerMessageId) ?? 'sent',
          providerMessageId: s.providerMessageId,
        })),
      );
      const inserted = here.filter(({ s }) => rows.get(s.providerMessageId)!.inserted);
      await touchConversations(
        trx,
        ws,
        inserted.map(({ p, s }) => ({ id: p.conversationId, lastMessageAt: rows.get(s.providerMessageId)!.timestamp })),
      );
      await recordWaIds(
        trx,
        ws,
        inserted.filter(({ s }) => s.waId).map(({ p, s }) => ({ contactId: p.contactId, waId: s.waId! })),
      );
      await markRecipientsSent(
        trx,
        ws,
        b.id,
        here.map(({ p, s }) => ({
          contactId: p.contactId,
          messageId: rows.get(s.providerMessageId)!.id,
          conversationId: p.conversationId,
        })),
      );
      return sent.filter(({ p }) => !live.has(p.conversationId));
    });
    for (const { p, s } of lost) await record(b, p, s);
  }

  return {
    /** Freezes the audience and starts the broadcast (domain/broadcasts freezeAudience); its status after. */
    async startBroadcast(input: BroadcastRef): Promise<{ status: string }> {
      return freezeAudience(db, input.workspaceId, input.broadcastId);
    },

    /** The broadcast's status now (the workflow checks it when woken while scheduled). */
    async broadcastStatus(input: BroadcastRef): Promise<{ status: string }> {
      const row = await broadcastForRun(db, input.workspaceId, input.broadcastId);
      return { status: row?.status ?? 'cancelled' };
    },

    /** `completed` with `broadcast.completed` once nothing is pending; the status it leaves. */
    async completeBroadcast(input: BroadcastRef): Promise<{ status: string }> {
      return { status: await completeBroadcast(db, input.workspaceId, input.broadcastId) };
    },

    /**
     * A cancelled broadcast's recipients that were prepared and never called (a worker died
     * between the two): their daily units back and their empty new conversations removed, each
     * once (undoPreparedSend). Recipients whose call may have reached the provider keep theirs.
     */
    async releaseCancelledBroadcast(input: BroadcastRef): Promise<{ released: number }> {
      const { workspaceId, broadcastId } = input;
      const b = await broadcastForRun(db, workspaceId, broadcastId);
      if (b?.status !== 'cancelled') return { released: 0 };
      let released = 0;
      for (let after = -1; ;) {
        heartbeat();
        const page = await pendingReferences(db, workspaceId, broadcastId, after, 1000);
        if (page.length === 0) return { released };
        after = page[page.length - 1].position;
        for (const reference of await preparedNeverCalled(
          db,
          workspaceId,
          page.map((r) => r.reference),
        )) {
          await db.transaction(async (trx) => {
            const prepared = await findPreparation<PreparedRecipient>(trx, workspaceId, reference);
            if (!prepared || !(await lockPendingRecipient(trx, workspaceId, broadcastId, prepared.contactId))) return;
            // Checked again under the recipient's lock, which a preparation also takes.
            if ((await preparedNeverCalled(trx, workspaceId, [reference])).length) {
              await undoPreparedSend(trx, workspaceId, prepared);
              released += 1;
            }
          });
        }
      }
    },

    /**
     * Sends to the next pending recipients, in position order, for up to BATCH_BUDGET_MS or
     * BROADCAST_BATCH_SIZE recipients. Before EACH recipient it re-reads the broadcast: paused or cancelled
     * stops the batch at once (a pause's 200 is followed by no new provider call). Paced at
     * `ratePerSecond` provider calls a second; heartbeats every recipient. At the daily quota or
     * the cold cap it stops and says until when the broadcast waits.
     */
    async sendBroadcastBatch(input: BroadcastRef): Promise<BatchResult> {
      // A heartbeat every second whatever the batch is doing (a provider call may take its whole 10 s timeout).
      const beat = setInterval(heartbeat, 1000);
      try {
        return await runBatch(input);
      } finally {
        clearInterval(beat);
      }
    },
  };

  /** A batch stopped before a call: the broadcast waits (saying until when and why) or is cancelled (saying why). */
  async function stopFor(b: BroadcastRow, blocked: Blocked): Promise<BatchResult> {
    if ('cancel' in blocked) {
      await cancelBroadcastFor(db, b.workspace_id, b.id, blocked.cancel);
      return { state: 'cancelled' };
    }
    await setWaiting(db, b.workspace_id, b.id, blocked.until, blocked.wait);
    return { state: 'waiting', until: blocked.until.toISOString() };
  }

  /**
   * One batch (sendBroadcastBatch's work): pages of recipients (preparePage), each page's provider
   * calls one at a time, then the page recorded (recordPage); up to `lanes` pages in flight at
   * once. Before EACH provider call the lane takes its pacing slot (the broadcast's rate, shared by
   * the lanes), re-reads the broadcast (paused or cancelled: no call) and takes the instance's
   * slot. The first stop (paused, cancelled, waiting, reconciling, done) ends every lane after its
   * current call; what its page sent is recorded; recipients prepared and not called stay pending
   * with their preparation (resumed: called; cancelled: their units are given back).
   */
  async function runBatch(input: BroadcastRef): Promise<BatchResult> {
    const started = Date.now();
    const deadline = started + BATCH_BUDGET_MS;
    const first = await broadcastForRun(db, input.workspaceId, input.broadcastId);
    if (first?.status !== 'in_progress') return stoppedState(first);
    const callsPerSecond = first.rate_per_second * rateScale;
    const intervalMs = 1000 / callsPerSecond;
    const pageSize = Math.max(1, Math.min(MAX_PAGE, Math.floor(callsPerSecond / PAGES_PER_SECOND)));
    const lanes = Math.max(1, Math.min(MAX_LANES, Math.ceil(callsPerSecond / LANE_RATE)));
    // The pacing carries over from the last batch (a pause and a quick resume do not shorten the gap).
    const last = await lastSentAt(db, input.workspaceId, input.broadcastId);
    let nextCallAt = last ? last.getTime() + intervalMs : 0;
    let taken = 0;
    let outcome: BatchResult | undefined;
    let failure: { error: unknown } | undefined;
    const stop = (result: BatchResult): void => {
      if (!outcome || STOP_RANK[result.state] > STOP_RANK[outcome.state]) outcome = result;
    };
    const going = () => !outcome && !failure && taken < batchSize && Date.now() < deadline;
    /** A stop that ends the calls of pages in flight too ('done' only means no page is left to take). */
    const halted = () => !!failure || (!!outcome && outcome.state !== 'done');

    // Pending recipients in position order, read ahead in pages and handed out once each.
    const queue: RecipientRow[] = [];
    let after = -1;
    let exhausted = false;
    let reading: Promise<void> | undefined;
    const nextPage = async (size: number): Promise<RecipientRow[]> => {
      while (queue.length < size && !exhausted) {
        reading ??= nextPendingRecipients(db, input.workspaceId, input.broadcastId, after, Math.max(size * lanes, 50))
          .then((rows) => {
            if (rows.length === 0) exhausted = true;
            else {
              after = rows[rows.length - 1].position;
              queue.push(...rows);
            }
          })
          .finally(() => {
            reading = undefined;
          });
        await reading;
      }
      return queue.splice(0, size);
    };

    const lane = async (): Promise<void> => {
      while (going()) {
        const b = await broadcastForRun(db, input.workspaceId, input.broadcastId);
        if (b?.status !== 'in_progress') return stop(stoppedState(b));
        // The page's share of the batch is counted before the read, so lanes reading together never take more than the batch's size.
        const want = Math.min(pageSize, batchSize - taken);
        if (want <= 0) return;
        taken += want;
        const page = await nextPage(want);
        taken -= want - page.length;
        if (page.length === 0) return stop({ state: 'done' });
        const { prepared, blocked } = await preparePage(b, page);
        if (prepared.length && (b.waiting_until || b.code)) await setWaiting(db, b.workspace_id, b.id, null, null);
        const sent: Array<{ p: PreparedRecipient; s: { providerMessageId: string; waId?: string } }> = [];
        try {
          for (const p of prepared) {
            // Pacing: at most ratePerSecond provider calls a second, the slots shared by the lanes.
            // Waited before the status is read, so a pause during the wait is seen before the call.
            const slotAt = Math.max(Date.now(), nextCallAt);
            nextCallAt = slotAt + intervalMs;
            if (slotAt > Date.now()) await sleep(slotAt - Date.now());
            if (halted()) return;
            const now = await broadcastForRun(db, input.workspaceId, input.broadcastId);
            if (now?.status !== 'in_progress') return stop(stoppedState(now));
            // The instance's throughput is shared by its broadcasts: this call takes the next free slot.
            const slot = await reserveInstanceSlot(db, now.workspace_id, p.instanceId, instanceIntervalMs);
            if (slot > 0) {
              await sleep(slot);
              // A long turn (many broadcasts on the instance): a pause meanwhile stops this call.
              if (slot > SLOT_RECHECK_MS) {
                const later = await broadcastForRun(db, input.workspaceId, input.broadcastId);
                if (later?.status !== 'in_progress') return stop(stoppedState(later));
              }
            }
            const result = await call(now, p, deadline);
            if (result === 'failed') continue;
            if (result === 'wait') return stop({ state: 'reconciling' });
            if (!('providerMessageId' in result)) return stop(await stopFor(now, result));
            sent.push({ p, s: result });
          }
        } finally {
          // What the provider took is recorded whatever stopped the page (a retry would find it sent and record it too).
          await recordPage(b, sent);
        }
        if (blocked) return stop(await stopFor(b, blocked));
      }
    };
    // A lane that throws stops the others after their current call; the batch fails (and is retried) once all have ended.
    await Promise.all(
      Array.from({ length: lanes }, () =>
        lane().catch((error: unknown) => {
          failure ??= { error };
        }),
      ),
    );
    if (failure) throw failure.error;
    return outcome ?? { state: 'more' };
  }
}

/** Which stop a batch reports when its lanes stop for different reasons: the broadcast's own state first. */
const STOP_RANK: Record<BatchResult['state'], number> = {
  more: 0,
  done: 1,
  reconciling: 2,
  waiting: 3,
  paused: 4,
  completed: 5,
  cancelled: 5,
};

/** What a batch tells the workflow when the broadcast is not in progress (gone: cancelled). */
function stoppedState(b: BroadcastRow | undefined): BatchResult {
  if (!b || b.status === 'cancelled') return { state: 'cancelled' };
  if (b.status === 'completed') return { state: 'completed' };
  return { state: 'paused' };
}

export type BroadcastActivities = ReturnType<typeof createBroadcastActivities>;
