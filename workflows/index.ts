import { proxyActivities } from '@temporalio/workflow';
import type * as activities from '../activities';
import { DATABASE } from './profiles';

type Activities = ReturnType<typeof activities.createActivities>;

const db = proxyActivities<Activities>(DATABASE);

/** A trivial round trip through the worker and the database: used by /ready-style checks and tests. */
export async function systemCheckWorkflow(): Promise<{ databaseTime: string }> {
  return { databaseTime: await db.databaseTime() };
}
export { sendMessageWorkflow } from './send-message';
export { webhookDeliveryWorkflow } from './webhook-delivery';
export { automationRunWorkflow } from './automation-run';
export { broadcastWorkflow } from './broadcast';
export { templateSyncWorkflow, templateSyncAllWorkflow } from './template-sync';
export { inboundMediaWorkflow } from './inbound-media';
export { insightWorkflow } from './insight';
