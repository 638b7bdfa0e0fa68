import type { Knex } from 'knex';
import type { Db } from '../platform';
import type { SendOutcome, SendRequest } from '../../types/messaging';
import { requestOfRow, SEND_REQUEST_COLUMNS, sendRequestRow } from './send-requests';

/**
 * The Idempotency-Key of a send the API makes itself (api/send.ts), kept in send_keys beside the
 * request (send_requests). A key is held by one request at a time: while it is 'sending', a repeat
 * is 409 IN_PROGRESS; 'answered', a repeat within IDEMPOTENCY_MEMO_MS replays the answer; a
 * refusal frees it; 'workflow', a send workflow carries it on and Temporal's own id rules decide.
 */

/** How long a repeat of an Idempotency-Key gets the memoised answer (docs/api-conventions.md). */
export const IDEMPOTENCY_MEMO_MS = 10 * 60 * 1000;

/** What holds a key when another request holds it. */
export interface HeldSendKey {
  state: 'sending' | 'answered' | 'workflow';
  fingerprint: string;
  /** The 201 body of an answered send. */
  answer: SendOutcome | null;
}

/**
 * Stores a send's request and claims its key, in one statement: undefined when this request now
 * holds the key (new, refused before, or answered longer than IDEMPOTENCY_MEMO_MS ago), else what
 * holds it. `state` is the claim's: 'sending' (the API attempts it) or 'workflow' (a media send,
 * which only a workflow makes). `now`: the API's clock (domain/kernel/clock.ts), which dates
 * answers and their window; a claim is dated by the database, as the sweep that reads it is.
 */
export async function claimSendKey(
  db: Db,
  claim: {
    workspaceId: string;
    key: string;
    requestId: string;
    request: SendRequest;
    fingerprint: string;
    state: 'sending' | 'workflow';
    now: number;
  },
): Promise<HeldSendKey | undefined> {
  const { workspaceId, key, requestId, request } = claim;
  const memoFrom = new Date(claim.now - IDEMPOTENCY_MEMO_MS);
  const claimed = (stored: Knex.QueryBuilder | Knex.Raw) =>
    db.raw(
      `WITH request AS (:stored)
       INSERT INTO send_keys AS k (workspace_id, key, request_id, fingerprint, state, updated_at)
       SELECT :workspaceId, :key, id, :fingerprint, :state, now() FROM request
       ON CONFLICT (workspace_id, key) DO UPDATE
         SET request_id = EXCLUDED.request_id, fingerprint = EXCLUDED.fingerprint, state = EXCLUDED.state,
             answer = NULL, updated_at = EXCLUDED.updated_at, created_at = now()
         WHERE k.state = 'refused' OR (k.state = 'answered' AND k.updated_at < :memoFrom)
       RETURNING k.request_id`,
      { stored, workspaceId, key, fingerprint: claim.fingerprint, state: claim.state, memoFrom },
    );
  let taken = await claimed(
    db('send_requests')
      .insert(sendRequestRow(workspaceId, requestId, request))
      .returning('id'),
  );
  for (let attempt = 0; attempt < 3; attempt++) {
    if (taken.rows.length > 0) return undefined;
    const held = (await db('send_keys')
      .where({ workspace_id: workspaceId, key })
      .first('state', 'fingerprint', 'answer', db.raw('updated_at < ? AS expired', [memoFrom]))) as
      { state: HeldSendKey['state'] | 'refused'; fingerprint: string; answer: SendOutcome | null; expired: boolean } | undefined;
    if (held && held.state !== 'refused' && !(held.state === 'answered' && held.expired))
      return { state: held.state, fingerprint: held.fingerprint, answer: held.answer };
    // Freed (or pruned) between the two statements: claim it again with the request already stored.
    taken = await claimed(db.raw('SELECT CAST(? AS text) AS id', [requestId]));
  }
  return { state: 'sending', fingerprint: claim.fingerprint, answer: null };
}

/**
 * The send this request made is settled: recorded (`answer`, replayed for IDEMPOTENCY_MEMO_MS
 * from `now`) or refused (null: the key is free). Only while the request still holds the key as
 * 'sending': a send the sweep handed to a workflow meanwhile stays the workflow's.
 */
export async function settleSendKey(
  db: Db | Knex.Transaction,
  held: { workspaceId: string; key: string; requestId: string },
  answer: SendOutcome | null,
  now: number,
): Promise<void> {
  await db('send_keys')
    .where({ workspace_id: held.workspaceId, key: held.key, request_id: held.requestId, state: 'sending' })
    .update({ state: answer ? 'answered' : 'refused', answer: answer ? JSON.stringify(answer) : null, updated_at: new Date(now) });
}

/** A workflow carries the send on (started by the API, or by the sweep for an API that died). */
export async function sendKeyToWorkflow(db: Db, held: { workspaceId: string; key: string; requestId: string }): Promise<void> {
  await db('send_keys')
    .where({ workspace_id: held.workspaceId, key: held.key, request_id: held.requestId, state: 'sending' })
    .update({ state: 'workflow', answer: null });
}

/** A send the API began and never settled or handed over (its process died): what the sweep starts its workflow from. */
export interface UnsettledSend {
  workspaceId: string;
  key: string;
  requestId: string;
  fingerprint: string;
  request: SendRequest;
}

/** Sends still 'sending' after `olderThanMs` by the database's clock, oldest first. */
export async function unsettledSends(db: Db, olderThanMs: number, limit: number): Promise<UnsettledSend[]> {
  const rows: {
    workspace_id: string;
    key: string;
    request_id: string;
    fingerprint: string;
    phone: string | null;
    instance_id: string | null;
    conversation_id: string | null;
    message: SendRequest['message'];
  }[] = await db('send_keys as k')
    .join('send_requests as r', (j) => j.on('r.workspace_id', 'k.workspace_id').andOn('r.id', 'k.request_id'))
    .where('k.state', 'sending')
    .where('k.updated_at', '<', db.raw(`now() - make_interval(secs => ?)`, [olderThanMs / 1000]))
    .orderBy('k.updated_at')
    .limit(limit)
    .select('k.workspace_id', 'k.key', 'k.request_id', 'k.fingerprint', ...SEND_REQUEST_COLUMNS.map((c) => `r.${c}`));
  return rows.map((r) => ({
    workspaceId: r.workspace_id,
    key: r.key,
    requestId: r.request_id,
    fingerprint: r.fingerprint,
    request: requestOfRow(r),
  }));
}
