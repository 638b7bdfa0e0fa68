import type { Knex } from 'knex';
import { z } from 'zod';
import { compiledOnce, instantsAsText, prepared, type Db, answerItem, BatchInput, ItemAnswer, SyncRead, syncPage } from '../platform';
import { ApiError, newestFirst, Page, PAGE_TOTAL, pageWithTotal, isUuid, DEAL_STATUSES, type DealStatus, iso } from '../kernel';
import { Cause, OutboxRecord, outboxInsert, recordOutbox } from '../webhooks';
import { resolveOrCreateProduct } from './products';
import { Actor, lockWorkspace, memberNames, memberNameSql, resolveMember, workspacePlan } from '../access';
import { joinCanonicalContact, requireContact } from '../leads';

export { DEAL_STATUSES, type DealStatus };

type Trx = Knex.Transaction;

/** Money in BRL: >= 0, two decimals, what numeric(14, 2) holds. */
export const dealValue = z.number().min(0).max(999_999_999_999.99);

/**
 * Custom values: string, number, boolean or an array of those; a nested object is 400
 * VALIDATION. `null` clears a key.
 */
const primitive = z.union([z.string().max(10_000), z.number(), z.boolean()]);
/** More keys than any pipeline can define (200 custom fields each); the keys become query parameters. */
export const MAX_CUSTOM_VALUES = 1000;
export const customValuesSchema = z
  .record(z.string().max(64), z.union([primitive, z.array(primitive).max(1000), z.null()]))
  .refine((values) => Object.keys(values).length <= MAX_CUSTOM_VALUES, { message: `at most ${MAX_CUSTOM_VALUES} custom values` });

export interface DealRow {
  id: string;
  workspace_id: string;
  contact_id: string;
  pipeline_id: string;
  stage_id: string;
  product_id: string | null;
  assigned_to: string | null;
  name: string;
  status: DealStatus;
  lost_reason: string | null;
  closed_at: Date | null;
  value: string | null;
  source: string;
  custom_values: Record<string, unknown>;
  created_at: Date;
  updated_at: Date;
}

/** A deal's columns, named: a change's statements run prepared, and a prepared `*` breaks when a migration adds a column. */
const DEAL_COLUMNS = [
  'id',
  'workspace_id',
  'contact_id',
  'pipeline_id',
  'stage_id',
  'product_id',
  'assigned_to',
  'name',
  'status',
  'lost_reason',
  'closed_at',
  'value',
  'source',
  'custom_values',
  'created_at',
  'updated_at',
] as const satisfies readonly (keyof DealRow)[];

/** A deal with its assignee's name (serializeDeal's second argument), read in the deal's own statement. */
type DealWithAssignee = DealRow & { assignee_name: string | null };
const ASSIGNEE_NAME = memberNameSql('deals.workspace_id', 'deals.assigned_to', 'assignee_name');

const money = (value: string | null): number | null => (value === null ? null : Number(value));

/** What card.created, card.won and card.lost say about the deal. */
const cardFields = (row: DealRow) => ({
  card_id: row.id,
  stage_id: row.stage_id,
  pipeline_id: row.pipeline_id,
  contact_id: row.contact_id,
  name: row.name,
});
/** The variables of the card_created, deal_won and deal_lost triggers. */
const dealVariables = (row: DealRow) => ({ dealId: row.id, contactId: row.contact_id, pipelineId: row.pipeline_id, stageId: row.stage_id });

export function serializeDeal(row: DealRow, assigneeName: string | null | undefined) {
  return {
    id: row.id,
    name: row.name,
    status: row.status,
    lostReason: row.lost_reason,
    closedAt: iso(row.closed_at),
    value: money(row.value),
    pipelineId: row.pipeline_id,
    stageId: row.stage_id,
    contactId: row.contact_id,
    productId: row.product_id,
    source: row.source,
    assignedTo: row.assigned_to ? { id: row.assigned_to, name: assigneeName ?? '' } : null,
    customValues: row.custom_values,
    createdAt: iso(row.created_at),
    updatedAt: iso(row.updated_at),
  };
}

