import type { Knex } from 'knex';
import { applyMapping, passesFilter, tokenHash, TriggerConfig } from './automations';
import type { Db } from './db';
import { ApiError } from './errors';
import { recordAcceptedRun } from './outbox';
import { storableJson } from './text';
import { suspension } from './workspaces';

/**
 * The inbound webhook receiver (POST /api/automations/webhook-in/{token}): the URL's token names
 * the automation, and so its workspace; every call is recorded as a run of it.
 */

export interface InboundAutomation {
  id: string;
  workspace_id: string;
  active: boolean;
  trigger: TriggerConfig;
}

export type InboundStatus = 'accepted' | 'filtered' | 'duplicate';

/** The automation behind an inbound webhook URL; an unknown or revoked token is 404 NOT_FOUND. */
export async function findInboundAutomation(db: Db, token: string): Promise<InboundAutomation> {
  const automation = await db('automations as a')
    .join('workspaces as w', 'w.id', 'a.workspace_id')
    .where({ 'a.webhook_token_hash': tokenHash(token) })
    .first('a.id', 'a.workspace_id', 'a.active', 'a.trigger', 'w.active as workspace_active', 'w.api_access');
  if (!automation) throw new ApiError('NOT_FOUND', 'Unknown or revoked webhook URL');
  const suspended = suspension({ active: automation.workspace_active, api_access: automation.api_access }, 'inboundWebhook');
  if (suspended) throw suspended;
  return { id: automation.id, workspace_id: automation.workspace_id, active: automation.active, trigger: automation.trigger };
}

/**
 * Records one call of an automation's inbound URL as a run in the automation's workspace:
 * `filtered` (inactive, or the eventFilter did not match), `duplicate` (the mapped externalId
 * already ran) or `accepted` (running, its start handed to the outbox).
 */
export async function receiveInboundWebhook(db: Db, automation: InboundAutomation, body: object): Promise<{ runId: string; status: InboundStatus }> {
  const workspaceId = automation.workspace_id;
  const trigger = automation.trigger;
  const { externalId } = applyMapping(trigger.mapping, body);
  const summary = { type: 'webhook_received', ...(externalId ? { externalId } : {}) };

  if (!automation.active || !passesFilter(trigger.eventFilter, body)) {
    const [run] = await db('automation_runs')
      .insert({
        workspace_id: workspaceId,
        automation_id: automation.id,
        status: 'filtered',
        trigger: JSON.stringify(summary),
        external_id: externalId ?? null,
        error: automation.active ? null : 'The automation is inactive',
        finished_at: db.fn.now(),
      })
      .returning('id');
    return { runId: run.id, status: 'filtered' };
  }

  const record = (trx: Db | Knex.Transaction, status: 'running' | 'duplicate') =>
    trx('automation_runs')
      .insert({
        workspace_id: workspaceId,
        automation_id: automation.id,
        status,
        trigger: JSON.stringify(summary),
        external_id: externalId ?? null,
        // Kept on the run until it finishes (its workflow's input names only the run). Text
        // PostgreSQL cannot store is made storable (domain/text).
        ...(status === 'running' ? { webhook_body: JSON.stringify(storableJson(body)) } : { finished_at: db.fn.now() }),
      })
      .returning('id');
  let run: { id: string };
  try {
    // Accepted means recorded: the run and the outbox row that starts it commit together, and
    // the worker's dispatcher starts the workflow (Temporal away only delays it).
    run = await db.transaction(async (trx) => {
      const [row] = await record(trx, 'running');
      await recordAcceptedRun(trx, workspaceId, { runId: row.id, automationId: automation.id, ...(externalId ? { externalId } : {}) });
      return row;
    });
  } catch (err) {
    // The externalId already ran (index automation_runs_external_id_uq, which outlives Temporal's retention).
    if ((err as { constraint?: string }).constraint !== 'automation_runs_external_id_uq') throw err;
    const [duplicate] = await record(db, 'duplicate');
    return { runId: duplicate.id, status: 'duplicate' };
  }
  return { runId: run.id, status: 'accepted' };
}
