import type { Knex } from 'knex';
import type { Db } from '../platform';
import { ApiError, iso, isUuid, newestFirst, type Page, pageWithTotal } from '../kernel';
import { approvedTemplate, chooseInstance, refuseUnsendable, sendCandidates, sendingPlan } from '../messaging';
import { existingTagIds, listExists, segmentContacts } from '../leads';
import { lockWorkspace } from '../access';
import { definedCustomFieldKeys } from '../sales';
import { recordOutbox } from '../webhooks';
import type { MessageContent, TemplateButton, TemplateHeader } from '../../types/messaging';

import { customVariableKeys, personalTexts } from './recipients';

/** The statuses of a public broadcast (`draft` is the admin route's record only). */
export const PUBLIC_BROADCAST_STATUSES = ['scheduled', 'in_progress', 'paused', 'completed', 'cancelled'] as const;
export type PublicBroadcastStatus = (typeof PUBLIC_BROADCAST_STATUSES)[number];

export const RECIPIENT_STATUSES = ['pending', 'sent', 'delivered', 'read', 'failed', 'skipped'] as const;
export type RecipientStatus = (typeof RECIPIENT_STATUSES)[number];

/** Audience bounds (tag ids, lead ids) and pacing bounds (provider calls a second). */
export const MAX_AUDIENCE_TAGS = 20;
export const MAX_AUDIENCE_LEADS = 1000;
/** Broadcasts not finished yet (scheduled, in progress, paused) a workspace may hold: each is a workflow. */
export const MAX_ACTIVE_BROADCASTS = 20;
export const MIN_RATE_PER_SECOND = 1;
export const MAX_RATE_PER_SECOND = 80;
export const DEFAULT_RATE_PER_SECOND = 20;

/** Statuses in which a broadcast still uses its tags: deleting one of them is 409 TAG_IN_USE (refuseTagInUse). */
export const TAG_BLOCKING_STATUSES = ['scheduled', 'in_progress', 'paused'] as const;

export interface BroadcastAudience {
  tagIds?: string[];
  listId?: string;
  leadIds?: string[];
}

export interface BroadcastTemplate {
  name: string;
  language: string;
  variables?: string[];
  /** The send's `templateHeader`; its `text` may use `{{contact.*}}` like the variables. */
  header?: TemplateHeader;
  /** The send's `templateButtons`; each `urlVariable` may use `{{contact.*}}` like the variables. */
  buttons?: TemplateButton[];
}

/** A broadcast's template as a send's message carries it (the send rules check it: domain/messaging templateComponents). */
export function broadcastMessage(template: BroadcastTemplate): MessageContent & { type: 'template'; templateVariables: string[] } {
  return {
    type: 'template',
    templateName: template.name,
    templateLanguage: template.language,
    templateVariables: template.variables ?? [],
    ...(template.header ? { templateHeader: template.header } : {}),
    ...(template.buttons?.length ? { templateButtons: template.buttons } : {}),
  };
}

export interface BroadcastInput {
  name: string;
  instanceId?: string;
  audience: BroadcastAudience;
  template: BroadcastTemplate;
  scheduledAt?: string;
  ratePerSecond?: number;
}

export interface BroadcastRow {
  id: string;
  workspace_id: string;
  name: string;
  status: string;
  instance_id: string | null;
  audience: BroadcastAudience;
  template: BroadcastTemplate | null;
  scheduled_at: Date | null;
  started_at: Date | null;
  finished_at: Date | null;
  waiting_until: Date | null;
  code: string | null;
  rate_per_second: number;
  created_at: Date;
  updated_at: Date;
}

export type BroadcastCounts = Record<RecipientStatus | 'total', number>;

const notFound = () => new ApiError('NOT_FOUND', 'Broadcast not found');

/**
 * Counts of each broadcast's recipients by status; one row per recipient, so they add up to
 * `total`. A `sent` recipient follows the provider's status callbacks on its message
 * (`delivered`, `read`, `failed`): a trigger on `messages` moves the row (migration
 * 20261127070100), so this reads the broadcast's own rows only.
 */
