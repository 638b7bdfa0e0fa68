import type { Db } from './db';
import { KeyRing, openText, sealedWith, sealText } from './encryption';
import { INSTANCE_SECRETS, InstanceConfig } from './instances';

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
    const changed = INSTANCE_SECRETS.filter((field) => stale(row.config[field]));
    if (changed.length === 0) continue;
    const config = { ...row.config };
    for (const field of changed) config[field] = reseal(config[field]!);
    await db('instances').where({ id: row.id }).update({ config: JSON.stringify(config) });
    instances++;
  }
  let webhookSubscriptions = 0;
  for (const row of (await db('webhook_subscriptions').whereRaw(`secret NOT LIKE ?`, [`enc:v1:${ring.current.id}:%`]).select('id', 'secret')) as { id: string; secret: string }[]) {
    await db('webhook_subscriptions').where({ id: row.id, secret: row.secret }).update({ secret: reseal(row.secret) });
    webhookSubscriptions++;
  }
  // Inbound automation tokens are found by their hash (which does not change); the token is kept sealed for its URL.
  let automationTokens = 0;
  for (const row of (await db('automations').whereNotNull('webhook_token').whereRaw(`webhook_token NOT LIKE ?`, [`enc:v1:${ring.current.id}:%`]).select('id', 'webhook_token')) as { id: string; webhook_token: string }[]) {
    await db('automations').where({ id: row.id, webhook_token: row.webhook_token }).update({ webhook_token: reseal(row.webhook_token) });
    automationTokens++;
  }
  return { instances, webhookSubscriptions, automationTokens };
}
