import type { Knex } from 'knex';
import { type Db, insertJsonRowSql } from '../platform';

/**
 * Business events and automation triggers are written to the outbox in the same transaction as
 * the change that causes them, so none is lost between a commit and its delivery.
 */
export const WEBHOOK_EVENTS = [
  'lead.created',
  'contact.created',
  'contact.updated',
  // A lead leaves the CRM: soft-deleted, or merged into another contact (the event names the survivor).
  'contact.deleted',
  'contact.merged',
  'message.received',
  // An outbound message moved forward: delivered, read, or failed (never the initial sent).
  'message.status_updated',
  'contact.tag_added',
  'contact.tag_removed',
  'card.created',
  'card.moved',
  'card.won',
  'card.lost',
  // A broadcast froze its audience and began sending; it sent (or skipped) every recipient.
  'broadcast.started',
  'broadcast.completed',
  // The AI insight of a contact was derived anew from its conversations (domain/insights).
  'contact.insight_updated',
] as const;
export type WebhookEvent = (typeof WEBHOOK_EVENTS)[number];

export const TRIGGERS = [
  'stage_changed',
  'deal_won',
  'deal_lost',
  'card_created',
  'contact_updated',
  'webhook_received',
  'insight_updated',
  // Internal: a message in or out of a contact's conversation, in a workspace that derives insights
  // (the dispatcher signals the contact's insight workflow; no automation has this trigger).
  'conversation_activity',
] as const;
export type Trigger = (typeof TRIGGERS)[number];

type Writer = Knex | Knex.Transaction;

/**
 * What caused a change: a direct request (depth 0, no chain) or an automation run, `depth` runs
 * deep in the chain that began with one root event (`chain`: that root's id). Loop protection reads
 * both: the depth bounds how deep a chain goes, the chain id how many runs it may start in all.
 */
export interface Cause {
  depth: number;
  chain: string | null;
}
export const DIRECT: Cause = { depth: 0, chain: null };

/** What a change records in the outbox: outbound events and automation triggers. */
export type OutboxRecord =
  { event: WebhookEvent; fields: Record<string, unknown> } | { trigger: Trigger; variables: Record<string, unknown> };

/**
 * A change's events and triggers in one statement, in this order (their `seq` follows it): one round trip
 * for a deal move's card.moved and stage_changed, or a batch's records, instead of one each.
 * An event's fields sit at the root of its payload next to `event`, `workspace_id` and `timestamp`.
 */
export async function recordOutbox(trx: Writer, workspaceId: string, records: OutboxRecord[], cause: Cause = DIRECT): Promise<void> {
  if (records.length === 0) return;
  await outboxInsert(trx, workspaceId, records, cause);
}

/**
 * recordOutbox's statement, not run: for a change that writes its records in its own statement
 * (a data-modifying WITH), one round trip fewer. `records` must not be empty.
 */
export function outboxInsert(trx: Writer, workspaceId: string, records: OutboxRecord[], cause: Cause = DIRECT): Knex.QueryBuilder {
  return trx('outbox_events').insert(outboxRows(workspaceId, records, cause));
}

/** The outbox_events rows of `records` (every column the insert sets: OUTBOX_COLUMNS). */
function outboxRows(workspaceId: string, records: OutboxRecord[], cause: Cause) {
  const timestamp = new Date().toISOString();
  return records.map((r) => ({
    workspace_id: workspaceId,
    ...('event' in r
      ? { kind: 'webhook', name: r.event, payload: { event: r.event, workspace_id: workspaceId, timestamp, ...r.fields } }
      : { kind: 'trigger', name: r.trigger, payload: { trigger: r.trigger, ...r.variables } }),
    depth: cause.depth,
    chain_id: cause.chain,
  }));
}

/** The columns outboxRows sets (the others keep their defaults). */
const OUTBOX_COLUMNS = ['workspace_id', 'kind', 'name', 'payload', 'depth', 'chain_id'] as const;

