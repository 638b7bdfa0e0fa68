import type { Knex } from 'knex';
import { ApplicationFailure, Context } from '@temporalio/activity';
import type { Config, Db } from '../domain/platform';
import {
  attemptSend,
  type AttemptItem,
  forWorkflow,
  messageBody,
  outcomeUnknown,
  prepareSend,
  recordConversationActivity,
  recordSent,
  refusalsAsFailures,
  sendRequestOf,
  settleAttempt,
  toFailure,
  undoPreparedSend,
  type Prepared,
} from '../domain/messaging';
import { heartbeating } from './providers/heartbeat';
import { providerPort } from './providers/port';
import {
  PROVIDER_RETRYABLE,
  type PreparedSend,
  type ProviderSendResult,
  type SendAtOnce,
  type ReconcileResult,
  type SendInput,
  type SendOutcome,
  type SendRequest,
  type SentMessage,
} from '../types/messaging';

/** What names a send's content: its send_requests row, or (a send started before that table) the message itself. */
type ContentRef = { requestId: string; message?: undefined } | { requestId?: undefined; message: NonNullable<SendInput['message']> };

/**
 * The steps of a send workflow (workflows/send-message.ts orders them and compensates), each an
 * adapter over the send engine of domain/messaging (send/prepare.ts, attempt.ts, record.ts).
 * Refusals become final failures whose `type` is the API's error code (domain/messaging/failures.ts).
 */
export function createMessagingActivities(deps: MessagingDeps) {
  return messagingSteps(deps).activities;
}

/**
 * The send's one step (the sendAtOnce activity's body) for the API, which makes it in the request
 * under a reference of its own (api/send.ts) and passes the request it already holds.
 */
export function createSendAtOnce(deps: MessagingDeps) {
  return messagingSteps(deps).atOnce;
}

type MessagingDeps = { db: Db; config: Pick<Config, 'allowPrivateUrls' | 'encryptionKeys'> };
type SendAtOnceInput = { workspaceId: string; requestId: string; mode: 'cold' | 'conversation'; reference?: string };

