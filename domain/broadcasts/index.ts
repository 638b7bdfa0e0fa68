export * from './broadcasts';
export * from './resource';
export * from './batch';