/** Serialises deals with their assignees' names in one extra query, whatever the page size. */
export async function serializeDeals(db: Db, workspaceId: string, rows: DealRow[]) {
  const names = await memberNames(
    db,
    workspaceId,
    rows.map((r) => r.assigned_to),
  );
  return rows.map((r) => serializeDeal(r, r.assigned_to ? names.get(r.assigned_to) : undefined));
}

/**
 * Deals visible through the API: those of canonical contacts. Soft-deleting a lead hides its
 * deals with it (and restoring it would bring them back); nothing is destroyed.
 */
export function visibleDeals(db: Db, workspaceId: string): Knex.QueryBuilder {
  return joinCanonicalContact(db('deals'), 'contacts', { id: 'deals.contact_id' })
    .where('deals.workspace_id', workspaceId)
    .select('deals.*');
}

/**
 * A deal's id, name, value, status, stage and pipeline, visible or not (visibleDeals hides the deals
 * of a deleted or merged contact; this does not): domain/automations' `deal.*` run variables.
 */
export async function dealSummary(
  db: Db,
  workspaceId: string,
  id: string,
): Promise<Pick<DealRow, 'id' | 'name' | 'value' | 'status' | 'stage_id' | 'pipeline_id'> | undefined> {
  return db('deals').where({ workspace_id: workspaceId, id }).first('id', 'name', 'value', 'status', 'stage_id', 'pipeline_id');
}

/** The visible deal `id`, its columns named, with its assignee's name. */
function dealById(db: Db, workspaceId: string, id: string): Knex.QueryBuilder {
  return visibleDeals(db, workspaceId)
    .clearSelect()
    .where('deals.id', id)
    .select(DEAL_COLUMNS.map((c) => `deals.${c}`))
    .select(db.raw(ASSIGNEE_NAME))
    .first();
}

export async function findDeal(db: Db, workspaceId: string, id: string): Promise<DealWithAssignee> {
  const row = isUuid(id) ? await prepared(dealById(db, workspaceId, id)) : undefined;
  if (!row) throw new ApiError('NOT_FOUND', 'Deal not found');
  return row;
}

interface StageOfMove {
  id: string;
  name: string;
  pipeline_id: string;
}

/**
 * The deal, locked for a change, with in the same statement what the change reads besides it:
 * its assignee's name and, when the change names a stage, that stage (of this workspace, else
 * null) and the one the deal is in. One round trip: on this machine a statement's round trip
 * costs the API about as much CPU as the statement costs PostgreSQL.
 */
async function lockDeal(
  trx: Trx,
  workspaceId: string,
  id: string,
  stageId: string | undefined,
): Promise<DealWithAssignee & { move_to?: StageOfMove | null; move_from?: StageOfMove }> {
  if (!isUuid(id)) throw new ApiError('NOT_FOUND', 'Deal not found');
  const q = dealById(trx, workspaceId, id).forUpdate('deals');
  // A stage id that is not a uuid names no stage: nothing to read.
  if (stageId !== undefined && isUuid(stageId)) {
    const stage = `json_build_object('id', s.id, 'name', s.name, 'pipeline_id', s.pipeline_id)`;
    q.select({
      move_to: trx('stages as s').where('s.workspace_id', workspaceId).where('s.id', stageId).select(trx.raw(stage)),
      move_from: trx('stages as s').whereRaw('s.id = deals.stage_id').select(trx.raw(stage)),
    });
  }
  const row = await prepared(q);
  if (!row) throw new ApiError('NOT_FOUND', 'Deal not found');
  return row;
}

export interface DealFilters {
  pipelineId?: string;
  stageId?: string;
  status?: DealStatus;
  contactId?: string;
  assignedTo?: string;
  updatedAfter?: Date;
}