/**
 * The text of a data-modifying WITH's statement that inserts one outbox row given as JSON (the
 * named binding `:<binding>`, a row of acceptedRunOutbox's) when the SQL condition `when` holds:
 * for a statement that records its change and its row together only under a condition (the
 * inbound receiver's, only when the run fits the plan's budget).
 */
export function outboxRowInsertSql(binding: string, when: string): string {
  return insertJsonRowSql('outbox_events', OUTBOX_COLUMNS, binding, when);
}

/** An outbound event. */
export function recordEvent(
  trx: Writer,
  workspaceId: string,
  event: WebhookEvent,
  fields: Record<string, unknown>,
  cause: Cause = DIRECT,
): Promise<void> {
  return recordOutbox(trx, workspaceId, [{ event, fields }], cause);
}

/** Several events in one statement, in this order. */
export function recordEvents(
  trx: Writer,
  workspaceId: string,
  events: { event: WebhookEvent; fields: Record<string, unknown> }[],
  cause: Cause = DIRECT,
): Promise<void> {
  return recordOutbox(trx, workspaceId, events, cause);
}

/** An internal automation trigger with its variables. */
export function recordTrigger(
  trx: Writer,
  workspaceId: string,
  trigger: Trigger,
  variables: Record<string, unknown>,
  cause: Cause = DIRECT,
): Promise<void> {
  return recordOutbox(trx, workspaceId, [{ trigger, variables }], cause);
}

/**
 * The outbox row of a run the inbound receiver accepted (inserted by outboxRowInsertSql), for the
 * statement that records the run (the run and its row commit together, in one round trip): the
 * worker's dispatcher carries the run out or starts its workflow, so a 202 never waits on
 * Temporal, nor fails with it. `depth` and
 * `chain` place the run in its chain of automations (a root call: 0 and its own run id; a call one
 * of our own webhook deliveries made: below the event it carried), in the payload the dispatcher
 * starts the run from and in the row's own depth and chain_id.
 */
export function acceptedRunOutbox(
  workspaceId: string,
  run: { runId: string; automationId: string; externalId?: string; depth: number; chain: string },
): Record<string, unknown> {
  const [row] = outboxRows(workspaceId, [{ trigger: 'webhook_received', variables: run }], { depth: run.depth, chain: run.chain });
  return row;
}

/* ------------------------------------------------------------------------------------------------
 * The dispatcher's side (workers/outbox-dispatcher.ts): claiming rows fairly, marking them.
 * ---------------------------------------------------------------------------------------------- */

/** An outbox row as the dispatcher takes it. */
export interface OutboxRow {
  id: string;
  /** The row's place in the outbox (bigint, as text): a workspace's rows are dispatched in this order. */
  seq: string;
  workspace_id: string;
  kind: 'webhook' | 'trigger';
  name: string;
  payload: Record<string, unknown>;
  depth: number;
  /** The automation chain the event belongs to (its root event's id), or null for a root event. */
  chain_id: string | null;
}

/**
 * The claim's statement (exported for the bench, which explains it when it runs long). Its plan
 * must not depend on the statistics: taken while the outbox is drained, as it almost always is,
 * they say no row is pending, and a burst (a large broadcast's events) is always new to them. So
 * the rows to claim are chosen once (`= ANY(ARRAY(...))`, run before the UPDATE: as `IN (...)`
 * PostgreSQL ran the choice again for every pending row, 15 s for 10,000); the UPDATE names no
 * condition of the pending index, so it can only find them by primary key (the choice locked them
 * and checked them on their latest version: nothing changes them between); a workspace's
 * claimable row is looked for by a scalar subquery, one probe per workspace (as EXISTS it became
 * a hash of every pending row); and the only index of pending rows is (workspace_id, seq).
 */
