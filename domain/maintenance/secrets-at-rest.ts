import { columnResealer, type Db, KeyRing, openText, SealBinding, sealedAs, sealText } from '../platform';
import { INSTANCE_SECRETS, InstanceConfig, instanceSecretBinding, mapInstanceSecrets } from '../messaging';
import { resealSubscriptionSecrets } from '../webhooks';
import { resealAutomationTokens } from '../automations';

/**
 * Secrets stored by the service (provider tokens and app secrets, webhook signing secrets,
 * inbound automation tokens) are sealed with the current key of ENCRYPTION_KEYS when written,
 * bound to their workspace and purpose (domain/platform/encryption.ts). This pass, run by the worker at
 * start, seals what is still in plain text (rows written before encryption), binds what was sealed
 * before bindings (`enc:v1`), and re-seals what an older key sealed, so after a rotation the old
 * key can be dropped once the pass has run. A value bound to another workspace or purpose than its
 * row's (copied there) is not re-sealed, which would launder it: it is left as it is, refused
 * wherever it is opened with its binding, and counted in `refused`.
 */
export async function sealStoredSecrets(
  db: Db,
  ring: KeyRing,
): Promise<{ instances: number; webhookSubscriptions: number; automationTokens: number; refused: number }> {
  let refused = 0;
  /** The value sealed with the current key and bound, or null when it is bound elsewhere. */
  const reseal = (value: string, binding: SealBinding): string | null => {
    let plain: string;
    try {
      plain = openText(ring, value, binding);
    } catch (err) {
      if (!/belongs to another workspace or purpose/.test((err as Error).message)) throw err;
      refused++;
      return null;
    }
    return sealText(ring, plain, binding);
  };

  let instances = 0;
  for (const row of (await db('instances').select('id', 'workspace_id', 'config')) as {
    id: string;
    workspace_id: string;
    config: InstanceConfig;
  }[]) {
    const stale = INSTANCE_SECRETS.filter(
      (field) =>
        typeof row.config[field] === 'string' && !sealedAs(ring, row.config[field]!, instanceSecretBinding(row.workspace_id, field)),
    );
    if (stale.length === 0) continue;
    let changed = false;
    const config = mapInstanceSecrets(row.config, (value, field) => {
      if (!stale.includes(field)) return value;
      const sealed = reseal(value, instanceSecretBinding(row.workspace_id, field));
      if (sealed === null) return value;
      changed = true;
      return sealed;
    });
    if (!changed) continue;
    // Only the secrets, merged: a concurrent change of another key of the config is kept.
    const secrets = Object.fromEntries(INSTANCE_SECRETS.filter((f) => config[f] !== row.config[f]).map((f) => [f, config[f]]));
    await db('instances')
      .where({ id: row.id })
      .update({ config: db.raw('config || ?::jsonb', [JSON.stringify(secrets)]) });
    instances++;
  }

  // Each area re-seals its own table's secrets. Instances (domain/messaging) are still walked here,
  // allow-listed in test/unit/architecture.test.ts until messaging exports its own re-seal like
  // domain/webhooks resealSubscriptionSecrets.
  const resealColumn = columnResealer(db, ring, reseal);
  const webhookSubscriptions = await resealSubscriptionSecrets(resealColumn);
  // Inbound automation tokens are found by their hash (which does not change); the token is kept sealed for its URL.
  const automationTokens = await resealAutomationTokens(resealColumn);
  return { instances, webhookSubscriptions, automationTokens, refused };
}
