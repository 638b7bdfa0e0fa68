import type { Knex } from 'knex';
import { prepared, type Db } from '../../platform';
import { workspaceQuery } from '../../access';
import { contactOptedOut, deleteUnusedContact } from '../../leads';
import { conversationsOfContact, deleteEmptyConversation } from '../conversations';
import { giveBackDaily } from './daily';

/**
 * A send's own records, keyed by its reference (workflow id / run id): send_preparations (what
 * prepareSend decided, so a retry after its commit returns it instead of taking a second quota
 * unit) and send_attempts (the provider call, claimed before it so it happens at most once).
 * The send engine (prepare.ts, attempt.ts, record.ts beside this file) reads and moves them.
 */

/** The preparations recorded for these references (prepare already committed them), keyed by reference. */
export async function findPreparations<T>(trx: Db, workspaceId: string, references: string[]): Promise<Map<string, T>> {
  if (references.length === 0) return new Map();
  const rows: { reference: string; prepared: T }[] = await trx('send_preparations')
    .where({ workspace_id: workspaceId })
    .whereIn('reference', references)
    .select('reference', 'prepared');
  return new Map(rows.map((r): [string, T] => [r.reference, r.prepared]));
}

/** Records preparations (each whole) in one INSERT; a concurrent duplicate conflicts (primary key) and rolls its transaction back. */
export async function recordPreparations(trx: Db, workspaceId: string, preparations: { reference: string }[]): Promise<void> {
  if (preparations.length === 0) return;
  await trx('send_preparations').insert(
    preparations.map((p) => ({ reference: p.reference, workspace_id: workspaceId, prepared: JSON.stringify(p) })),
  );
}

/**
 * Of these references, the prepared sends never called that keep their units: a preparation not
 * undone, with no attempt or a failed one. A cancelled broadcast gives their units back.
 */
export async function preparedNeverCalled(db: Db, workspaceId: string, references: string[]): Promise<string[]> {
  if (references.length === 0) return [];
  const { rows } = await db.raw<{ rows: { reference: string }[] }>(
    `SELECT p.reference FROM send_preparations p
       LEFT JOIN send_attempts a ON a.reference = p.reference AND a.workspace_id = p.workspace_id
      WHERE p.workspace_id = ? AND p.reference = ANY(?::text[]) AND p.undone_at IS NULL AND (a.reference IS NULL OR a.state = 'failed')`,
    [workspaceId, references],
  );
  return rows.map((r) => r.reference);
}

/** Marks the preparation undone; false when it already was (the compensation runs once). */
export async function claimUndo(trx: Knex.Transaction, workspaceId: string, reference: string): Promise<boolean> {
  const claimed = await trx('send_preparations')
    .where({ reference, workspace_id: workspaceId })
    .whereNull('undone_at')
    .update({ undone_at: trx.fn.now() });
  return claimed > 0;
}

/**
 * A prepared send's compensation, once per reference even when retried after its commit (the
 * single send's undoPrepare, a broadcast recipient the provider did not take): its daily units
 * back, the conversation it created removed if still empty, and the contact it created removed
 * if nothing else started using it meanwhile (a deal, a note, another send).
 */
export async function undoPreparedSend(
  db: Db,
  workspaceId: string,
  prepared: {
    reference: string;
    day: string;
    tookCold: boolean;
    createdConversation: boolean;
    conversationId: string;
    createdContact?: boolean;
    contactId: string;
  },
): Promise<void> {
  // Its own transaction, or a savepoint inside the caller's (a broadcast recipient settled with it).
  await db.transaction(async (trx) => {
    if (!(await claimUndo(trx, workspaceId, prepared.reference))) return;
    await giveBackDaily(trx, workspaceId, 'messages', prepared.day);
    if (prepared.tookCold) await giveBackDaily(trx, workspaceId, 'cold_conversations', prepared.day);
    if (prepared.createdConversation) await deleteEmptyConversation(trx, workspaceId, prepared.conversationId);
    if (prepared.createdContact) await deleteUnusedContact(trx, workspaceId, prepared.contactId, conversationsOfContact(trx));
  });
}

/**
 * The workspace's standing and the prepared contact's opt-out now, for a retried provider call
 * (the contact is the one prepare chose: its row in send_preparations, by the reference).
 */
