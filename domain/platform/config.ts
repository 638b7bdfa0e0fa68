import { KeyRing, parseKeyRing } from './encryption';
import { DEFAULT_RECONCILE_WINDOW_MS } from '../../types/messaging';
/**
 * Every setting the service reads from the environment, parsed once: nothing else in the service
 * reads process.env. The README's configuration table documents each of them.
 */
/** BROADCAST_BATCH_SIZE's default: 30 s of calls at the highest rate (80 a second), so at any rate a batch ends by its 30 s budget. */
export const DEFAULT_BROADCAST_BATCH_SIZE = 2400;

export interface Config {
  port: number;
  databaseUrl: string;
  temporalAddress: string;
  temporalNamespace: string;
  taskQueue: string;
  /**
   * Task queue of webhook delivery workflows (TEMPORAL_WEBHOOK_TASK_QUEUE, default `<taskQueue>-webhooks`):
   * a worker serves it with slots of its own, so subscribers that answer slowly hold only webhook
   * slots, never those of sends and automation runs.
   */
  webhookTaskQueue: string;
  /**
   * Task queue of the API's sends (TEMPORAL_SEND_TASK_QUEUE, default `<taskQueue>-sends`): each API
   * process hosts a worker on it and starts its sends there eagerly (workers/send-worker.ts); the
   * dedicated workers serve it too (retries, timers, an API that went away).
   */
  sendTaskQueue: string;
  /**
   * Whether an API process hosts a send worker and starts its send workflows eagerly
   * (API_SEND_WORKER, default false: with the API's own first attempt only the sends it hands over
   * are workflows, and the hosted worker cost 45-75 MB per API process for no measured gain).
   */
  apiSendWorker: boolean;
  /**
   * Who makes a text or template send's first provider attempt (SEND_FIRST_ATTEMPT): `api` (the
   * default) makes it in the request and hands only what did not finish (a retry, an unknown
   * outcome) to a send workflow; `workflow` starts a workflow for every send (api/send.ts).
   */
  sendFirstAttempt: 'api' | 'workflow';
  /**
   * Whether the worker's outbox dispatcher carries out an automation run of database actions
   * itself (AUTOMATION_RUNS_IN_DISPATCHER, default true), leaving to a workflow only runs that wait
   * or send and steps a retry may fix (activities/automations.ts createRunHere); false: every run is a workflow.
   */
  automationRunsInDispatcher: boolean;
  /** How long a send the API began may stay unsettled before the worker's sweep hands it to a workflow (SEND_SWEEP_AFTER_MS). */
  sendSweepAfterMs: number;
  adminToken: string;
  /**
   * The one origin allowed to call the Temporal codec endpoint from a browser with credentials
   * (TEMPORAL_UI_ORIGIN, default the local Temporal UI `http://localhost:8233`): the UI's page.
   */
  temporalUiOrigin: string;
  publicBaseUrl: string;
  allowPrivateUrls: boolean;
  webhookRetryScale: number;
  /**
   * How many proxies you control stand in front of the API (TRUST_PROXY; `true` is 1): the client
   * IP is the address the outermost of them saw, the N-th entry from the right of
   * X-Forwarded-For. Entries further left are the client's own words, so never trusted.
   */
  trustProxy: number;
  logLevel: string;
  /**
   * How long a send whose provider call may have happened (worker died mid-call, no answer) waits
   * for the provider's status callback before it counts as not accepted and is sent again.
   */
  sendReconcileWindowMs: number;
  /**
   * Recipients one broadcast batch (one activity) may take (BROADCAST_BATCH_SIZE, default 2,400:
   * 30 s at the highest rate, so at any rate a batch ends by its 30 s budget): a batch is a few
   * history events and a round trip through Temporal, so fewer, larger batches keep a broadcast's
   * history short and its calls going.
   */
  broadcastBatchSize: number;
  /** Whether this worker runs the outbox dispatcher (OUTBOX_DISPATCHER); at least one worker must. */
  outboxDispatcher: boolean;
  /** How often the worker's outbox dispatcher looks for new events when it is idle. */
  outboxPollMs: number;
  /** How often the dispatcher looks for pending deliveries that lost their attempt (a worker died mid-attempt). */
  deliverySweepMs: number;
  /** A factor on automation `wait` actions (development and tests only; default 1). */
  automationWaitScale: number;
  /** Inbound automation webhooks accepted per token per minute. */
  inboundTokenLimit: number;
  /** A factor on every rate limit (IP profiles, keys, tokens, broadcast pacing): benchmarks only; default 1. */
  rateLimitScale: number;
  /** PostgreSQL pool size of each API and worker process. */
  dbPoolMax: number;
  /** ENCRYPTION_KEYS (domain/platform/encryption.ts); null when unset: the API and the worker then refuse to start. */
  encryptionKeys: KeyRing | null;
  /** PostgreSQL cancels a statement of the API or the worker running longer than this (ms). */
  statementTimeoutMs: number;
  /** The planner's random_page_cost on the API's and the worker's connections (domain/platform/db.ts). */
  dbRandomPageCost: number;
  /** Days dispatched outbox rows, finished webhook deliveries and finished automation runs are kept (domain/maintenance/retention.ts). */
  retentionDays: number;
  /**
   * The deployment's language model for the AI insight (AI_BASE_URL, AI_API_KEY, AI_MODEL): only
   * fills in what a workspace with AI enabled leaves out; no workspace derives without enabling it.
   */
  ai: { baseUrl?: string; apiKey?: string; model?: string };
  /** Quiet after a contact's last message before its insight is derived (INSIGHT_DEBOUNCE_SECONDS, default 120, at least 1). */
  insightDebounceSeconds: number;
  /** Worker concurrency and memory bounds. */
  worker: {
    maxActivities: number;
    maxWorkflowTasks: number;
    /** Webhook attempts are local activities waiting on receivers (up to 10 s each): I/O, not CPU. */
    maxLocalActivities: number;
    /**
     * The SDK sizes its workflow cache from the machine's memory (thousands here); each cached run
     * holds a V8 context, so a bounded cache keeps the worker's memory bounded.
     */
    maxCachedWorkflows: number;
    /** Tests only (WORKER_LOOP_STATS_FILE): where the worker appends its event-loop lag and memory every 100 ms. */
    loopStatsFile: string | null;
  };
}