export const CLAIM_PENDING_SQL = `WITH RECURSIVE pending AS (
       (SELECT workspace_id FROM outbox_events WHERE dispatched_at IS NULL ORDER BY workspace_id LIMIT 1)
       UNION ALL
       SELECT (SELECT e.workspace_id FROM outbox_events e
                WHERE e.dispatched_at IS NULL AND e.workspace_id > p.workspace_id ORDER BY e.workspace_id LIMIT 1)
         FROM pending p WHERE p.workspace_id IS NOT NULL
     ), chosen AS (
       SELECT p.workspace_id FROM pending p
        WHERE p.workspace_id IS NOT NULL AND p.workspace_id <> ALL(?::uuid[])
          AND (SELECT true FROM outbox_events e
                WHERE e.workspace_id = p.workspace_id AND e.dispatched_at IS NULL AND (e.claimed_until IS NULL OR e.claimed_until < now())
                LIMIT 1)
        ORDER BY p.workspace_id <= ?::uuid, p.workspace_id
        LIMIT ?
     )
     UPDATE outbox_events SET claimed_until = now() + make_interval(secs => ?)
      WHERE id = ANY(ARRAY(SELECT r.id FROM chosen c CROSS JOIN LATERAL (
              SELECT e.id FROM outbox_events e
               WHERE e.workspace_id = c.workspace_id AND e.dispatched_at IS NULL AND (e.claimed_until IS NULL OR e.claimed_until < now())
               ORDER BY e.seq LIMIT ? FOR UPDATE SKIP LOCKED) r))
      RETURNING id, seq, workspace_id, kind, name, payload, depth, chain_id`;

export type ClaimOptions = { busy: string[]; after: string; workspaces: number; rowsPerWorkspace: number; leaseSeconds: number };

export function claimPendingBindings(options: ClaimOptions): Knex.RawBinding[] {
  return [options.busy, options.after, options.workspaces, options.leaseSeconds, options.rowsPerWorkspace];
}

/**
 * Up to `workspaces` workspaces with claimable rows, none of those in `busy`, each with at most
 * `rowsPerWorkspace` of its oldest rows, leased for `leaseSeconds`; by workspace, in `seq` order.
 * The workspaces with pending rows are found by a skip scan of outbox_events_pending_workspace_idx
 * (one probe per workspace, however large a backlog is) and taken in turn from the one after
 * `after`, so a busy workspace can never keep another waiting for more than one turn.
 */
export async function claimPendingFairly(db: Db, options: ClaimOptions): Promise<Map<string, OutboxRow[]>> {
  const { rows } = await db.raw<{ rows: OutboxRow[] }>(CLAIM_PENDING_SQL, claimPendingBindings(options));
  const byWorkspace = new Map<string, OutboxRow[]>();
  for (const row of rows.sort((a, b) => Number(a.seq) - Number(b.seq))) {
    const group = byWorkspace.get(row.workspace_id);
    if (group) group.push(row);
    else byWorkspace.set(row.workspace_id, [row]);
  }
  return byWorkspace;
}

/** A workspace's rows handed over: dispatched, their lease dropped. */
export async function markDispatched(db: Db, workspaceId: string, ids: string[]): Promise<void> {
  await db('outbox_events')
    .where('workspace_id', workspaceId)
    .whereIn('id', ids)
    .update({ dispatched_at: db.fn.now(), claimed_until: null });
}

/** Rows given back at once (their lease dropped), unless dispatched meanwhile. */
export async function releaseClaims(db: Db, ids: string[]): Promise<void> {
  await db('outbox_events').whereIn('id', ids).whereNull('dispatched_at').update({ claimed_until: null });
}

/**
 * A row that failed to dispatch, set aside with its error and leased for a growing backoff (2^n
 * seconds, an hour at most), so it never holds back the rows behind it. Returns its failures so far.
 */
export async function setAside(db: Db, id: string, error: string): Promise<number> {
  const [{ dispatch_failures: failures }] = await db('outbox_events')
    .where({ id })
    .update({
      dispatch_failures: db.raw('dispatch_failures + 1'),
      last_dispatch_error: error.slice(0, 1000),
      claimed_until: db.raw(`now() + least(interval '1 hour', interval '1 second' * power(2, dispatch_failures))`),
    })
    .returning('dispatch_failures');
  return failures;
}
