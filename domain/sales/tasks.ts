import type { Knex } from 'knex';
import { type Db, SyncRead, syncPage } from '../platform';
import { ApiError, Page, pageWithTotal, isUuid, iso } from '../kernel';
import { memberNames, resolveMember } from '../access';
import { leftJoinCanonicalContact, requireContact } from '../leads';

export const TASK_STATUSES = ['pending', 'done'] as const;
export type TaskStatus = (typeof TASK_STATUSES)[number];

interface TaskRow {
  id: string;
  title: string;
  type: string;
  due_at: Date | null;
  status: TaskStatus;
  deal_id: string | null;
  assigned_to: string | null;
  created_at: Date;
  updated_at: Date;
  /** The task's contact when it is canonical (not merged, not deleted, not a group), else null. */
  visible_contact_id: string | null;
}

export function serializeTask(row: TaskRow, names: Map<string, string>) {
  return {
    id: row.id,
    title: row.title,
    type: row.type,
    dueDate: iso(row.due_at),
    status: row.status,
    contactId: row.visible_contact_id ?? null,
    cardId: row.deal_id ?? null,
    assignedTo: row.assigned_to ? { id: row.assigned_to, name: names.get(row.assigned_to) ?? '' } : null,
    createdAt: iso(row.created_at)!,
    updatedAt: iso(row.updated_at)!,
  };
}
export type Task = ReturnType<typeof serializeTask>;

/** Serialises tasks with their assignees' names in one extra query, whatever the page size. */
async function serializeTasks(db: Db, workspaceId: string, rows: TaskRow[]): Promise<Task[]> {
  const names = await memberNames(
    db,
    workspaceId,
    rows.map((r) => r.assigned_to),
  );
  return rows.map((r) => serializeTask(r, names));
}

/**
 * Tasks of the workspace joined to their contact only when it is canonical: a task whose contact
 * was merged or soft-deleted stays visible but shows `contactId: null`, so the hidden contact
 * never leaks.
 */
function tasksQuery(db: Db, workspaceId: string): Knex.QueryBuilder {
  return leftJoinCanonicalContact(db('tasks as t'), 'c', 't.contact_id').where('t.workspace_id', workspaceId);
}

const TASK_COLUMNS = [
  't.id',
  't.title',
  't.type',
  't.due_at',
  't.status',
  't.deal_id',
  't.assigned_to',
  't.created_at',
  't.updated_at',
  'c.id as visible_contact_id',
];

/** A deal (card) of the workspace, or 404 NOT_FOUND. */
export async function requireDeal(db: Db, workspaceId: string, dealId: string): Promise<{ id: string }> {
  const row = isUuid(dealId) ? await db('deals').where({ workspace_id: workspaceId, id: dealId }).first('id') : undefined;
  if (!row) throw new ApiError('NOT_FOUND', 'Deal not found', { hint: 'cardId must be a deal of this workspace.' });
  return row;
}

export async function getTask(db: Db, workspaceId: string, id: string): Promise<Task> {
  const row: TaskRow | undefined = await tasksQuery(db, workspaceId).where('t.id', id).first(TASK_COLUMNS);
  if (!row) throw new ApiError('NOT_FOUND', 'Task not found');
  return (await serializeTasks(db, workspaceId, [row]))[0];
}

export interface CreateTaskInput {
  title: string;
  type?: string;
  dueDate?: Date | null;
  contactId?: string | null;
  cardId?: string | null;
  /** A member id (or, with `assigneeByName`, a member name). */
  assignedTo?: string | null;
  status?: TaskStatus;
}

/**
 * Creates a task (API and automation `create_task` action). The contact must be canonical in the
 * workspace (404 CONTACT_NOT_FOUND), the card a deal of the workspace (404 NOT_FOUND), the
 * assignee a member (400 ASSIGNEE_NOT_FOUND). A task created as `done` is completed now.
 */
export async function createTask(
  db: Db,
  workspaceId: string,
  input: CreateTaskInput,
  options: { assigneeByName?: boolean } = {},
): Promise<Task> {
  const title = input.title.trim();
  const type = (input.type ?? 'task').trim();
  if (title.length < 1 || title.length > 500) throw new ApiError('VALIDATION', 'Invalid title: 1 to 500 characters');
  if (type.length < 1 || type.length > 64) throw new ApiError('VALIDATION', 'Invalid type: 1 to 64 characters');
  const contact = input.contactId ? await requireContact(db, workspaceId, input.contactId) : null;
  const deal = input.cardId ? await requireDeal(db, workspaceId, input.cardId) : null;
  const member = input.assignedTo ? await resolveMember(db, workspaceId, input.assignedTo, { byName: options.assigneeByName }) : null;
  const status = input.status ?? 'pending';
  const [row] = await db('tasks')
    .insert({
      workspace_id: workspaceId,
      title,
      type,
      due_at: input.dueDate ?? null,
      status,
      completed_at: status === 'done' ? db.fn.now() : null,
      contact_id: contact?.id ?? null,
      deal_id: deal?.id ?? null,
      assigned_to: member?.id ?? null,
    })
    .returning('*');
  const names = new Map(member ? [[member.id, member.name]] : []);
  return serializeTask({ ...row, visible_contact_id: contact?.id ?? null }, names);
}

