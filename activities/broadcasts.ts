import { ApplicationFailure, Context } from '@temporalio/activity';
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
  attemptQuietFor,
  undoPreparedSend,
  preparedNeverCalled,
} from '../domain/messaging';
import { recordWaId } from '../domain/leads/contacts';
import {
  broadcastForRun,
  completeBroadcast,
  freezeAudience,
  markRecipientSent,
  lockPendingRecipient,
  nextPendingRecipient,
  recipientVariables,
  recipientContact,
  settleRecipient,
  setWaiting,
  cancelBroadcastFor,
  pendingReferences,
  reserveInstanceSlot,
  MAX_RATE_PER_SECOND,
  type BroadcastRow,
  type RecipientRow,
} from '../domain/broadcasts';
import { DEFAULT_RECONCILE_WINDOW_MS, PROVIDER_RETRYABLE } from '../types/messaging';
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
  async function prepare(b: BroadcastRow, r: RecipientRow): Promise<PreparedRecipient | 'settled' | Blocked> {
    try {
      return await db.transaction(async (trx) => {
        if (!(await lockPendingRecipient(trx, b.workspace_id, b.id, r.contact_id))) return 'settled' as const;
        const done = await findPreparation<PreparedRecipient>(trx, b.workspace_id, r.reference);
        if (done) return done;
        const contact = await recipientContact(trx, b.workspace_id, r.contact_id);
        if (!contact) {
          await settleRecipient(trx, b.workspace_id, b.id, r.contact_id, 'skipped', 'CONTACT_DELETED');
          return 'settled' as const;
        }
        const now = new Date();
        const plan = await sendingPlan(trx, b.workspace_id);
        const template = b.template!;
        const given = template.variables ?? [];
        const message = {
          type: 'template' as const,
          templateName: template.name,
          templateLanguage: template.language,
          templateVariables: given,
        };
        let instance;
        try {
          const suspended = plan && suspension(plan, 'send');
          if (suspended) throw suspended;
          instance = chooseInstance(await sendCandidates(trx, b.workspace_id, b.instance_id ?? undefined), b.instance_id ?? undefined);
          const approved = await approvedTemplate(trx, b.workspace_id, instance.id, template.name, template.language);
          // Templates need no window: the conversation's last inbound does not matter.
          refuseUnsendable({ instance, contact, conversation: { last_inbound_at: null }, message, template: approved, now });
        } catch (err) {
          if (!(err instanceof ApiError)) throw err;
          if (WAIT_CODES.has(err.code)) return { wait: err.code, until: new Date(now.getTime() + BLOCKED_RETRY_MS) };
          if (CANCEL_CODES.has(err.code)) return { cancel: err.code };
          await settleRecipient(trx, b.workspace_id, b.id, r.contact_id, err.code === 'OPTED_OUT' ? 'skipped' : 'failed', err.code);
          return 'settled' as const;
        }
        const variables = await recipientVariables(trx, b.workspace_id, contact, given);
        if (!variables) {
          await settleRecipient(trx, b.workspace_id, b.id, r.contact_id, 'skipped', 'VARIABLE_EMPTY');
          return 'settled' as const;
        }
        const conv = await findOrCreateConversation(trx, b.workspace_id, contact.id, instance);
        const day = saoPauloDay(now);
        for (const unit of dailyUnits(plan!, conv.created)) {
          if (!(await takeDaily(trx, b.workspace_id, unit.counter, day, unit.cap))) throw new DailyLimit(unit.refusal().code);
        }
        const prepared: PreparedRecipient = {
          reference: r.reference,
          instanceId: instance.id,
          provider: instance.provider,
          contactId: contact.id,
          conversationId: conv.conversation.id,
          to: contact.wa_id ?? contact.phone,
          day,
          createdConversation: conv.created,
          tookCold: conv.created,
          variables,
        };
        await recordPreparation(trx, b.workspace_id, r.reference, prepared);
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

  /** One batch (sendBroadcastBatch's work). */
  async function runBatch(input: BroadcastRef): Promise<BatchResult> {
    const started = Date.now();
    const deadline = started + BATCH_BUDGET_MS;
    let nextCallAt = 0;
    for (let n = 0; n < batchSize && Date.now() < deadline; n++) {
      heartbeat();
      // Pacing: at most ratePerSecond provider calls a second. Waited before the status is read,
      // so a pause during the wait is seen before the next call.
      const wait = nextCallAt - Date.now();
      if (wait > 0) await sleep(wait);
      const b = await broadcastForRun(db, input.workspaceId, input.broadcastId);
      if (b?.status !== 'in_progress') return stoppedState(b);
      const r = await nextPendingRecipient(db, b.workspace_id, b.id);
      if (!r) return { state: 'done' };
      const prepared = await prepare(b, r);
      if (prepared === 'settled') continue;
      if (!('reference' in prepared)) return stopFor(b, prepared);
      if (b.waiting_until || b.code) await setWaiting(db, b.workspace_id, b.id, null, null);
      nextCallAt = Math.max(Date.now(), nextCallAt) + 1000 / (b.rate_per_second * rateScale);
      // The instance's throughput is shared by its broadcasts: this call takes the next free slot.
      const slot = await reserveInstanceSlot(db, b.workspace_id, prepared.instanceId, instanceIntervalMs);
      if (slot > 0) {
        await sleep(slot);
        // A long turn (many broadcasts on the instance): a pause meanwhile stops this call.
        if (slot > SLOT_RECHECK_MS) {
          const now = await broadcastForRun(db, input.workspaceId, input.broadcastId);
          if (now?.status !== 'in_progress') return stoppedState(now);
        }
      }
      const sent = await call(b, prepared, deadline);
      if (sent === 'failed') continue;
      if (sent === 'wait') return { state: 'reconciling' };
      if (!('providerMessageId' in sent)) return stopFor(b, sent);
      await record(b, prepared, sent);
    }
    return { state: 'more' };
  }
}

/** What a batch tells the workflow when the broadcast is not in progress (gone: cancelled). */
function stoppedState(b: BroadcastRow | undefined): BatchResult {
  if (!b || b.status === 'cancelled') return { state: 'cancelled' };
  if (b.status === 'completed') return { state: 'completed' };
  return { state: 'paused' };
}

export type BroadcastActivities = ReturnType<typeof createBroadcastActivities>;
