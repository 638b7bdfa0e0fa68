import { createHash, randomUUID } from 'node:crypto';
import type { Knex } from 'knex';
import type { Db } from './db';
import { ApiError } from '../kernel';

/**
 * What a key was first used for: the operation and its validated input, hashed. A key names one
 * request; the same key on another body or another endpoint is refused instead of replaying an
 * unrelated answer. Field order does not matter, nor do fields left undefined.
 */
export function fingerprint(operation: string, input: unknown): string {
  const sorted = (value: unknown): unknown =>
    Array.isArray(value)
      ? value.map(sorted)
      : value && typeof value === 'object'
        ? Object.fromEntries(
            Object.entries(value)
              .filter(([, v]) => v !== undefined)
              .sort(([a], [b]) => (a < b ? -1 : 1))
              .map(([k, v]) => [k, sorted(v)]),
          )
        : value;
  return createHash('sha256')
    .update(`${operation}\n${JSON.stringify(sorted(input))}`)
    .digest('hex');
}

/** How long a batch's answer is replayed under its key (docs/api-conventions.md), and kept (domain/maintenance/retention.ts). */
export const STORED_ANSWER_HOURS = 24;
/**
 * How long a claim holds its key without news from its request (each committed chunk renews it):
 * past it, the request is taken for dead and a repeat with the same body takes over.
 */
export const CLAIM_LEASE_SECONDS = 60;

/** A key held by this request: `answers` are those a dead predecessor already committed (resumed, not redone). */
export interface Claim<A> {
  id: string;
  workspaceId: string;
  key: string;
  claim: string;
  answers: A[];
}

interface Row {
  id: string;
  operation: string;
  request_hash: string;
  state: 'running' | 'done';
  claim: string;
  results: string[];
  fresh: boolean;
  expired_lease: boolean;
}

/**
 * Claims `key` for one request before any work: a new key (or one whose answer is older than
 * STORED_ANSWER_HOURS) is taken; a finished request with the same operation and body is replayed
 * (`replay`); one still running is 409 IN_PROGRESS, unless its lease ran out, when this request
 * takes it over and resumes; another operation or body is 422 IDEMPOTENCY_KEY_REUSED. One
 * statement decides, so of concurrent requests with one key exactly one holds it.
 */
export async function claimKey<A>(
  db: Db,
  workspaceId: string,
  key: string,
  operation: string,
  hash: string,
): Promise<{ claim: Claim<A> } | { replay: A[] }> {
  const claim = randomUUID();
  for (let attempt = 0; attempt < 3; attempt++) {
    const taken = await db.raw(
      `INSERT INTO idempotent_requests AS r (workspace_id, key, operation, request_hash, claim, locked_until)
       VALUES (?, ?, ?, ?, ?, now() + make_interval(secs => ?))
       ON CONFLICT (workspace_id, key) DO UPDATE
         -- A takeover keeps what its predecessor committed; an answer past its window is forgotten.
         SET claim = EXCLUDED.claim, locked_until = EXCLUDED.locked_until, operation = EXCLUDED.operation,
             request_hash = EXCLUDED.request_hash, state = 'running',
             results = CASE WHEN r.created_at < now() - make_interval(hours => ?) THEN '{}' ELSE r.results END,
             created_at = CASE WHEN r.created_at < now() - make_interval(hours => ?) THEN now() ELSE r.created_at END
         WHERE r.created_at < now() - make_interval(hours => ?)
            OR (r.state = 'running' AND r.locked_until < now() AND r.operation = EXCLUDED.operation AND r.request_hash = EXCLUDED.request_hash)
       RETURNING r.id, r.results`,
      [workspaceId, key, operation, hash, claim, CLAIM_LEASE_SECONDS, STORED_ANSWER_HOURS, STORED_ANSWER_HOURS, STORED_ANSWER_HOURS],
    );
    const mine: { id: string; results: string[] } | undefined = taken.rows[0];
    if (mine) return { claim: { id: mine.id, workspaceId, key, claim, answers: mine.results.map((r) => JSON.parse(r) as A) } };

    const held: Row | undefined = (
      await db.raw(
        `SELECT id, operation, request_hash, state, claim, results,
                created_at >= now() - make_interval(hours => ?) AS fresh, locked_until < now() AS expired_lease
           FROM idempotent_requests WHERE workspace_id = ? AND key = ?`,
        [STORED_ANSWER_HOURS, workspaceId, key],
      )
    ).rows[0];
    // Pruned, expired or its lease lapsed between the two statements: claim again.
    if (
      !held ||
      !held.fresh ||
      (held.state === 'running' && held.expired_lease && held.operation === operation && held.request_hash === hash)
    )
      continue;
    if (held.operation !== operation || held.request_hash !== hash) throw keyReused(key);
    if (held.state === 'running') throw inProgress(key);
    return { replay: held.results.map((r) => JSON.parse(r) as A) };
  }
  throw inProgress(key);
}

/**
 * Appends a chunk's answers to the claim in the chunk's own transaction (they commit together, so
 * a takeover never redoes a committed item) and renews the lease. A claim taken over meanwhile
 * (this request outlived its lease) is 409 IN_PROGRESS, and the chunk rolls back.
 */
export async function recordProgress<A>(trx: Knex.Transaction, claim: Claim<A>, answers: A[]): Promise<void> {
  const updated = await trx.raw(
    `UPDATE idempotent_requests SET results = results || ?::text[], locked_until = now() + make_interval(secs => ?) WHERE workspace_id = ? AND id = ? AND claim = ?`,
    [answers.map((a) => JSON.stringify(a)), CLAIM_LEASE_SECONDS, claim.workspaceId, claim.id, claim.claim],
  );
  if (updated.rowCount === 0) throw inProgress(claim.key);
}

/** The answer is complete: the key replays it from now on (`answers`: those not recorded by a chunk). */
export async function completeKey<A>(db: Db, claim: Claim<A>, answers: A[]): Promise<void> {
  await db.raw(
    `UPDATE idempotent_requests SET results = results || ?::text[], state = 'done' WHERE workspace_id = ? AND id = ? AND claim = ?`,
    [answers.map((a) => JSON.stringify(a)), claim.workspaceId, claim.id, claim.claim],
  );
}

/** The request failed (the database, a bug): a repeat with the same body may resume at once. */
export async function releaseKey<A>(db: Db, claim: Claim<A>): Promise<void> {
  await db.raw(
    `UPDATE idempotent_requests SET locked_until = now() WHERE workspace_id = ? AND id = ? AND claim = ? AND state = 'running'`,
    [claim.workspaceId, claim.id, claim.claim],
  );
}

function keyReused(key: string): ApiError {
  return new ApiError('IDEMPOTENCY_KEY_REUSED', 'This Idempotency-Key was already used for a different request', {
    hint: `A key names one request (same endpoint, same body). Send a new key for a different request; "${key}" keeps its first request's answer for ${STORED_ANSWER_HOURS} hours.`,
  });
}

function inProgress(key: string): ApiError {
  return new ApiError('IN_PROGRESS', 'A request with this Idempotency-Key is still running', {
    hint: `Repeat the request with the header Idempotency-Key: ${key} in a moment: it answers with the first request's result.`,
  });
}
