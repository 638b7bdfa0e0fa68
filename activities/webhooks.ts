import type { Config, Db } from '../domain/platform';
import { attemptDelivery, recordDeliveryFailed } from '../domain/webhooks';
import type { AttemptInput, AttemptResult } from '../types/webhooks';

/** A webhook delivery's activities: the attempt (domain/webhooks attemptDelivery) and its last word. */
export function createWebhookActivities({ db, config }: { db: Db; config: Pick<Config, 'allowPrivateUrls' | 'encryptionKeys'> }) {
  return {
    async attemptWebhookDelivery(input: AttemptInput): Promise<AttemptResult> {
      return attemptDelivery(db, { ring: config.encryptionKeys!, allowPrivateUrls: config.allowPrivateUrls }, input);
    },

    /** The last attempt could not even run (database down through its retries): the log says so once it can. */
    async markDeliveryFailed(input: { workspaceId: string; deliveryId: string; error: string }): Promise<void> {
      await recordDeliveryFailed(db, input.workspaceId, input.deliveryId, input.error);
    },
  };
}

export type WebhookActivities = ReturnType<typeof createWebhookActivities>;
