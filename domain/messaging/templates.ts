import type { Db, KeyRing } from '../platform';
import { ApiError, cut, iso, Page, pageWithTotal, storable } from '../kernel';
import { type InstanceConfig, type InstanceRow, liveInstanceConfig, openInstanceConfig } from './instances';
import type { TemplateSyncInput, TemplateSyncResult } from '../../types/templates';
import { arr, cloudChanges, obj } from './inbound';

/**
 * Message templates of an instance (docs/messaging.md, "Templates"). A template is identified by
 * instance, name and language: the row an operator registers (admin API) and the one read from the
 * WhatsApp Business account are one. Cloud API instances follow the provider: a sync
 * (syncTemplates, run by the activity syncInstanceTemplates) upserts what `GET /{version}/{wabaId}/message_templates`
 * lists, and the `message_template_status_update` webhook field changes a status at once. Only an
 * `approved` template is sendable (approvedTemplate).
 */
export const TEMPLATE_STATUSES = ['approved', 'pending', 'rejected', 'paused', 'disabled'] as const;
export type TemplateStatus = (typeof TEMPLATE_STATUSES)[number];
export const HEADER_FORMATS = ['text', 'image', 'video', 'document'] as const;
export type HeaderFormat = (typeof HEADER_FORMATS)[number];

/** The sendable parts of a template, in our lower-case shape (stored as `templates.components`). */
export interface TemplateComponents {
  header: { format: HeaderFormat; variableCount: number } | null;
  /** `text`: null for an operator's row that never came from the provider. */
  body: { text: string | null; variableCount: number };
  buttons: { type: string; text: string; urlVariable: boolean }[];
}

/** The largest number of body variables a send can fill (sending.ts templateVariables): a template over it is not kept. */
export const MAX_TEMPLATE_VARIABLES = 20;

export interface TemplateInput {
  instanceId: string;
  name: string;
  language: string;
  variableCount: number;
  status: TemplateStatus;
}

interface TemplateRow {
  id: string;
  workspace_id: string;
  instance_id: string;
  name: string;
  language: string;
  variable_count: number;
  status: TemplateStatus;
  category: string | null;
  components: TemplateComponents | null;
  provider_template_id: string | null;
  created_at: Date;
  updated_at: Date;
}

/** Registers a message template of one of the workspace's instances (`approved` is sendable). */
export async function createTemplate(db: Db, workspaceId: string, input: TemplateInput) {
  const instance = await db('instances').where({ id: input.instanceId, workspace_id: workspaceId }).first('id');
  if (!instance) throw new ApiError('INSTANCE_NOT_FOUND', 'Instance not found in this workspace');
  const [row] = await db('templates')
    .insert({
      workspace_id: workspaceId,
      instance_id: input.instanceId,
      name: input.name,
      language: input.language,
      variable_count: input.variableCount,
      status: input.status,
    })
    .returning('*');
  return {
    id: row.id,
    instanceId: row.instance_id,
    name: row.name,
    language: row.language,
    variableCount: row.variable_count,
    status: row.status,
    createdAt: iso(row.created_at),
  };
}

/**
 * The approved template of this name and language on the instance, if any: what a template send
 * needs, its body's variable count and its components (null for an operator's row: a body only),
 * checked by sending.ts templateComponents.
 */
export async function approvedTemplate(
  trx: Db,
  workspaceId: string,
  instanceId: string,
  name: string | undefined,
  language: string | undefined,
): Promise<{ variable_count: number; components: TemplateComponents | null } | undefined> {
  return trx('templates')
    .where({ workspace_id: workspaceId, instance_id: instanceId, name, language, status: 'approved' })
    .first('variable_count', 'components');
}

/** The public shape (GET /api/v1/templates). An operator's row has no category and only its body's variable count. */
export function serializeTemplate(row: TemplateRow) {
  return {
    id: row.id,
    instanceId: row.instance_id,
    name: row.name,
    language: row.language,
    status: row.status,
    category: row.category,
    components: row.components ?? { header: null, body: { text: null, variableCount: row.variable_count }, buttons: [] },
    updatedAt: iso(row.updated_at)!,
  };
}