function bool(value: string | undefined, fallback: boolean): boolean {
  if (value === undefined || value === '') return fallback;
  return ['1', 'true', 'yes', 'on'].includes(value.toLowerCase());
}

function proxyHops(value: string | undefined): number {
  if (value === undefined || value === '') return 0;
  if (/^\d+$/.test(value)) return Number(value);
  return bool(value, false) ? 1 : 0;
}

function number(name: string, value: string | undefined, fallback: number): number {
  if (value === undefined || value === '') return fallback;
  const parsed = Number(value);
  if (!Number.isFinite(parsed)) throw new Error(`${name} must be a number, got "${value}"`);
  return parsed;
}

function positive(name: string, value: string | undefined, fallback: number): number {
  const parsed = number(name, value, fallback);
  if (!(parsed > 0)) throw new Error(`${name} must be a positive number, got ${parsed}`);
  return parsed;
}

function count(name: string, value: string | undefined, fallback: number): number {
  const parsed = positive(name, value, fallback);
  if (!Number.isInteger(parsed)) throw new Error(`${name} must be a whole number, got ${parsed}`);
  return parsed;
}

function oneOf<T extends string>(name: string, value: string | undefined, allowed: readonly T[], fallback: T): T {
  if (value === undefined || value === '') return fallback;
  if (!(allowed as readonly string[]).includes(value)) throw new Error(`${name} must be one of ${allowed.join(', ')}, got "${value}"`);
  return value as T;
}

/** The local Temporal UI's address (the dev server's default UI port). */
export const DEFAULT_TEMPORAL_UI_ORIGIN = 'http://localhost:8233';

/** An origin as browsers send it: scheme, host and port, no path, no trailing slash. */
function origin(name: string, value: string | undefined, fallback: string): string {
  if (value === undefined || value === '') return fallback;
  if (!URL.canParse(value)) throw new Error(`${name} must be an origin such as https://temporal.example.com, got "${value}"`);
  const url = new URL(value);
  if (url.protocol !== 'http:' && url.protocol !== 'https:') throw new Error(`${name} must be an http(s) origin, got "${value}"`);
  return url.origin;
}

/**
 * The admin token opens every workspace: one shorter than this is refused at start (npm start,
 * the API, the worker). Empty still means the admin API is disabled.
 */
export const ADMIN_TOKEN_MIN_LENGTH = 32;

/** Throws a message for the operator when ADMIN_TOKEN is set but too short to be a secret. */
export function assertAdminToken(adminToken: string): void {
  if (adminToken !== '' && adminToken.length < ADMIN_TOKEN_MIN_LENGTH) {
    throw new Error(
      `ADMIN_TOKEN is ${adminToken.length} characters; it must be at least ${ADMIN_TOKEN_MIN_LENGTH} (for example: openssl rand -base64 32), or empty to disable the admin API`,
    );
  }
}

/** The default send task queue of a task queue (a test that gives its API a task queue of its own gives it this one too). */
export function sendTaskQueueOf(taskQueue: string): string {
  return `${taskQueue}-sends`;
}

