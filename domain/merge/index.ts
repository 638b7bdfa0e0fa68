export { mergeContacts } from './merge';