/** The workspace's templates, oldest first; `instanceId` and `status` filter. */
export async function listTemplates(db: Db, workspaceId: string, query: Page & { instanceId?: string; status?: TemplateStatus }) {
  const scope = db('templates').where({ workspace_id: workspaceId });
  if (query.instanceId) scope.where({ instance_id: query.instanceId });
  if (query.status) scope.where({ status: query.status });
  const { rows, total } = await pageWithTotal<TemplateRow>(scope, query, (q) =>
    q.orderBy([{ column: 'created_at' }, { column: 'id' }]).select('*'),
  );
  return { rows: rows.map(serializeTemplate), total };
}

// ---------------------------------------------------------------------------------------------
// The provider's templates (Graph API `message_templates`) in our shape.

const text = (v: unknown, max: number): string | undefined =>
  typeof v === 'string' && v.length > 0 ? cut(storable(v), max) : typeof v === 'number' ? String(v) : undefined;

/**
 * A provider status or status-update event in our words; undefined for one that changes nothing
 * (FLAGGED: the quality dropped, the template is still sendable until Meta pauses it).
 */
export function templateStatusOf(providerStatus: unknown): TemplateStatus | undefined {
  switch (String(providerStatus ?? '').toUpperCase()) {
    case 'APPROVED':
    case 'REINSTATED':
      return 'approved';
    case 'PENDING':
    case 'IN_APPEAL':
      return 'pending';
    case 'REJECTED':
      return 'rejected';
    case 'PAUSED':
      return 'paused';
    case 'DISABLED':
    case 'DELETED':
    case 'PENDING_DELETION':
    case 'ARCHIVED':
    case 'LIMIT_EXCEEDED':
      return 'disabled';
    default:
      return undefined;
  }
}

/** Distinct `{{1}}` / `{{name}}` placeholders of a text. */
export function variableCount(value: string | undefined): number {
  if (!value) return 0;
  return new Set([...value.matchAll(/\{\{\s*([A-Za-z0-9_]+)\s*\}\}/g)].map((m) => m[1])).size;
}

export interface ProviderTemplate {
  providerId: string | null;
  name: string;
  language: string;
  status: TemplateStatus;
  category: string | null;
  components: TemplateComponents;
}

/**
 * One entry of the provider's list in our shape, or why it is not kept (no name or language, a
 * header we cannot describe, more body variables than a send can fill).
 */
