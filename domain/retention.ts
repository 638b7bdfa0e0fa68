import type { Db } from './db';

/**
 * How long the service keeps what it only needs for a while, and the job that forgets the rest:
 * outbox rows once dispatched, webhook deliveries once delivered or given up, automation runs once
 * finished, send requests (a send's recipient and content), each after RETENTION_DAYS. What is
 * still pending or running is never removed. An inbound automation call's `externalId` is
 * recognised as a duplicate for as long as its run is kept.
 */
export const RETENTION_TABLES = {
  outbox_events: 'dispatched_at IS NOT NULL',
  webhook_deliveries: "status <> 'pending'",
  automation_runs: "status <> 'running'",
  // A send's content, kept for its workflow (which ends within a day: the reconcile window's bound).
  send_requests: 'true',
} as const;

/** Rows deleted per statement: short transactions, no long lock on a busy table. */
const BATCH = 5000;

/** Deletes what is past retention, oldest first, in batches; returns how many rows per table. */
export async function pruneRetention(db: Db, days: number): Promise<Record<keyof typeof RETENTION_TABLES, number>> {
  const removed = { outbox_events: 0, webhook_deliveries: 0, automation_runs: 0, send_requests: 0 };
  for (const [table, done] of Object.entries(RETENTION_TABLES) as [keyof typeof RETENTION_TABLES, string][]) {
    for (;;) {
      const n: number = await db(table)
        .whereIn('id', db(table).where('created_at', '<', db.raw(`now() - make_interval(days => ?)`, [days])).whereRaw(done).orderBy('created_at').limit(BATCH).select('id'))
        .delete();
      removed[table] += n;
      if (n < BATCH) break;
    }
  }
  return removed;
}

/** How often the worker runs the job. */
export const PRUNE_EVERY_MS = 60 * 60 * 1000;
