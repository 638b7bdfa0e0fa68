import { type Client, ScheduleAlreadyRunning } from '@temporalio/client';
import { TEMPLATE_SYNC_EVERY, TEMPLATE_SYNC_SCHEDULE_ID } from '../types/templates';
import { templateSyncAllWorkflow } from '../workflows/template-sync';

/**
 * The Temporal schedule that syncs every Cloud API instance's templates (workflows/template-sync.ts
 * templateSyncAllWorkflow) every TEMPLATE_SYNC_EVERY, created at the worker's start-up when it does
 * not exist yet (an existing one is left as it is: several workers start it alike). A run still
 * going when the next is due makes that one skip; after an outage, one missed run is caught up.
 * Answers whether this call created it.
 */
export async function ensureTemplateSyncSchedule(client: Client, taskQueue: string): Promise<boolean> {
  try {
    await client.schedule.create({
      scheduleId: TEMPLATE_SYNC_SCHEDULE_ID,
      spec: { intervals: [{ every: TEMPLATE_SYNC_EVERY }] },
      action: {
        type: 'startWorkflow',
        workflowType: templateSyncAllWorkflow,
        workflowId: TEMPLATE_SYNC_SCHEDULE_ID,
        taskQueue,
        args: [{}],
      },
      policies: { overlap: 'SKIP', catchupWindow: TEMPLATE_SYNC_EVERY },
      memo: { about: 'Syncs the message templates of every Cloud API instance with a wabaId (docs/messaging.md, Templates).' },
    });
    return true;
  } catch (err) {
    if (err instanceof ScheduleAlreadyRunning) return false;
    throw err;
  }
}
