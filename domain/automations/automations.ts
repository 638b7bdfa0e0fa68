import { createHash, randomBytes } from 'node:crypto';
import {
  KeyRing,
  openText,
  prepared,
  SealBinding,
  sealText,
  type ColumnResealer,
  type Db,
  assertSafeUrlSyntax,
  UrlPolicy,
} from '../platform';
import { z } from 'zod';
import { isMediaType, MESSAGE_TYPES } from '../../types/messaging';
import {
  ApiError,
  notFound,
  Page,
  pageWithTotal,
  isUuid,
  cut,
  storable,
  atLeastOne,
  HTTP_URL_OR_TEMPLATE,
  onlyWith,
  trimmedText,
} from '../kernel';
import { MESSAGE_CONTENT_FIELDS } from '../messaging';
import { consume, grants, joinWorkspace, Scope, workspacePlan } from '../access';

/**
 * Automations (docs/automations.md): definitions, the inbound URL token and its quota,
 * the run log, and the pure rules a run applies (event filter, field mapping, `webhook.<field>`
 * variables, template rendering). The durable part is workflows/automation-run.ts; actions are
 * activities (activities/automations.ts) calling the same domain functions as the REST API.
 */

export const TRIGGER_TYPES = [
  'webhook_received',
  'stage_changed',
  'deal_won',
  'deal_lost',
  'card_created',
  'contact_updated',
  'insight_updated',
] as const;
export type TriggerType = (typeof TRIGGER_TYPES)[number];
export const CONTACT_FIELDS = ['name', 'email', 'phone', 'notes', 'tags'] as const;

/** How deep a chain of automations may go (an action firing a trigger firing an action ...) before it is stopped. */
export const MAX_CHAIN_DEPTH = 5;
/** Runs one root event may cause through its whole chain of automations (loop protection in breadth). */
export const CHAIN_RUN_BUDGET = 25;

/** Body limit of the inbound receiver. */
export const WEBHOOK_IN_MAX_BYTES = 256 * 1024;
/** `webhook.<field>` variables: key and value lengths, and how many. */
export const VARIABLE_KEY_MAX = 64;
export const VARIABLE_VALUE_MAX = 1024;
export const VARIABLES_MAX = 200;

const text = trimmedText;

export const ActionSchema = z.discriminatedUnion('type', [
  z.object({ type: z.literal('add_tag'), tag: text(100) }),
  z.object({ type: z.literal('remove_tag'), tag: text(100) }),
  z.object({
    type: z.literal('update_contact'),
    fields: atLeastOne(
      z.object({
        name: z.string().max(200).optional(),
        email: z.string().max(320).nullable().optional(),
        phone: z.string().max(32).optional(),
        notes: z.string().max(5000).optional(),
      }),
      'expected at least one of name, email, phone, notes',
    ),
  }),
  z.object({
    type: z.literal('create_deal'),
    pipeline: text(200),
    stage: text(200).optional(),
    name: text(200).optional(),
    value: z.union([z.number().min(0), text(64)]).optional(),
  }),
  z.object({ type: z.literal('move_deal'), stage: text(200) }),
  z.object({ type: z.literal('set_deal_status'), status: z.enum(['open', 'won', 'lost']), lostReason: text(500).optional() }),
  z.object({
    type: z.literal('create_task'),
    title: text(500),
    taskType: text(64).optional(),
    dueInMinutes: z.number().int().min(0).max(525_600),
    assignedTo: text(200).optional(),
  }),
  z.object({ type: z.literal('add_note'), body: text(5000) }),
  z.object({
    type: z.literal('send_message'),
    instanceId: z.uuid().optional(),
    /** The message type (`type` names the action). */
    messageType: z.enum(MESSAGE_TYPES).default('text'),
    ...MESSAGE_CONTENT_FIELDS,
    mediaUrl: MESSAGE_CONTENT_FIELDS.mediaUrl.meta({ pattern: HTTP_URL_OR_TEMPLATE }),
  }),
  z.object({
    type: z.literal('wait'),
    seconds: z
      .number()
      .int()
      .min(1)
      .max(30 * 86_400),
  }),
]);
export type Action = z.infer<typeof ActionSchema>;

/**
 * The scopes each action needs through the API. A run acts for the workspace without a key, so
 * the key that saves an automation must hold what its actions (and an inbound mapping's lead
 * intake) would need: `automations:write` alone must not send messages or write deals.
 */