export async function broadcastCounts(db: Db, workspaceId: string, broadcastIds: string[]): Promise<Map<string, BroadcastCounts>> {
  const out = new Map<string, BroadcastCounts>();
  for (const id of broadcastIds) out.set(id, { total: 0, pending: 0, sent: 0, delivered: 0, read: 0, failed: 0, skipped: 0 });
  if (broadcastIds.length === 0) return out;
  const { rows } = await db.raw<{ rows: { broadcast_id: string; status: RecipientStatus; n: number }[] }>(
    `SELECT r.broadcast_id, r.status, count(*)::int AS n
       FROM broadcast_recipients r
      WHERE r.workspace_id = ? AND r.broadcast_id = ANY(?::uuid[])
      GROUP BY 1, 2`,
    [workspaceId, broadcastIds],
  );
  for (const row of rows) {
    const counts = out.get(row.broadcast_id)!;
    counts[row.status] += row.n;
    counts.total += row.n;
  }
  return out;
}

export function serializeBroadcast(row: BroadcastRow, counts: BroadcastCounts) {
  return {
    id: row.id,
    name: row.name,
    status: row.status as PublicBroadcastStatus,
    instanceId: row.instance_id,
    audience: row.audience,
    template: row.template,
    scheduledAt: iso(row.scheduled_at),
    startedAt: iso(row.started_at),
    finishedAt: iso(row.finished_at),
    waitingUntil: iso(row.waiting_until),
    code: row.code,
    ratePerSecond: row.rate_per_second,
    counts,
    createdAt: iso(row.created_at)!,
    updatedAt: iso(row.updated_at)!,
  };
}
export type Broadcast = ReturnType<typeof serializeBroadcast>;

async function withCounts(db: Db, row: BroadcastRow): Promise<Broadcast> {
  return serializeBroadcast(row, (await broadcastCounts(db, row.workspace_id, [row.id])).get(row.id)!);
}

/**
 * How many contacts the audience holds now: canonical leads (not deleted, merged or groups) tagged
 * with any of the tags, in the list, or named, each once (domain/leads segmentContacts, `contacts as c`).
 */
export async function audienceSize(db: Db, workspaceId: string, audience: BroadcastAudience): Promise<number> {
  const [row] = await segmentContacts(db, workspaceId, audience).count<{ n: string | number }[]>({ n: '*' });
  return Number(row.n);
}

function limitReached(limit: number, size: number): ApiError {
  return new ApiError('BROADCAST_LIMIT_REACHED', `The audience holds ${size} contacts; the plan allows ${limit} per broadcast`, {
    hint: 'Narrow the audience (fewer tags, a smaller list) or split it into several broadcasts.',
  });
}

/**
 * A new broadcast, checked in this order (the first failure answers): the instance, with the
 * rules of a send (404 INSTANCE_NOT_FOUND, 422 NO_INSTANCE / INSTANCE_REQUIRED /
 * INSTANCE_DISCONNECTED / TEMPLATE_UNSUPPORTED); the template, approved on that instance, its
 * variables, header and buttons fitting it (domain/messaging templateComponents), each
 * `{{contact.<key>}}` a contact field or a custom field key (422 TEMPLATE_INVALID); the audience's tags and list, of the workspace
 * (404 NOT_FOUND); its size against the plan's broadcastLimit (402 BROADCAST_LIMIT_REACHED).
 * Lead ids that are not leads of the workspace add nobody. The broadcast is `scheduled`; its
 * workflow (workflows/broadcast.ts) freezes the audience when it starts.
 */
