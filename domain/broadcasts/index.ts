export * from './broadcasts';
export * from './resource';