const ACTION_SCOPES: Record<Action['type'], Scope[]> = {
  add_tag: ['tags:write'],
  remove_tag: ['tags:write'],
  update_contact: ['leads:write'],
  create_deal: ['deals:write'],
  move_deal: ['deals:write'],
  set_deal_status: ['deals:write'],
  create_task: ['tasks:write'],
  add_note: ['notes:write'],
  send_message: ['conversations:send'],
  wait: [],
};

/** 403 INSUFFICIENT_SCOPE naming every scope the automation needs that the key lacks. */
export function assertScopesToSave(
  keyScopes: readonly string[],
  automation: { mapping?: { phone?: string }; actions: readonly { type: string }[] },
): void {
  const needed = new Set<Scope>(automation.actions.flatMap((a) => ACTION_SCOPES[a.type as Action['type']] ?? []));
  if (automation.mapping?.phone) needed.add('leads:write');
  const missing = [...needed].filter((scope) => !grants(keyScopes, [scope]));
  if (missing.length > 0) {
    throw new ApiError('INSUFFICIENT_SCOPE', "The API key lacks scopes the automation's actions need", {
      hint: `An automation acts with the scopes of the key that saves it: add ${missing.join(', ')} to the key, or remove the actions that need them.`,
    });
  }
}

const MappingSchema = z
  .object({
    name: text(200),
    email: text(200),
    phone: text(200),
    product: text(200),
    value: text(200),
    status: text(200),
    externalId: text(200),
  })
  .partial();

/** Trigger fields that only some trigger types take. */
const TRIGGER_ONLY = {
  pipelineId: ['card_created'],
  fields: ['contact_updated'],
  temperature: ['insight_updated'],
  eventFilter: ['webhook_received'],
  mapping: ['webhook_received'],
} as const satisfies Record<string, readonly TriggerType[]>;

export const TriggerSchema = onlyWith(
  z.object({
    type: z.enum(TRIGGER_TYPES),
    // Omitted, null or "": any pipeline (stored as omitted: storedTrigger). Like any card_created
    // option, it is refused on another trigger type, "" and null included, as the document says.
    pipelineId: z
      .union([z.uuid(), z.literal(''), z.null()])
      .optional()
      .meta({ description: 'Only deals created in this pipeline; omitted, null or "" for any pipeline.' }),
    fields: z.array(z.enum(CONTACT_FIELDS)).min(1).max(CONTACT_FIELDS.length).optional(),
    temperature: z
      .enum(['cold', 'warm', 'hot'])
      .optional()
      .meta({ description: 'insight_updated only: only insights of this temperature; omitted for any.' }),
    eventFilter: z
      .object({ path: text(200), op: z.literal('equals'), value: z.union([z.string().max(1000), z.number(), z.boolean(), z.null()]) })
      .optional(),
    mapping: MappingSchema.optional(),
  }),
  'type',
  TRIGGER_ONLY,
  'trigger',
);
export type TriggerConfig = z.infer<typeof TriggerSchema>;

/** A trigger's options as stored: a pipelineId of null or "" (any pipeline) is stored as omitted. */
function storedTrigger(trigger: Omit<TriggerConfig, 'type'>): string {
  const { pipelineId, ...rest } = trigger;
  return JSON.stringify(pipelineId ? { ...rest, pipelineId } : rest);
}

/**
 * A send_message action's literal media URL passes, when the automation is saved, the same check
 * as `mediaUrl` on POST /api/v1/messages (400 INVALID_URL: https only, no credentials, no private
 * or internal host unless ALLOW_PRIVATE_URLS). A URL built from `{{...}}` variables can only be
 * judged once rendered: the run's send saga checks it (with DNS) before anything is sent.
 */
export function assertActionMediaUrls(actions: readonly Action[] | undefined, policy: UrlPolicy): void {
  actions?.forEach((action, i) => {
    if (action.type !== 'send_message') return;
    // A template's header file, the same way (the Cloud API fetches it: checked when literal).
    const header = action.messageType === 'template' ? action.templateHeader?.mediaUrl : undefined;
    if (header !== undefined && !header.includes('{{'))
      assertSafeUrlSyntax(header, policy, { field: `body.actions.${i}.templateHeader.mediaUrl` });
    if (!isMediaType(action.messageType)) return;
    if (action.mediaUrl === undefined || action.mediaUrl.includes('{{')) return;
    assertSafeUrlSyntax(action.mediaUrl, policy, { field: `body.actions.${i}.mediaUrl` });
  });
}

