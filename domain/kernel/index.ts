export { clock } from './clock';
export { DEAL_STATUSES, type DealStatus } from './deal-statuses';
export { ApiError, constraintConflict, ERROR_CODES, type ErrorCode, isPgError, notFound, validationError } from './errors';
export { isUuid } from './ids';
export { atLeastOne, ECMA_WHITESPACE, emailAddress, HTTP_URL, HTTP_URL_OR_TEMPLATE, NON_BLANK, onlyWith, trimmedText } from './input-rules';
export {
  isoInstant,
  JsonRecords,
  likeContains,
  listEnvelope,
  MAX_OFFSET,
  newestFirst,
  type Page,
  PAGE_TOTAL,
  pageQuery,
  pageWithTotal,
  type Pagination,
  paginationOf,
  queryBoolean,
  sortQuery,
} from './pagination';
export { cut, storable, storableJson, unstorableReason } from './text';
export { iso } from './time';
