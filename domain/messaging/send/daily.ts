import type { Knex } from 'knex';
import type { Db } from '../../platform';

/** The workspace's daily counters (São Paulo days) that a send takes units of: its messages, and the conversations it opens. */
export type DailyCounter = 'messages' | 'cold_conversations';

/**
 * Takes `n` units of a daily counter if they all stay within `cap` (null: unlimited, still
 * counted): one conditional upsert, so concurrent takers never overshoot. False when they do not
 * all fit: the caller must then roll its transaction back (a first take over the cap inserted its row).
 */
export async function takeDailyUnits(
  trx: Knex.Transaction,
  workspaceId: string,
  kind: DailyCounter,
  day: string,
  cap: number | null,
  n: number,
): Promise<boolean> {
  if (n === 0) return true;
  const result = await trx.raw<{ rows: { count: number }[] }>(
    `INSERT INTO daily_counters (workspace_id, day, kind, count) VALUES (?, ?, ?, ?)
     ON CONFLICT (workspace_id, day, kind) DO UPDATE SET count = daily_counters.count + EXCLUDED.count
       WHERE ?::int IS NULL OR daily_counters.count + EXCLUDED.count <= ?::int
     RETURNING count`,
    [workspaceId, day, kind, n, cap, cap],
  );
  return result.rows.length === 1 && (cap === null || result.rows[0].count <= cap);
}

/** Returns a unit taken by a send that did not happen (saga compensation). */
export async function giveBackDaily(trx: Db, workspaceId: string, kind: DailyCounter, day: string): Promise<void> {
  await trx('daily_counters').where({ workspace_id: workspaceId, day, kind }).where('count', '>', 0).decrement('count', 1);
}
