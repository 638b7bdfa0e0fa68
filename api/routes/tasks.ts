import { z } from 'zod';
import { apiKey, route } from '../route';
import { Deleted, IdParams, listOrSyncOf, pageOf, single } from '../schemas';
import { atLeastOne, isoInstant, isUuid, pageQuery, sortQuery, trimmedText } from '../../domain/kernel';
import { createTask, deleteTask, getTask, listTasks, syncTasks, TASK_SORTS, TASK_STATUSES, updateTask } from '../../domain/sales';
import { syncDescription, syncParams, syncRead, updatedAfterParam } from '../../domain/platform';

const Task = z
  .object({
    id: z.string(),
    title: z.string(),
    type: z.string(),
    dueDate: z.string().nullable(),
    status: z.enum(TASK_STATUSES),
    contactId: z.string().nullable().openapi({ description: 'The linked contact; null when none, or when it was merged or deleted.' }),
    cardId: z.string().nullable().openapi({ description: 'The linked deal (card), or null.' }),
    assignedTo: z.object({ id: z.string(), name: z.string() }).nullable(),
    createdAt: z.string(),
    updatedAt: z.string(),
  })
  .openapi('Task');

const uuidFilter = (what: string) => z.string().refine(isUuid, 'expected a uuid').optional().openapi({ description: what, format: 'uuid' });

const TaskQuery = pageQuery()
  .extend(sortQuery(TASK_SORTS, { sort: 'dueAt', order: 'asc' }).shape)
  .extend({
    contactId: uuidFilter("Tasks of this contact (another workspace's, a merged or a deleted contact gives an empty list)."),
    cardId: uuidFilter('Tasks of this deal.'),
    status: z.enum(TASK_STATUSES).optional(),
    assignedTo: uuidFilter('Tasks assigned to this member id.'),
    dueAfter: isoInstant.optional().openapi({ description: 'Due at or after this instant (ISO 8601; a bare date is midnight UTC).' }),
    dueBefore: isoInstant.optional().openapi({ description: 'Due at or before this instant (ISO 8601; a bare date is midnight UTC).' }),
    updatedAfter: updatedAfterParam,
    ...syncParams('tasks'),
  });

const fields = {
  title: trimmedText(500),
  type: trimmedText(64).openapi({ example: 'call' }),
  dueDate: isoInstant.nullable().openapi({ description: 'ISO 8601 instant; null clears.', example: '2026-01-31T15:00:00.000Z' }),
  status: z.enum(TASK_STATUSES),
  contactId: z
    .string()
    .nullable()
    .openapi({ description: 'A contact of the workspace (404 `CONTACT_NOT_FOUND` otherwise); null unlinks.' }),
  cardId: z.string().nullable().openapi({ description: 'A deal of the workspace (404 `NOT_FOUND` otherwise); null unlinks.' }),
  assignedTo: z.string().nullable().openapi({ description: 'A member id (400 `ASSIGNEE_NOT_FOUND` otherwise); null unassigns.' }),
};

/** Every field optional: the body of a change, and with the title required the body of a create. */
const TaskChanges = z.object(fields).partial();

export const taskRoutes = [
  route({
    method: 'get',
    path: '/api/v1/tasks',
    operationId: 'listTasks',
    ...apiKey('Tasks', 'tasks:read', 'read'),
    summary: 'List tasks',
    description:
      '`sort` is `dueAt` (default), `createdAt` or `updatedAt`; `order` `asc` (default) or `desc`. Tasks without a due date ' +
      'sort last in both orders and are left out by `dueAfter`/`dueBefore` (both inclusive). Ties are broken by id. A task ' +
      'whose contact was merged or deleted is still listed, with `contactId: null` (and a new `updatedAt`).\n\n' +
      syncDescription(' and `updatedAfter` (first page)') +
      ' A deleted task is gone: no tombstone.',
    query: TaskQuery,
    response: listOrSyncOf(Task),
    handler: async (ctx, { query }) => {
      const workspaceId = ctx.state.auth!.workspaceId;
      const read = syncRead(ctx.query, query, Object.keys(TaskQuery.shape));
      if (read) return syncTasks(ctx.deps.db, workspaceId, read);
      return pageOf(listTasks(ctx.deps.db, workspaceId, query), query);
    },
  }),
  route({
    method: 'post',
    path: '/api/v1/tasks',
    operationId: 'createTask',
    ...apiKey('Tasks', 'tasks:write', 'write'),
    status: 201,
    summary: 'Create a task',
    description: '`type` defaults to `task` and `status` to `pending`. Links (`contactId`, `cardId`, `assignedTo`) are optional.',
    body: TaskChanges.extend({ title: fields.title }),
    errors: ['CONTACT_NOT_FOUND', 'NOT_FOUND', 'ASSIGNEE_NOT_FOUND'],
    response: single(Task),
    handler: async (ctx, { body }) => ({ data: await createTask(ctx.deps.db, ctx.state.auth!.workspaceId, body) }),
  }),
  route({
    method: 'get',
    path: '/api/v1/tasks/{id}',
    operationId: 'getTask',
    ...apiKey('Tasks', 'tasks:read', 'read'),
    summary: 'Get a task',
    params: IdParams,
    response: single(Task),
    handler: async (ctx, { params }) => ({ data: await getTask(ctx.deps.db, ctx.state.auth!.workspaceId, params.id) }),
  }),
  route({
    method: 'patch',
    path: '/api/v1/tasks/{id}',
    operationId: 'updateTask',
    ...apiKey('Tasks', 'tasks:write', 'write'),
    summary: 'Change a task',
    description:
      'At least one field must be sent. `status: "done"` records the completion time, `"pending"` clears it. `null` clears ' +
      '`dueDate`, `contactId`, `cardId` and `assignedTo`.',
    params: IdParams,
    body: atLeastOne(TaskChanges, 'send at least one of title, type, dueDate, status, contactId, cardId, assignedTo'),
    errors: ['CONTACT_NOT_FOUND', 'ASSIGNEE_NOT_FOUND'],
    response: single(Task),
    handler: async (ctx, { params, body }) => ({ data: await updateTask(ctx.deps.db, ctx.state.auth!.workspaceId, params.id, body) }),
  }),
  route({
    method: 'delete',
    path: '/api/v1/tasks/{id}',
    operationId: 'deleteTask',
    ...apiKey('Tasks', 'tasks:write', 'delete'),
    summary: 'Delete a task',
    params: IdParams,
    response: Deleted,
    handler: async (ctx, { params }) => ({ data: await deleteTask(ctx.deps.db, ctx.state.auth!.workspaceId, params.id) }),
  }),
];
