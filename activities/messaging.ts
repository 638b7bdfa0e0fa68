import { ApplicationFailure, Context } from '@temporalio/activity';
import type { Db } from '../domain/platform/db';
import { ApiError } from '../domain/kernel/errors';
import {
  outcomeUnknown,
  chooseInstance,
  dailyUnits,
  refuseUnsendable,
  saoPauloDay,
  templateComponents,
  type SendInstance,
} from '../domain/messaging/sending';
import { refusalsAsFailures, toFailure } from '../domain/messaging/failures';
import { recordContactCreated, recordWaId, requirePhone } from '../domain/leads/contacts';
import { conversationForSend, lockConversation, touchConversation } from '../domain/messaging/conversations';
import {
  findOrCreateContact,
  findOrCreateConversation,
  recordOutboundMessage,
  sendingPlan,
  takeDaily,
} from '../domain/messaging/messaging';
import {
  attemptOf,
  claimAttempt,
  undoPreparedSend,
  failAttempt,
  findPreparation,
  lockAttemptStatus,
  markAttemptSent,
  noteAttemptError,
  readAttempt,
  recordPreparation,
  standingSincePrepare,
  type SendAttemptRow,
} from '../domain/messaging/send-attempts';
import { approvedTemplate } from '../domain/messaging/templates';
import { suspension } from '../domain/access/workspaces';
import { searchHash, withoutPhoneNumbers } from '../domain/platform/temporal';
import { sendRequestOf } from '../domain/messaging/send-requests';
import { instanceChannel, liveInstanceConfig, openInstanceConfig, sendCandidates } from '../domain/messaging/instances';
import type { Config } from '../domain/platform/config';
import { adapterFor, sendThroughProvider } from './providers';
import { failureCode, mayHaveReachedProvider, MEDIA_SEND_TIMEOUT_MS, OutboundMessage, ProviderError } from './providers/types';
import { downloadMedia, MEDIA_DOWNLOAD_TIMEOUT_MS, type MediaDownload } from './media';
import {
  PROVIDER_RETRYABLE,
  type SendInput,
  type PreparedSend,
  type ProviderSendResult,
  type ReconcileResult,
  type SentMessage,
  type SendOutcome,
} from '../types/messaging';

/**
 * A preparation with the recipient's keyed hash, which the workflow sets as its PhoneHash search
 * attribute (domain/platform/temporal.ts searchHash; the workflow cannot compute it, it has no keys).
 * Absent in preparations made before it.
 */
export type PreparedWithHash = PreparedSend & { phoneHash?: string };

/** What names a send's content: its send_requests row, or (a send started before that table) the message itself. */
type ContentRef = { requestId: string; message?: undefined } | { requestId?: undefined; message: NonNullable<SendInput['message']> };

/**
 * The steps of a send (the workflow in workflows/send-message.ts orders them and compensates).
 * The rules are domain/messaging/sending.ts; these activities load what the rules look at, and record.
 * Refusals become final failures whose `type` is the API's error code (domain/messaging/failures.ts).
 */

/**
 * `unconfirmed` for a provider that echoes our reference in status callbacks (Cloud API
 * `biz_opaque_callback_data`), so the workflow can wait for the provider's own answer. The web
 * gateway has no such callback: there the send stops (never twice), as a last resort.
 */
function unconfirmed(provider: string | undefined, reason: string): ProviderSendResult {
  if (provider === 'cloud') return { outcome: 'unconfirmed', reason };
  throw toFailure(outcomeUnknown(reason));
}

/** Runs `work` heartbeating every second (inside an ordinary activity), so a dead worker is detected by the heartbeat timeout. */
async function withHeartbeat<T>(work: () => Promise<T>): Promise<T> {
  let context: Context | undefined;
  try {
    context = Context.current();
  } catch {
    context = undefined;
  }
  // A local activity cannot heartbeat: its worker holds the workflow task, which times out instead.
  if (!context || context.info.isLocal) return work();
  const beat = context;
  beat.heartbeat();
  const timer = setInterval(() => beat.heartbeat(), 1000);
  try {
    return await work();
  } finally {
    clearInterval(timer);
  }
}

/**
 * What stops a send's later provider call although prepare let it through: the workspace
 * suspended (SUBSCRIPTION_INACTIVE) or the contact opted out (OPTED_OUT) since. The contact is the
 * one prepare chose (its row in send_preparations, by the attempt's reference).
 */
async function refusalSincePrepare(db: Db, workspaceId: string, reference: string): Promise<ApiError | null> {
  const standing = await standingSincePrepare(db, workspaceId, reference);
  if (!standing) return null;
  const suspended = suspension(standing, 'send');
  if (suspended) return suspended;
  if (standing.opted_out) return new ApiError('OPTED_OUT', 'The contact opted out of messages');
  return null;
}