export const AutomationBody = z.object({
  name: text(200),
  active: z.boolean().default(true),
  trigger: TriggerSchema,
  actions: z.array(ActionSchema).min(1).max(50),
});

/* ------------------------------------------------------------------------------------------------
 * Pure rules of a run
 * ---------------------------------------------------------------------------------------------- */

/** The value at a dotted path (`customer.phone`, `items.0.sku`), or undefined. */
export function valueAt(body: unknown, path: string): unknown {
  let current: unknown = body;
  for (const part of path.split('.')) {
    if (current === null || typeof current !== 'object') return undefined;
    current = (current as Record<string, unknown>)[part];
  }
  return current;
}

/** `eventFilter { path, op: "equals", value }`: strict equality, numbers and strings compared as text. */
export function passesFilter(filter: TriggerConfig['eventFilter'], body: unknown): boolean {
  if (!filter) return true;
  const actual = valueAt(body, filter.path);
  if (actual === filter.value) return true;
  const scalar = (v: unknown) => typeof v === 'string' || typeof v === 'number' || typeof v === 'boolean';
  return scalar(actual) && scalar(filter.value) && String(actual) === String(filter.value);
}

/**
 * `{{` and `}}` can never come out of a payload: a value cannot smuggle a template in. Nor can
 * text PostgreSQL cannot store (the values end up in the run log and in records; domain/kernel/text).
 */
export function neutralise(value: string): string {
  return storable(value).replace(/\{\{/g, '{ {').replace(/\}\}/g, '} }');
}

/**
 * Every scalar field of a received body as `webhook.<path>` (nested objects with dotted paths,
 * arrays skipped): keys cut to 64 characters, values to 1024, `{{`/`}}` neutralised, at most 200.
 */
export function webhookVariables(body: unknown): Record<string, string> {
  const out: Record<string, string> = {};
  const walk = (value: unknown, prefix: string, depth: number) => {
    if (Object.keys(out).length >= VARIABLES_MAX || depth > 5) return;
    if (value === null || value === undefined) return;
    if (typeof value === 'object') {
      if (Array.isArray(value)) return;
      for (const [k, v] of Object.entries(value as Record<string, unknown>)) walk(v, prefix ? `${prefix}.${k}` : k, depth + 1);
      return;
    }
    const key = cut(neutralise(`webhook.${prefix}`), VARIABLE_KEY_MAX);
    if (!(key in out)) out[key] = cut(neutralise(String(value)), VARIABLE_VALUE_MAX);
  };
  if (body && typeof body === 'object' && !Array.isArray(body)) walk(body, '', 0);
  return out;
}

export interface Mapped {
  contact: { name?: string; email?: string; phone?: string };
  deal: { product?: string; value?: string; status?: string };
  externalId?: string;
}

/** The fields a `mapping` extracts from a body (scalars only, as text, neutralised). */
export function applyMapping(mapping: TriggerConfig['mapping'], body: unknown): Mapped {
  const pick = (field: keyof NonNullable<TriggerConfig['mapping']>): string | undefined => {
    const path = mapping?.[field];
    if (!path) return undefined;
    const value = valueAt(body, path);
    if (typeof value === 'string' || typeof value === 'number' || typeof value === 'boolean') {
      const s = neutralise(String(value)).trim();
      return s === '' ? undefined : cut(s, VARIABLE_VALUE_MAX);
    }
    return undefined;
  };
  const strip = <T extends Record<string, string | undefined>>(o: T) =>
    Object.fromEntries(Object.entries(o).filter(([, v]) => v !== undefined)) as T;
  const externalId = pick('externalId');
  return {
    contact: strip({ name: pick('name'), email: pick('email'), phone: pick('phone') }),
    deal: strip({ product: pick('product'), value: pick('value'), status: pick('status') }),
    externalId: externalId === undefined ? undefined : cut(externalId, 200),
  };
}

/** What a run knows of a contact: the contact's record, or the values an inbound body mapped to it. */
export interface PersonalData {
  name?: string | null;
  email?: string | null;
  phone?: string | null;
}

const escapeRegExp = (text: string): string => text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');

