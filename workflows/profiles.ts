import type { ActivityOptions, LocalActivityOptions } from '@temporalio/workflow';

/** Named timeout and retry profiles: every activity call picks one, none is left to defaults. */
export const DATABASE: ActivityOptions = {
  startToCloseTimeout: '10 seconds',
  retry: { initialInterval: '200 milliseconds', backoffCoefficient: 2, maximumInterval: '10 seconds', maximumAttempts: 20 },
};

/**
 * The provider call: throttling and outages retried briefly (waits of 0.5, 1 and 2 s), then
 * SEND_FAILED, so the client that waits on the send gets a prompt 502 it may retry with its own
 * backoff instead of an API wait running out. The activity heartbeats while it waits for the
 * provider, so a worker that dies mid-call is noticed within the heartbeat timeout (not the 20 s
 * start-to-close); the retry then finds the attempt claimed and does not call the provider again
 * (see reconcileSend).
 */
export const PROVIDER_SEND: ActivityOptions = {
  startToCloseTimeout: '20 seconds',
  heartbeatTimeout: '5 seconds',
  retry: {
    initialInterval: '500 milliseconds',
    backoffCoefficient: 2,
    maximumInterval: '2 seconds',
    maximumAttempts: 4,
  },
};

/**
 * The provider call of a media message: PROVIDER_SEND with room for a web gateway's share of it,
 * the download of the file (60 s, MEDIA_DOWNLOAD_TIMEOUT_MS) streamed into its upload to the
 * gateway as it arrives (the upload's deadline, the sum of MEDIA_DOWNLOAD_TIMEOUT_MS and
 * MEDIA_SEND_TIMEOUT_MS: 120 s, covers both). Same
 * heartbeat, so a dead worker is still noticed within seconds.
 */
export const PROVIDER_SEND_MEDIA: ActivityOptions = { ...PROVIDER_SEND, startToCloseTimeout: '150 seconds' };

/**
 * The first provider call of a text or template send, as a local activity inside the workflow
 * task that prepared it: a send that the provider accepts at once (nearly all of them) is one
 * workflow task and no activity task. One try: a failure retrying may fix (throttling, an outage)
 * goes on as the ordinary PROVIDER_SEND_RETRY activity, which heartbeats and shows its last
 * failure in the Temporal UI. 15 s leaves room for the HTTP call's own 10 s timeout
 * (DEFAULT_SEND_TIMEOUT_MS), so a silent provider is answered by the call (outcome unknown), not
 * by this timeout. A worker that dies in the call loses the workflow task (noticed at its 10 s
 * timeout); the next worker runs prepare again (idempotent) and finds the attempt claimed.
 */
export const LOCAL_PROVIDER_FIRST_CALL: LocalActivityOptions = {
  startToCloseTimeout: '15 seconds',
  retry: { maximumAttempts: 1 },
};

/**
 * The provider call after a first local try failed: PROVIDER_SEND's remaining tries, so a
 * provider that stays down still gets four calls in all, 0.5, 1 and 2 s apart.
 */
export const PROVIDER_SEND_RETRY: ActivityOptions = {
  ...PROVIDER_SEND,
  retry: { ...PROVIDER_SEND.retry, initialInterval: '1 second', maximumAttempts: 3 },
};
/** The wait before PROVIDER_SEND_RETRY's first call (PROVIDER_SEND's first retry interval). */
export const PROVIDER_FIRST_RETRY_WAIT = PROVIDER_SEND.retry!.initialInterval!;

/**
 * Waiting for the provider's status callback of a send whose outcome is unknown: each try is one
 * short read of the attempt's row; "not yet" is a retryable failure, so the wait is durable, adds
 * nothing to the workflow history and shows in the Temporal UI as the pending activity's last
 * failure. The activity answers `failed` itself once the deadline it is given has passed; the
 * workflow adds a schedule-to-close timeout (window + margin) so a database outage cannot make it
 * wait forever.
 */
export const RECONCILE: ActivityOptions = {
  startToCloseTimeout: '10 seconds',
  retry: {
    initialInterval: '300 milliseconds',
    backoffCoefficient: 1.5,
    maximumInterval: '2 seconds',
    maximumAttempts: Number.POSITIVE_INFINITY,
  },
};

/** Recording what the provider already accepted must not give up: retried until the database answers. */
export const RECORD: ActivityOptions = {
  startToCloseTimeout: '10 seconds',
  retry: {
    initialInterval: '200 milliseconds',
    backoffCoefficient: 2,
    maximumInterval: '30 seconds',
    maximumAttempts: Number.POSITIVE_INFINITY,
  },
};

/**
 * The send's database steps (prepare, record) as local activities: they run inside the workflow
 * task that schedules them (with LOCAL_PROVIDER_FIRST_CALL, a send accepted at once is one
 * workflow task and no activity task, where ordinary activities made it four and three). Safe
 * because both steps are idempotent per run (prepare returns its recorded preparation, record
 * writes the message once per provider message id): a worker that dies mid-step makes the next
 * worker run it again from the history. Same retries as their ordinary profiles.
 */
export const LOCAL_DATABASE: LocalActivityOptions = { startToCloseTimeout: DATABASE.startToCloseTimeout, retry: DATABASE.retry };
export const LOCAL_RECORD: LocalActivityOptions = { startToCloseTimeout: RECORD.startToCloseTimeout, retry: RECORD.retry };

