import { ActivityFailure, ApplicationFailure, proxyActivities, proxyLocalActivities, sleep } from '@temporalio/workflow';
import type { WebhookActivities } from '../activities/webhooks';
import { RECORD, WEBHOOK_ATTEMPT } from './profiles';
import { DeliveryInput, DeliveryResult, retryWaitMs, WEBHOOK_MAX_ATTEMPTS } from '../types/webhooks';

// A local activity: an attempt is one HTTP call plus two small queries, and running it inside the
// workflow task keeps a delivery to one task round trip with the server (hundreds per second).
const { attemptWebhookDelivery } = proxyLocalActivities<WebhookActivities>(WEBHOOK_ATTEMPT);
const { markDeliveryFailed } = proxyActivities<WebhookActivities>(RECORD);

/** The wait before retry `retry` (1-based). Math.random is Temporal's seeded one here. */
const waitBefore = (retry: number, scale: number): number => retryWaitMs(retry, scale, Math.random());

/**
 * One webhook delivery: an event to one subscription, attempted on the Standard Webhooks schedule
 * with durable timers between attempts (a worker restart resumes the wait). Each attempt records
 * itself on the delivery row; a 2xx ends it `succeeded`, a 410 `failed` (and the subscription
 * disabled), the last failed attempt `failed`. Id: `webhook/<workspace>/<subscription>/<event>`.
 */
export async function webhookDeliveryWorkflow(input: DeliveryInput): Promise<DeliveryResult> {
  const maxAttempts = Math.min(Math.max(1, input.maxAttempts ?? WEBHOOK_MAX_ATTEMPTS), WEBHOOK_MAX_ATTEMPTS);
  // The dispatcher may have made the first attempt itself (and recorded it): the schedule goes on from there.
  const done = Math.min(Math.max(0, input.attemptsDone ?? 0), maxAttempts - 1);
  let last: DeliveryResult = { status: 'pending', statusCode: null, error: null, attempts: done };
  if (done > 0) await sleep(Math.max(1, input.firstWaitMs ?? waitBefore(done, input.retryScale)));
  for (let attempt = done + 1; attempt <= maxAttempts; attempt++) {
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
        await markDeliveryFailed({
          workspaceId: input.workspaceId,
          deliveryId: input.deliveryId,
          error: `The last attempt could not run: ${cause}`,
        });
        throw ApplicationFailure.nonRetryable(`The delivery's last attempt could not run: ${cause}`, 'WEBHOOK_ATTEMPT_FAILED');
      }
      last = { status: 'pending', statusCode: null, error: cause, attempts: attempt };
    }
    if (last.status !== 'pending') return last;
    await sleep(nextAttemptInMs!);
  }
  return last;
}
