import { randomUUID } from 'node:crypto';
import { applyMapping, inboundRunRefusal, loopRefusal, passesFilter, runBudgetBucket, tokenHash, TriggerConfig } from './automations';
import { type Db, insertJsonRowSql, KeyRing, openText, prepared } from '../platform';
import { ApiError, isUuid, storableJson } from '../kernel';
import { acceptedRunOutbox, deliveryToVerify, outboxRowInsertSql, verifyWebhookSignature, webhookSecretBinding } from '../webhooks';
import {
  type Bucket,
  type BucketState,
  bucketStates,
  COUNT_BUCKETS_CTES,
  type CountedRow,
  joinWorkspace,
  shardsFor,
  suspension,
  THIS_MINUTE,
  windowAt,
} from '../access';

/**
 * The inbound webhook receiver (POST /api/automations/webhook-in/{token}): the URL's token names
 * the automation, and so its workspace; every call is recorded as a run of it.
 */

export interface InboundAutomation {
  id: string;
  workspace_id: string;
  active: boolean;
  trigger: TriggerConfig;
  /** The workspace's standing (a suspended workspace's URLs refuse calls). */
  standing: { active: boolean; api_access: boolean };
  /** The workspace plan's automationRunsPerMinute, which inbound runs take from too. */
  runs_per_minute: number;
}

/** The workspace columns the lookup reads beside the automation. */
interface AutomationStanding {
  workspace_active: boolean;
  api_access: boolean;
  automation_runs_per_minute: number;
}

/** Where a run sits in a chain of automations: its depth, and the chain's id (the root event's, or the root inbound run's). */
export interface ChainPosition {
  depth: number;
  chain: string;
}

export type InboundStatus = 'accepted' | 'filtered' | 'duplicate';

/**
 * The automation behind an inbound webhook URL, read by the statement that counts the call (as
 * authenticateAndCount reads a key): the caller's IP always, the URL's token when it names an
 * automation. One statement where three were (the IP's count, the lookup, the token's count):
 * under a burst the receiver's round trips are what queue on the API's event loop. The states
 * come back IP first, so its refusal wins, as when the IP was counted before the lookup. An
 * unknown or revoked token is null here (404 NOT_FOUND once the IP's state is judged).
 */
export async function findInboundAutomationAndCount(
  db: Db,
  token: string,
  ip: Bucket,
  tokenLimit: number,
): Promise<{ automation: InboundAutomation | null; counted: BucketState[] }> {
  const window = windowAt();
  const { rows } = await prepared(
    db.raw<{
      rows: {
        automation: (Omit<InboundAutomation, 'runs_per_minute' | 'standing'> & AutomationStanding) | null;
        counted: Omit<CountedRow, 'reset'>[] | null;
      }[];
    }>(
      `WITH a AS (:lookup), ${COUNT_BUCKETS_CTES(`
         SELECT name, shards, 1 AS n, ${THIS_MINUTE} AS window_start FROM (
           SELECT CAST(:ip AS text) AS name, CAST(:ipShards AS int) AS shards
           UNION ALL
           SELECT 'token:' || a.id, CAST(:tokenShards AS int) FROM a
         ) AS requested`)}
     SELECT (SELECT row_to_json(a) FROM a) AS automation, (SELECT json_agg(counted) FROM counted) AS counted`,
      {
        lookup: joinWorkspace(db('automations as a'), 'w', 'a.workspace_id')
          .where({ 'a.webhook_token_hash': tokenHash(token) })
          .select(
            'a.id',
            'a.workspace_id',
            'a.active',
            'a.trigger',
            'w.active as workspace_active',
            'w.api_access',
            'w.automation_runs_per_minute',
          ),
        ip: ip.name,
        ipShards: shardsFor(ip.limit),
        tokenShards: shardsFor(tokenLimit),
        windowStart: window.windowStart,
      },
    ),
  );
  const found = rows[0].automation;
  const buckets: Bucket[] = [ip, ...(found ? [{ name: `token:${found.id}`, limit: tokenLimit, code: 'TOKEN_RATE_LIMITED' as const }] : [])];
  const counted = bucketStates(
    buckets,
    (rows[0].counted ?? []).map((row) => ({ ...row, reset: window.resetSeconds })),
  );
  if (!found) return { automation: null, counted };
  const { workspace_active, api_access, automation_runs_per_minute, ...automation } = found;
  return {
    automation: { ...automation, standing: { active: workspace_active, api_access }, runs_per_minute: automation_runs_per_minute },
    counted,
  };
}

