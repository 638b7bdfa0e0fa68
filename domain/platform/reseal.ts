import type { Db } from './db';
import type { KeyRing, SealBinding, SecretPurpose } from './encryption';

/** A stored secret sealed with the current key and bound, or null when it is bound elsewhere (left as it is). */
export type Resealer = (value: string, binding: SealBinding) => string | null;

/**
 * Re-seals one text column of secrets row by row: every value not yet sealed with the current key
 * for its workspace and `purpose`. A row changed meanwhile (the value compared) is left to the
 * next pass. Answers how many rows were re-sealed.
 */
export type ColumnResealer = (table: string, column: string, purpose: SecretPurpose) => Promise<number>;

/**
 * The ColumnResealer of one pass (domain/maintenance sealStoredSecrets), handed to the area that
 * owns each table, which names its own table and column (domain/webhooks resealSubscriptionSecrets).
 */
export function columnResealer(db: Db, ring: KeyRing, reseal: Resealer): ColumnResealer {
  return async (table, column, purpose) => {
    const rows: { id: string; workspace_id: string; value: string }[] = await db(table)
      .whereNotNull(column)
      .whereRaw(`?? NOT LIKE ? || workspace_id || ':%'`, [column, `enc:v2:${ring.current.id}:${purpose}:`])
      .select('id', 'workspace_id', `${column} as value`);
    let count = 0;
    for (const row of rows) {
      const sealed = reseal(row.value, { workspaceId: row.workspace_id, purpose });
      if (sealed === null) continue;
      await db(table)
        .where({ id: row.id, workspace_id: row.workspace_id, [column]: row.value })
        .update({ [column]: sealed });
      count++;
    }
    return count;
  };
}
