import { ActivityFailure, ApplicationFailure, proxyActivities, proxyLocalActivities, sleep } from '@temporalio/workflow';
import type { WebhookActivities } from '../activities/webhooks';
import { RECORD, WEBHOOK_ATTEMPT } from './profiles';
import { DeliveryInput, DeliveryResult, WEBHOOK_JITTER, WEBHOOK_MAX_ATTEMPTS, WEBHOOK_RETRY_SCHEDULE_SECONDS } from './webhook-types';

// A local activity: an attempt is one HTTP call plus two small queries, and running it inside the
// workflow task keeps a delivery to one task round trip with the server (hundreds per second).
const { attemptWebhookDelivery } = proxyLocalActivities<WebhookActivities>(WEBHOOK_ATTEMPT);
const { markDeliveryFailed } = proxyActivities<WebhookActivities>(RECORD);

/** The wait before retry `retry` (1-based), scaled and jittered. Math.random is Temporal's seeded one here. */
function waitBefore(retry: number, scale: number): number {
  const base = WEBHOOK_RETRY_SCHEDULE_SECONDS[retry - 1] * 1000 * scale;
  const jitter = 1 + (Math.random() * 2 - 1) * WEBHOOK_JITTER;
  return Math.max(1, Math.round(base * jitter));
}

/**
 * One webhook delivery: an event to one subscription, attempted on the Standard Webhooks schedule
 * with durable timers between attempts (a worker restart resumes the wait). Each attempt records
 * itself on the delivery row; a 2xx ends it `succeeded`, a 410 `failed` (and the subscription
 * disabled), the last failed attempt `failed`. Id: `webhook/<workspace>/<subscription>/<event>`.
 */
export async function webhookDeliveryWorkflow(input: DeliveryInput): Promise<DeliveryResult> {
  const maxAttempts = Math.min(Math.max(1, input.maxAttempts ?? WEBHOOK_MAX_ATTEMPTS), WEBHOOK_MAX_ATTEMPTS);
  let last: DeliveryResult = { status: 'pending', statusCode: null, error: null, attempts: 0 };
  for (let attempt = 1; attempt <= maxAttempts; attempt++) {
    const final = attempt === maxAttempts;
    const nextAttemptInMs = final ? null : waitBefore(attempt, input.retryScale);
    try {
      const result = await attemptWebhookDelivery({ workspaceId: input.workspaceId, deliveryId: input.deliveryId, final, nextAttemptInMs });
      last = { ...result, attempts: attempt };
    } catch (err) {
      // The attempt could not run or be recorded (database unreachable through all its retries):
      // it counts as a failed attempt and the schedule goes on; the last one fails the workflow
      // so it shows in the Temporal UI with the cause.
      const cause = err instanceof ActivityFailure && err.cause ? err.cause.message : String(err);
      if (final) {
        await markDeliveryFailed({ workspaceId: input.workspaceId, deliveryId: input.deliveryId, error: `The last attempt could not run: ${cause}` });
        throw ApplicationFailure.nonRetryable(`The delivery's last attempt could not run: ${cause}`, 'WEBHOOK_ATTEMPT_FAILED');
      }
      last = { status: 'pending', statusCode: null, error: cause, attempts: attempt };
    }
    if (last.status !== 'pending') return last;
    await sleep(nextAttemptInMs!);
  }
  return last;
}