export type UpdateTaskInput = Partial<CreateTaskInput>;

/**
 * Changes the fields sent; null clears `dueDate`, `contactId`, `cardId` and `assignedTo`.
 * `done` records the completion time (kept when the task was already done); `pending` clears it.
 */
export async function updateTask(db: Db, workspaceId: string, id: string, input: UpdateTaskInput): Promise<Task> {
  return db.transaction(async (trx) => {
    const current = await trx('tasks').where({ workspace_id: workspaceId, id }).forUpdate().first('id', 'status');
    if (!current) throw new ApiError('NOT_FOUND', 'Task not found');
    const changes: Record<string, unknown> = {};
    if (input.title !== undefined) changes.title = input.title;
    if (input.type !== undefined) changes.type = input.type;
    if (input.dueDate !== undefined) changes.due_at = input.dueDate;
    if (input.contactId !== undefined)
      changes.contact_id = input.contactId === null ? null : (await requireContact(trx, workspaceId, input.contactId)).id;
    if (input.cardId !== undefined) changes.deal_id = input.cardId === null ? null : (await requireDeal(trx, workspaceId, input.cardId)).id;
    if (input.assignedTo !== undefined) {
      changes.assigned_to = input.assignedTo === null ? null : (await resolveMember(trx, workspaceId, input.assignedTo)).id;
    }
    if (input.status !== undefined && input.status !== current.status) {
      changes.status = input.status;
      changes.completed_at = input.status === 'done' ? trx.fn.now() : null;
    }
    await trx('tasks')
      .where({ workspace_id: workspaceId, id })
      .update({ ...changes, updated_at: trx.fn.now() });
    return getTask(trx, workspaceId, id);
  });
}

export async function deleteTask(db: Db, workspaceId: string, id: string): Promise<{ id: string; deleted: true }> {
  const [row] = await db('tasks').where({ workspace_id: workspaceId, id }).delete().returning('id');
  if (!row) throw new ApiError('NOT_FOUND', 'Task not found');
  return { id: row.id, deleted: true };
}

export const TASK_SORTS = {
  dueAt: 't.due_at',
  createdAt: 't.created_at',
  updatedAt: 't.updated_at',
} as const;

export interface TaskFilter extends Page {
  contactId?: string;
  cardId?: string;
  status?: TaskStatus;
  assignedTo?: string;
  dueAfter?: Date;
  dueBefore?: Date;
  updatedAfter?: Date;
  sort: keyof typeof TASK_SORTS;
  order: 'asc' | 'desc';
}

/**
 * One page of tasks and the exact total in three queries whatever the page size (rows, count,
 * assignee names). `dueAfter`/`dueBefore` are inclusive and leave out tasks without a due date;
 * tasks without a due date sort last in both orders; the id breaks ties.
 */
export async function listTasks(db: Db, workspaceId: string, filter: TaskFilter): Promise<{ rows: Task[]; total: number }> {
  const scope = tasksQuery(db, workspaceId);
  // Only a canonical contact has tasks as far as the API is concerned.
  if (filter.contactId !== undefined) scope.where('t.contact_id', filter.contactId).whereNotNull('c.id');
  if (filter.cardId !== undefined) scope.where('t.deal_id', filter.cardId);
  if (filter.status !== undefined) scope.where('t.status', filter.status);
  if (filter.assignedTo !== undefined) scope.where('t.assigned_to', filter.assignedTo);
  if (filter.dueAfter !== undefined) scope.where('t.due_at', '>=', filter.dueAfter);
  if (filter.dueBefore !== undefined) scope.where('t.due_at', '<=', filter.dueBefore);
  if (filter.updatedAfter !== undefined) scope.where('t.updated_at', '>=', filter.updatedAfter);
  const dir = filter.order === 'desc' ? 'DESC' : 'ASC';
  const { rows, total } = await pageWithTotal<TaskRow>(scope, filter, (q) =>
    q.orderByRaw(`${TASK_SORTS[filter.sort]} ${dir} NULLS LAST, t.id ${dir}`).select(TASK_COLUMNS),
  );
  return { rows: await serializeTasks(db, workspaceId, rows), total };
}

/** One sync page of tasks (a deleted task is gone without a tombstone). */
export async function syncTasks(db: Db, workspaceId: string, read: SyncRead) {
  const source = { scope: tasksQuery(db, workspaceId), updatedAt: 't.updated_at', id: 't.id', columns: TASK_COLUMNS };
  const { rows, pagination } = await syncPage<TaskRow>(db, 'tasks', source, read);
  return { data: await serializeTasks(db, workspaceId, rows), pagination };
}

/** A merge (domain/merge): the duplicate contact's tasks become the survivor's. */
export async function moveContactTasks(
  trx: Knex.Transaction,
  workspaceId: string,
  fromContactId: string,
  toContactId: string,
): Promise<void> {
  await trx('tasks')
    .where({ workspace_id: workspaceId, contact_id: fromContactId })
    .update({ contact_id: toContactId, updated_at: trx.fn.now() });
}
