import type { Knex } from 'knex';

/**
 * Business events and automation triggers are written to the outbox in the same transaction as
 * the change that causes them, so none is lost between a commit and its delivery.
 */
export const WEBHOOK_EVENTS = [
  'lead.created',
  'contact.created',
  'contact.updated',
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

/** An outbound event: its fields sit at the root next to `event`, `workspace_id` and `timestamp`. */
export async function recordEvent(
  trx: Knex | Knex.Transaction,
  workspaceId: string,
  event: WebhookEvent,
  fields: Record<string, unknown>,
  depth = 0,
): Promise<void> {
  const payload = { event, workspace_id: workspaceId, timestamp: new Date().toISOString(), ...fields };
  await trx('outbox_events').insert({ workspace_id: workspaceId, kind: 'webhook', name: event, payload, depth });
}

/** An internal automation trigger with its variables. */
export async function recordTrigger(
  trx: Knex | Knex.Transaction,
  workspaceId: string,
  trigger: Trigger,
  variables: Record<string, unknown>,
  depth = 0,
): Promise<void> {
  await trx('outbox_events').insert({ workspace_id: workspaceId, kind: 'trigger', name: trigger, payload: { trigger, ...variables }, depth });
}
