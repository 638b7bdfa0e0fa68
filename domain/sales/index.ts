export {
  contactCustomValues,
  createDeal,
  customValuesSchema,
  DEAL_STATUSES,
  type DealBatchInput,
  dealChunk,
  dealSummary,
  dealValue,
  definedCustomFieldKeys,
  findDeal,
  listDealActivities,
  listDeals,
  matchingDealsOfContact,
  moveContactDeals,
  resolveStage,
  serializeDeal,
  syncDeals,
  updateDeal,
} from './deals';
export { createGlobalCustomField, createPipeline, customFieldSchema, listPipelines, MAX_CUSTOM_FIELDS } from './pipelines';
export { createProduct, deleteProduct, getProduct, listProducts, PRODUCT_SORTS, syncProducts, updateProduct } from './products';
export { createTask, deleteTask, getTask, listTasks, moveContactTasks, syncTasks, TASK_SORTS, TASK_STATUSES, updateTask } from './tasks';
