import type { Knex } from 'knex';

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
  'contact.tag_added',
  'contact.tag_removed',
  'card.created',
  'card.moved',
  'card.won',
  'card.lost',
] as const;
export type WebhookEvent = (typeof WEBHOOK_EVENTS)[number];

export const TRIGGERS = ['stage_changed', 'deal_won', 'deal_lost', 'card_created', 'contact_updated', 'webhook_received'] as const;
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
export type OutboxRecord = { event: WebhookEvent; fields: Record<string, unknown> } | { trigger: Trigger; variables: Record<string, unknown> };

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
  const timestamp = new Date().toISOString();
  return trx('outbox_events').insert(
    records.map((r) => ({
      workspace_id: workspaceId,
      ...('event' in r
        ? { kind: 'webhook', name: r.event, payload: { event: r.event, workspace_id: workspaceId, timestamp, ...r.fields } }
        : { kind: 'trigger', name: r.trigger, payload: { trigger: r.trigger, ...r.variables } }),
      depth: cause.depth,
      chain_id: cause.chain,
    })),
  );
}

/** An outbound event. */
export function recordEvent(trx: Writer, workspaceId: string, event: WebhookEvent, fields: Record<string, unknown>, cause: Cause = DIRECT): Promise<void> {
  return recordOutbox(trx, workspaceId, [{ event, fields }], cause);
}

/** Several events in one statement, in this order. */
export function recordEvents(trx: Writer, workspaceId: string, events: { event: WebhookEvent; fields: Record<string, unknown> }[], cause: Cause = DIRECT): Promise<void> {
  return recordOutbox(trx, workspaceId, events, cause);
}

/** An internal automation trigger with its variables. */
export function recordTrigger(trx: Writer, workspaceId: string, trigger: Trigger, variables: Record<string, unknown>, cause: Cause = DIRECT): Promise<void> {
  return recordOutbox(trx, workspaceId, [{ trigger, variables }], cause);
}

/**
 * A run the inbound receiver accepted (its `running` row written in the same transaction): the
 * worker's dispatcher starts its workflow, so a 202 never waits on Temporal, nor fails with it.
 * `depth` and `chain` place the run in its chain of automations (a root call: 0 and its own run
 * id; a call one of our own webhook deliveries made: below the event it carried), in the payload
 * the dispatcher starts the run from and in the row's own depth and chain_id.
 */
export function recordAcceptedRun(
  trx: Writer,
  workspaceId: string,
  run: { runId: string; automationId: string; externalId?: string; depth: number; chain: string },
): Promise<void> {
  return recordTrigger(trx, workspaceId, 'webhook_received', run, { depth: run.depth, chain: run.chain });
}