/** Visible deals of the workspace, newest first; the filters combine (AND). */
export async function listDeals(db: Db, workspaceId: string, query: Page & DealFilters) {
  const scope = visibleDeals(db, workspaceId);
  if (query.pipelineId) scope.where('deals.pipeline_id', query.pipelineId);
  if (query.stageId) scope.where('deals.stage_id', query.stageId);
  if (query.status) scope.where('deals.status', query.status);
  if (query.contactId) scope.where('deals.contact_id', query.contactId);
  if (query.assignedTo) scope.where('deals.assigned_to', query.assignedTo);
  if (query.updatedAfter) scope.where('deals.updated_at', '>=', query.updatedAfter);
  const { rows, total } = await pageWithTotal<DealRow>(scope, query, (q) => q.orderBy(newestFirst('deals.created_at', 'deals.id')));
  return { rows: await serializeDeals(db, workspaceId, rows), total };
}

/** One sync page of visible deals (a deleted lead's leave with it: its tombstone says so). */
export async function syncDeals(db: Db, workspaceId: string, read: SyncRead) {
  const source = { scope: visibleDeals(db, workspaceId), updatedAt: 'deals.updated_at', id: 'deals.id', columns: ['deals.*'] };
  const { rows, pagination } = await syncPage<DealRow>(db, 'deals', source, read);
  return { data: await serializeDeals(db, workspaceId, rows), pagination };
}

/** Pipeline by id or case-insensitive name. */
async function resolvePipeline(trx: Db, workspaceId: string, ref: string): Promise<{ id: string; name: string }> {
  const q = trx('pipelines').where({ workspace_id: workspaceId });
  const row =
    (isUuid(ref) ? await q.clone().where({ id: ref }).first('id', 'name') : undefined) ??
    (await q.clone().whereRaw('lower(name) = lower(?)', [ref.trim()]).first('id', 'name'));
  if (!row)
    throw new ApiError('PIPELINE_NOT_FOUND', `Pipeline "${ref}" not found`, {
      hint: 'GET /api/v1/pipelines lists the accepted ids and names.',
    });
  return row;
}

/** Stage of the pipeline by id or case-insensitive name; none given: the first stage of the funnel. */
export async function resolveStage(trx: Db, pipelineId: string, ref: string | undefined): Promise<{ id: string; name: string }> {
  const stages: { id: string; name: string }[] = await trx('stages')
    .where({ pipeline_id: pipelineId })
    .orderBy('position')
    .select('id', 'name');
  if (stages.length === 0)
    throw new ApiError('PIPELINE_EMPTY', 'The pipeline has no stages', { hint: 'Add a stage to the pipeline first.' });
  if (ref === undefined) return stages[0];
  const wanted = ref.trim().toLowerCase();
  const stage = stages.find((s) => s.id === ref) ?? stages.find((s) => s.name.toLowerCase() === wanted);
  if (!stage) throw new ApiError('STAGE_NOT_FOUND', `Stage "${ref}" not found in this pipeline`);
  return stage;
}

/** Keeps only keys defined as custom fields of the pipeline or globally; unknown keys are dropped silently. */
async function knownCustomValues(
  trx: Db,
  workspaceId: string,
  pipelineId: string,
  values: Record<string, unknown>,
): Promise<Record<string, unknown>> {
  const keys = Object.keys(values);
  if (keys.length === 0) return {};
  const defined: string[] = await trx('custom_fields')
    .where({ workspace_id: workspaceId })
    .where((q) => q.where({ pipeline_id: pipelineId }).orWhereNull('pipeline_id'))
    .whereIn('key', keys)
    .pluck('key');
  return Object.fromEntries(keys.filter((k) => defined.includes(k)).map((k) => [k, values[k]]));
}

/** Which of `keys` are custom field keys of the workspace (global or of any pipeline). */
export async function definedCustomFieldKeys(db: Db, workspaceId: string, keys: string[]): Promise<string[]> {
  if (keys.length === 0) return [];
  return db('custom_fields').where({ workspace_id: workspaceId }).whereIn('key', keys).distinct().pluck('key');
}

