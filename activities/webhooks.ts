import { openText, type Config, type Db } from '../domain/platform';
import {
  deliveryBody,
  getDeliveryToAttempt,
  postWebhook,
  recordDeliveryAttempt,
  recordDeliveryFailed,
  webhookSecretBinding,
} from '../domain/webhooks';
import type { AttemptInput, AttemptResult } from '../types/webhooks';

/**
 * The delivery attempt: read the delivery with its subscription's current URL and secret (a PATCH
 * between retries takes effect), POST it signed, record the outcome. Two queries per attempt. The
 * receiver's answer is a result, not an activity failure: retrying the activity is only for a
 * database that did not answer. If the record fails after the POST, the retry posts again with
 * the same X-Service-Delivery, which is how receivers recognise a repeat (at-least-once).
 */
export function createWebhookActivities({ db, config }: { db: Db; config: Pick<Config, 'allowPrivateUrls' | 'encryptionKeys'> }) {
  return {
    async attemptWebhookDelivery(input: AttemptInput): Promise<AttemptResult> {
      const delivery = await getDeliveryToAttempt(db, input.workspaceId, input.deliveryId);
      if (!delivery) return { status: 'stopped', statusCode: null, error: 'The delivery or its subscription was deleted' };
      // Already settled (a repeat of an attempt that was recorded): never post twice for it.
      if (delivery.status !== 'pending') return { status: delivery.status, statusCode: null, error: null };

      const outcome = delivery.active
        ? await postWebhook({
            url: delivery.url,
            secret: openText(config.encryptionKeys!, delivery.secret, webhookSecretBinding(input.workspaceId)),
            event: delivery.event,
            deliveryId: delivery.id,
            eventId: delivery.event_id,
            body: deliveryBody(delivery.payload),
            policy: { allowPrivate: config.allowPrivateUrls },
          })
        : { ok: false, statusCode: null, error: 'The subscription is disabled, so the delivery stopped', gone: true, durationMs: 0 };

      const status: AttemptResult['status'] = outcome.ok ? 'succeeded' : input.final || outcome.gone ? 'failed' : 'pending';
      const error = outcome.gone && delivery.active ? `${outcome.error}; the subscription is disabled` : outcome.error;
      await recordDeliveryAttempt(
        db,
        input.workspaceId,
        { id: input.deliveryId, subscriptionId: delivery.subscription_id },
        {
          posted: delivery.active,
          gone: outcome.gone && delivery.active,
          status,
          statusCode: outcome.statusCode,
          error,
          nextAttemptInMs: input.nextAttemptInMs,
          delivered: outcome.ok,
        },
      );
      return { status, statusCode: outcome.statusCode, error };
    },

    /** The last attempt could not even run (database down through its retries): the log says so once it can. */
    async markDeliveryFailed(input: { workspaceId: string; deliveryId: string; error: string }): Promise<void> {
      await recordDeliveryFailed(db, input.workspaceId, input.deliveryId, input.error);
    },
  };
}

export type WebhookActivities = ReturnType<typeof createWebhookActivities>;