export function parseProviderTemplate(raw: unknown): { template: ProviderTemplate } | { skipped: string } {
  const t = obj(raw);
  const name = text(t?.name, 512);
  const language = text(t?.language, 15);
  if (!t || !name || !language || language.length < 2) return { skipped: 'template without a name or language' };
  let header: TemplateComponents['header'] = null;
  let body: TemplateComponents['body'] = { text: null, variableCount: 0 };
  const buttons: TemplateComponents['buttons'] = [];
  for (const c of arr(t.components)) {
    const component = obj(c);
    const type = String(component?.type ?? '').toUpperCase();
    if (!component) continue;
    if (type === 'HEADER') {
      const format = String(component.format ?? 'TEXT').toLowerCase();
      if (!(HEADER_FORMATS as readonly string[]).includes(format)) return { skipped: `${name} (${language}): header format ${format}` };
      header = { format: format as HeaderFormat, variableCount: format === 'text' ? variableCount(text(component.text, 1024)) : 0 };
    } else if (type === 'BODY') {
      const bodyText = text(component.text, 4096) ?? null;
      body = { text: bodyText, variableCount: variableCount(bodyText ?? undefined) };
    } else if (type === 'BUTTONS') {
      for (const b of arr(component.buttons).slice(0, 10)) {
        const button = obj(b);
        if (!button) continue;
        const buttonType = String(button.type ?? '').toLowerCase();
        buttons.push({
          type: cut(buttonType, 32),
          text: text(button.text, 200) ?? '',
          urlVariable: buttonType === 'url' && typeof button.url === 'string' && /\{\{/.test(button.url),
        });
      }
    }
  }
  if (body.variableCount > MAX_TEMPLATE_VARIABLES)
    return { skipped: `${name} (${language}): ${body.variableCount} body variables, more than ${MAX_TEMPLATE_VARIABLES}` };
  const category = text(t.category, 32)?.toLowerCase() ?? null;
  return {
    template: {
      providerId: text(t.id, 64) ?? null,
      name,
      language,
      // A status we do not know is not sendable until a later sync or notification says more.
      status: templateStatusOf(t.status) ?? 'pending',
      category,
      components: { header, body, buttons },
    },
  };
}

const UPSERT_CHUNK = 200;

/**
 * Upserts the provider's templates of one instance: by (instance, name, language), so an operator's
 * row becomes the provider's. A row changes (and its `updated_at`) only when something differs.
 * When `complete` (every page was read), a template the provider no longer lists that came from it
 * (it has a provider id) is `disabled`; an operator's rows are never touched by absence.
 */
export async function upsertProviderTemplates(
  db: Db,
  instance: { id: string; workspace_id: string },
  templates: ProviderTemplate[],
  complete: boolean,
): Promise<{ created: number; updated: number; unchanged: number }> {
  // The provider lists each (name, language) once; a repeated one keeps the last.
  const unique = [...new Map(templates.map((t) => [`${t.name}\u0000${t.language}`, t])).values()];
  return db.transaction(async (trx) => {
    let created = 0;
    let updated = 0;
    let disabled = 0;
    for (let i = 0; i < unique.length; i += UPSERT_CHUNK) {
      const rows = unique.slice(i, i + UPSERT_CHUNK).map((t) => ({
        workspace_id: instance.workspace_id,
        instance_id: instance.id,
        name: t.name,
        language: t.language,
        status: t.status,
        category: t.category,
        components: JSON.stringify(t.components),
        variable_count: t.components.body.variableCount,
        provider_template_id: t.providerId,
      }));
      const { rows: changed } = await trx.raw<{ rows: { created: boolean }[] }>(
        `? ON CONFLICT (instance_id, name, language) DO UPDATE SET
           status = excluded.status, category = excluded.category, components = excluded.components,
           variable_count = excluded.variable_count, provider_template_id = excluded.provider_template_id, updated_at = now()
         WHERE (templates.status, templates.category, templates.components, templates.variable_count, templates.provider_template_id)
           IS DISTINCT FROM (excluded.status, excluded.category, excluded.components, excluded.variable_count, excluded.provider_template_id)
         RETURNING (xmax = 0) AS created`,
        [trx('templates').insert(rows)],
      );
      created += changed.filter((r) => r.created).length;
      updated += changed.filter((r) => !r.created).length;
    }
    if (complete) {
      const listed = unique.map((t) => [t.name, t.language]);
      const gone = trx('templates')
        .where({ instance_id: instance.id })
        .whereNotNull('provider_template_id')
        .whereNot({ status: 'disabled' });
      if (listed.length > 0) gone.whereNotIn(['name', 'language'], listed);
      disabled = await gone.update({ status: 'disabled', updated_at: trx.fn.now() });
    }
    return { created, updated: updated + disabled, unchanged: unique.length - created - updated };
  });
}

/**
 * The provider's template list as an adapter read it (activities/providers): `listed`, every page
 * (`complete`), or as many as the page cap allows; `refused`, a final refusal that trying again
 * cannot fix (a token the provider refuses, an answer it cannot read). The adapter throws when
 * trying again may help (throttling, an outage): the sync then fails, retryably.
 */
export type TemplateListing =
  { outcome: 'listed'; templates: unknown[]; pages: number; complete: boolean } | { outcome: 'refused'; error: string };

/** Reads the list of the business account an instance's (opened) configuration names. */
export type TemplateLister = (settings: InstanceConfig) => Promise<TemplateListing>;

/**
 * One instance's template sync (docs/messaging.md, "Templates"): its templates read from the Cloud
 * API through `list` and upserted (upsertProviderTemplates), the only code path for both the API's
 * `POST /api/v1/instances/{id}/templates/sync` and the hourly schedule. A refusal that trying again
 * cannot fix (no such instance, a web gateway instance, no wabaId, a list the provider refuses) is
 * the result, not a failure, so the API answers it; what `list` throws (throttling, an outage) is
 * left to the caller's retries.
 */
export async function syncTemplates(db: Db, ring: KeyRing, input: TemplateSyncInput, list: TemplateLister): Promise<TemplateSyncResult> {
  const instance = await liveInstanceConfig(db, input.workspaceId, input.instanceId);
  if (!instance) return { refused: { code: 'INSTANCE_NOT_FOUND', message: 'Instance not found in this workspace' } };
  const unsupported = (message: string): TemplateSyncResult => ({ refused: { code: 'TEMPLATE_UNSUPPORTED', message } });
  if (instance.provider !== 'cloud')
    return unsupported('A web gateway instance has no template API: templates are a WhatsApp Cloud API feature');
  const settings = openInstanceConfig(ring, instance.config, input.workspaceId);
  if (!settings.wabaId)
    return unsupported('The instance has no wabaId configured: its WhatsApp Business account id is needed to read its templates');
  const listing = await list(settings);
  if (listing.outcome === 'refused') return { refused: { code: 'SEND_FAILED', message: listing.error } };
  const kept: ProviderTemplate[] = [];
  const skipped: string[] = [];
  for (const raw of listing.templates) {
    const parsed = parseProviderTemplate(raw);
    if ('template' in parsed) kept.push(parsed.template);
    else skipped.push(parsed.skipped);
  }
  const counts = await upsertProviderTemplates(db, { id: instance.id, workspace_id: input.workspaceId }, kept, listing.complete);
  return { counts, skipped: skipped.length, pages: listing.pages, complete: listing.complete };
}

// ---------------------------------------------------------------------------------------------
// The Cloud API webhook field `message_template_status_update`.

export interface TemplateStatusUpdate {
  providerId?: string;
  name?: string;
  language?: string;
  status: TemplateStatus;
}

/** At most this many template notifications of one delivery are applied (Meta sends one per change). */
export const MAX_TEMPLATE_UPDATES_PER_DELIVERY = 100;

/**
 * The `message_template_status_update` changes of a Cloud API notification (`value: { event,
 * message_template_id, message_template_name, message_template_language, reason }`); an event
 * that changes nothing (FLAGGED, unknown) or names no template is left out.
 */
export function parseTemplateStatusUpdates(payload: unknown): TemplateStatusUpdate[] {
  const updates: TemplateStatusUpdate[] = [];
  for (const { change, value } of cloudChanges(payload) ?? []) {
    if (!value || change?.field !== 'message_template_status_update') continue;
    const status = templateStatusOf(value.event);
    const providerId = text(value.message_template_id, 64);
    const name = text(value.message_template_name, 512);
    const language = text(value.message_template_language, 15);
    if (!status || (!providerId && !(name && language))) continue;
    if (updates.length >= MAX_TEMPLATE_UPDATES_PER_DELIVERY) return updates;
    updates.push({ status, ...(providerId ? { providerId } : {}), ...(name && language ? { name, language } : {}) });
  }
  return updates;
}

/**
 * Applies the notifications to the instance's templates: the one with that provider id, else that
 * name and language. A template not known yet is left to the next sync. Answers how many changed.
 */
export async function applyTemplateStatusUpdates(
  db: Db,
  instance: { id: string; workspace_id: string },
  updates: TemplateStatusUpdate[],
): Promise<number> {
  let changed = 0;
  for (const update of updates) {
    changed += await db('templates')
      .where({ workspace_id: instance.workspace_id, instance_id: instance.id })
      .where((q) => {
        if (update.providerId) q.orWhere({ provider_template_id: update.providerId });
        if (update.name && update.language) q.orWhere({ name: update.name, language: update.language });
      })
      .whereNot({ status: update.status })
      .update({ status: update.status, updated_at: db.fn.now() });
  }
  return changed;
}

/**
 * The instance a template sync is asked for (POST /api/v1/instances/{id}/templates/sync): the
 * workspace's, not archived, with its provider (only a Cloud API instance has a template API);
 * undefined when the workspace has no such instance.
 */
export async function instanceForTemplateSync(
  db: Db,
  workspaceId: string,
  instanceId: string,
): Promise<Pick<InstanceRow, 'id' | 'provider'> | undefined> {
  return db('instances').where({ id: instanceId, workspace_id: workspaceId, archived: false }).first('id', 'provider');
}

/**
 * The next `limit` Cloud API instances with a wabaId after `afterId` (by id, so instances of all
 * workspaces interleave), for the scheduled template sync. Every workspace's: the schedule serves them all.
 */
export async function templateSyncInstances(
  db: Db,
  afterId: string | undefined,
  limit: number,
): Promise<{ workspaceId: string; instanceId: string }[]> {
  const q = db('instances')
    .where({ provider: 'cloud', archived: false })
    .whereRaw("config->>'wabaId' IS NOT NULL")
    .orderBy('id')
    .limit(limit)
    .select('id', 'workspace_id');
  if (afterId) q.where('id', '>', afterId);
  const rows: { id: string; workspace_id: string }[] = await q;
  return rows.map((r) => ({ workspaceId: r.workspace_id, instanceId: r.id }));
}
