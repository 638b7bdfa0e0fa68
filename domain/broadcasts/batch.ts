import type { Knex } from 'knex';
import type { Db, KeyRing } from '../platform';
import {
  attemptSend,
  dailyLimitOf,
  dailyLimitRefusalOf,
  findPreparations,
  liveConnection,
  prepareSends,
  preparedNeverCalled,
  providerThrottled,
  recordSent,
  secondsUntilSaoPauloMidnight,
  settleAttempt,
  undoPreparedSend,
  type PrepareItem,
  type Prepared,
  type ProviderConnection,
  type ProviderPort,
} from '../messaging';
import { contactsForSend } from '../leads';
import type { SentMessage } from '../../types/messaging';
import { paceBatch, pacingFor, type BatchResult } from './pacing';
import {
  cancelBroadcastFor,
  lastSentAt,
  lockPendingRecipients,
  markRecipientsSent,
  nextPendingRecipients,
  recipientTemplate,
  reserveInstanceSlots,
  setWaiting,
  settleRecipient,
  type RecipientRow,
} from './recipients';
import { broadcastForRun, broadcastMessage, MAX_RATE_PER_SECOND, type BroadcastRow } from './broadcasts';

/**
 * A broadcast's sends, through the send engine of domain/messaging: pages of recipients prepared
 * (prepareSends), each recipient's one provider call (attemptSend, settleAttempt), the page
 * recorded (recordSent). What is the broadcast's own: the frozen audience it reads, how a refusal
 * is classed (the broadcast waits, is cancelled, or the recipient is skipped or failed), and the
 * pacing (lanes, page size, the instance's slots).
 */

/** How long one batch may run, so it stays well inside its activity timeout (its recipients: BROADCAST_BATCH_SIZE). */
const BATCH_BUDGET_MS = 30_000;
/** How long a broadcast blocked by a WAIT_CODES refusal waits before it looks again. */
const BLOCKED_RETRY_MS = 60_000;

/**
 * What a recipient's preparation holds: the engine's, and (in a preparation made before
 * template components were kept) the personalised variables.
 */
type PreparedRecipient = Prepared & { variables?: string[] };

/**
 * Refusals that are about the broadcast, not the recipient: failing recipient after recipient for
 * them would burn the audience. The broadcast waits (looking again every BLOCKED_RETRY_MS) until
 * the instance is reconnected, the subscription active again, the template approved again.
 */
const WAIT_CODES = new Set(['INSTANCE_DISCONNECTED', 'SUBSCRIPTION_INACTIVE', 'TEMPLATE_INVALID']);
/** Refusals no wait can cure (the instance removed, or one that cannot carry templates): the broadcast is cancelled, saying why. */
const CANCEL_CODES = new Set(['INSTANCE_NOT_FOUND', 'NO_INSTANCE', 'CHANNEL_UNSUPPORTED', 'TEMPLATE_UNSUPPORTED']);
/**
 * How old the broadcast's state a provider call goes by may be: the lanes share one read at a
 * time, so a pause or a cancel stops every call that starts later than this after it (and a
 * wait for the instance's slot longer than this reads it again before the call).
 */
const STATE_FRESH_MS = 250;
/** What stops a batch before a recipient's provider call: wait (until, why) or cancel (why). */
type Blocked = { wait: string; until: Date } | { cancel: string };

export interface BatchDeps {
  db: Db;
  port: ProviderPort;
  keys: KeyRing;
  /** The reconciliation window of an unconfirmed call (SEND_RECONCILE_WINDOW_MS). */
  windowMs: number;
  /** Recipients a batch takes at most (BROADCAST_BATCH_SIZE). */
  batchSize: number;
  /** RATE_LIMIT_SCALE lifts the pacing as it lifts every limit (benchmarks only). */
  rateScale: number;
  /** Called every second and while waiting, so a dead worker is noticed (the activity's heartbeat). */
  heartbeat: () => void;
}

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/**
 * Sends to the next pending recipients, in position order, for up to BATCH_BUDGET_MS or
 * `batchSize` recipients: pages prepared, each page's provider calls started at their slots (not
 * waiting for each other's answers), then the page recorded; up to `lanes` pages in flight at
 * once. Before EACH provider call the lane takes its pacing slot (the broadcast's rate, shared by
 * the lanes), looks at the broadcast as read at most STATE_FRESH_MS before (paused or cancelled:
 * no call) and takes the instance's slot. The first stop (paused, cancelled, waiting,
 * reconciling, done) ends every lane once the calls it started are answered;
 * what its page sent is recorded; recipients prepared and not called stay pending with their
 * preparation (resumed: called; cancelled: their units are given back by releaseCancelled).
 */
