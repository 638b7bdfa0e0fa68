import type { Knex } from 'knex';
import type { Db } from '../../platform';

/** The workspace's daily counters (São Paulo days) that a send takes units of: its messages, and the conversations it opens. */
export type DailyCounter = 'messages' | 'cold_conversations';

/**
 * Takes the units of daily counters a transaction's sends need, at its COMMIT: each take is staged
 * in daily_unit_takes, and a deferred trigger adds it to its counter if it stays within its `cap`
 * (null: unlimited, still counted), one conditional upsert so concurrent takers never overshoot
 * (migrations/20261207000200_daily_units_at_commit.ts). The counter row is locked only for the
 * commit, not from the take until the commit's round trip. A take that does not fit fails the
 * COMMIT and rolls everything back: dailyLimitOf tells that failure from others.
 */
export async function takeDailyUnitsAtCommit(
  trx: Knex.Transaction,
  workspaceId: string,
  day: string,
  takes: { counter: DailyCounter; cap: number | null; n: number }[],
): Promise<void> {
  const rows = takes.filter((t) => t.n > 0).map((t) => ({ workspace_id: workspaceId, day, kind: t.counter, units: t.n, cap: t.cap }));
  // In the order given: at the commit the first that does not fit is the one reported.
  if (rows.length > 0) await trx('daily_unit_takes').insert(rows);
}

/** The counter whose units did not fit, when `err` is a COMMIT that takeDailyUnitsAtCommit's trigger refused. */
export function dailyLimitOf(err: unknown): DailyCounter | undefined {
  const { code, detail } = (err ?? {}) as { code?: string; detail?: string };
  if (code !== 'CRM01') return undefined;
  return detail === 'cold_conversations' ? 'cold_conversations' : 'messages';
}

/** Returns a unit taken by a send that did not happen (saga compensation). */
export async function giveBackDaily(trx: Db, workspaceId: string, kind: DailyCounter, day: string): Promise<void> {
  await trx('daily_counters').where({ workspace_id: workspaceId, day, kind }).where('count', '>', 0).decrement('count', 1);
}