export async function createPublicBroadcast(db: Db, workspaceId: string, input: BroadcastInput): Promise<Broadcast> {
  return db.transaction(async (trx) => {
    if (input.instanceId !== undefined && !isUuid(input.instanceId))
      throw new ApiError('INSTANCE_NOT_FOUND', 'Instance not found in this workspace');
    const instance = chooseInstance(await sendCandidates(trx, workspaceId, input.instanceId), input.instanceId);
    const message = broadcastMessage(input.template);
    const template = await approvedTemplate(trx, workspaceId, instance.id, input.template.name, input.template.language);
    // The send's own rules, for any recipient: an opt-out is decided per recipient, and a template needs no window.
    refuseUnsendable({
      instance,
      contact: { opted_out: false },
      conversation: { last_inbound_at: null },
      message,
      template,
      now: new Date(),
    });
    const keys = customVariableKeys(personalTexts(input.template));
    const defined = await definedCustomFieldKeys(trx, workspaceId, keys);
    const unknown = keys.filter((k) => !defined.includes(k));
    if (unknown.length) {
      throw new ApiError('TEMPLATE_INVALID', `Unknown variable {{contact.${unknown[0]}}}`, {
        hint: 'A variable may use {{contact.name}}, {{contact.phone}}, {{contact.email}} and the key of a custom field.',
      });
    }

    const tagIds = [...new Set(input.audience.tagIds ?? [])];
    const leadIds = [...new Set(input.audience.leadIds ?? [])].filter(isUuid);
    if (tagIds.some((id) => !isUuid(id))) throw new ApiError('NOT_FOUND', 'Tag not found in this workspace');
    if (tagIds.length) {
      const found = await existingTagIds(trx, workspaceId, tagIds, { lock: 'share' });
      if (found.length !== tagIds.length) throw new ApiError('NOT_FOUND', 'Tag not found in this workspace');
    }
    if (input.audience.listId !== undefined && !(await listExists(trx, workspaceId, input.audience.listId)))
      throw new ApiError('NOT_FOUND', 'List not found in this workspace');
    const audience: BroadcastAudience = {
      ...(tagIds.length ? { tagIds } : {}),
      ...(input.audience.listId !== undefined ? { listId: input.audience.listId } : {}),
      ...(input.audience.leadIds !== undefined ? { leadIds: [...new Set(input.audience.leadIds)] } : {}),
    };
    const plan = await sendingPlan(trx, workspaceId);
    if (plan?.broadcast_limit !== null && plan?.broadcast_limit !== undefined) {
      const size = await audienceSize(trx, workspaceId, { ...audience, leadIds });
      if (size > plan.broadcast_limit) throw limitReached(plan.broadcast_limit, size);
    }

    // The workspace row lock makes concurrent creations count one by one.
    await lockWorkspace(trx, workspaceId);
    const { active } = await trx('broadcasts')
      .where({ workspace_id: workspaceId })
      .whereIn('status', TAG_BLOCKING_STATUSES)
      .first(trx.raw('count(*)::int AS active'));
    if (active >= MAX_ACTIVE_BROADCASTS) {
      throw new ApiError('ACTIVE_BROADCAST_LIMIT_REACHED', `At most ${MAX_ACTIVE_BROADCASTS} broadcasts can be unfinished at once`, {
        hint: 'Wait for one to complete, or cancel one.',
      });
    }

    const now = Date.now();
    const scheduled = input.scheduledAt ? new Date(input.scheduledAt) : undefined;
    const [row] = await trx('broadcasts')
      .insert({
        workspace_id: workspaceId,
        status: 'scheduled',
        name: input.name,
        instance_id: instance.id,
        audience: JSON.stringify(audience),
        // As the message carries it: variables always, buttons only when there are some.
        template: JSON.stringify({ ...input.template, variables: message.templateVariables, buttons: message.templateButtons }),
        // No time, or one in the past: now.
        scheduled_at: scheduled && scheduled.getTime() > now ? scheduled : new Date(now),
        rate_per_second: input.ratePerSecond ?? DEFAULT_RATE_PER_SECOND,
      })
      .returning('*');
    if (tagIds.length)
      await trx('broadcast_tags').insert(tagIds.map((tagId) => ({ workspace_id: workspaceId, broadcast_id: row.id, tag_id: tagId })));
    return withCounts(trx, row);
  });
}

/** Removes a broadcast whose workflow could not be started (nothing was frozen or sent). */
export async function discardBroadcast(db: Db, workspaceId: string, broadcastId: string): Promise<void> {
  await db('broadcasts').where({ workspace_id: workspaceId, id: broadcastId, status: 'scheduled' }).whereNull('started_at').delete();
}

export async function listPublicBroadcasts(db: Db, workspaceId: string, input: Page & { status?: PublicBroadcastStatus }) {
  const scope = db('broadcasts').where({ workspace_id: workspaceId }).whereNot('status', 'draft');
  if (input.status) scope.where({ status: input.status });
  const { rows, total } = await pageWithTotal<BroadcastRow>(scope, input, (q) => q.orderBy(newestFirst()).select('*'));
  const counts = await broadcastCounts(
    db,
    workspaceId,
    rows.map((r) => r.id),
  );
  return { rows: rows.map((r) => serializeBroadcast(r, counts.get(r.id)!)), total };
}

