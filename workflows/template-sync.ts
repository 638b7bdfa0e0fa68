import { continueAsNew, ParentClosePolicy, proxyActivities, startChild, WorkflowIdReusePolicy } from '@temporalio/workflow';
import type { TemplateActivities } from '../activities/templates';
import { templateSyncWorkflowId, type TemplateSyncInput, type TemplateSyncResult } from '../types/templates';
import { DATABASE, TEMPLATE_SYNC } from './profiles';

const sync = proxyActivities<TemplateActivities>(TEMPLATE_SYNC);
const steps = proxyActivities<TemplateActivities>(DATABASE);

/**
 * One instance's template sync: its id is templateSyncWorkflowId, so one runs per instance at a
 * time, and the API's `POST /api/v1/instances/{id}/templates/sync` joins a running one.
 */
export async function templateSyncWorkflow(input: TemplateSyncInput): Promise<TemplateSyncResult> {
  return sync.syncInstanceTemplates(input);
}

/** Instances read per page of the scheduled run. */
export const TEMPLATE_SYNC_PAGE = 50;
/** Pages per run before continue-as-new: a page is an activity and two events per instance, so a run's history stays small. */
export const TEMPLATE_SYNC_PAGES_PER_RUN = 10;

/**
 * The scheduled sync of every Cloud API instance with a wabaId (started hourly by the Temporal
 * schedule TEMPLATE_SYNC_SCHEDULE_ID): instances in pages by id, each synced by a workflow of its
 * own (templateSyncWorkflow), started and left to run (not awaited, so a slow instance holds back
 * no other), with its workspace as fairness key: the worker takes the syncs of all workspaces in
 * turn, and one workspace's many instances or thousands of templates do not starve the others.
 * An instance whose sync still runs (the API started it) is skipped this time.
 */
export async function templateSyncAllWorkflow(input: { afterId?: string } = {}): Promise<{ started: number }> {
  let afterId = input.afterId;
  let started = 0;
  for (let page = 0; page < TEMPLATE_SYNC_PAGES_PER_RUN; page += 1) {
    const targets = await steps.templateSyncTargets({ afterId, limit: TEMPLATE_SYNC_PAGE });
    const starts = await Promise.allSettled(
      targets.map((target) =>
        startChild(templateSyncWorkflow, {
          workflowId: templateSyncWorkflowId(target.workspaceId, target.instanceId),
          args: [target],
          parentClosePolicy: ParentClosePolicy.ABANDON,
          workflowIdReusePolicy: WorkflowIdReusePolicy.ALLOW_DUPLICATE,
          priority: { fairnessKey: target.workspaceId },
        }),
      ),
    );
    started += starts.filter((s) => s.status === 'fulfilled').length;
    if (targets.length < TEMPLATE_SYNC_PAGE) return { started };
    afterId = targets[targets.length - 1].instanceId;
  }
  return continueAsNew<typeof templateSyncAllWorkflow>({ afterId });
}
