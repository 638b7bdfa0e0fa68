export * from './contact-refs';
export * from './contacts';
export * from './insights';
export * from './lead-list';
export * from './lists';
export * from './notes';
export * from './phone';
export * from './tags';
