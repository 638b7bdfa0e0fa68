export { answerItem, BATCH_CHUNK, BATCH_MAX, type BatchInput, type ItemAnswer, refused, runInChunks } from './batch';
export {
  CODEC_SESSION_COOKIE,
  CODEC_SESSION_PAGE_PATH,
  CODEC_SESSION_PATH,
  CODEC_SESSION_TTL_MS,
  codecSessionSecure,
  issueCodecSession,
  validCodecSession,
} from './codec-session';
export { assertAdminToken, type Config, DEFAULT_BROADCAST_BATCH_SIZE, loadConfig, sendTaskQueueOf } from './config';
export { cursorPage, encodeCursor, FIRST_MICROS, FROM_MICROS, LAST_MICROS, microsOf, settledHorizon } from './cursor';
export {
  compiledOnce,
  createDb,
  createServiceDb,
  databaseNow,
  type Db,
  insertJsonRowSql,
  instantSql,
  instantsAsText,
  isDatabaseUnavailable,
  jsonPage,
  type JsonPageRow,
  lockUntilCommit,
  pingDatabase,
  prepared,
  sameWorkspaceSql,
} from './db';
export { type KeyRing, newKeyRingValue, openText, parseKeyRing, type SealBinding, sealedAs, sealText } from './encryption';
export { claimKey, completeKey, fingerprint, recordProgress, releaseKey, STORED_ANSWER_HOURS } from './idempotency';
export { createLogger } from './logger';
export { EncryptionCodec } from './payload-codec';
export { type ColumnResealer, columnResealer, type Resealer } from './reseal';
export { NETWORK_WORDS, SafeHttpError, safeRequest, safeStream, type SafeStreamResponse } from './safe-http';
export {
  BEGINNING,
  type Position,
  syncDescription,
  syncPage,
  syncJsonPage,
  syncPageQuery,
  syncParams,
  type SyncRead,
  syncRead,
  type SyncSource,
  updatedAfterParam,
} from './sync';
export {
  dataConverterFor,
  ensureSearchAttributes,
  isTemporalUnreachable,
  SEARCH_ATTRIBUTES,
  searchHash,
  searchHashes,
  START_DEADLINE_MS,
  temporalClientFactory,
  type TemporalClients,
  withDeadline,
  withoutPhoneNumbers,
  workspacePriority,
} from './temporal';
export { assertPublicUrl, assertSafeUrlSyntax, type UrlPolicy } from './url-safety';
