export { joinInstagramContacts, mergeContacts } from './merge';