/** The ways a phone may be written in a message: as given, digits only, with +, and without the country code (and the ninth digit). */
function phoneForms(phone: string): string[] {
  const digits = phone.replace(/\D/g, '');
  const forms = [phone.trim()];
  if (digits.length >= 8) {
    forms.push(digits, `+${digits}`);
    const national = digits.startsWith('55') && digits.length >= 12 ? digits.slice(2) : undefined;
    if (national) forms.push(national);
    // A Brazilian mobile without its ninth digit (the other form of the same number).
    if (national?.length === 11 && national[2] === '9')
      forms.push(`55${national.slice(0, 2)}${national.slice(3)}`, `${national.slice(0, 2)}${national.slice(3)}`);
  }
  return forms;
}

/**
 * A run's error as `automations:read` sees it: the contact's phone, email and name replaced by
 * `[phone]`, `[email]`, `[name]`. Messages name what failed; a value rendered from a variable
 * (`Pipeline "{{contact.name}}" not found`) or echoed by the database must not carry the contact.
 */
export function withoutPersonalData(text: string, people: readonly PersonalData[]): string {
  const replacements: [string, string][] = [];
  for (const person of people) {
    if (person.email?.trim()) replacements.push([person.email.trim(), '[email]']);
    if (person.phone?.trim()) for (const form of phoneForms(person.phone)) replacements.push([form, '[phone]']);
    // A one-letter name would blank out every such letter.
    if (person.name && person.name.trim().length >= 2) replacements.push([person.name.trim(), '[name]']);
  }
  if (replacements.length === 0) return text;
  // One pass, longest first (an email holding the name, a phone holding its national form): a mask is never read again.
  replacements.sort((a, b) => b[0].length - a[0].length);
  const masks = new Map(replacements.map(([value, mask]) => [value.toLowerCase(), mask] as const));
  return text.replace(
    new RegExp(replacements.map(([value]) => escapeRegExp(value)).join('|'), 'gi'),
    (found) => masks.get(found.toLowerCase()) ?? found,
  );
}

/** `{{name}}` replaced from `vars` in one pass (a replaced value is never read again); unknown names become empty. */
export function render(template: string, vars: Record<string, string>): string {
  return template.replace(/\{\{\s*([\w.-]+)\s*\}\}/g, (_m, name: string) => (Object.hasOwn(vars, name) ? vars[name] : ''));
}

/* ------------------------------------------------------------------------------------------------
 * Definitions, token and quota
 * ---------------------------------------------------------------------------------------------- */

interface AutomationRow {
  id: string;
  workspace_id: string;
  name: string;
  active: boolean;
  trigger_type: TriggerType;
  trigger: TriggerConfig;
  actions: Action[];
  webhook_token: string | null;
  created_at: Date;
  updated_at: Date;
}

/** What answers need to show an automation: the base of its URL and the keys that open its token. */
export interface AutomationView {
  baseUrl: string;
  ring: KeyRing;
}

/**
 * Inbound webhook tokens re-sealed with the current key (domain/maintenance sealStoredSecrets);
 * answers how many. A token is found by its hash, which does not change; it stays sealed for its URL.
 */
export function resealAutomationTokens(resealColumn: ColumnResealer): Promise<number> {
  return resealColumn('automations', 'webhook_token', 'automation.webhookToken');
}

/** How an inbound token is found: by its SHA-256, never by the token itself. */
export function tokenHash(token: string): string {
  return createHash('sha256').update(token).digest('hex');
}

/** A new inbound token (192 random bits, URL-safe), as stored: sealed, and its hash for the lookup. */
function newToken(ring: KeyRing, workspaceId: string): { webhook_token: string; webhook_token_hash: string } {
  const token = randomBytes(24).toString('base64url');
  return { webhook_token: sealText(ring, token, webhookTokenBinding(workspaceId)), webhook_token_hash: tokenHash(token) };
}

/** What an inbound token at rest is bound to: a ciphertext copied to another workspace's row does not open. */
const webhookTokenBinding = (workspaceId: string): SealBinding => ({ workspaceId, purpose: 'automation.webhookToken' });

export function webhookUrl(baseUrl: string, token: string): string {
  return `${baseUrl}/api/automations/webhook-in/${token}`;
}

export function serializeAutomation(row: AutomationRow, view: AutomationView) {
  return {
    id: row.id,
    name: row.name,
    active: row.active,
    trigger: { ...row.trigger, type: row.trigger_type },
    actions: row.actions,
    webhookUrl: row.webhook_token
      ? webhookUrl(view.baseUrl, openText(view.ring, row.webhook_token, webhookTokenBinding(row.workspace_id)))
      : null,
    createdAt: row.created_at.toISOString(),
    updatedAt: row.updated_at.toISOString(),
  };
}

