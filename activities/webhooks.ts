import type { Knex } from 'knex';
import { openText } from '../domain/encryption';
import type { Config } from '../domain/config';
import type { Db } from '../domain/db';
import { deliveryBody, postWebhook, webhookSecretBinding } from '../domain/webhooks';
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
      const { rows } = await db.raw(
        `SELECT d.id, d.event_id, d.event, d.payload, d.status, s.id AS subscription_id, s.url, s.secret, s.active
           FROM webhook_deliveries d
           JOIN webhook_subscriptions s ON s.workspace_id = d.workspace_id AND s.id = d.subscription_id
          WHERE d.workspace_id = ? AND d.id = ?`,
        [input.workspaceId, input.deliveryId],
      );
      const delivery = rows[0];
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
      const recordAttempt = async (trx: Db | Knex.Transaction) => {
        await trx('webhook_deliveries')
          .where({ workspace_id: input.workspaceId, id: input.deliveryId, status: 'pending' })
          .update({
            attempts: delivery.active ? trx.raw('attempts + 1') : trx.raw('attempts'),
            status,
            last_status_code: outcome.statusCode,
            last_error: error ? error.slice(0, 1000) : null,
            last_attempt_at: delivery.active ? trx.fn.now() : trx.raw('last_attempt_at'),
            next_attempt_at: status === 'pending' && input.nextAttemptInMs !== null ? trx.raw(`now() + make_interval(secs => ?)`, [input.nextAttemptInMs / 1000]) : null,
            delivered_at: outcome.ok ? trx.fn.now() : null,
          });
      };
      if (outcome.gone && delivery.active) {
        // 410: the subscription is disabled with the attempt, atomically.
        await db.transaction(async (trx) => {
          await trx('webhook_subscriptions')
            .where({ workspace_id: input.workspaceId, id: delivery.subscription_id, active: true })
            .update({ active: false, disabled_reason: `The receiver answered 410 Gone at ${new Date().toISOString()}`, updated_at: trx.fn.now() });
          await recordAttempt(trx);
        });
      } else {
        await recordAttempt(db); // one statement, no transaction round trips
      }
      return { status, statusCode: outcome.statusCode, error };
    },

    /** The last attempt could not even run (database down through its retries): the log says so once it can. */
    async markDeliveryFailed(input: { workspaceId: string; deliveryId: string; error: string }): Promise<void> {
      await db('webhook_deliveries')
        .where({ workspace_id: input.workspaceId, id: input.deliveryId, status: 'pending' })
        .update({ status: 'failed', last_error: input.error.slice(0, 1000), next_attempt_at: null });
    },
  };
}

export type WebhookActivities = ReturnType<typeof createWebhookActivities>;