/**
 * A contact's values of the custom fields `keys`, as a message to it is personalised with them (a
 * broadcast's `{{contact.<key>}}`): from its deals, the most recently updated deal holding a key winning.
 */
export async function contactCustomValues(
  db: Db,
  workspaceId: string,
  contactId: string,
  keys: string[],
): Promise<Record<string, unknown>> {
  if (keys.length === 0) return {};
  const { rows } = await db.raw<{ rows: { key: string; value: unknown }[] }>(
    `SELECT DISTINCT ON (kv.key) kv.key, kv.value
       FROM deals d, jsonb_each(d.custom_values) kv
      WHERE d.workspace_id = ? AND d.contact_id = ? AND kv.key = ANY(?::text[])
      ORDER BY kv.key, d.updated_at DESC, d.id DESC`,
    [workspaceId, contactId, keys],
  );
  return Object.fromEntries(rows.map((r) => [r.key, r.value]));
}

/** Takes a unit of the plan's deal quota: the workspace row lock makes concurrent creations count one by one. */
async function takeDealQuota(trx: Trx, workspaceId: string): Promise<void> {
  const plan = await workspacePlan(trx, workspaceId, ['deal_limit']);
  if (!plan || plan.deal_limit === null) return;
  // NO KEY UPDATE: serialises deal creation without blocking inserts that reference the workspace.
  await lockWorkspace(trx, workspaceId);
  const { count } = await trx('deals').where({ workspace_id: workspaceId }).first(trx.raw('count(*)::int AS count'));
  if (count >= plan.deal_limit) {
    throw new ApiError('DEAL_LIMIT_REACHED', `The plan allows ${plan.deal_limit} deals`, {
      hint: 'Existing deals stay readable; upgrade the plan to create more.',
    });
  }
}

export interface CreateDealInput {
  contactId: string;
  pipeline: string;
  stage?: string;
  name?: string;
  value?: number | null;
  product?: string;
  source?: string;
  assignedTo?: string;
  customValues?: Record<string, unknown>;
}

/** Creates a deal and records card.created and the card_created trigger in the same transaction. */
export async function createDeal(db: Db, workspaceId: string, input: CreateDealInput, options: { cause?: Cause } = {}) {
  const run = async (trx: Trx) => {
    const contact = await requireContact(trx, workspaceId, input.contactId);
    const pipeline = await resolvePipeline(trx, workspaceId, input.pipeline);
    const stage = await resolveStage(trx, pipeline.id, input.stage);
    const assignee = input.assignedTo !== undefined ? await resolveMember(trx, workspaceId, input.assignedTo, { byName: true }) : null;
    const product = input.product !== undefined ? await resolveOrCreateProduct(trx, workspaceId, input.product) : null;
    const customValues = await knownCustomValues(trx, workspaceId, pipeline.id, input.customValues ?? {});
    await takeDealQuota(trx, workspaceId);
    const name = input.name ?? (contact.name.trim() || contact.phone);
    const [row]: DealRow[] = await trx('deals')
      .insert({
        workspace_id: workspaceId,
        contact_id: contact.id,
        pipeline_id: pipeline.id,
        stage_id: stage.id,
        product_id: product?.id ?? null,
        assigned_to: assignee?.id ?? null,
        name: name.slice(0, 200),
        value: input.value ?? null,
        source: input.source ?? 'api',
        custom_values: JSON.stringify(dropNulls(customValues)),
      })
      .returning('*');
    await recordOutbox(
      trx,
      workspaceId,
      [
        { event: 'card.created', fields: cardFields(row) },
        { trigger: 'card_created', variables: dealVariables(row) },
      ],
      options.cause,
    );
    return serializeDeal(row, assignee?.name);
  };
  // Inside a caller's transaction this is a savepoint; otherwise its own transaction.
  return db.transaction(run);
}

