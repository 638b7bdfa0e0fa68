export {
  authenticateAndCount,
  createApiKey,
  generateApiKey,
  hashApiKey,
  type KeyRow,
  looksLikeApiKey,
  revokeApiKey,
  setApiKeyRateLimit,
} from './api-keys';
export { type Actor, addMember, memberNames, memberNameSql, requireMember, resolveMember } from './members';
export {
  type Bucket,
  type BucketState,
  bucketStates,
  consume,
  consumeIfRoom,
  IN_MEMORY_IP_PROFILES,
  IP_PROFILES,
  ipClient,
  type IpProfile,
  KEY_PROFILES,
  KeyCache,
  type KeyProfile,
  LocalCounts,
  pruneCounters,
  shardsFor,
  tightest,
} from './rate-limit';
export { ALL_SCOPES, grants, satisfying, type Scope } from './scopes';
export {
  createWorkspace,
  getWorkspace,
  lockWorkspace,
  PLAN_DEFAULTS,
  planSchema,
  requireWorkspace,
  serializeWorkspace,
  suspension,
  updateWorkspace,
  workspacePlan,
  workspaceQuery,
} from './workspaces';