export function loadConfig(env: NodeJS.ProcessEnv = process.env): Config {
  const port = number('PORT', env.PORT, 3000);
  return {
    port,
    databaseUrl: env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/crm',
    temporalAddress: env.TEMPORAL_ADDRESS ?? '127.0.0.1:7233',
    temporalNamespace: env.TEMPORAL_NAMESPACE ?? 'default',
    taskQueue: env.TEMPORAL_TASK_QUEUE ?? 'crm',
    webhookTaskQueue: env.TEMPORAL_WEBHOOK_TASK_QUEUE ?? `${env.TEMPORAL_TASK_QUEUE ?? 'crm'}-webhooks`,
    sendTaskQueue: env.TEMPORAL_SEND_TASK_QUEUE ?? sendTaskQueueOf(env.TEMPORAL_TASK_QUEUE ?? 'crm'),
    apiSendWorker: bool(env.API_SEND_WORKER, false),
    sendFirstAttempt: oneOf('SEND_FIRST_ATTEMPT', env.SEND_FIRST_ATTEMPT, ['api', 'workflow'] as const, 'api'),
    sendSweepAfterMs: positive('SEND_SWEEP_AFTER_MS', env.SEND_SWEEP_AFTER_MS, 60_000),
    automationRunsInDispatcher: bool(env.AUTOMATION_RUNS_IN_DISPATCHER, true),
    adminToken: env.ADMIN_TOKEN ?? '',
    temporalUiOrigin: origin('TEMPORAL_UI_ORIGIN', env.TEMPORAL_UI_ORIGIN, DEFAULT_TEMPORAL_UI_ORIGIN),
    publicBaseUrl: (env.PUBLIC_BASE_URL ?? `http://localhost:${port}`).replace(/\/+$/, ''),
    allowPrivateUrls: bool(env.ALLOW_PRIVATE_URLS, false),
    webhookRetryScale: positive('WEBHOOK_RETRY_SCALE', env.WEBHOOK_RETRY_SCALE, 1),
    trustProxy: proxyHops(env.TRUST_PROXY),
    logLevel: env.LOG_LEVEL ?? 'info',
    automationWaitScale: positive('AUTOMATION_WAIT_SCALE', env.AUTOMATION_WAIT_SCALE, 1),
    inboundTokenLimit: positive('INBOUND_TOKEN_RATE_LIMIT', env.INBOUND_TOKEN_RATE_LIMIT, 300),
    rateLimitScale: positive('RATE_LIMIT_SCALE', env.RATE_LIMIT_SCALE, 1),
    outboxDispatcher: bool(env.OUTBOX_DISPATCHER, true),
    outboxPollMs: positive('OUTBOX_POLL_MS', env.OUTBOX_POLL_MS, 100),
    deliverySweepMs: positive('DELIVERY_SWEEP_MS', env.DELIVERY_SWEEP_MS, 10_000),
    sendReconcileWindowMs: positive('SEND_RECONCILE_WINDOW_MS', env.SEND_RECONCILE_WINDOW_MS, DEFAULT_RECONCILE_WINDOW_MS),
    broadcastBatchSize: count('BROADCAST_BATCH_SIZE', env.BROADCAST_BATCH_SIZE, DEFAULT_BROADCAST_BATCH_SIZE),
    dbPoolMax: count('DB_POOL_MAX', env.DB_POOL_MAX, 20),
    encryptionKeys: env.ENCRYPTION_KEYS ? parseKeyRing(env.ENCRYPTION_KEYS) : null,
    statementTimeoutMs: count('DB_STATEMENT_TIMEOUT_MS', env.DB_STATEMENT_TIMEOUT_MS, 15_000),
    dbRandomPageCost: positive('DB_RANDOM_PAGE_COST', env.DB_RANDOM_PAGE_COST, 1.1),
    retentionDays: count('RETENTION_DAYS', env.RETENTION_DAYS, 30),
    ai: {
      ...(env.AI_BASE_URL ? { baseUrl: env.AI_BASE_URL } : {}),
      ...(env.AI_API_KEY ? { apiKey: env.AI_API_KEY } : {}),
      ...(env.AI_MODEL ? { model: env.AI_MODEL } : {}),
    },
    insightDebounceSeconds: count('INSIGHT_DEBOUNCE_SECONDS', env.INSIGHT_DEBOUNCE_SECONDS, 120),
    worker: {
      maxActivities: count('WORKER_MAX_ACTIVITIES', env.WORKER_MAX_ACTIVITIES, 200),
      maxWorkflowTasks: count('WORKER_MAX_WORKFLOW_TASKS', env.WORKER_MAX_WORKFLOW_TASKS, 100),
      maxLocalActivities: count('WORKER_MAX_LOCAL_ACTIVITIES', env.WORKER_MAX_LOCAL_ACTIVITIES, 500),
      maxCachedWorkflows: count('WORKER_MAX_CACHED_WORKFLOWS', env.WORKER_MAX_CACHED_WORKFLOWS, 250),
      loopStatsFile: env.WORKER_LOOP_STATS_FILE || null,
    },
  };
}
