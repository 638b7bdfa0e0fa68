export * from './api-keys';
export * from './members';
export * from './rate-limit';
export * from './scopes';
export * from './workspaces';