function dropNulls(values: Record<string, unknown>): Record<string, unknown> {
  return Object.fromEntries(Object.entries(values).filter(([, v]) => v !== null));
}

export interface UpdateDealInput {
  name?: string;
  value?: number | null;
  stageId?: string;
  assignedTo?: string | null;
  status?: DealStatus;
  lostReason?: string;
  customValues?: Record<string, unknown>;
}

/**
 * The single mutation of a deal. The row is locked first, so identical concurrent requests are
 * applied one after the other: the second sees the stage or status already in place, changes
 * nothing and records no event (status changes and stage moves are atomic). Inside a caller's
 * transaction (a batch chunk) its transaction is a savepoint.
 */
export async function updateDeal(
  db: Db,
  workspaceId: string,
  dealId: string,
  input: UpdateDealInput,
  actor: Actor,
  options: { cause?: Cause } = {},
) {
  return db.transaction(async (trx) => {
    const {
      assignee_name: assigneeName,
      move_to: moveTo,
      move_from: moveFrom,
      ...before
    } = await lockDeal(trx, workspaceId, dealId, input.stageId);
    const changes: Record<string, unknown> = {};
    const after = (): DealRow => ({ ...before, ...changes }) as DealRow;

    if (input.name !== undefined && input.name !== before.name) changes.name = input.name;
    if (input.value !== undefined && money(before.value) !== input.value) changes.value = input.value;
    if (input.assignedTo !== undefined) {
      const member = input.assignedTo === null ? null : await resolveMember(trx, workspaceId, input.assignedTo);
      if ((member?.id ?? null) !== before.assigned_to) changes.assigned_to = member?.id ?? null;
    }

    let move: { from: StageOfMove; to: StageOfMove } | undefined;
    if (input.stageId !== undefined) {
      if (!moveTo) throw new ApiError('STAGE_NOT_FOUND', 'Stage not found', { hint: 'GET /api/v1/pipelines lists the stages.' });
      if (moveTo.id !== before.stage_id) {
        // A stage of another pipeline of the workspace moves the deal to that pipeline.
        Object.assign(changes, { stage_id: moveTo.id, pipeline_id: moveTo.pipeline_id });
        move = { from: moveFrom!, to: moveTo };
      }
    }

    const status = input.status ?? before.status;
    if (input.lostReason !== undefined && status !== 'lost') {
      throw new ApiError('VALIDATION', 'Invalid body.lostReason: only with status "lost"', {
        hint: 'Send status: "lost" with the reason.',
      });
    }
    const transition = input.status !== undefined && input.status !== before.status ? input.status : undefined;
    if (transition === 'won') Object.assign(changes, { status: 'won', closed_at: trx.fn.now(), lost_reason: null });
    if (transition === 'lost') Object.assign(changes, { status: 'lost', closed_at: trx.fn.now(), lost_reason: input.lostReason });
    if (transition === 'open') Object.assign(changes, { status: 'open', closed_at: null, lost_reason: null });
    if (!transition && status === 'lost' && input.lostReason !== undefined && input.lostReason !== before.lost_reason)
      changes.lost_reason = input.lostReason;

    if (input.customValues !== undefined) {
      const known = await knownCustomValues(trx, workspaceId, after().pipeline_id, input.customValues);
      const merged = dropNulls({ ...before.custom_values, ...known });
      if (JSON.stringify(merged) !== JSON.stringify(before.custom_values)) changes.custom_values = JSON.stringify(merged);
    }

    if (Object.keys(changes).length === 0) return serializeDeal(before, assigneeName);

    // The change's events and triggers, in this order.
    const records = (row: DealRow): OutboxRecord[] => {
      const recorded: OutboxRecord[] = [];
      if (move) {
        recorded.push(
          {
            event: 'card.moved',
            fields: { card_id: row.id, from_stage_id: move.from.id, to_stage_id: move.to.id, contact_id: row.contact_id, name: row.name },
          },
          {
            trigger: 'stage_changed',
            variables: {
              dealId: row.id,
              contactId: row.contact_id,
              pipelineId: row.pipeline_id,
              fromStageId: move.from.id,
              toStageId: move.to.id,
            },
          },
        );
      }
      if (transition === 'won') {
        recorded.push(
          { event: 'card.won', fields: { ...cardFields(row), value: money(row.value), closed_at: iso(row.closed_at) } },
          { trigger: 'deal_won', variables: dealVariables(row) },
        );
      }
      if (transition === 'lost') {
        recorded.push(
          { event: 'card.lost', fields: { ...cardFields(row), lost_reason: row.lost_reason, closed_at: iso(row.closed_at) } },
          { trigger: 'deal_lost', variables: { ...dealVariables(row), lostReason: row.lost_reason } },
        );
      }
      return recorded;
    };
    // The activity, and the records when they read only what this request already knows (the deal
    // as changed here), are written by the UPDATE's own statement. A won or lost deal's records
    // read what PostgreSQL writes (its closedAt, its value as numeric(14, 2) keeps it): they follow it.
    const write = trx('deals')
      .where({ workspace_id: workspaceId, id: before.id })
      .update({ ...changes, updated_at: trx.fn.now() })
      .returning([...DEAL_COLUMNS, trx.raw(ASSIGNEE_NAME)]);
    if (move) {
      write.with(
        'activity',
        trx('deal_activities').insert({
          workspace_id: workspaceId,
          deal_id: before.id,
          type: 'stage_changed',
          actor_member_id: actor.memberId,
          actor_name: actor.name,
          meta: JSON.stringify({ from: move.from.name, to: move.to.name, fromStageId: move.from.id, toStageId: move.to.id }),
        }),
      );
    }
    const known = transition === 'won' || transition === 'lost' ? [] : records(after());
    if (known.length > 0) write.with('outbox', outboxInsert(trx, workspaceId, known, options.cause));
    const [row]: DealWithAssignee[] = await prepared(write);
    if (known.length === 0) await recordOutbox(trx, workspaceId, records(row), options.cause);
    return serializeDeal(row, row.assignee_name);
  });
}