const automationNotFound = () => notFound('Automation');

/**
 * Takes a unit of the inbound-webhook quota: the workspace row lock makes concurrent takers count
 * one by one; units in use are the automations holding a token.
 */
async function takeInboundUnit(trx: Db, workspaceId: string, exceptId?: string): Promise<void> {
  const plan = await workspacePlan(trx, workspaceId, ['inbound_webhook_quota'], { lock: true });
  if (plan?.inbound_webhook_quota === null || plan?.inbound_webhook_quota === undefined) return;
  const q = trx('automations').where({ workspace_id: workspaceId }).whereNotNull('webhook_token');
  if (exceptId) q.whereNot({ id: exceptId });
  const { count } = await q.first(trx.raw('count(*)::int AS count'));
  if (count >= plan.inbound_webhook_quota) {
    throw new ApiError(
      'INBOUND_WEBHOOK_LIMIT_REACHED',
      `The plan allows ${plan.inbound_webhook_quota} automations with an inbound webhook`,
      {
        hint: 'Delete one, or remove its token (DELETE /api/v1/automations/{id}/token), to free a unit.',
      },
    );
  }
}

/**
 * Takes a unit of the plan's automation cap (always set: default 100): the workspace row lock
 * makes concurrent creations count one by one.
 */
async function takeAutomationUnit(trx: Db, workspaceId: string): Promise<void> {
  const plan = await workspacePlan(trx, workspaceId, ['automation_limit'], { lock: true });
  if (!plan) return;
  const { count } = await trx('automations').where({ workspace_id: workspaceId }).first(trx.raw('count(*)::int AS count'));
  if (count >= plan.automation_limit) {
    throw new ApiError('AUTOMATION_LIMIT_REACHED', `The plan allows ${plan.automation_limit} automations`, {
      hint: 'Delete one to free a unit, or upgrade the plan.',
    });
  }
}

export async function createAutomation(
  db: Db,
  workspaceId: string,
  input: z.infer<typeof AutomationBody>,
  view: AutomationView,
  keyScopes: readonly string[],
) {
  const { type, ...trigger } = input.trigger;
  assertScopesToSave(keyScopes, { mapping: input.trigger.mapping, actions: input.actions });
  const row: AutomationRow = await db.transaction(async (trx) => {
    const inbound = type === 'webhook_received';
    await takeAutomationUnit(trx as unknown as Db, workspaceId);
    if (inbound) await takeInboundUnit(trx as unknown as Db, workspaceId);
    const [created] = await trx('automations')
      .insert({
        workspace_id: workspaceId,
        name: input.name,
        active: input.active,
        trigger_type: type,
        trigger: storedTrigger(trigger),
        actions: JSON.stringify(input.actions),
        ...(inbound ? newToken(view.ring, workspaceId) : {}),
      })
      .returning('*');
    return created;
  });
  return serializeAutomation(row, view);
}

export async function listAutomations(db: Db, workspaceId: string, page: Page, view: AutomationView) {
  const scope = db('automations').where({ workspace_id: workspaceId });
  const { rows, total } = await pageWithTotal<AutomationRow>(scope, page, (q) =>
    q.select('*').orderBy([{ column: 'created_at' }, { column: 'id' }]),
  );
  return { rows: rows.map((r) => serializeAutomation(r, view)), total };
}

export async function getAutomationRow(
  db: Db,
  workspaceId: string,
  id: string,
  options: { forUpdate?: boolean } = {},
): Promise<AutomationRow> {
  if (!isUuid(id)) throw automationNotFound();
  const q = db('automations').where({ workspace_id: workspaceId, id });
  if (options.forUpdate) q.forUpdate();
  const row = await q.first();
  if (!row) throw automationNotFound();
  return row;
}

/** Before each action: whether the automation is still active, and its workspace's standing (one suspended during a wait stops the run). One statement. */
export async function getAutomationStanding(
  db: Db,
  workspaceId: string,
  id: string,
): Promise<{ active: boolean; name: string; workspace_active: boolean; api_access: boolean } | undefined> {
  return prepared(
    joinWorkspace(db('automations as a'), 'w', 'a.workspace_id')
      .where({ 'a.workspace_id': workspaceId, 'a.id': id })
      .first('a.active', 'a.name', 'w.active as workspace_active', 'w.api_access'),
  );
}