/** An inbound URL's automation as the receiver may use it: 404 NOT_FOUND for none, the workspace's suspension refused. */
export function usableInboundAutomation(automation: InboundAutomation | null): InboundAutomation {
  if (!automation) throw new ApiError('NOT_FOUND', 'Unknown or revoked webhook URL');
  const suspended = suspension(automation.standing, 'inboundWebhook');
  if (suspended) throw suspended;
  return automation;
}

/**
 * The chain position of a call made by one of this service's own webhook deliveries (an outbound
 * subscription pointed at an inbound URL, ours or another workspace's): one step below the event
 * the delivery carries (its depth + 1), in that event's chain. Without it, each such call began a
 * new chain with a fresh budget, and a subscription to what the automation's own actions cause
 * looped for ever. Null for any other call: no `X-Service-Delivery`, an unknown delivery, or a
 * signature that is not the delivery's subscription's (anyone can send the header; only we, or
 * the subscription's owner, can sign with its secret).
 *
 * Not scoped by workspace on purpose: a delivery of another workspace continues its chain too (a
 * loop across two tenants). It reads only the delivery's chain position, never answered or shown,
 * and only once the caller has proved it holds the delivery's signed request.
 */
export async function deliveryChain(
  db: Db,
  ring: KeyRing,
  request: { deliveryId: string; signature: string; rawBody: string },
): Promise<ChainPosition | null> {
  if (!isUuid(request.deliveryId) || !request.signature) return null;
  const delivery = await deliveryToVerify(db, request.deliveryId);
  if (!delivery?.event_id) return null;
  return signedDeliveryChain(
    {
      eventId: delivery.event_id,
      depth: delivery.depth,
      chainId: delivery.chain_id,
      secret: openText(ring, delivery.secret, webhookSecretBinding(delivery.workspace_id)),
    },
    request.signature,
    request.rawBody,
  );
}

/**
 * The pure half of deliveryChain, once the delivery is found: its chain position when `signature`
 * is a valid `X-Service-Signature` of `rawBody` with the subscription's (opened) secret, within the
 * signature's own tolerance (verifyWebhookSignature's default, 5 minutes either way of `nowSeconds`,
 * the boundary included); null otherwise. The position is one step below the delivered event (its
 * depth + 1, an unknown depth counting as 0), in that event's chain (its own id when it has none).
 */
export function signedDeliveryChain(
  delivery: { eventId: string; depth: number | null; chainId: string | null; secret: string },
  signature: string,
  rawBody: string,
  nowSeconds?: number,
): ChainPosition | null {
  if (!verifyWebhookSignature(delivery.secret, signature, rawBody, undefined, nowSeconds)) return null;
  // The event row outlives any delivery attempt (retention); were it gone, its id still names the chain.
  return { depth: (delivery.depth ?? 0) + 1, chain: delivery.chainId ?? delivery.eventId };
}

/**
 * Records one call of an automation's inbound URL as a run in the automation's workspace:
 * `filtered` (inactive, or the eventFilter did not match: nothing runs; or loop protection
 * refused a call our own webhook delivery made, `parent`: the run is recorded `failed` with the
 * reason), `duplicate` (a run of the mapped externalId is running or completed; a failed one
 * does not count, so a sender's retry runs again) or `accepted` (running, its start
 * handed to the outbox). A run about to start takes one from the plan's automationRunsPerMinute
 * first: over it, 429 RATE_LIMITED and nothing is recorded.
 */