export async function standingSincePrepare(
  db: Db,
  workspaceId: string,
  reference: string,
): Promise<{ active: boolean; api_access: boolean; opted_out: boolean | null } | undefined> {
  const preparedContact = db.raw(
    `(SELECT (prepared->>'contactId')::uuid FROM send_preparations WHERE workspace_id = ? AND reference = ?)`,
    [workspaceId, reference],
  );
  return workspaceQuery(db, workspaceId).first('active', 'api_access', {
    opted_out: contactOptedOut(db, workspaceId, preparedContact),
  });
}

export interface SendAttemptRow {
  state: string;
  provider_message_id: string | null;
  wa_id: string | null;
  error: string | null;
}

/**
 * Claims the attempt (`in_flight`) before the provider call: a new row, or a `failed` one taken
 * again. Undefined when another state holds it (`in_flight` or `sent`). `fresh`: a new row, the
 * first call of the send. Written with the process's other claims and marks (attemptWrites).
 */
export async function claimAttempt(db: Db, workspaceId: string, reference: string): Promise<{ fresh: boolean } | undefined> {
  return attemptWrites(db).claim(workspaceId, reference);
}

/** The attempt by its reference alone (unique), as the claim saw it. */
export async function attemptOf(db: Db, reference: string): Promise<(SendAttemptRow & Record<string, unknown>) | undefined> {
  return db('send_attempts').where({ reference }).first();
}

/** The attempt's outcome fields, scoped by workspace. */
export async function readAttempt(db: Db, workspaceId: string, reference: string): Promise<SendAttemptRow | undefined> {
  return db('send_attempts').where({ reference, workspace_id: workspaceId }).first('state', 'provider_message_id', 'wa_id', 'error');
}

/** Whether the attempt has not changed for `ms` (by the database's clock): past a reconciliation window without a status callback. */
export async function attemptQuietFor(db: Db, workspaceId: string, reference: string, ms: number): Promise<boolean> {
  const row = await db('send_attempts')
    .where({ reference, workspace_id: workspaceId })
    .first(db.raw(`updated_at < now() - (?::int * interval '1 millisecond') AS expired`, [ms]));
  return row?.expired === true;
}

/** `in_flight` → `failed` (conditional on the state, so a concurrent settle wins once); returns the rows changed. */
export async function failAttempt(db: Db, reference: string, error: string, workspaceId?: string): Promise<number> {
  return db('send_attempts')
    .where({ reference, state: 'in_flight', ...(workspaceId ? { workspace_id: workspaceId } : {}) })
    .update({ state: 'failed', error, updated_at: db.fn.now() });
}

/** Keeps the error of a call that may have reached the provider; the attempt stays `in_flight`. */
export async function noteAttemptError(db: Db, reference: string, error: string): Promise<void> {
  await db('send_attempts').where({ reference, state: 'in_flight' }).update({ error, updated_at: db.fn.now() });
}

/** The provider accepted the message. Written with the process's other claims and marks (attemptWrites). */
export async function markAttemptSent(db: Db, reference: string, sent: { providerMessageId: string; waId?: string }): Promise<void> {
  return attemptWrites(db).mark(reference, sent);
}

interface Waiting<T> {
  resolve(value: T): void;
  reject(err: unknown): void;
}
type ClaimWrite = Waiting<{ fresh: boolean } | undefined> & { reference: string; workspaceId: string };
type MarkWrite = Waiting<void> & { reference: string; providerMessageId: string; waId: string | null };

/** Rows one statement of attemptWrites takes at most, of each kind. */
const WRITES_PER_STATEMENT = 500;

/**
 * One statement for a group of claims and marks: the marks (by reference; only the claimer
 * marks) and the claims (in reference order, so two processes claiming overlapping groups lock
 * their rows in one order). A claim's `fresh` is whether it inserted the row.
 */
const WRITE_ATTEMPTS_SQL = `WITH marked AS (
  UPDATE send_attempts a SET state = 'sent', provider_message_id = m.provider_message_id, wa_id = nullif(m.wa_id, ''), error = NULL, updated_at = now()
    FROM unnest(?::text[], ?::text[], ?::text[]) AS m(reference, provider_message_id, wa_id)
   WHERE a.reference = m.reference
), claimed AS (
  INSERT INTO send_attempts (reference, workspace_id, state)
  SELECT c.reference, c.workspace_id, 'in_flight' FROM unnest(?::text[], ?::uuid[]) AS c(reference, workspace_id) ORDER BY c.reference
  ON CONFLICT (reference) DO UPDATE SET state = 'in_flight', error = NULL, updated_at = now() WHERE send_attempts.state = 'failed'
  RETURNING reference, (xmax = 0) AS fresh
)
SELECT reference, fresh FROM claimed`;

