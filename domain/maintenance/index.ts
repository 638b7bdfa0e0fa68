export { PRUNE_EVERY_MS, pruneRetention } from './retention';
export { sealStoredSecrets } from './secrets-at-rest';
