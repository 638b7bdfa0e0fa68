import { createHmac, randomBytes } from 'node:crypto';
import type Koa from 'koa';
import type { EmulatorWebhook } from './server';

/**
 * The Cloud API's message templates, at their wire format (emulator/server.ts mounts it):
 *
 * - `GET /{version}/{wabaId}/message_templates?limit=&after=` (Bearer token): `{ data, paging: {
 *   cursors: { before, after }, next? } }`, `next` only while a page follows (Graph's paging).
 * - `POST /__emulator/templates` `{ wabaId, templates: [{ name, language, status, category,
 *   components, id? }] }`: sets a business account's templates (Graph's shape: upper-case status,
 *   category, component types and header format); `GET /__emulator/templates?wabaId=` lists them
 *   and the page calls made.
 * - `POST /__emulator/template-status` `{ phoneNumberId, name, language, event, reason? }`: the
 *   template's status changes (APPROVED, PAUSED, DISABLED, REJECTED, REINSTATED, FLAGGED, ...) and Meta's
 *   `message_template_status_update` notification is posted to the number's webhook, signed with its
 *   app secret like the status callbacks. Answers what the webhook answered.
 */
export interface EmulatedTemplate {
  id: string;
  name: string;
  language: string;
  status: string;
  category: string;
  components: unknown[];
}

export interface TemplatePageCall {
  at: string;
  wabaId: string;
  after: string | null;
  limit: number;
  auth: 'bearer' | 'none';
}

const DEFAULT_LIMIT = 25;
const MAX_LIMIT = 100;

const isText = (v: unknown): v is string => typeof v === 'string' && v.length > 0;
const cursorOf = (index: number): string => Buffer.from(`idx:${index}`).toString('base64url');
const indexOf = (cursor: string): number | undefined => {
  const m = /^idx:(\d+)$/.exec(Buffer.from(cursor, 'base64url').toString('utf8'));
  return m ? Number(m[1]) : undefined;
};

/** A Graph API error body. */
const graphError = (code: number, message: string) => ({
  error: {
    message,
    type: code === 190 ? 'OAuthException' : 'GraphMethodException',
    code,
    fbtrace_id: randomBytes(9).toString('base64url'),
  },
});