async function broadcastRow(db: Db, workspaceId: string, id: string, lock = false): Promise<BroadcastRow> {
  if (!isUuid(id)) throw notFound();
  const query = db('broadcasts').where({ workspace_id: workspaceId, id }).whereNot('status', 'draft');
  if (lock) query.forUpdate();
  const row: BroadcastRow | undefined = await query.first();
  if (!row) throw notFound();
  return row;
}

export async function getPublicBroadcast(db: Db, workspaceId: string, id: string): Promise<Broadcast> {
  return withCounts(db, await broadcastRow(db, workspaceId, id));
}

export async function listRecipients(db: Db, workspaceId: string, id: string, input: Page & { status?: RecipientStatus }) {
  await broadcastRow(db, workspaceId, id);
  const scope = db('broadcast_recipients as r').where({ 'r.workspace_id': workspaceId, 'r.broadcast_id': id });
  if (input.status) scope.where('r.status', input.status);
  const { rows, total } = await pageWithTotal<{
    contact_id: string;
    phone: string;
    status: RecipientStatus;
    code: string | null;
    message_id: string | null;
    conversation_id: string | null;
    sent_at: Date | null;
  }>(scope, input, (q) =>
    q.orderBy('r.position').select('r.contact_id', 'r.phone', 'r.status', 'r.code', 'r.message_id', 'r.conversation_id', 'r.sent_at'),
  );
  return {
    rows: rows.map((r) => ({
      contactId: r.contact_id,
      phone: r.phone,
      status: r.status,
      code: r.code,
      messageId: r.message_id,
      conversationId: r.conversation_id,
      sentAt: iso(r.sent_at),
    })),
    total,
  };
}

function invalidState(row: BroadcastRow, move: string): ApiError {
  return new ApiError('INVALID_STATE', `A broadcast that is ${row.status} cannot be ${move}`, {
    hint: 'Pause a scheduled or in-progress broadcast, resume a paused one, cancel one that has not finished.',
  });
}

/**
 * Pause, resume, cancel: one conditional update under the row's lock, so the answer already
 * carries the new status, and a batch stops before its next recipient once its read of the row
 * (at most 250 ms old) sees it.
 * Pause: `scheduled` or `in_progress` → `paused`. Resume: `paused` → `in_progress`, or back to
 * `scheduled` when it was paused before it started (it then starts at `scheduledAt`, or at once
 * if that has passed). Cancel: `scheduled`, `in_progress` or `paused` → `cancelled` (recipients
 * not yet sent stay `pending`). A move by the user clears the service's `code`.
 */
export async function moveBroadcast(db: Db, workspaceId: string, id: string, move: 'pause' | 'resume' | 'cancel'): Promise<Broadcast> {
  return db.transaction(async (trx) => {
    const row = await broadcastRow(trx, workspaceId, id, true);
    const moves: Record<typeof move, { from: string[]; to: string; past: string }> = {
      pause: { from: ['scheduled', 'in_progress'], to: 'paused', past: 'paused' },
      resume: { from: ['paused'], to: row.started_at ? 'in_progress' : 'scheduled', past: 'resumed' },
      cancel: { from: ['scheduled', 'in_progress', 'paused'], to: 'cancelled', past: 'cancelled' },
    };
    const rule = moves[move];
    if (!rule.from.includes(row.status)) throw invalidState(row, rule.past);
    const [updated] = await trx('broadcasts')
      .where({ workspace_id: workspaceId, id })
      .update({
        status: rule.to,
        code: null,
        updated_at: trx.fn.now(),
        ...(move === 'cancel' ? { finished_at: trx.fn.now(), waiting_until: null } : {}),
      })
      .returning('*');
    return withCounts(trx, updated);
  });
}

/* ------------------------------------------------------------------------------------------------
 * What the broadcast's workflow does (activities/broadcasts.ts)
 * ---------------------------------------------------------------------------------------------- */

