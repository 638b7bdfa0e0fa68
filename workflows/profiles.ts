import type { ActivityOptions } from '@temporalio/workflow';

/** Named timeout and retry profiles: every activity call picks one, none is left to defaults. */
export const DATABASE: ActivityOptions = {
  startToCloseTimeout: '10 seconds',
  retry: { initialInterval: '200 milliseconds', backoffCoefficient: 2, maximumInterval: '10 seconds', maximumAttempts: 20 },
};
