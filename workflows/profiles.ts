import type { ActivityOptions } from '@temporalio/workflow';

/** Named timeout and retry profiles: every activity call picks one, none is left to defaults. */
export const DATABASE: ActivityOptions = {
  startToCloseTimeout: '10 seconds',
  retry: { initialInterval: '200 milliseconds', backoffCoefficient: 2, maximumInterval: '10 seconds', maximumAttempts: 20 },
};

/** The provider call: throttling and outages retried with backoff for about a minute, then SEND_FAILED. */
export const PROVIDER_SEND: ActivityOptions = {
  startToCloseTimeout: '20 seconds',
  retry: {
    initialInterval: '1 second',
    backoffCoefficient: 2,
    maximumInterval: '20 seconds',
    maximumAttempts: 6,
  },
};

/** Recording what the provider already accepted must not give up: retried until the database answers. */
export const RECORD: ActivityOptions = {
  startToCloseTimeout: '10 seconds',
  retry: { initialInterval: '200 milliseconds', backoffCoefficient: 2, maximumInterval: '30 seconds', maximumAttempts: Number.POSITIVE_INFINITY },
};

/** Compensations run until they succeed: a half-undone saga is worse than a late one. */
export const COMPENSATION: ActivityOptions = {
  startToCloseTimeout: '10 seconds',
  retry: { initialInterval: '500 milliseconds', backoffCoefficient: 2, maximumInterval: '1 minute', maximumAttempts: Number.POSITIVE_INFINITY },
};

/** A media URL's DNS and size check (HEAD request). */
export const MEDIA_CHECK: ActivityOptions = {
  startToCloseTimeout: '15 seconds',
  retry: { initialInterval: '500 milliseconds', backoffCoefficient: 2, maximumInterval: '5 seconds', maximumAttempts: 3 },
};