export function createTemplateEmulator(webhooks: Map<string, EmulatorWebhook>) {
  const byWaba = new Map<string, EmulatedTemplate[]>();
  const pageCalls: TemplatePageCall[] = [];
  let ids = 0;

  const reset = (): void => {
    byWaba.clear();
    pageCalls.length = 0;
  };

  const middleware: Koa.Middleware = async (ctx, next) => {
    const list = /^\/(v\d+\.\d+)\/([^/]+)\/message_templates$/.exec(ctx.path);
    if (list && ctx.method === 'GET') {
      const wabaId = decodeURIComponent(list[2]);
      const auth = /^Bearer \S+/.test(ctx.get('authorization')) ? 'bearer' : 'none';
      const limit = Math.min(MAX_LIMIT, Math.max(1, Number(ctx.query.limit) || DEFAULT_LIMIT));
      const after = typeof ctx.query.after === 'string' ? ctx.query.after : null;
      pageCalls.push({ at: new Date().toISOString(), wabaId, after, limit, auth });
      if (pageCalls.length > 10_000) pageCalls.shift();
      if (auth === 'none') {
        ctx.status = 401;
        ctx.body = graphError(190, 'Invalid OAuth access token.');
        return;
      }
      const templates = byWaba.get(wabaId);
      if (!templates) {
        ctx.status = 400;
        ctx.body = graphError(
          100,
          `Unsupported get request. Object with ID '${wabaId}' does not exist, cannot be loaded due to missing permissions, or does not support this operation.`,
        );
        return;
      }
      const start = after === null ? 0 : indexOf(after);
      if (start === undefined) {
        ctx.status = 400;
        ctx.body = graphError(100, 'Invalid cursor');
        return;
      }
      const data = templates.slice(start, start + limit);
      const end = start + data.length;
      const paging: Record<string, unknown> = data.length > 0 ? { cursors: { before: cursorOf(start), after: cursorOf(end) } } : {};
      if (end < templates.length) {
        const query = new URLSearchParams();
        if (typeof ctx.query.fields === 'string') query.set('fields', ctx.query.fields);
        query.set('limit', String(limit));
        query.set('after', cursorOf(end));
        paging.next = `${ctx.protocol}://${ctx.get('host')}${ctx.path}?${query.toString()}`;
      }
      ctx.body = { data, paging };
      return;
    }
    if (ctx.path === '/__emulator/templates' && ctx.method === 'GET') {
      const wabaId = typeof ctx.query.wabaId === 'string' ? ctx.query.wabaId : '';
      ctx.body = { templates: byWaba.get(wabaId) ?? [], calls: pageCalls.filter((c) => c.wabaId === wabaId) };
      return;
    }
    if (ctx.path === '/__emulator/templates' && ctx.method === 'POST') {
      const body = ((ctx.request as { body?: unknown }).body ?? {}) as Record<string, unknown>;
      if (!isText(body.wabaId) || !Array.isArray(body.templates)) {
        ctx.status = 400;
        ctx.body = { error: 'wabaId and templates (a list) are required' };
        return;
      }
      const templates: EmulatedTemplate[] = [];
      for (const raw of body.templates as Record<string, unknown>[]) {
        if (!raw || !isText(raw.name) || !isText(raw.language)) {
          ctx.status = 400;
          ctx.body = { error: 'each template needs a name and a language' };
          return;
        }
        templates.push({
          id: isText(raw.id) ? raw.id : String(9_000_000_000_000 + ++ids),
          name: raw.name,
          language: raw.language,
          status: isText(raw.status) ? raw.status : 'APPROVED',
          category: isText(raw.category) ? raw.category : 'MARKETING',
          components: Array.isArray(raw.components) ? raw.components : [{ type: 'BODY', text: 'Hello' }],
        });
      }
      byWaba.set(body.wabaId, templates);
      ctx.body = { wabaId: body.wabaId, templates };
      return;
    }
    if (ctx.path === '/__emulator/template-status' && ctx.method === 'POST') {
      const body = ((ctx.request as { body?: unknown }).body ?? {}) as Record<string, unknown>;
      const webhook = isText(body.phoneNumberId) ? webhooks.get(body.phoneNumberId) : undefined;
      const template = webhook
        ? byWaba.get(webhook.wabaId)?.find((t) => t.name === body.name && (!isText(body.language) || t.language === body.language))
        : undefined;
      if (!webhook || !template || !isText(body.event)) {
        ctx.status = 400;
        ctx.body = { error: 'phoneNumberId (with a webhook set), name (of a template of its account), language and event are required' };
        return;
      }
      const event = body.event.toUpperCase();
      if (event !== 'FLAGGED') template.status = event === 'REINSTATED' ? 'APPROVED' : event;
      const raw = JSON.stringify({
        object: 'whatsapp_business_account',
        entry: [
          {
            id: webhook.wabaId,
            time: Math.floor(Date.now() / 1000),
            changes: [
              {
                value: {
                  event,
                  message_template_id: Number(template.id),
                  message_template_name: template.name,
                  message_template_language: template.language,
                  reason: isText(body.reason) ? body.reason : 'NONE',
                },
                field: 'message_template_status_update',
              },
            ],
          },
        ],
      });
      const res = await fetch(webhook.url, {
        method: 'POST',
        headers: {
          'content-type': 'application/json',
          'user-agent': 'facebookexternalua',
          'x-hub-signature': `sha1=${createHmac('sha1', webhook.appSecret).update(raw, 'utf8').digest('hex')}`,
          'x-hub-signature-256': `sha256=${createHmac('sha256', webhook.appSecret).update(raw, 'utf8').digest('hex')}`,
        },
        body: raw,
        redirect: 'manual',
      });
      ctx.body = { delivered: res.status, answer: await res.json().catch(() => null) };
      return;
    }
    await next();
  };

  return { middleware, reset };
}
