import type { KeyRing } from '../../platform';
import { withoutPhoneNumbers, type Db } from '../../platform';
import { ApiError } from '../../kernel';
import { suspension } from '../../access';
import type { MessageContent, SentMessage, TemplateWireComponent } from '../../../types/messaging';
import { liveInstanceConfig, openInstanceConfig, type InstanceConfig, type Provider } from '../instances';
import { approvedTemplate } from '../templates';
import { templateComponents } from '../sending';
import {
  attemptOf,
  attemptQuietFor,
  claimAttempt,
  failAttempt,
  markAttemptSent,
  noteAttemptError,
  readAttempt,
  standingSincePrepare,
} from './ledger';

/**
 * The provider port: one call to an instance's provider, whichever wire format it speaks
 * (activities/providers implements it). It classifies what happened; it never retries.
 * - `sent`: the provider accepted the message.
 * - `unanswered`: no answer (timeout, connection lost, an unreadable 2xx): it may have been accepted.
 * - `refused`: a final refusal, under the API's code (WINDOW_CLOSED, TEMPLATE_INVALID, ...): nothing was sent.
 * - `throttled`: throttling or an outage: nothing was sent, and trying again later may help.
 * Anything else it throws (a failed media download, a bug): nothing was sent.
 */
export type ProviderCall =
  | { outcome: 'sent'; sent: SentMessage }
  | { outcome: 'unanswered'; error: string }
  | { outcome: 'refused'; code: 'WINDOW_CLOSED' | 'TEMPLATE_INVALID' | 'MEDIA_TOO_LARGE' | 'SEND_FAILED'; error: string }
  | { outcome: 'throttled'; error: string };

/** A live instance as a provider call needs it: its provider and its configuration, secrets opened. */
export interface ProviderConnection {
  instanceId: string;
  provider: Provider;
  config: InstanceConfig;
}

export interface ProviderPort {
  call(
    connection: ProviderConnection,
    message: MessageContent & { to: string; reference: string; templateComponents?: TemplateWireComponent[] },
  ): Promise<ProviderCall>;
}

/**
 * What one attempt of a prepared send came to.
 * - `sent`: the provider has it (now, or an earlier attempt of the same reference).
 * - `unconfirmed`: an earlier attempt died mid-call or this call got no answer; nothing is called
 *   until the provider's status callback or the reconciliation window settles it (settleAttempt).
 *   `awaitsCallback` is false for a provider that sends no such callback (the web gateway): the
 *   outcome stays unknown, and the send must stop there (never twice).
 * - `refused`: nothing reached the provider and nothing will (the attempt is `failed`).
 * - `throttled`: nothing reached the provider; the caller tries again later (the attempt is `failed`,
 *   so the next attempt claims it again).
 */
export type AttemptOutcome =
  | { outcome: 'sent'; sent: SentMessage }
  | { outcome: 'unconfirmed'; reason: string; awaitsCallback: boolean }
  | { outcome: 'refused'; error: ApiError }
  | { outcome: 'throttled'; message: string };

export interface AttemptItem {
  workspaceId: string;
  instanceId: string;
  /** The recipient as the provider knows it. */
  to: string;
  /** The send's reference: names its preparation and its one attempt. */
  reference: string;
  /**
   * The content. A template without `templateComponents` is checked against the template as
   * approved now (a template paused or changed since prepare is refused before any call); with
   * them (a broadcast recipient's, fixed at prepare), they are sent as they are.
   */
  message: MessageContent & { templateComponents?: TemplateWireComponent[] };
  /**
   * The instance as the caller opened it just before (liveConnection: a broadcast opens it once
   * a page, for up to a quarter of a second of calls); without it, it is opened here.
   */
  connection?: ProviderConnection;
}

/** The instance's connection for a provider call, or undefined when it is gone (archived). */
export async function liveConnection(
  db: Db,
  keys: KeyRing,
  workspaceId: string,
  instanceId: string,
): Promise<ProviderConnection | undefined> {
  const instance = await liveInstanceConfig(db, workspaceId, instanceId);
  if (!instance) return undefined;
  return { instanceId: instance.id, provider: instance.provider, config: openInstanceConfig(keys, instance.config, workspaceId) };
}

/**
 * The provider call of a prepared send, at most once per reference: the attempt is claimed
 * (`in_flight`) before the call. A claim that finds the attempt `in_flight` (an earlier attempt
 * died mid-call) does not call: `unconfirmed`. An attempt after the first (a retry, a later round)
 * first checks what may have changed since prepare: the workspace suspended, the contact opted out.
 * A call that got no answer stays `in_flight` (only the status callback or the window settles it).
 */