/** The broadcast as the worker reads it, unchanged (undefined when it is gone). */
export async function broadcastForRun(db: Db, workspaceId: string, id: string): Promise<BroadcastRow | undefined> {
  return db('broadcasts').where({ workspace_id: workspaceId, id }).first();
}

/** The workflow id of a broadcast: one run per broadcast. */
export function broadcastWorkflowId(workspaceId: string, broadcastId: string): string {
  return `broadcast/${workspaceId}/${broadcastId}`;
}

/**
 * Starts a scheduled broadcast: the audience is frozen (one recipient row per contact, inserted
 * once whatever the retries), the plan's broadcastLimit checked again (over it, the broadcast is
 * cancelled without sending, code BROADCAST_LIMIT_REACHED), the status moves to `in_progress` and `broadcast.started` is
 * recorded, all in one transaction. Anything but `scheduled` is left as it is and returned.
 */
export async function freezeAudience(db: Db, workspaceId: string, id: string): Promise<{ status: string }> {
  let frozen = 0;
  const started = await db.transaction(async (trx) => {
    const row: BroadcastRow | undefined = await trx('broadcasts').where({ workspace_id: workspaceId, id }).forUpdate().first();
    if (!row) return { status: 'cancelled' };
    if (row.status !== 'scheduled') return { status: row.status };
    const audience = { ...row.audience, leadIds: (row.audience.leadIds ?? []).filter(isUuid) };
    const plan = await sendingPlan(trx, workspaceId);
    const limit = plan?.broadcast_limit ?? null;
    if (limit !== null && (await audienceSize(trx, workspaceId, audience)) > limit) {
      await trx('broadcasts')
        .where({ workspace_id: workspaceId, id })
        .update({ status: 'cancelled', code: 'BROADCAST_LIMIT_REACHED', finished_at: trx.fn.now(), updated_at: trx.fn.now() });
      return { status: 'cancelled' };
    }
    const contacts = segmentContacts(trx, workspaceId, audience).select(
      trx.raw('?::uuid AS workspace_id', [workspaceId]),
      trx.raw('?::uuid AS broadcast_id', [id]),
      'c.id AS contact_id',
      'c.phone',
      trx.raw('(row_number() OVER (ORDER BY c.created_at, c.id))::int - 1 AS position'),
      trx.raw(`'broadcast/' || ?::text || '/' || c.id::text AS reference`, [id]),
    );
    frozen =
      (
        await trx.raw(
          `INSERT INTO broadcast_recipients (workspace_id, broadcast_id, contact_id, phone, position, reference)
           ${contacts.toString()}
           ON CONFLICT DO NOTHING`,
        )
      ).rowCount ?? 0;
    const [started] = await trx('broadcasts')
      .where({ workspace_id: workspaceId, id })
      .update({ status: 'in_progress', started_at: trx.fn.now(), updated_at: trx.fn.now() })
      .returning('*');
    const counts = (await broadcastCounts(trx, workspaceId, [id])).get(id)!;
    await recordOutbox(trx, workspaceId, [{ event: 'broadcast.started', fields: { broadcast_id: id, name: started.name, counts } }]);
    return { status: 'in_progress' };
  });
  if (frozen >= ANALYZE_AFTER_RECIPIENTS) await analyzeRecipients(db);
  return started;
}

/**
 * Recipients frozen at once from which their table's statistics are taken again: the pages'
 * statements find a broadcast's recipients by the broadcast's id, and statistics that have never
 * seen that id put it at one row, so PostgreSQL scans every pending recipient of the broadcast
 * instead of probing the page's (3-4 ms a page at 5,000 recipients, growing with the broadcast).
 * Autovacuum would come too late, and not at all on a server that runs without it.
 */
const ANALYZE_AFTER_RECIPIENTS = 1000;

/**
 * ANALYZE of broadcast_recipients (a sample of 30,000 rows by default, whatever the table's size),
 * given up when another maintenance holds the table or it runs long (the freeze's activity has
 * 30 s): the broadcast then goes on with the plans it has.
 */
async function analyzeRecipients(db: Db): Promise<void> {
  await db
    .transaction(async (trx) => {
      await trx.raw(`SET LOCAL lock_timeout = '2s'`);
      await trx.raw(`SET LOCAL statement_timeout = '10s'`);
      await trx.raw('ANALYZE broadcast_recipients');
    })
    .catch((err: { code?: string }) => {
      // lock_not_available, query_canceled (the timeouts above).
      if (err.code !== '55P03' && err.code !== '57014') throw err;
    });
}

