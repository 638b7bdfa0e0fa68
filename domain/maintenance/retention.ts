import type { Knex } from 'knex';
import { type Db, STORED_ANSWER_HOURS } from '../platform';

/**
 * How long the service keeps what it only needs for a while, and the job that forgets the rest:
 * outbox rows once dispatched, webhook deliveries once delivered or given up, automation runs once
 * finished, send requests (a send's recipient and content), each after RETENTION_DAYS; a batch's
 * Idempotency-Key and its answer after their own window (`hours`). What is still pending or
 * running is never removed. An inbound automation call's `externalId` is recognised as a
 * duplicate for as long as its run is kept.
 */
export const RETENTION_TABLES: Record<string, { done: string; hours?: number; id?: string }> = {
  outbox_events: { done: 'dispatched_at IS NOT NULL' },
  webhook_deliveries: { done: "status <> 'pending'" },
  automation_runs: { done: "status <> 'running'" },
  // A send's content, kept for its workflow (which ends within a day: the reconcile window's bound).
  send_requests: { done: 'true' },
  // A send's Idempotency-Key (replayed for 10 minutes); one still 'sending' waits for the worker's sweep.
  send_keys: { done: "state <> 'sending'", id: 'key' },
  // Replayed for STORED_ANSWER_HOURS, not RETENTION_DAYS; a claim whose request still runs (its lease not lapsed) stays.
  idempotent_requests: { done: "state = 'done' OR locked_until < now()", hours: STORED_ANSWER_HOURS },
};

/** Rows deleted per statement: short transactions, no long lock on a busy table. */
const BATCH = 5000;

/**
 * Deletes what is past retention, oldest first, in batches; returns how many rows per table. The
 * worker's job prunes every workspace; `scope.workspaceId` limits each delete to one workspace's
 * rows (every table pruned has `workspace_id`), so a test can prune its own workspace without
 * removing rows other tests, running at the same time, still read.
 */
export async function pruneRetention(db: Db, days: number, scope: { workspaceId?: string } = {}): Promise<Record<string, number>> {
  const removed: Record<string, number> = {};
  const scoped = <Q extends Knex.QueryBuilder>(q: Q): Q =>
    scope.workspaceId === undefined ? q : (q.where('workspace_id', scope.workspaceId) as Q);
  for (const [table, { done, hours, id = 'id' }] of Object.entries(RETENTION_TABLES)) {
    removed[table] = 0;
    const cutoff =
      hours === undefined ? db.raw(`now() - make_interval(days => ?)`, [days]) : db.raw(`now() - make_interval(hours => ?)`, [hours]);
    for (;;) {
      const n: number = await scoped(db(table))
        // By (workspace_id, id): send_requests' ids are clients' Idempotency-Keys, unique only within a workspace.
        .whereIn(
          ['workspace_id', id],
          scoped(db(table)).where('created_at', '<', cutoff).whereRaw(done).orderBy('created_at').limit(BATCH).select('workspace_id', id),
        )
        .delete();
      removed[table] += n;
      if (n < BATCH) break;
    }
  }
  return removed;
}

/** How often the worker runs the job. */
export const PRUNE_EVERY_MS = 60 * 60 * 1000;