function messagingSteps({ db, config }: MessagingDeps) {
  const port = providerPort({ allowPrivateUrls: config.allowPrivateUrls });
  /**
   * The send's reference: names its preparation and its one provider attempt. The run's own, or
   * the one the API attempted the send under before a workflow took it on (SendInput.reference).
   */
  const reference = (given?: string) => {
    if (given) return given;
    const { workflowId, runId } = Context.current().info.workflowExecution!;
    return `${workflowId}/${runId}`;
  };
  const prepare = (input: SendInput, given?: { loaded?: SendRequest; fresh?: boolean }) =>
    refusalsAsFailures(() => prepareSend(db, config.encryptionKeys!, input, reference(input.reference), given));

  /** The provider call of a send whose content the caller loaded (a template's components as prepared, when it has them). */
  async function callProvider(
    input: { workspaceId: string; instanceId: string; to: string; reference: string },
    message: AttemptItem['message'],
  ): Promise<ProviderSendResult> {
    const result = await attemptSend(db, port, config.encryptionKeys!, { ...input, message });
    switch (result.outcome) {
      case 'sent':
        return result;
      case 'unconfirmed':
        if (!result.awaitsCallback) throw toFailure(outcomeUnknown(result.reason));
        return { outcome: 'unconfirmed', reason: result.reason };
      case 'refused':
        throw toFailure(result.error);
      case 'throttled':
        throw ApplicationFailure.retryable(result.message, PROVIDER_RETRYABLE);
    }
  }

  /**
   * The sent message recorded (recordSent), then the send's answer. `settle`: what the caller
   * keeps of the answer in the same transaction (the API's send key), so the message and the
   * answer a repeat replays commit together.
   */
  async function record(
    input: { workspaceId: string; prepared: PreparedSend; sent: SentMessage; mode: 'cold' | 'conversation' },
    message: SendRequest['message'],
    settle?: (trx: Knex.Transaction, outcome: SendOutcome) => Promise<void>,
  ): Promise<SendOutcome> {
    const { prepared } = input;
    const outcomeOf = (row: { id: string; conversationId: string; contactId: string }): SendOutcome => ({
      id: row.id,
      status: 'sent',
      type: message.type,
      conversationId: row.conversationId,
      contactId: row.contactId,
      ...(input.mode === 'cold' ? { created: { contact: prepared.createdContact, conversation: prepared.createdConversation } } : {}),
    });
    const [row] = await recordSent(
      db,
      input.workspaceId,
      [{ prepared, sent: input.sent, message: { type: message.type, body: messageBody(message), mediaUrl: message.mediaUrl ?? null } }],
      async (trx, recorded) => {
        await recordConversationActivity(
          trx,
          input.workspaceId,
          recorded.map((r) => r.contactId),
        );
        if (settle) await settle(trx, outcomeOf(recorded[0]));
      },
    );
    return outcomeOf(row);
  }

  /**
   * A text or template send's three steps at once (see the sendAtOnce activity). For the API:
   * `loaded`, the request it holds; `fresh`, its reference new with the request (nothing prepared
   * under it yet); `settle`, what it keeps of the answer in the record's transaction.
   */
  async function atOnce(
    input: SendAtOnceInput,
    options: { loaded?: SendRequest; fresh?: boolean; settle?: (trx: Knex.Transaction, outcome: SendOutcome) => Promise<void> } = {},
  ): Promise<SendAtOnce> {
    // The request is read once for the three steps, and the template's components as prepare
    // checked them a moment ago go to the provider as they are (no second template read).
    const request = options.loaded ?? (await sendRequestOf(db, input));
    const full = await prepare(input, { loaded: request, fresh: options.fresh });
    const prepared = forWorkflow(full);
    const { workspaceId } = input;
    let call: ProviderSendResult;
    try {
      call = await callProvider(
        { workspaceId, instanceId: prepared.instanceId, to: prepared.to, reference: prepared.reference },
        { ...request.message, ...(full.components ? { templateComponents: full.components } : {}) },
      );
    } catch (err) {
      const failure = err instanceof ApplicationFailure ? err : ApplicationFailure.fromError(err);
      return {
        prepared,
        failure: {
          type: failure.type ?? undefined,
          message: failure.message,
          nonRetryable: Boolean(failure.nonRetryable),
          details: failure.details ?? undefined,
        },
      };
    }
    if (call.outcome === 'unconfirmed') return { prepared, unconfirmed: call.reason };
    try {
      return {
        prepared,
        recorded: await record({ workspaceId, prepared, sent: call.sent, mode: input.mode }, request.message, options.settle),
      };
    } catch {
      // The provider has it: the workflow records it with RECORD's retries.
      return { prepared, sent: call.sent };
    }
  }

  const activities = {
    /** Everything before the provider call, in one transaction (the workflow sets PhoneHash from the result). */
    async prepareSend(input: SendInput): Promise<Prepared> {
      return forWorkflow(await prepare(input));
    },

    /** Saga compensation of prepareSend, once even when retried: quota, daily slot, conversation, contact. */
    async undoPrepare(prepared: PreparedSend): Promise<void> {
      await undoPreparedSend(db, prepared.workspaceId, prepared);
    },

    /**
     * The provider call, at most once per reference (attemptSend). `unconfirmed`: the workflow
     * waits for the provider's status callback (reconcileSend); a provider without one (the web
     * gateway) stops the send as SEND_OUTCOME_UNKNOWN. Heartbeats (PROVIDER_SEND.heartbeatTimeout).
     */
    async sendToProvider(
      input: { workspaceId: string; instanceId: string; to: string; reference: string } & ContentRef,
    ): Promise<ProviderSendResult> {
      return heartbeating(async () => callProvider(input, (await sendRequestOf(db, input)).message));
    },

    /** One look at an unconfirmed send (settleAttempt): before `deadline` a retryable failure (the retry policy is the wait). */
    async reconcileSend(input: { workspaceId: string; reference: string; deadline: string }): Promise<ReconcileResult> {
      const deadline = new Date(input.deadline);
      const settled = await settleAttempt(db, input.workspaceId, input.reference, { deadline });
      if (settled.outcome !== 'pending') return settled;
      throw ApplicationFailure.retryable(
        `Waiting for the provider's status callback: an earlier attempt of this send may have reached the provider, ` +
          `so it is not sent again before ${deadline.toISOString()} (then, without a callback, it counts as not accepted and is sent once more)`,
        'SEND_UNCONFIRMED',
      );
    },

    /** After the provider accepted: the message recorded (recordSent), then the send's answer. */
    async recordSent(
      input: { workspaceId: string; prepared: PreparedSend; sent: SentMessage; mode: 'cold' | 'conversation' } & ContentRef,
    ): Promise<SendOutcome> {
      return record(input, (await sendRequestOf(db, input)).message);
    },

    /**
     * A text or template send's three steps in one local activity (prepare, the first provider
     * call, record), so a send accepted at once costs one activity round in its one workflow task.
     * Run again after a crash it repeats nothing: each step is idempotent by the run's reference.
     * A refusal of prepare is thrown (nothing was prepared); what happens after prepare is
     * answered with the preparation, and the workflow goes on from it (compensation, retry, reconciliation).
     * The API makes the same step itself, under a reference of its own (api/send.ts).
     */
    async sendAtOnce(input: SendAtOnceInput): Promise<SendAtOnce> {
      return atOnce(input);
    },
  };
  return { activities, atOnce };
}

export type MessagingActivities = ReturnType<typeof createMessagingActivities>;