/** A deal batch item: without `id` it creates a deal, with one it changes that deal. */
export type DealBatchInput = ({ id?: undefined } & CreateDealInput) | ({ id: string } & UpdateDealInput);

/**
 * One chunk of a deal batch (POST /api/v1/deals/batch): each item is the single create or update,
 * in its own savepoint. The updates go first, by deal id, so concurrent batches lock deals in the
 * same order; then the creates in request order, each taking its unit of the plan's deal quota
 * (the items past the quota answer DEAL_LIMIT_REACHED).
 */
export async function dealChunk(trx: Trx, workspaceId: string, chunk: BatchInput<DealBatchInput>[], actor: Actor): Promise<ItemAnswer[]> {
  const updates = chunk
    .filter((item) => item.input.id !== undefined)
    .sort((a, b) => (a.input.id! < b.input.id! ? -1 : a.input.id! > b.input.id! ? 1 : a.index - b.index));
  const creates = chunk.filter((item) => item.input.id === undefined);
  const answers: ItemAnswer[] = [];
  for (const { index, input } of updates) {
    const { id, ...changes } = input as { id: string } & UpdateDealInput;
    answers.push(await answerItem(index, async () => ({ status: 200, data: await updateDeal(trx, workspaceId, id, changes, actor) })));
  }
  for (const { index, input } of creates) {
    answers.push(
      await answerItem(index, async () => ({ status: 201, data: await createDeal(trx, workspaceId, input as CreateDealInput) })),
    );
  }
  return answers;
}

/** Activity `meta` exposes only these keys; with none left it is null. */
const META_KEYS = ['outcome', 'attemptNo', 'from', 'to'] as const;