/** The trigger type cannot change (its token and quota unit belong to the webhook trigger). */
export async function updateAutomation(
  db: Db,
  workspaceId: string,
  id: string,
  patch: { name?: string; active?: boolean; trigger?: TriggerConfig; actions?: Action[] },
  view: AutomationView,
  keyScopes: readonly string[],
) {
  return db.transaction(async (trx) => {
    const before = await getAutomationRow(trx as unknown as Db, workspaceId, id, { forUpdate: true });
    // A change that sets what the automation does, or turns it on, answers for all it will do,
    // whoever wrote its actions before; renaming or turning it off takes nothing.
    if (patch.actions !== undefined || patch.trigger !== undefined || patch.active === true) {
      assertScopesToSave(keyScopes, {
        mapping: (patch.trigger ?? (before.trigger as TriggerConfig)).mapping,
        actions: patch.actions ?? (before.actions as Action[]),
      });
    }
    const changes: Record<string, unknown> = { updated_at: trx.fn.now() };
    if (patch.name !== undefined) changes.name = patch.name;
    if (patch.active !== undefined) changes.active = patch.active;
    if (patch.actions !== undefined) changes.actions = JSON.stringify(patch.actions);
    if (patch.trigger !== undefined) {
      const { type, ...trigger } = patch.trigger;
      if (type !== before.trigger_type) {
        throw new ApiError('VALIDATION', 'Invalid body.trigger.type: the trigger type of an automation cannot change', {
          hint: 'Create a new automation instead.',
        });
      }
      changes.trigger = storedTrigger(trigger);
    }
    const [row] = await trx('automations').where({ workspace_id: workspaceId, id }).update(changes).returning('*');
    return serializeAutomation(row, view);
  });
}

/** Deleting returns its inbound unit (the count is of tokens held) and its run log goes with it. */
export async function deleteAutomation(db: Db, workspaceId: string, id: string): Promise<{ id: string; deleted: true }> {
  if (!isUuid(id)) throw automationNotFound();
  const deleted = await db('automations').where({ workspace_id: workspaceId, id }).delete();
  if (!deleted) throw automationNotFound();
  return { id, deleted: true };
}

/** A new token (the old URL stops at once). Restoring a removed token takes a unit again. */
export async function regenerateToken(db: Db, workspaceId: string, id: string, view: AutomationView) {
  return db.transaction(async (trx) => {
    const before = await getAutomationRow(trx as unknown as Db, workspaceId, id, { forUpdate: true });
    if (before.trigger_type !== 'webhook_received') {
      throw new ApiError('VALIDATION', 'Only an automation with the webhook_received trigger has an inbound URL');
    }
    if (!before.webhook_token) await takeInboundUnit(trx as unknown as Db, workspaceId, id);
    const [row] = await trx('automations')
      .where({ workspace_id: workspaceId, id })
      .update({ ...newToken(view.ring, workspaceId), updated_at: trx.fn.now() })
      .returning('*');
    return serializeAutomation(row, view);
  });
}

/** Removes the token: the URL stops working and the quota unit is free. */
export async function removeToken(db: Db, workspaceId: string, id: string, view: AutomationView) {
  if (!isUuid(id)) throw automationNotFound();
  // One statement: an automation deleted meanwhile is 404, not a row that is not there.
  const [row] = await db('automations')
    .where({ workspace_id: workspaceId, id })
    .update({ webhook_token: null, webhook_token_hash: null, updated_at: db.fn.now() })
    .returning('*');
  if (!row) throw automationNotFound();
  return serializeAutomation(row, view);
}

/* ------------------------------------------------------------------------------------------------
 * Runs
 * ---------------------------------------------------------------------------------------------- */

/**
 * Takes up to `wanted` runs from the workspace's runs-per-minute budget (bucket `runs:<workspaceId>`, the current minute): how
 * many of them may start, 0..wanted (the refused ones are counted too), and the seconds until the minute ends (a refusal's Retry-After).
 */
export async function takeRunBudget(
  db: Db,
  workspaceId: string,
  limit: number,
  wanted: number,
): Promise<{ allowed: number; resetSeconds: number }> {
  if (wanted <= 0) return { allowed: 0, resetSeconds: 60 };
  const [state] = await consume(db, [{ name: runBudgetBucket(workspaceId), limit, code: 'RATE_LIMITED', n: wanted }]);
  // What the minute had before these: the ones that still fit under the limit may start.
  const before = state.count - wanted;
  return { allowed: Math.max(0, Math.min(wanted, limit - before)), resetSeconds: state.resetSeconds };
}

