export * from './broadcasts';
