export * from './retention';
export * from './secrets-at-rest';
