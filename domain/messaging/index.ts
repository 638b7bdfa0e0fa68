export {
  contactTranscript,
  CONVERSATION_STATUSES,
  getConversationWithMessages,
  listConversations,
  MESSAGE_STATUSES,
  moveContactConversations,
  panelReply,
  replyConversationOf,
  statusPastSent,
  syncConversations,
  updateConversationStatus,
} from './conversations';
export { fromFailure, fromRefusal, providerThrottled, refusalOfFailure, refusalsAsFailures, toFailure } from './failures';
export {
  applyProviderWebhook,
  expectedVerifyToken,
  findWebhookInstance,
  ITEMS_PER_TRANSACTION,
  MAX_DELIVERY_ITEMS,
  parseCloudWebhook,
  type ParsedWebhook,
  parseWebGatewayWebhook,
  refuseOversizedDelivery,
  sameToken,
  validSignature,
  type WebhookInstance,
  type WebhookOutcome,
} from './inbound';
export { recordConversationActivity } from './activity';
export { addInstagramProfiles, parseInstagramWebhook } from './instagram';
export {
  CHANNELS,
  createInstance,
  instanceConfigSchema,
  listInstances,
  openInstanceConfig,
  type Provider,
  PROVIDERS,
  resealInstanceSecrets,
  sealInstanceConfig,
  sendCandidates,
  updateInstance,
} from './instances';
export {
  checkSendMedia,
  claimMediaToStart,
  contentDisposition,
  fetchAndStoreMedia,
  type FetchedMedia,
  markUnavailable,
  MediaChunkWriter,
  type MediaFetchInput,
  type MediaFetchResult,
  type MediaSource,
  MediaUnavailable,
  mediaWorkflowId,
  openStoredMedia,
  unclaimMedia,
} from './media';
export { listMessages, MESSAGE_DIRECTIONS, MESSAGE_SYNC_FILTERS, syncMessages } from './message-list';
export { claimReplaced, isReplacedAlready, releaseReplaced, saveSendRequest, sendInputFor, sendRequestOf } from './send-requests';
export {
  claimSendKey,
  type HeldSendKey,
  IDEMPOTENCY_MEMO_MS,
  sendKeyToWorkflow,
  settleSendKey,
  type UnsettledSend,
  unsettledSends,
} from './send-keys';
export { attemptSend, type AttemptItem, liveConnection, type ProviderConnection, type ProviderPort, settleAttempt } from './send/attempt';
export { dailyLimitOf } from './send/daily';
export { findPreparations, preparedNeverCalled, undoPreparedSend } from './send/ledger';
export { forWorkflow, type Prepared, type PrepareItem, prepareSend, prepareSends, sendingPlan } from './send/prepare';
export { messageBody, recordSent } from './send/record';
export {
  checkMediaSize,
  chooseInstance,
  dailyLimitRefusalOf,
  MEDIA_LIMITS,
  MESSAGE_CONTENT_FIELDS,
  messageContent,
  messageRequirements,
  missingFields,
  outcomeUnknown,
  refuseUnsendable,
  requiredFields,
  saoPauloDay,
  secondsUntilSaoPauloMidnight,
  TEMPLATE_BUTTONS,
  TEMPLATE_HEADER,
} from './sending';
export {
  applyTemplateStatusUpdates,
  approvedTemplate,
  createTemplate,
  HEADER_FORMATS,
  instanceForTemplateSync,
  listTemplates,
  parseTemplateStatusUpdates,
  syncTemplates,
  TEMPLATE_STATUSES,
  type TemplateLister,
  type TemplateListing,
  templateSyncInstances,
} from './templates';
