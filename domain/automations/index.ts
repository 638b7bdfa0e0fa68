// What other layers use of the area (api/, workers/, activities/, tests); the rest stays inside.
export {
  ActionSchema,
  assertActionMediaUrls,
  AutomationBody,
  type AutomationView,
  CHAIN_RUN_BUDGET,
  createAutomation,
  deleteAutomation,
  getAutomationRow,
  listAutomations,
  listRuns,
  MAX_CHAIN_DEPTH,
  regenerateToken,
  removeToken,
  resealAutomationTokens,
  runWorkflowId,
  serializeAutomation,
  TriggerSchema,
  updateAutomation,
  WEBHOOK_IN_MAX_BYTES,
} from './automations';
export { deliveryChain, findInboundAutomationAndCount, receiveInboundWebhook, usableInboundAutomation } from './automation-receiver';
export { keepWebhookBodyOnRun, REFUSALS_LISTED_PER_EVENT, runsForEvents } from './automation-triggers';
export { applyRunAction, endRun, planRun, runAtOnce, type RunActionInput } from './automation-actions';
