import {
  ApplicationFailure,
  CancellationScope,
  executeChild,
  patched,
  proxyActivities,
  proxyLocalActivities,
  sleep,
  workflowInfo,
} from '@temporalio/workflow';
import type { AutomationActivities } from '../activities/automations';
import {
  type ActionResult,
  type RunContext,
  type RunInput,
  type RunResult,
  RUN_NOT_BEGUN,
  runFailureReason as reason,
} from '../types/automations';
import { isRefusal } from '../types/messaging';
import { DATABASE, LOCAL_DATABASE, LOCAL_RECORD, RECORD } from './profiles';
import { sendMessageWorkflow } from './send-message';

/**
 * The run's steps (startRun, runAction, finishRun) as local activities: a run of database actions
 * is one workflow task and no activity task, where ordinary activities made it four and three
 * (inbound bursts spent most of their CPU on them). Safe because each step is idempotent per run,
 * as a retried ordinary activity already needed (the plan is kept on the row, an action is applied
 * once per run and index, only a running run is finished). A run started by an older worker ran
 * them as ordinary activities and must replay so: the patch marker says which. Deprecate it once
 * no run older than the change can be running.
 */
const LOCAL_RUN_STEPS = 'automation-run-steps-as-local-activities';
function runSteps() {
  return patched(LOCAL_RUN_STEPS)
    ? {
        acts: proxyLocalActivities<AutomationActivities>(LOCAL_DATABASE),
        record: proxyLocalActivities<AutomationActivities>(LOCAL_RECORD),
      }
    : { acts: proxyActivities<AutomationActivities>(DATABASE), record: proxyActivities<AutomationActivities>(RECORD) };
}

/**
 * One automation run: the actions in order, each an activity calling the same domain code as the
 * REST API (origin `automation`, depth + 1), `send_message` as a child send workflow (the same
 * saga, quotas and window as the send API), `wait` as a durable timer. A failing action stops the
 * run, which is recorded `failed` with the action and its reason. Ids: see runWorkflowId.
 */
export async function automationRunWorkflow(input: RunInput): Promise<RunResult> {
  let result: RunResult = { status: 'completed', error: null };
  const { acts, record } = runSteps();
  try {
    const plan = await acts.startRun(input);
    // Carried out already (by the worker's dispatcher, whose outbox row was taken again): nothing to record.
    if (plan.finished) return { status: 'completed', error: null };
    if (!plan.proceed) {
      result = { status: 'failed', error: RUN_NOT_BEGUN };
    } else {
      // Only a run started before the row kept its context carries one (see RunPlan).
      let context: RunContext | undefined = plan.context;
      // The latest send's message id: runAction adds it to the row's variables as `message.id`.
      let sentMessageId: string | undefined;
      for (const [index, action] of plan.actions.entries()) {
        if (action.type === 'wait') {
          await sleep(Math.max(1, Math.round(Number(action.seconds) * 1000 * (input.waitScale ?? 1))));
          continue;
        }
        const ids = {
          workspaceId: input.workspaceId,
          automationId: input.automationId,
          runId: input.runId,
          depth: input.depth,
          chain: input.chain,
          index,
          actionType: action.type,
        };
        const step: ActionResult = await acts.runAction(
          context ? { ...ids, automationName: plan.automationName, action, context } : { ...ids, sentMessageId },
        );
        context = step.context;
        if (step.send) {
          try {
            const sent = await executeChild(sendMessageWorkflow, {
              workflowId: `${workflowInfo().workflowId}/send/${index + 1}`,
              args: [step.send],
              // Found beside the workspace's other sends (a child does not inherit its parent's).
              searchAttributes: { WorkspaceId: [input.workspaceId], AutomationId: [input.automationId] },
            });
            // A refusal fails the action with its code, as the child's failure did before refusals completed.
            if (isRefusal(sent))
              throw ApplicationFailure.create({ type: sent.refused.code, message: sent.refused.message, nonRetryable: true });
            sentMessageId = sent.id;
            if (context) context = { ...context, vars: { ...context.vars, 'message.id': sent.id } };
          } catch (err) {
            throw ApplicationFailure.nonRetryable(`Action ${index + 1} (send_message): ${reason(err)}`, 'ACTION_FAILED');
          }
        }
      }
    }
  } catch (err) {
    result = { status: 'failed', error: reason(err) };
  }
  // Recorded even when the run was cancelled (from the Temporal UI): the run log must not stay `running`.
  await CancellationScope.nonCancellable(() => record.finishRun({ workspaceId: input.workspaceId, runId: input.runId, ...result }));
  return result;
}