/**
 * The claims and marks of one process, written as a group commit: the first goes at once, and
 * those that come while a statement is on its way wait for it and go together in the next. Each
 * call still waits for its own row's write, so a claim still comes before its provider call and a
 * mark after it; what changes is that concurrent sends (a broadcast's lanes, a burst of single
 * sends) share statements: the worker's event loop and PostgreSQL pay per statement, not per row.
 */
class AttemptWrites {
  private claims: ClaimWrite[] = [];
  private marks: MarkWrite[] = [];
  private writing = false;

  constructor(private readonly db: Db) {}

  claim(workspaceId: string, reference: string): Promise<{ fresh: boolean } | undefined> {
    return new Promise((resolve, reject) => {
      this.claims.push({ workspaceId, reference, resolve, reject });
      this.write();
    });
  }

  mark(reference: string, sent: { providerMessageId: string; waId?: string }): Promise<void> {
    return new Promise((resolve, reject) => {
      this.marks.push({ reference, providerMessageId: sent.providerMessageId, waId: sent.waId ?? null, resolve, reject });
      this.write();
    });
  }

  private write(): void {
    if (this.writing || (this.claims.length === 0 && this.marks.length === 0)) return;
    this.writing = true;
    const marks = this.marks.splice(0, WRITES_PER_STATEMENT);
    const marking = new Set(marks.map((m) => m.reference));
    // A reference is claimed once a statement: a second claim of it in the group finds it held,
    // as it would one statement later; a claim of a reference marked in this group waits for the next.
    const claims = new Map<string, ClaimWrite>();
    const held: ClaimWrite[] = [];
    const later: ClaimWrite[] = [];
    for (const c of this.claims) {
      if (marking.has(c.reference) || claims.size === WRITES_PER_STATEMENT) later.push(c);
      else if (claims.has(c.reference)) held.push(c);
      else claims.set(c.reference, c);
    }
    this.claims = later;
    // The statement inserts them in reference order (its ORDER BY): the lock order two processes share.
    const claimed = [...claims.values()];
    prepared(
      this.db.raw<{ rows: { reference: string; fresh: boolean }[] }>(WRITE_ATTEMPTS_SQL, [
        marks.map((m) => m.reference),
        marks.map((m) => m.providerMessageId),
        marks.map((m) => m.waId ?? ''),
        claimed.map((c) => c.reference),
        claimed.map((c) => c.workspaceId),
      ]),
    )
      .then(
        ({ rows }) => {
          const fresh = new Map(rows.map((r) => [r.reference, r.fresh]));
          for (const m of marks) m.resolve();
          for (const c of claimed) c.resolve(fresh.has(c.reference) ? { fresh: fresh.get(c.reference)! } : undefined);
          for (const c of held) c.resolve(undefined);
        },
        (err: unknown) => {
          for (const w of [...marks, ...claimed, ...held]) w.reject(err);
        },
      )
      .finally(() => {
        this.writing = false;
        this.write();
      });
  }
}

const writesOf = new WeakMap<Db, AttemptWrites>();

/** The process's group writer of attempts for this database (a transaction has none: its writes are its own). */
function attemptWrites(db: Db): Pick<AttemptWrites, 'claim' | 'mark'> {
  if (db.isTransaction) return new AttemptWrites(db);
  let writes = writesOf.get(db);
  if (!writes) writesOf.set(db, (writes = new AttemptWrites(db)));
  return writes;
}

/**
 * The attempts' provider statuses recorded by status callbacks that beat the message rows, locked
 * (in one order) so one arriving now waits until the message row exists (domain/messaging/inbound.ts);
 * keyed by provider message id.
 */
export async function lockAttemptStatuses(
  trx: Knex.Transaction,
  workspaceId: string,
  providerMessageIds: string[],
): Promise<Map<string, string | null>> {
  if (providerMessageIds.length === 0) return new Map();
  const rows: { provider_message_id: string; provider_status: string | null }[] = await trx('send_attempts')
    .where({ workspace_id: workspaceId })
    .whereIn('provider_message_id', providerMessageIds)
    .orderBy('reference')
    .forUpdate()
    .select('provider_message_id', 'provider_status');
  return new Map(rows.map((r) => [r.provider_message_id, r.provider_status]));
}