export async function receiveInboundWebhook(
  db: Db,
  automation: InboundAutomation,
  body: object,
  parent: ChainPosition | null = null,
): Promise<{ runId: string; status: InboundStatus }> {
  const workspaceId = automation.workspace_id;
  const trigger = automation.trigger;
  const { externalId } = applyMapping(trigger.mapping, body);
  const summary = { type: 'webhook_received', ...(externalId ? { externalId } : {}) };
  const depth = parent?.depth ?? 0;
  /** A run of the automation that does not start, recorded with the call's summary. */
  const insertRun = async (run: Record<string, unknown>): Promise<string> => {
    const [row] = await db('automation_runs')
      .insert({ workspace_id: workspaceId, automation_id: automation.id, trigger: JSON.stringify(summary), ...run })
      .returning('id');
    return row.id;
  };

  if (!automation.active || !passesFilter(trigger.eventFilter, body)) {
    const error = automation.active ? null : 'The automation is inactive';
    const runId = await insertRun({ status: 'filtered', external_id: externalId ?? null, error, finished_at: db.fn.now() });
    return { runId, status: 'filtered' };
  }

  if (parent) {
    // The trigger handler's loop protection (workers/automation-triggers.ts), for a run one of our
    // own deliveries started: as deep as its chain allows, and within the chain's run budget.
    const { used } = await db('automation_runs')
      .where({ workspace_id: workspaceId, chain_id: parent.chain })
      .first(db.raw('count(*)::int AS used'));
    const refused = loopRefusal(depth, used);
    if (refused) {
      // Failed, in the chain (it counts in its budget); the externalId stays free, as nothing ran.
      const runId = await insertRun({ status: 'failed', depth, chain_id: parent.chain, error: refused, finished_at: db.fn.now() });
      // 2xx: the delivery that made the call is done (a 4xx or 5xx would only make it retry).
      return { runId, status: 'filtered' };
    }
  }
  const columns = (status: 'running' | 'duplicate') => ({
    status,
    external_id: externalId ?? null,
    // A root call's run keeps chain_id empty, as before: its chain is named by its own id, which
    // the outbox row carries to the runs it causes.
    depth,
    chain_id: parent?.chain ?? null,
    // Kept on the run until it finishes (its workflow's input names only the run). Text
    // PostgreSQL cannot store is made storable (domain/kernel/text).
    ...(status === 'running' ? { webhook_body: storableJson(body) } : { finished_at: db.fn.now() }),
  });
  // Accepted means recorded: the run, its outbox row and its take from the plan's runs-per-minute
  // budget in one statement, and the worker's dispatcher carries the run out or starts its workflow
  // (Temporal away only delays it). The index below refuses a repeat of a running or completed run,
  // and its error undoes the take with the rest: a duplicate uses no budget. No externalId in the
  // workflow's id: a retry after a failed run starts a new one.
  const runId = randomUUID();
  let recorded: boolean;
  try {
    recorded = await recordAcceptedRun(db, automation, {
      run: { id: runId, workspace_id: workspaceId, automation_id: automation.id, trigger: summary, ...columns('running') },
      outbox: acceptedRunOutbox(workspaceId, { runId, automationId: automation.id, depth, chain: parent?.chain ?? runId }),
    });
  } catch (err) {
    // The externalId is running or completed (index automation_runs_external_id_uq, which outlives
    // Temporal's retention); a failed run gave it up, so the sender's retry got here as a new run.
    if ((err as { constraint?: string }).constraint !== 'automation_runs_external_id_uq') throw err;
    return { runId: await insertRun(columns('duplicate')), status: 'duplicate' };
  }
  if (!recorded) throw inboundRunRefusal(automation.runs_per_minute, windowAt().resetSeconds);
  return { runId, status: 'accepted' };
}

/** The columns of an accepted run's row that recordAcceptedRun sets (the others keep their defaults). */
const ACCEPTED_RUN_COLUMNS = [
  'id',
  'workspace_id',
  'automation_id',
  'trigger',
  'status',
  'external_id',
  'depth',
  'chain_id',
  'webhook_body',
];

/**
 * Takes one from the workspace's runs-per-minute budget (takeRunBudget's bucket, counted the same
 * way) and, when it fits, records the run and its outbox row: one statement, one round trip. Over
 * the budget nothing is recorded (false) and the take stays counted, as consume counts a refused
 * request.
 */
async function recordAcceptedRun(
  db: Db,
  automation: InboundAutomation,
  rows: { run: Record<string, unknown>; outbox: Record<string, unknown> },
): Promise<boolean> {
  const window = windowAt();
  const limit = automation.runs_per_minute;
  const { rows: result } = await prepared(
    db.raw<{ rows: { recorded: boolean }[] }>(
      `WITH ${COUNT_BUCKETS_CTES(`SELECT CAST(:bucket AS text) AS name, CAST(:shards AS int) AS shards, 1 AS n, ${THIS_MINUTE} AS window_start`)},
     room AS (SELECT 1 FROM counted WHERE count <= CAST(:limit AS int)),
     outbox AS (${outboxRowInsertSql('outbox', 'EXISTS (SELECT 1 FROM room)')}),
     run AS (${insertJsonRowSql('automation_runs', ACCEPTED_RUN_COLUMNS, 'run', 'EXISTS (SELECT 1 FROM room)')} RETURNING id)
     SELECT EXISTS (SELECT 1 FROM run) AS recorded`,
      {
        bucket: runBudgetBucket(automation.workspace_id),
        shards: shardsFor(limit),
        limit,
        windowStart: window.windowStart,
        outbox: JSON.stringify(rows.outbox),
        run: JSON.stringify(rows.run),
      },
    ),
  );
  return result[0].recorded;
}