export async function attemptSend(db: Db, port: ProviderPort, keys: KeyRing, item: AttemptItem): Promise<AttemptOutcome> {
  // The instance first: one that vanished is a refusal, before any attempt is claimed.
  const connection = item.connection ?? (await liveConnection(db, keys, item.workspaceId, item.instanceId));
  if (!connection) return { outcome: 'refused', error: new ApiError('INSTANCE_NOT_FOUND', 'The instance of this send no longer exists') };
  const unconfirmed = (reason: string): AttemptOutcome => ({
    outcome: 'unconfirmed',
    awaitsCallback: connection.provider === 'cloud',
    reason,
  });
  const claimed = await claimAttempt(db, item.workspaceId, item.reference);
  if (!claimed) {
    const previous = await attemptOf(db, item.reference);
    if (previous?.state === 'sent') return { outcome: 'sent', sent: sentOf(previous) };
    return unconfirmed(
      'An earlier attempt of this send did not finish its provider call (its worker stopped or lost contact); it may have reached the provider',
    );
  }
  const refuse = async (error: ApiError): Promise<AttemptOutcome> => {
    await failAttempt(db, item.reference, error.message);
    return { outcome: 'refused', error };
  };
  if (!claimed.fresh) {
    const refusal = await refusalSincePrepare(db, item.workspaceId, item.reference);
    if (refusal) return refuse(refusal);
  }
  const message = { ...item.message, to: item.to, reference: item.reference };
  if (message.type === 'template' && !message.templateComponents) {
    try {
      const template = await approvedTemplate(
        db,
        item.workspaceId,
        connection.instanceId,
        message.templateName!,
        message.templateLanguage!,
      );
      if (!template)
        throw new ApiError('TEMPLATE_INVALID', `The template "${message.templateName}" is no longer approved on this instance`);
      message.templateComponents = templateComponents(template, message);
    } catch (err) {
      if (!(err instanceof ApiError)) throw err;
      return refuse(err);
    }
  }
  let call: ProviderCall;
  try {
    call = await port.call(connection, message);
  } catch (err) {
    const full = err instanceof Error ? err.message : String(err);
    await failAttempt(db, item.reference, full.slice(0, 1000));
    // What Temporal shows (failures, results) has no number in it; the row keeps the provider's words.
    const shown = withoutPhoneNumbers(full);
    throw shown === full ? err : new Error(shown);
  }
  switch (call.outcome) {
    case 'sent':
      // If this write fails, the row stays `in_flight`: a retry does not call again, and the status callback settles it.
      await markAttemptSent(db, item.reference, call.sent);
      return call;
    case 'unanswered':
      await noteAttemptError(db, item.reference, call.error.slice(0, 1000));
      return unconfirmed(`The provider call got no answer, so it may have been accepted: ${withoutPhoneNumbers(call.error)}`);
    case 'refused':
      await failAttempt(db, item.reference, call.error.slice(0, 1000));
      return { outcome: 'refused', error: new ApiError(call.code, withoutPhoneNumbers(call.error)) };
    case 'throttled':
      await failAttempt(db, item.reference, call.error.slice(0, 1000));
      return { outcome: 'throttled', message: withoutPhoneNumbers(call.error) };
  }
}

/**
 * What stops a later attempt although prepare let it through: the workspace suspended
 * (SUBSCRIPTION_INACTIVE) or the contact prepare chose opted out (OPTED_OUT) since.
 */
async function refusalSincePrepare(db: Db, workspaceId: string, reference: string): Promise<ApiError | null> {
  const standing = await standingSincePrepare(db, workspaceId, reference);
  if (!standing) return null;
  const suspended = suspension(standing, 'send');
  if (suspended) return suspended;
  if (standing.opted_out) return new ApiError('OPTED_OUT', 'The contact opted out of messages');
  return null;
}

/** How long an unconfirmed attempt may wait for the provider's status callback. */
export type SettleWindow =
  /** Until this instant of the caller's clock (a send workflow's deadline). */
  | { deadline: Date }
  /** Until the attempt has been quiet this long by the database's clock (a broadcast recipient). */
  | { quietMs: number };

export type Settled = { outcome: 'sent'; sent: SentMessage } | { outcome: 'failed'; reason: string } | { outcome: 'pending' };

/**
 * One look at an unconfirmed attempt: `sent` once the provider's status callback recorded its
 * answer on the attempt (domain/messaging/inbound.ts), `pending` while the window is open, and
 * after it `failed` (no callback: the provider did not accept it, and it may be sent again). The
 * `in_flight` → `failed` and `in_flight` → `sent` updates are conditional on the state, so exactly
 * one of them wins.
 */
export async function settleAttempt(db: Db, workspaceId: string, reference: string, window: SettleWindow): Promise<Settled> {
  const settled = async (): Promise<Exclude<Settled, { outcome: 'pending' }> | undefined> => {
    const row = await readAttempt(db, workspaceId, reference);
    if (!row) return { outcome: 'failed', reason: 'The send was never claimed, so it never reached the provider' };
    if (row.state === 'sent') return { outcome: 'sent', sent: sentOf(row) };
    if (row.state === 'failed') return { outcome: 'failed', reason: row.error ?? 'The earlier attempt failed' };
    return undefined;
  };
  const now = await settled();
  if (now) return now;
  const passed =
    'deadline' in window ? Date.now() >= window.deadline.getTime() : await attemptQuietFor(db, workspaceId, reference, window.quietMs);
  if (!passed) return { outcome: 'pending' };
  const reason =
    'deadline' in window
      ? `No status callback from the provider until ${window.deadline.toISOString()}: the interrupted attempt was not accepted`
      : 'No status callback from the provider within the reconciliation window: not accepted';
  if ((await failAttempt(db, reference, reason, workspaceId)) > 0) return { outcome: 'failed', reason };
  // The callback won the race between the read and the update.
  return (await settled()) ?? { outcome: 'failed', reason };
}

function sentOf(row: { provider_message_id: string | null; wa_id: string | null }): SentMessage {
  return { providerMessageId: row.provider_message_id!, ...(row.wa_id ? { waId: row.wa_id } : {}) };
}