/** `config.allowPrivateUrls`: the media download's URL policy (strict when not given). */
export function createMessagingActivities({ db, config }: { db: Db; config: Pick<Config, 'allowPrivateUrls' | 'encryptionKeys'> }) {
  return {
    /**
     * Everything before the provider call, in one transaction so a refusal leaves nothing behind:
     * instance, contact and conversation (found or created), opt-out, the 24-hour window and the
     * template, the daily cold slot (new conversations only) and the daily message quota.
     */
    async prepareSend(input: SendInput): Promise<PreparedWithHash> {
      const execution = Context.current().info.workflowExecution!;
      const reference = `${execution.workflowId}/${execution.runId}`;
      return refusalsAsFailures(() =>
        db.transaction(async (trx) => {
          // Retried after its commit: the first run's result, not a second quota unit.
          const done = await findPreparation<PreparedWithHash>(trx, input.workspaceId, reference);
          if (done) return done;
          const now = new Date();
          const day = saoPauloDay(now);
          const workspace = await sendingPlan(trx, input.workspaceId);
          const suspended = workspace && suspension(workspace, 'send');
          if (suspended) throw suspended;
          const request = await sendRequestOf(trx, input);

          let instance: SendInstance;
          let contact: { id: string; name: string; phone: string; opted_out: boolean; wa_id: string | null };
          let conversation: { id: string; last_inbound_at: Date | null };
          let createdContact = false;
          let createdConversation = false;

          if (request.conversationId) {
            const row = await conversationForSend(trx, input.workspaceId, request.conversationId);
            if (!row) throw new ApiError('NOT_FOUND', 'Conversation not found');
            instance = { id: row.instance_id, channel: row.channel, provider: row.provider, connected: row.connected };
            contact = { id: row.contact_id, name: row.name, phone: row.phone, opted_out: row.opted_out, wa_id: row.wa_id };
            conversation = { id: row.id, last_inbound_at: row.last_inbound_at };
          } else {
            const phone = requirePhone(request.phone);
            // A named instance of another channel is found, then refused as unsupported; the default is the WhatsApp one.
            const candidates: SendInstance[] = await sendCandidates(trx, input.workspaceId, request.instanceId);
            instance = chooseInstance(candidates, request.instanceId);
            const found = await findOrCreateContact(trx, input.workspaceId, phone);
            contact = found.contact;
            createdContact = found.created;
            const conv = await findOrCreateConversation(trx, input.workspaceId, contact.id, instance);
            conversation = conv.conversation;
            createdConversation = conv.created;
          }

          const message = request.message;
          const template =
            message.type === 'template'
              ? await approvedTemplate(trx, input.workspaceId, instance.id, message.templateName, message.templateLanguage)
              : undefined;
          refuseUnsendable({ instance, contact, conversation, message, template, now });

          const tookCold = createdConversation;
          for (const unit of dailyUnits(workspace!, createdConversation)) {
            if (!(await takeDaily(trx, input.workspaceId, unit.counter, day, unit.cap))) throw unit.refusal();
          }
          const prepared: PreparedWithHash = {
            reference,
            workspaceId: input.workspaceId,
            instanceId: instance.id,
            contactId: contact.id,
            conversationId: conversation.id,
            // Cloud API recipients are addressed by the provider's wa_id once known.
            to: contact.wa_id ?? contact.phone,
            phone: contact.phone,
            createdContact,
            createdConversation,
            day,
            tookCold,
            phoneHash: searchHash(config.encryptionKeys!, 'phone', input.workspaceId, contact.phone),
          };
          // A concurrent duplicate of this activity conflicts here and rolls back; its retry reads the row.
          await recordPreparation(trx, input.workspaceId, reference, prepared);
          return prepared;
        }),
      );
    },

    /** Saga compensation of prepareSend, in reverse order: quota, daily slot, conversation, contact. */
    async undoPrepare(prepared: PreparedSend): Promise<void> {
      const workspaceId = prepared.workspaceId;
      // Once only, even when this compensation is retried after its commit.
      await db.transaction((trx) => undoPreparedSend(trx, workspaceId, prepared));
    },

    /**
     * The provider call, at most once per reference: the attempt is claimed (`in_flight`) before
     * the call. A retry that finds it `in_flight` (an earlier attempt died mid-call) does not call
     * again: it answers `unconfirmed` and the workflow waits for the provider's status callback
     * (reconcileSend), which records the provider's answer on the row (domain/messaging/inbound.ts). A call
     * that got no answer (timeout, connection lost) may have been accepted too: same path.
     * Heartbeats while it runs (PROVIDER_SEND.heartbeatTimeout) so a dead worker is noticed fast.
     * For a provider given media as bytes (a web gateway), the claimed attempt downloads the file
     * here (downloadMedia) while it uploads it, chunk by chunk: the bytes go straight to the
     * provider, never whole into memory nor into the workflow's history, and a failed download
     * (before or during the upload, which it then aborts) marks the attempt failed (nothing was
     * sent). A retry downloads again.
     */
    async sendToProvider(
      input: { workspaceId: string; instanceId: string; to: string; reference: string } & ContentRef,
    ): Promise<ProviderSendResult> {
      return withHeartbeat(async () => {
        // The instance first: one that vanished is a refusal, before any attempt is claimed.
        const instance = await liveInstanceConfig(db, input.workspaceId, input.instanceId);
        if (!instance) throw toFailure(new ApiError('INSTANCE_NOT_FOUND', 'The instance of this send no longer exists'));
        // `fresh`: the first call of the send (a new row); a retry or a later round re-claims a failed one.
        const claimed = await claimAttempt(db, input.workspaceId, input.reference);
        if (!claimed) {
          const previous = await attemptOf(db, input.reference);
          if (previous?.state === 'sent')
            return { outcome: 'sent', sent: { providerMessageId: previous.provider_message_id!, waId: previous.wa_id ?? undefined } };
          return unconfirmed(
            instance.provider,
            'An earlier attempt of this send did not finish its provider call (its worker stopped or lost contact); it may have reached the provider',
          );
        }
        // Prepare checked the workspace and the contact; a retry may come seconds or minutes later,
        // after a suspension or an opt-out, which stop it as they would have stopped the send.
        if (!claimed.fresh) {
          const refusal = await refusalSincePrepare(db, input.workspaceId, input.reference);
          if (refusal) {
            await failAttempt(db, input.reference, refusal.message);
            throw toFailure(refusal);
          }
        }
        const { message } = await sendRequestOf(db, input);
        const outbound: OutboundMessage = { ...message, to: input.to, reference: input.reference };
        if (message.type === 'template') {
          // The template's header, body and buttons at the provider's wire format (prepare checked them;
          // a template paused or changed since is refused here, before any call).
          try {
            const template = await approvedTemplate(db, input.workspaceId, instance.id, message.templateName, message.templateLanguage);
            if (!template)
              throw new ApiError('TEMPLATE_INVALID', `The template "${message.templateName}" is no longer approved on this instance`);
            outbound.templateComponents = templateComponents(template, message);
          } catch (err) {
            if (!(err instanceof ApiError)) throw err;
            await failAttempt(db, input.reference, err.message);
            throw toFailure(err);
          }
        }
        let sent: SentMessage;
        let download: MediaDownload | undefined;
        try {
          if (outbound.mediaUrl && adapterFor(instance.provider).wantsMediaBytes) {
            download = await downloadMedia(outbound.mediaUrl, outbound.type, { allowPrivate: config.allowPrivateUrls });
            outbound.mediaFile = download;
          }
          // A streamed file is downloaded while it is uploaded: the upload's deadline spans both.
          const options = download ? { timeoutMs: MEDIA_DOWNLOAD_TIMEOUT_MS + MEDIA_SEND_TIMEOUT_MS } : {};
          sent = await sendThroughProvider(
            {
              instanceId: instance.id,
              provider: instance.provider,
              config: openInstanceConfig(config.encryptionKeys!, instance.config, input.workspaceId),
            },
            outbound,
            options,
          );
        } catch (thrown) {
          // A download that failed mid-upload aborted it: the download's failure is the send's.
          const err = download?.failure ?? thrown;
          const full = err instanceof Error ? err.message : String(err);
          // The row keeps the provider's words; what Temporal shows (failures, results) has no number in it.
          const message = withoutPhoneNumbers(full);
          if (mayHaveReachedProvider(err)) {
            // Stays `in_flight`: only the provider's status callback (or the window passing) settles it.
            await noteAttemptError(db, input.reference, full.slice(0, 1000));
            return unconfirmed(instance.provider, `The provider call got no answer, so it may have been accepted: ${message}`);
          }
          await failAttempt(db, input.reference, full.slice(0, 1000));
          if (!(err instanceof ProviderError)) throw message === full ? err : new Error(message);
          if (err.retryable) throw ApplicationFailure.retryable(message, PROVIDER_RETRYABLE);
          throw toFailure(new ApiError(failureCode(err.failure), message));
        } finally {
          download?.close();
        }
        // If this write fails the activity fails: the row stays `in_flight`, so the retry does not
        // call again and the status callback carrying the same message id settles it.
        await markAttemptSent(db, input.reference, sent);
        return { outcome: 'sent', sent };
      });
    },

    /**
     * One check of a send whose provider call may have happened (sendToProvider answered
     * `unconfirmed`): `sent` once the provider's status callback recorded its answer on the
     * attempt; before `deadline`, a retryable SEND_UNCONFIRMED failure (the retry policy is the
     * wait); after it, the attempt is marked `failed` (no callback: the provider did not accept
     * it) and the workflow may send again. The `in_flight` → `failed` and `in_flight` → `sent`
     * (inbound) updates are conditional on the row's state, so exactly one of them wins.
     */
    async reconcileSend(input: { workspaceId: string; reference: string; deadline: string }): Promise<ReconcileResult> {
      const read = () => readAttempt(db, input.workspaceId, input.reference);
      const settled = (row: SendAttemptRow | undefined): ReconcileResult | undefined => {
        if (!row) return { outcome: 'failed', reason: 'The send was never claimed, so it never reached the provider' };
        if (row.state === 'sent')
          return { outcome: 'sent', sent: { providerMessageId: row.provider_message_id!, ...(row.wa_id ? { waId: row.wa_id } : {}) } };
        if (row.state === 'failed') return { outcome: 'failed', reason: row.error ?? 'The earlier attempt failed' };
        return undefined;
      };
      const now = settled(await read());
      if (now) return now;
      const deadline = new Date(input.deadline);
      if (Date.now() < deadline.getTime()) {
        throw ApplicationFailure.retryable(
          `Waiting for the provider's status callback: an earlier attempt of this send may have reached the provider, ` +
            `so it is not sent again before ${deadline.toISOString()} (then, without a callback, it counts as not accepted and is sent once more)`,
          'SEND_UNCONFIRMED',
        );
      }
      const reason = `No status callback from the provider until ${deadline.toISOString()}: the interrupted attempt was not accepted`;
      const marked = await failAttempt(db, input.reference, reason, input.workspaceId);
      if (marked > 0) return { outcome: 'failed', reason };
      // The callback won the race between the read and the update.
      return settled(await read()) ?? { outcome: 'failed', reason };
    },

    /**
     * After the provider accepted: the message (status `sent`), the conversation's clock, the
     * provider's identity of the number, and only now the business events.
     */
    async recordSent(
      input: { workspaceId: string; prepared: PreparedSend; sent: SentMessage; mode: 'cold' | 'conversation' } & ContentRef,
    ): Promise<SendOutcome> {
      const { workspaceId, sent } = input;
      return db.transaction(async (trx) => {
        const { message } = await sendRequestOf(trx, input);
        // A concurrent send to the same new number that failed may have compensated away the
        // contact or conversation this send found: the message exists, so they come back.
        let prepared = input.prepared;
        const live = await lockConversation(trx, workspaceId, prepared.conversationId);
        if (!live) {
          const instance = await instanceChannel(trx, workspaceId, prepared.instanceId);
          const { contact } = await findOrCreateContact(trx, workspaceId, requirePhone(prepared.phone));
          const { conversation } = await findOrCreateConversation(trx, workspaceId, contact.id, instance);
          prepared = { ...prepared, contactId: contact.id, conversationId: conversation.id };
        }
        // A status callback that beat us here is kept on the attempt (domain/messaging/inbound.ts); the lock
        // makes one arriving now wait until the message row exists.
        const attempt = await lockAttemptStatus(trx, workspaceId, sent.providerMessageId);
        const row = await recordOutboundMessage(trx, workspaceId, {
          conversationId: prepared.conversationId,
          type: message.type,
          body: message.text ?? message.caption ?? (message.templateName ? `[template] ${message.templateName}` : ''),
          mediaUrl: message.mediaUrl ?? null,
          status: attempt?.provider_status ?? 'sent',
          providerMessageId: sent.providerMessageId,
        });
        if (row.inserted) {
          await touchConversation(trx, workspaceId, prepared.conversationId, row.timestamp);
          if (sent.waId) await recordWaId(trx, workspaceId, prepared.contactId, sent.waId);
          if (prepared.createdContact) await recordContactCreated(trx, workspaceId, prepared.contactId);
        }
        const outcome: SendOutcome = {
          id: row.id,
          status: 'sent',
          type: message.type,
          conversationId: prepared.conversationId,
          contactId: prepared.contactId,
        };
        if (input.mode === 'cold') outcome.created = { contact: prepared.createdContact, conversation: prepared.createdConversation };
        return outcome;
      });
    },
  };
}

export type MessagingActivities = ReturnType<typeof createMessagingActivities>;
