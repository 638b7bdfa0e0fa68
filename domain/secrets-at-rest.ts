import type { Db } from './db';
import { KeyRing, openText, sealedWith, sealText } from './encryption';
import { INSTANCE_SECRETS, InstanceConfig, mapInstanceSecrets } from './instances';

/**
 * Secrets stored by the service (provider tokens and app secrets, webhook signing secrets,
 * inbound automation tokens) are
 * sealed with the current key of ENCRYPTION_KEYS when written. This pass, run by the worker at
 * start, seals what is still in plain text (rows written before encryption) and re-seals what an
 * older key sealed, so after a rotation the old key can be dropped once the pass has run.
 */
export async function sealStoredSecrets(db: Db, ring: KeyRing): Promise<{ instances: number; webhookSubscriptions: number; automationTokens: number }> {
  const stale = (value: unknown): value is string => typeof value === 'string' && sealedWith(value) !== ring.current.id;
  const reseal = (value: string): string => sealText(ring, openText(ring, value));
  let instances = 0;
  for (const row of (await db('instances').select('id', 'config')) as { id: string; config: InstanceConfig }[]) {
    if (!INSTANCE_SECRETS.some((field) => stale(row.config[field]))) continue;
    const config = mapInstanceSecrets(row.config, (value) => (stale(value) ? reseal(value) : value));
    await db('instances').where({ id: row.id }).update({ config: JSON.stringify(config) });
    instances++;
  }
  /** One text column of secrets, row by row; a row changed meanwhile (the value compared) is left to the next pass. */
  const resealColumn = async (table: string, column: string): Promise<number> => {
    const rows: { id: string; value: string }[] = await db(table).whereNotNull(column).whereRaw(`?? NOT LIKE ?`, [column, `enc:v1:${ring.current.id}:%`]).select('id', `${column} as value`);
    for (const row of rows) await db(table).where({ id: row.id, [column]: row.value }).update({ [column]: reseal(row.value) });
    return rows.length;
  };
  // Inbound automation tokens are found by their hash (which does not change); the token is kept sealed for its URL.
  return { instances, webhookSubscriptions: await resealColumn('webhook_subscriptions', 'secret'), automationTokens: await resealColumn('automations', 'webhook_token') };
}
