import { z } from 'zod';
import { apiKey, route } from '../route';
import { NON_BLANK, pageQuery } from '../../domain/kernel';
import { Deleted, listOf, pageOf, single } from '../schemas';
import { addNote, API_AUTHOR_NAME, deleteNote, listNotes, MAX_NOTE_BODY, updateNote } from '../../domain/leads';

const Note = z
  .object({ id: z.string(), body: z.string(), authorName: z.string(), createdAt: z.string(), updatedAt: z.string() })
  .openapi('Note');

/** 1 to 5000 characters (code points), not blank; kept as sent. */
const body = z
  .string()
  .refine((s) => s.trim().length > 0, { message: 'must not be blank' })
  .refine((s) => [...s].length <= MAX_NOTE_BODY, { message: `at most ${MAX_NOTE_BODY} characters` })
  // JSON Schema counts code points, like the rule above.
  .meta({ minLength: 1, maxLength: MAX_NOTE_BODY, pattern: NON_BLANK });

// A malformed lead id is 404 CONTACT_NOT_FOUND like an unknown one, a malformed note id 404 NOT_FOUND.
const LeadParams = z.object({ id: z.string().max(100) });
const NoteParams = z.object({ id: z.string().max(100), noteId: z.string().max(100) });

const LEAD_RULE = 'The lead must be a contact of the workspace (not deleted, not merged, not a group), else 404 `CONTACT_NOT_FOUND`.';
const NOTE_RULE = `${LEAD_RULE} A note that is not one of this lead's notes is 404 \`NOT_FOUND\`.`;

export const noteRoutes = [
  route({
    method: 'get',
    path: '/api/v1/leads/{id}/notes',
    operationId: 'listLeadNotes',
    ...apiKey('Notes', 'notes:read', 'read'),
    summary: "List a lead's notes",
    description: `Newest first. ${LEAD_RULE}`,
    params: LeadParams,
    query: pageQuery(),
    response: listOf(Note),
    errors: ['CONTACT_NOT_FOUND'],
    handler: async (ctx, { params, query }) => pageOf(listNotes(ctx.deps.db, ctx.state.auth!.workspaceId, params.id, query), query),
  }),
  route({
    method: 'post',
    path: '/api/v1/leads/{id}/notes',
    operationId: 'createLeadNote',
    ...apiKey('Notes', 'notes:write', 'write'),
    summary: 'Add a note to a lead',
    description:
      `\`body\`: 1 to ${MAX_NOTE_BODY} characters. \`authorId\` (optional): a member of the workspace, who becomes the author ` +
      `(\`authorName\` is their name; a non-member is 400 \`ASSIGNEE_NOT_FOUND\`). Without it \`authorName\` is \`"${API_AUTHOR_NAME}"\`. ` +
      `The author's name is kept as it was when the note was written; member ids are never returned. ${LEAD_RULE}`,
    status: 201,
    params: LeadParams,
    body: z.object({ body, authorId: z.string().max(100).optional() }),
    response: single(Note),
    errors: ['CONTACT_NOT_FOUND', 'ASSIGNEE_NOT_FOUND'],
    handler: async (ctx, { params, body: input }) => ({
      data: await addNote(ctx.deps.db, ctx.state.auth!.workspaceId, params.id, input),
    }),
  }),
  route({
    method: 'patch',
    path: '/api/v1/leads/{id}/notes/{noteId}',
    operationId: 'updateLeadNote',
    ...apiKey('Notes', 'notes:write', 'write'),
    summary: 'Edit a note',
    description: `\`body\` is required: 1 to ${MAX_NOTE_BODY} characters. The author does not change. ${NOTE_RULE}`,
    params: NoteParams,
    body: z.object({ body }),
    response: single(Note),
    errors: ['CONTACT_NOT_FOUND'],
    handler: async (ctx, { params, body: input }) => ({
      data: await updateNote(ctx.deps.db, ctx.state.auth!.workspaceId, params.id, params.noteId, input),
    }),
  }),
  route({
    method: 'delete',
    path: '/api/v1/leads/{id}/notes/{noteId}',
    operationId: 'deleteLeadNote',
    ...apiKey('Notes', 'notes:write', 'delete'),
    summary: 'Delete a note',
    description: NOTE_RULE,
    params: NoteParams,
    response: Deleted,
    errors: ['CONTACT_NOT_FOUND'],
    handler: async (ctx, { params }) => ({ data: await deleteNote(ctx.deps.db, ctx.state.auth!.workspaceId, params.id, params.noteId) }),
  }),
];