/** The bucket of a workspace's runs-per-minute budget (takeRunBudget's, and the inbound receiver's accept statement's). */
export const runBudgetBucket = (workspaceId: string): string => `runs:${workspaceId}`;

/**
 * The refusal of a run the inbound receiver would start over the budget: 429 RATE_LIMITED with
 * Retry-After, nothing recorded, rather than a failed run: the sender keeps the call and sends it
 * again when the minute turns, where a 202 for a run that never ran would lose it.
 */
export function inboundRunRefusal(limit: number, resetSeconds: number): ApiError {
  return new ApiError('RATE_LIMITED', 'Too many automation runs', {
    hint: `The workspace's plan allows ${limit} automation runs a minute (triggered and inbound together); retry after ${resetSeconds} s.`,
    headers: { 'Retry-After': String(resetSeconds) },
  });
}

/** Why a run `depth` deep in a chain that has already `used` runs must not start (loop protection), or null: the trigger handler's rules and words. */
export function loopRefusal(depth: number, used: number): string | null {
  if (depth >= MAX_CHAIN_DEPTH)
    return `Loop protection: this event comes from a chain of automations ${depth} deep; the limit is ${MAX_CHAIN_DEPTH}`;
  if (used >= CHAIN_RUN_BUDGET)
    return `Loop protection: the event that began this chain of automations has caused ${used} runs; the limit is ${CHAIN_RUN_BUDGET}`;
  return null;
}

export type RunStatus = 'running' | 'completed' | 'failed' | 'filtered' | 'duplicate';

interface RunRow {
  id: string;
  status: RunStatus;
  trigger: Record<string, unknown>;
  external_id: string | null;
  error: string | null;
  created_at: Date;
  finished_at: Date | null;
}

export function serializeRun(row: RunRow) {
  return {
    id: row.id,
    status: row.status,
    trigger: row.trigger,
    externalId: row.external_id,
    error: row.error,
    createdAt: row.created_at.toISOString(),
    finishedAt: row.finished_at ? row.finished_at.toISOString() : null,
  };
}

export async function listRuns(db: Db, workspaceId: string, automationId: string, query: Page & { status?: RunStatus }) {
  await getAutomationRow(db, workspaceId, automationId);
  const scope = db('automation_runs').where({ workspace_id: workspaceId, automation_id: automationId });
  if (query.status) scope.where({ status: query.status });
  const { rows, total } = await pageWithTotal<RunRow>(scope, query, (q) =>
    q.select('id', 'status', 'trigger', 'external_id', 'error', 'created_at', 'finished_at').orderBy([
      { column: 'created_at', order: 'desc' },
      { column: 'id', order: 'desc' },
    ]),
  );
  return { rows: rows.map(serializeRun), total };
}

/**
 * Temporal refuses workflow ids over 1000 bytes, and an externalId of 200 characters can encode to
 * 1800 (`é` is `%C3%A9`; the start failed and the receiver answered 503): past what fits beside
 * the 89-character prefix, the externalId is named by its SHA-256 instead (under `ext-sha256/`, so
 * it can never be mistaken for an encoded one). Ids that fit keep their form.
 */
const MAX_ENCODED_EXTERNAL_ID = 900;

/**
 * The run workflow's id: per business event (exactly once per event), or per run (an inbound run:
 * its externalId is deduplicated by automation_runs_external_id_uq, which frees it when the run
 * fails). The externalId form names runs accepted before that (their outbox rows carry it).
 */
export function runWorkflowId(
  workspaceId: string,
  automationId: string,
  key: { eventId: string } | { externalId: string } | { runId: string },
): string {
  if ('eventId' in key) return `automation/${workspaceId}/${automationId}/event/${key.eventId}`;
  if ('externalId' in key) {
    const encoded = encodeURIComponent(key.externalId);
    if (encoded.length <= MAX_ENCODED_EXTERNAL_ID) return `automation/${workspaceId}/${automationId}/ext/${encoded}`;
    return `automation/${workspaceId}/${automationId}/ext-sha256/${createHash('sha256').update(key.externalId, 'utf8').digest('hex')}`;
  }
  return `automation/${workspaceId}/${automationId}/run/${key.runId}`;
}