/**
 * `in_progress` with no recipient pending → `completed`, with `broadcast.completed`, once (a
 * conditional update). Returns the status it leaves.
 */
export async function completeBroadcast(db: Db, workspaceId: string, id: string): Promise<string> {
  return db.transaction(async (trx) => {
    const row: BroadcastRow | undefined = await trx('broadcasts').where({ workspace_id: workspaceId, id }).forUpdate().first();
    if (!row) return 'cancelled';
    if (row.status !== 'in_progress') return row.status;
    const pending = await trx('broadcast_recipients')
      .where({ workspace_id: workspaceId, broadcast_id: id, status: 'pending' })
      .first('contact_id');
    if (pending) return row.status;
    await trx('broadcasts')
      .where({ workspace_id: workspaceId, id })
      .update({ status: 'completed', finished_at: trx.fn.now(), waiting_until: null, code: null, updated_at: trx.fn.now() });
    const counts = (await broadcastCounts(trx, workspaceId, [id])).get(id)!;
    await recordOutbox(trx, workspaceId, [{ event: 'broadcast.completed', fields: { broadcast_id: id, name: row.name, counts } }]);
    return 'completed';
  });
}

export const BROADCAST_STATUSES = ['draft', 'scheduled', 'in_progress', 'paused', 'completed', 'cancelled'] as const;

/**
 * Records a broadcast and the tags it uses, all of the workspace (an unknown tag is 404
 * NOT_FOUND); a `scheduled`, `in_progress` or `paused` one blocks deleting those tags (refuseTagInUse).
 * The admin API's record for operators' tests: it starts no workflow (createPublicBroadcast is the public one).
 */
export async function createBroadcast(
  db: Db,
  workspaceId: string,
  input: { tagIds: string[]; status: (typeof BROADCAST_STATUSES)[number] },
) {
  const tagIds = [...new Set(input.tagIds)];
  return db.transaction(async (trx) => {
    const found = await existingTagIds(trx, workspaceId, tagIds);
    if (found.length !== tagIds.length) throw new ApiError('NOT_FOUND', 'Tag not found in this workspace');
    const [row] = await trx('broadcasts').insert({ workspace_id: workspaceId, status: input.status }).returning('*');
    if (tagIds.length) {
      await trx('broadcast_tags').insert(tagIds.map((tagId) => ({ workspace_id: workspaceId, broadcast_id: row.id, tag_id: tagId })));
    }
    return { id: row.id, status: row.status, tagIds, createdAt: iso(row.created_at) };
  });
}

/**
 * A tag used by a broadcast that has not finished (scheduled, in progress or paused) cannot be
 * deleted: 409 TAG_IN_USE. The guard of domain/leads deleteTag, run once the tag row is locked
 * (which blocks a concurrent insert of a broadcast_tags row referencing it: the foreign-key check
 * needs a share lock on the tag); the broadcasts using it are then share-locked, so a broadcast
 * being switched to `in_progress` concurrently is either seen as in progress or waits until the
 * tag is gone.
 */
export async function refuseTagInUse(trx: Knex.Transaction, workspaceId: string, tagId: string): Promise<void> {
  const { rows } = await trx.raw(
    `SELECT b.id, b.status FROM broadcasts b
       JOIN broadcast_tags bt ON bt.broadcast_id = b.id
      WHERE bt.workspace_id = ? AND bt.tag_id = ?
      FOR SHARE OF b`,
    [workspaceId, tagId],
  );
  const blocking: readonly string[] = TAG_BLOCKING_STATUSES;
  const inProgress = (rows as { id: string; status: string }[]).filter((b) => blocking.includes(b.status));
  if (inProgress.length) {
    throw new ApiError('TAG_IN_USE', 'The tag is used by a broadcast in progress', {
      hint: `Broadcast${inProgress.length > 1 ? 's' : ''} ${inProgress
        .slice(0, 5)
        .map((b) => b.id)
        .join(', ')}; retry when finished.`,
    });
  }
}