/**
 * A text or template send's prepare, first provider call and record as one local activity
 * (sendAtOnce): room for prepare and record beside the provider call's 15 s, and one try, like
 * the first call alone. Its failure or timeout is not the end: the workflow goes on step by step
 * with the profiles above, every step idempotent by the run's reference.
 */
export const LOCAL_SEND_AT_ONCE: LocalActivityOptions = { startToCloseTimeout: '25 seconds', retry: { maximumAttempts: 1 } };

/** Compensations run until they succeed: a half-undone saga is worse than a late one. */
export const COMPENSATION: ActivityOptions = {
  startToCloseTimeout: '10 seconds',
  retry: {
    initialInterval: '500 milliseconds',
    backoffCoefficient: 2,
    maximumInterval: '1 minute',
    maximumAttempts: Number.POSITIVE_INFINITY,
  },
};

/** A media URL's DNS and size check (HEAD request, 5 s). */
export const MEDIA_CHECK: ActivityOptions = {
  startToCloseTimeout: '15 seconds',
  retry: { initialInterval: '500 milliseconds', backoffCoefficient: 2, maximumInterval: '5 seconds', maximumAttempts: 3 },
};

/**
 * One webhook delivery attempt (a local activity): the 10 s HTTP timeout, DNS and two queries fit
 * in 20 s. The receiver's answer is the activity's result, never a failure; only an attempt that
 * could not run (database down) fails and is retried here a few times.
 */
export const WEBHOOK_ATTEMPT: LocalActivityOptions = {
  startToCloseTimeout: '20 seconds',
  retry: { initialInterval: '1 second', backoffCoefficient: 2, maximumInterval: '30 seconds', maximumAttempts: 5 },
};

/**
 * A broadcast's batch (activities/broadcasts.ts sendBroadcastBatch): it runs for at most 30 s
 * (BATCH_BUDGET_MS) and heartbeats every recipient, so a dead worker is noticed within the
 * heartbeat timeout and the retry carries on where the rows say (each recipient's claim keeps its
 * provider call to one). Throttling or an outage fails the batch retryably: the growing waits are
 * how the broadcast slows down; it never gives up (nothing is dropped).
 */
export const BROADCAST_BATCH: ActivityOptions = {
  startToCloseTimeout: '2 minutes',
  heartbeatTimeout: '10 seconds',
  retry: {
    initialInterval: '1 second',
    backoffCoefficient: 2,
    maximumInterval: '1 minute',
    maximumAttempts: Number.POSITIVE_INFINITY,
  },
};

/** A broadcast's own steps (freeze the audience, complete, read the status): short transactions, retried until the database answers. */
export const BROADCAST_STEP: ActivityOptions = {
  startToCloseTimeout: '30 seconds',
  retry: {
    initialInterval: '500 milliseconds',
    backoffCoefficient: 2,
    maximumInterval: '30 seconds',
    maximumAttempts: Number.POSITIVE_INFINITY,
  },
};

/**
 * One instance's template sync (activities/templates.ts syncInstanceTemplates): at most 60 pages of
 * 15 s each (activities/providers/cloud-templates.ts), heartbeating after every page, so a dead
 * worker is noticed within 30 s. Throttling and outages are retried a few times with growing
 * waits; the next scheduled run tries again anyway.
 */
export const TEMPLATE_SYNC: ActivityOptions = {
  startToCloseTimeout: '20 minutes',
  heartbeatTimeout: '30 seconds',
  retry: { initialInterval: '5 seconds', backoffCoefficient: 2, maximumInterval: '1 minute', maximumAttempts: 5 },
};

/**
 * The fetch of an inbound media file (activities/inbound-media.ts): one try may take a few minutes
 * (a 100 MB document), heartbeating every chunk it stores, so a dead worker is noticed within 30 s.
 * Tries back off from 1 s, doubling up to 10 minutes apart, for at most an hour in all
 * (MEDIA_FETCH_WINDOW); then the workflow marks the media `unavailable` with the last failure.
 * Final answers (the provider no longer has the file, a file over its type's limit) are no
 * failures: the activity marks the media `unavailable` itself and returns.
 */
export const MEDIA_FETCH_WINDOW = '1 hour';
export const MEDIA_FETCH: ActivityOptions = {
  startToCloseTimeout: '5 minutes',
  heartbeatTimeout: '30 seconds',
  scheduleToCloseTimeout: MEDIA_FETCH_WINDOW,
  retry: { initialInterval: '1 second', backoffCoefficient: 2, maximumInterval: '10 minutes', maximumAttempts: 25 },
};

/**
 * One derivation of a contact's insight (domain/insights): 3 to 5 attempts, about 1, 2, 4 and 8 s
 * apart (a 429's Retry-After, capped at 60 s, instead: activities/providers/llm.ts); after the
 * last the workflow fails where an operator finds it, and the contact keeps its insight.
 */
export const INSIGHT_DERIVATION: ActivityOptions = {
  startToCloseTimeout: '90 seconds',
  retry: { initialInterval: '1 second', backoffCoefficient: 2, maximumInterval: '8 seconds', maximumAttempts: 5 },
};
