export * from './deals';
export * from './pipelines';
export * from './products';
export * from './tasks';
