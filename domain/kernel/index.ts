export * from './clock';
export * from './deal-statuses';
export * from './errors';
export * from './ids';
export * from './input-rules';
export * from './pagination';
export * from './text';
export * from './time';