export async function sendBatch(deps: BatchDeps, input: { workspaceId: string; broadcastId: string }): Promise<BatchResult> {
  const { db } = deps;
  const { workspaceId, broadcastId } = input;
  /** One provider call of an instance's throughput (the Cloud API's default per number: MAX_RATE_PER_SECOND calls a second). */
  const instanceIntervalMs = 1000 / (MAX_RATE_PER_SECOND * deps.rateScale);
  const deadline = Date.now() + BATCH_BUDGET_MS;
  const first = await broadcastForRun(db, workspaceId, broadcastId);
  if (first?.status !== 'in_progress') return stoppedState(first);
  const callsPerSecond = first.rate_per_second * deps.rateScale;
  const { lanes } = pacingFor(callsPerSecond);

  // Pending recipients in position order, read ahead in pages and handed out once each.
  const queue: RecipientRow[] = [];
  let after = -1;
  let exhausted = false;
  let reading: Promise<void> | undefined;
  const nextPage = async (size: number): Promise<RecipientRow[]> => {
    while (queue.length < size && !exhausted) {
      reading ??= nextPendingRecipients(db, workspaceId, broadcastId, after, Math.max(size * lanes, 50))
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

  /**
   * The broadcast as the lanes' calls go by it: read at most STATE_FRESH_MS before (the read's
   * start), one read at a time shared by the lanes.
   */
  let known: { row: BroadcastRow | undefined; readAt: number } | undefined;
  let rereading: Promise<BroadcastRow | undefined> | undefined;
  const current = async (): Promise<BroadcastRow | undefined> => {
    if (known && Date.now() - known.readAt < STATE_FRESH_MS) return known.row;
    rereading ??= (async () => {
      const readAt = Date.now();
      const row = await broadcastForRun(db, workspaceId, broadcastId);
      known = { row, readAt };
      return row;
    })().finally(() => {
      rereading = undefined;
    });
    return rereading;
  };

  /**
   * One page: the broadcast read (paused or cancelled: nothing sent), the page prepared, and
   * before EACH provider call the pacing slot (waited before the status is read, so a pause during
   * the wait is seen before the call), the broadcast's state (current), and the instance's slot
   * (the page's calls on an instance reserved together at its first). Each call starts at its
   * slot without waiting for the one before to be answered: a provider answers in a few hundred
   * ms, and one call at a time would hold a lane to a few calls a second whatever the rate. The
   * first call that stops the broadcast stops the page from starting more; the calls already
   * started are answered, and what the provider took is recorded. The instance's connection is
   * opened once a page.
   */
  const sendPage = async (page: RecipientRow[], slot: () => Promise<boolean>): Promise<BatchResult | undefined> => {
    const b = await current();
    if (b?.status !== 'in_progress') return stoppedState(b);
    const { prepared, blocked } = await preparePage(deps, b, page);
    if (prepared.length && (b.waiting_until || b.code)) await setWaiting(db, workspaceId, broadcastId, null, null);
    /** What the provider took, by the recipient's place in the page (recorded in that order). */
    const sent: Array<{ p: PreparedRecipient; s: SentMessage; place: number }> = [];
    const calls: Promise<void>[] = [];
    /** The first stop a call met, with the broadcast as that call saw it. */
    let stop: { b: BroadcastRow; result: 'wait' | Blocked } | undefined;
    let failure: { error: unknown } | undefined;
    /** The batch stopped meanwhile (another lane's stop): nothing more to report from here. */
    let halted = false;
    const connections = new Map<string, Promise<ProviderConnection | undefined>>();
    /** Per instance: when the page's first reserved slot is, by Date.now, and how many of its slots were taken. */
    const turns = new Map<string, { firstAt: number; taken: number }>();
    try {
      for (const [i, p] of prepared.entries()) {
        if (stop || failure) break;
        if (!(await slot())) {
          halted = true;
          break;
        }
        let now = await current();
        if (now?.status !== 'in_progress') return stoppedState(now);
        let turn = turns.get(p.instanceId);
        if (!turn) {
          // The instance's throughput is shared by its broadcasts: the page's calls on it take its next free slots.
          const count = prepared.slice(i).filter((q) => q.instanceId === p.instanceId).length;
          const wait = await reserveInstanceSlots(db, workspaceId, p.instanceId, instanceIntervalMs, count);
          turns.set(p.instanceId, (turn = { firstAt: Date.now() + wait, taken: 0 }));
        }
        const wait = turn.firstAt + turn.taken * instanceIntervalMs - Date.now();
        turn.taken += 1;
        if (wait > 0) {
          await sleep(wait);
          // A long turn (many broadcasts on the instance): a pause meanwhile stops this call.
          if (wait > STATE_FRESH_MS) {
            now = await current();
            if (now?.status !== 'in_progress') return stoppedState(now);
          }
        }
        if (stop || failure) break;
        if (!connections.has(p.instanceId)) connections.set(p.instanceId, liveConnection(db, deps.keys, workspaceId, p.instanceId));
        const seen = now;
        const connection = await connections.get(p.instanceId)!;
        calls.push(
          call(deps, seen, p, deadline, connection).then(
            (result) => {
              if (result === 'failed') return;
              if (result === 'wait' || !('providerMessageId' in result)) stop ??= { b: seen, result };
              else sent.push({ p, s: result, place: i });
            },
            (error: unknown) => {
              failure ??= { error };
            },
          ),
        );
      }
    } finally {
      await Promise.all(calls);
      // What the provider took is recorded whatever stopped the page (a retry would find it sent and record it too).
      await recordPage(
        db,
        b,
        sent.sort((x, y) => x.place - y.place),
      );
    }
    if (failure) throw failure.error;
    if (stop) return stop.result === 'wait' ? { state: 'reconciling' } : stopFor(db, stop.b, stop.result);
    if (halted) return undefined;
    return blocked ? stopFor(db, b, blocked) : undefined;
  };

  const last = await lastSentAt(db, workspaceId, broadcastId);
  return paceBatch({
    callsPerSecond,
    batchSize: deps.batchSize,
    deadline,
    lastCallAt: last ? last.getTime() : null,
    nextPage,
    sendPage,
    now: Date.now,
    sleep,
  });
}

/** A batch stopped before a call: the broadcast waits (saying until when and why) or is cancelled (saying why). */
async function stopFor(db: Db, b: BroadcastRow, blocked: Blocked): Promise<BatchResult> {
  if ('cancel' in blocked) {
    await cancelBroadcastFor(db, b.workspace_id, b.id, blocked.cancel);
    return { state: 'cancelled' };
  }
  await setWaiting(db, b.workspace_id, b.id, blocked.until, blocked.wait);
  return { state: 'waiting', until: blocked.until.toISOString() };
}

/**
 * A page of recipients prepared in one transaction: those still pending locked (in position
 * order), their earlier preparations found, the rest through the engine (prepareSends) with their
 * personalised template, each refusal classed (a deleted contact or an empty variable skips the
 * recipient; a refusal about the broadcast stops the page: wait or cancel; the recipient's own
 * refusal skips it when it opted out, else fails it). When the page's daily units do not all fit,
 * its transaction rolls back and it goes one recipient at a time, which takes what is left and
 * stops at the limit until the São Paulo reset. The prepared come back in position order.
 */
async function preparePage(
  deps: BatchDeps,
  b: BroadcastRow,
  page: RecipientRow[],
): Promise<{ prepared: PreparedRecipient[]; blocked?: Blocked }> {
  try {
    return await deps.db.transaction((trx) => prepareInTransaction(trx, deps.keys, b, page));
  } catch (err) {
    // The page's daily units did not all fit: its commit failed and nothing was kept.
    const full = dailyLimitOf(err);
    if (!full) throw err;
    if (page.length === 1) {
      // The counters reset at São Paulo midnight: the broadcast sleeps until then.
      const now = new Date();
      const wait = dailyLimitRefusalOf(full).code;
      return { prepared: [], blocked: { wait, until: new Date(now.getTime() + secondsUntilSaoPauloMidnight(now) * 1000) } };
    }
  }
  const prepared: PreparedRecipient[] = [];
  for (const r of page) {
    const one = await preparePage(deps, b, [r]);
    prepared.push(...one.prepared);
    if (one.blocked) return { prepared, blocked: one.blocked };
  }
  return { prepared };
}

async function prepareInTransaction(
  trx: Knex.Transaction,
  keys: KeyRing,
  b: BroadcastRow,
  page: RecipientRow[],
): Promise<{ prepared: PreparedRecipient[]; blocked?: Blocked }> {
  const ws = b.workspace_id;
  const template = b.template!;
  const settle = (contactId: string, status: 'skipped' | 'failed', code: string) => settleRecipient(trx, ws, b.id, contactId, status, code);
  const contactIds = (rows: RecipientRow[]) => rows.map((r) => r.contact_id);
  const pending = await lockPendingRecipients(trx, ws, b.id, contactIds(page));
  const rows = page.filter((r) => pending.has(r.contact_id));
  const done = await findPreparations<PreparedRecipient>(
    trx,
    ws,
    rows.map((r) => r.reference),
  );
  const fresh = rows.filter((r) => !done.has(r.reference));
  const contacts = await contactsForSend(trx, ws, contactIds(fresh));
  const items: PrepareItem[] = [];
  for (const r of fresh) {
    const contact = contacts.get(r.contact_id);
    if (!contact) {
      await settle(r.contact_id, 'skipped', 'CONTACT_DELETED');
      continue;
    }
    // A broadcast goes by phone (WhatsApp): a contact met on Instagram has none.
    if (contact.phone === null) {
      await settle(r.contact_id, 'skipped', 'PHONE_REQUIRED');
      continue;
    }
    const personal = await recipientTemplate(trx, ws, { ...contact, phone: contact.phone }, template);
    if (!personal) {
      await settle(r.contact_id, 'skipped', 'VARIABLE_EMPTY');
      continue;
    }
    items.push({ reference: r.reference, to: { contact }, message: broadcastMessage(personal) });
  }
  const { results } = await prepareSends(trx, ws, items, {
    keys,
    instanceId: b.instance_id ?? undefined,
    stopsAt: (refused, about) => about === 'send' && (WAIT_CODES.has(refused.code) || CANCEL_CODES.has(refused.code)),
  });
  let blocked: Blocked | undefined;
  for (const [reference, result] of results) {
    if (!('refused' in result)) continue;
    const { refused, about } = result;
    if (about === 'send' && WAIT_CODES.has(refused.code)) blocked = { wait: refused.code, until: new Date(Date.now() + BLOCKED_RETRY_MS) };
    else if (about === 'send' && CANCEL_CODES.has(refused.code)) blocked = { cancel: refused.code };
    else {
      const contactId = fresh.find((r) => r.reference === reference)!.contact_id;
      await settle(contactId, refused.code === 'OPTED_OUT' ? 'skipped' : 'failed', refused.code);
    }
  }
  const prepared = rows
    .map((r) => {
      const result = results.get(r.reference);
      return done.get(r.reference) ?? (result && 'prepared' in result ? result.prepared : undefined);
    })
    .filter((p): p is PreparedRecipient => !!p);
  return { prepared, blocked };
}

/** A recipient the provider definitely did not take: its daily units back (once), its empty new conversation removed. */
async function fail(db: Db, b: BroadcastRow, p: PreparedRecipient, code: string, status: 'failed' | 'skipped' = 'failed'): Promise<void> {
  await db.transaction(async (trx) => {
    await undoPreparedSend(trx, b.workspace_id, p);
    await settleRecipient(trx, b.workspace_id, b.id, p.contactId, status, code);
  });
}

/**
 * One recipient's provider call, at most once ever (attemptSend, keyed by the recipient's
 * reference). An unconfirmed earlier call is not made again: we wait for the provider's status
 * callback (settleAttempt) until the reconciliation window after the attempt's last change;
 * without one by then, the provider did not accept it, and it is claimed and called once more.
 * Returns the provider's message, 'failed' (settled), 'wait' (the window is still open at the
 * batch's deadline), or what stops the batch.
 */
async function call(
  deps: BatchDeps,
  b: BroadcastRow,
  p: PreparedRecipient,
  deadline: number,
  connection: ProviderConnection | undefined,
): Promise<SentMessage | 'failed' | 'wait' | Blocked> {
  const { db } = deps;
  // The template's components as prepared (or, prepared before they were kept, its personalised variables).
  const { name, language } = b.template!;
  const message = {
    ...broadcastMessage({ name, language, variables: p.variables }),
    ...(p.components ? { templateComponents: p.components } : {}),
  };
  for (;;) {
    const result = await attemptSend(db, deps.port, deps.keys, {
      workspaceId: b.workspace_id,
      instanceId: p.instanceId,
      to: p.to,
      reference: p.reference,
      message,
      // Found archived by the page's read: attemptSend reads it again and refuses.
      ...(connection ? { connection } : {}),
    });
    switch (result.outcome) {
      case 'sent':
        return result.sent;
      case 'throttled':
        // Throttling or an outage: the activity's retries slow the broadcast down; the recipient stays.
        throw providerThrottled(result.message);
      case 'refused': {
        const { code } = result.error;
        // Not the recipient's doing: it stays pending with its units, and the broadcast waits.
        if (code === 'SUBSCRIPTION_INACTIVE') return { wait: code, until: new Date(Date.now() + BLOCKED_RETRY_MS) };
        await fail(db, b, p, code, code === 'OPTED_OUT' ? 'skipped' : 'failed');
        return 'failed';
      }
      case 'unconfirmed': {
        if (!result.awaitsCallback) {
          // No status callback to wait for (web gateway): never twice, so the recipient stops here.
          await settleRecipient(db, b.workspace_id, b.id, p.contactId, 'failed', 'SEND_OUTCOME_UNKNOWN');
          return 'failed';
        }
        const settled = await waitForCallback(deps, b.workspace_id, p.reference, deadline);
        if (settled === 'wait') return 'wait';
        continue; // sent: the claim finds it sent; failed: it is claimed again
      }
    }
  }
}

/** Waits (heartbeating) for an unconfirmed attempt to be settled, until `deadline` (the batch's budget). */
async function waitForCallback(deps: BatchDeps, workspaceId: string, reference: string, deadline: number): Promise<'settled' | 'wait'> {
  for (;;) {
    const settled = await settleAttempt(deps.db, workspaceId, reference, { quietMs: deps.windowMs });
    if (settled.outcome !== 'pending') return 'settled';
    if (Date.now() >= deadline) return 'wait';
    deps.heartbeat();
    await sleep(300);
  }
}

/** The recipients of a page the provider accepted, recorded at once (recordSent), and marked sent in the same transaction. */
async function recordPage(db: Db, b: BroadcastRow, sent: Array<{ p: PreparedRecipient; s: SentMessage }>): Promise<void> {
  await recordSent(
    db,
    b.workspace_id,
    sent.map(({ p, s }) => ({
      prepared: { instanceId: p.instanceId, contactId: p.contactId, conversationId: p.conversationId },
      sent: s,
      message: { type: 'template', body: `[template] ${b.template!.name}`, mediaUrl: null },
    })),
    (trx, recorded) =>
      markRecipientsSent(
        trx,
        b.workspace_id,
        b.id,
        recorded.map((r) => ({ contactId: r.contactId, messageId: r.id, conversationId: r.conversationId })),
      ),
  );
}

/**
 * A cancelled broadcast's recipients that were prepared and never called (a worker died between
 * the two): their daily units back and their empty new conversations removed, each once.
 * Recipients whose call may have reached the provider keep theirs.
 */
export async function releaseCancelled(
  db: Db,
  workspaceId: string,
  broadcastId: string,
  heartbeat: () => void,
): Promise<{ released: number }> {
  const b = await broadcastForRun(db, workspaceId, broadcastId);
  if (b?.status !== 'cancelled') return { released: 0 };
  let released = 0;
  for (let after = -1; ;) {
    heartbeat();
    const page = await nextPendingRecipients(db, workspaceId, broadcastId, after, 1000);
    if (page.length === 0) return { released };
    after = page[page.length - 1].position;
    const references = page.map((r) => r.reference);
    for (const reference of await preparedNeverCalled(db, workspaceId, references)) {
      await db.transaction(async (trx) => {
        const prepared = (await findPreparations<PreparedRecipient>(trx, workspaceId, [reference])).get(reference);
        if (!prepared || !(await lockPendingRecipients(trx, workspaceId, broadcastId, [prepared.contactId])).size) return;
        // Checked again under the recipient's lock, which a preparation also takes.
        if ((await preparedNeverCalled(trx, workspaceId, [reference])).length) {
          await undoPreparedSend(trx, workspaceId, prepared);
          released += 1;
        }
      });
    }
  }
}

/** What a batch tells the workflow when the broadcast is not in progress (gone: cancelled). */
function stoppedState(b: BroadcastRow | undefined): BatchResult {
  if (!b || b.status === 'cancelled') return { state: 'cancelled' };
  if (b.status === 'completed') return { state: 'completed' };
  return { state: 'paused' };
}