export function serializeActivity(row: {
  id: string;
  type: string;
  actor_name: string;
  meta: Record<string, unknown> | null;
  created_at: Date | string;
}) {
  const kept = META_KEYS.filter((k) => row.meta && Object.prototype.hasOwnProperty.call(row.meta, k));
  return {
    id: row.id,
    type: row.type,
    actorName: row.actor_name,
    meta: kept.length ? Object.fromEntries(kept.map((k) => [k, row.meta![k]])) : null,
    createdAt: iso(row.created_at),
  };
}

/** The deal activities page (listDealActivities): the same text on every call, compiled once. */
const dealActivitiesPage = compiledOnce((db, v: { workspaceId: string; dealId: string; limit: number; offset: number }) => {
  // The total is counted once, with the deal (a materialized CTE): in the select list it ran once per entry of the page.
  const deal = visibleDeals(db, v.workspaceId)
    .clearSelect()
    .where('deals.id', v.dealId)
    .select('deals.id', 'deals.workspace_id', {
      [PAGE_TOTAL]: db('deal_activities as c').whereRaw('c.workspace_id = deals.workspace_id AND c.deal_id = deals.id').count('*'),
    });
  return db
    .withMaterialized('deal', deal)
    .from('deal')
    .joinRaw(
      `LEFT JOIN LATERAL (SELECT a.id, a.type, a.actor_name, a.meta, a.created_at FROM deal_activities a
                           WHERE a.workspace_id = deal.workspace_id AND a.deal_id = deal.id
                           ORDER BY a.created_at DESC, a.id DESC LIMIT ? OFFSET ?) entry ON true`,
      [v.limit, v.offset],
    )
    .select(
      'entry.id',
      'entry.type',
      'entry.actor_name',
      'entry.meta',
      'entry.created_at',
      'deal.id AS visible_deal',
      `deal.${PAGE_TOTAL}`,
    );
});

/**
 * A visible deal's timeline, newest first; an unknown or hidden deal is 404 NOT_FOUND. One
 * statement: the deal (its visibility), its page of entries and their exact total. The deal's row
 * comes back once with no entry when the page is empty, and not at all when the deal is not visible.
 */
export async function listDealActivities(db: Db, workspaceId: string, dealId: string, page: Page) {
  if (!isUuid(dealId)) throw new ApiError('NOT_FOUND', 'Deal not found');
  type Row = Parameters<typeof serializeActivity>[0] & { visible_deal: string; [PAGE_TOTAL]: string };
  const { rows } = (await prepared(
    instantsAsText(dealActivitiesPage(db, { workspaceId, dealId, limit: page.limit, offset: page.offset })),
  )) as { rows: Row[] };
  if (rows.length === 0) throw new ApiError('NOT_FOUND', 'Deal not found');
  return { rows: rows.filter((r) => r.id !== null).map(serializeActivity), total: Number(rows[0][PAGE_TOTAL]) };
}

/** A merge (domain/merge): the duplicate contact's deals become the survivor's. */
export async function moveContactDeals(trx: Trx, workspaceId: string, fromContactId: string, toContactId: string): Promise<void> {
  await trx('deals')
    .where({ workspace_id: workspaceId, contact_id: fromContactId })
    .update({ contact_id: toContactId, updated_at: trx.fn.now() });
}

/**
 * The lead list's deal filters (`pipelineId`, `stageId` and `status` describe ONE deal that must
 * satisfy all of them): the matching deals of the contact `contactIdColumn` names in the lead
 * list's statement, as a correlated sub-query (domain/leads listLeads takes it: leads cannot import sales).
 */
export function matchingDealsOfContact(
  db: Db,
  workspaceId: string,
  contactIdColumn: string,
  f: { pipelineId?: string; stageId?: string; status?: DealStatus },
): Knex.QueryBuilder {
  const deal = db('deals as d').whereRaw(`d.contact_id = ${contactIdColumn}`).where('d.workspace_id', workspaceId);
  if (f.pipelineId) deal.where('d.pipeline_id', f.pipelineId);
  if (f.stageId) deal.where('d.stage_id', f.stageId);
  if (f.status) deal.where('d.status', f.status);
  return deal;
}
