import { columnResealer, type Db, KeyRing, openText, SealBinding, sealText } from '../platform';
import { resealInstanceSecrets } from '../messaging';
import { resealSubscriptionSecrets } from '../webhooks';
import { resealAutomationTokens } from '../automations';
import { resealAiKeys } from '../access';

/**
 * Secrets stored by the service (provider tokens and app secrets, webhook signing secrets,
 * inbound automation tokens, the workspaces' AI keys) are sealed with the current key of ENCRYPTION_KEYS when written,
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
): Promise<{ instances: number; webhookSubscriptions: number; automationTokens: number; aiKeys: number; refused: number }> {
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

  // Each area re-seals its own table's secrets.
  const instances = await resealInstanceSecrets(db, ring, reseal);
  const resealColumn = columnResealer(db, ring, reseal);
  const webhookSubscriptions = await resealSubscriptionSecrets(resealColumn);
  // Inbound automation tokens are found by their hash (which does not change); the token is kept sealed for its URL.
  const automationTokens = await resealAutomationTokens(resealColumn);
  const aiKeys = await resealAiKeys(db, ring, reseal);
  return { instances, webhookSubscriptions, automationTokens, aiKeys, refused };
}
