export { segmentContacts } from './audience';
export { contactsPersonalData, joinCanonicalContact, leftJoinCanonicalContact, requireContact } from './contact-refs';
export {
  addTag,
  contactOptedOut,
  contactsForSend,
  deleteUnusedContact,
  findOrCreateContact,
  finishMerge,
  type LeadInput,
  lockMergePair,
  moveLeadRecords,
  panelCreateContact,
  panelUpdateContact,
  recordConsent,
  recordContactCreated,
  recordWaIds,
  removeTag,
  requirePhone,
  resolveTagSets,
  serializeLeads,
  softDeleteContact,
  updateContact,
  upsertLead,
  upsertLeadChunk,
} from './contacts';
export {
  findOrCreateInstagramContact,
  instagramContactsOf,
  instagramIdOn,
  type InstagramPerson,
  knownInstagramPerson,
  moveContactIdentities,
} from './identities';
export { type DerivedInsightInput, getInsight, setInsight, storeDerivedInsight } from './insights';
export { leadListQueries, leadListQuery, leadSyncSource, listLeads, syncLeads } from './lead-list';
export {
  addContactsToList,
  createList,
  deleteList,
  getList,
  listContactsOfList,
  listExists,
  listLists,
  MAX_LIST_ADD,
  removeContactFromList,
  renameList,
} from './lists';
export { addNote, API_AUTHOR_NAME, deleteNote, listNotes, MAX_NOTE_BODY, updateNote } from './notes';
export {
  digitsOfPersonJid,
  MAX_PHONE_INPUT,
  parsePhone,
  type Phone,
  PHONE_INTEGER_SCHEMA,
  PHONE_PATTERN,
  PHONE_TEXT_SCHEMA,
} from './phone';
export { createTag, DEFAULT_TAG_COLOR, deleteTag, existingTagIds, getTag, listTags, TAG_COLOR, updateTag } from './tags';
