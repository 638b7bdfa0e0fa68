import type { Db } from '../platform';

/**
 * The tokens a workspace's derivations used per São Paulo day (`ai_usage`), against its optional
 * daily budget: once spent, derivations wait for the next day (the workflow sleeps until then).
 */

/** Tokens left today (Infinity without a budget). */
export async function budgetLeft(db: Db, workspaceId: string, day: string, budget: number | null): Promise<number> {
  if (budget === null) return Infinity;
  const row = await db('ai_usage').where({ workspace_id: workspaceId, day }).first('tokens');
  return budget - Number(row?.tokens ?? 0);
}

/** One call's tokens added to the day's count. */
export async function recordUsage(db: Db, workspaceId: string, day: string, tokens: number): Promise<void> {
  await db.raw(
    `INSERT INTO ai_usage AS u (workspace_id, day, tokens, derivations) VALUES (?, ?, ?, 1)
     ON CONFLICT (workspace_id, day) DO UPDATE SET tokens = u.tokens + excluded.tokens, derivations = u.derivations + 1`,
    [workspaceId, day, Math.max(0, Math.round(tokens))],
  );
}
