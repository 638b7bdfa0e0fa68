import type { Context } from 'koa';
import { z } from 'zod';
import { AnyRoute, route } from '../route';
// Side effect: zod's .openapi() (registered by the shared schemas module).
import '../schemas';
import { rawBody, requestBody } from '../middleware/body';
import { ApiError, type ErrorCode } from '../../domain/kernel';
import {
  addInstagramProfiles,
  applyProviderWebhook,
  applyTemplateStatusUpdates,
  expectedVerifyToken,
  findWebhookInstance,
  ITEMS_PER_TRANSACTION,
  MAX_DELIVERY_ITEMS,
  parseCloudWebhook,
  parseInstagramWebhook,
  type ParsedWebhook,
  parseTemplateStatusUpdates,
  parseWebGatewayWebhook,
  refuseOversizedDelivery,
  sameToken,
  validSignature,
  type WebhookInstance,
  type WebhookOutcome,
  type Provider,
} from '../../domain/messaging';

/**
 * Provider → service traffic (docs/messaging.md, inbound provider webhooks): Meta's WhatsApp Cloud API
 * and Instagram webhooks, one URL per instance, and the web gateway's. No API key: the POST is authenticated by its signature
 * (`X-Hub-Signature-256`, HMAC-SHA256 of the raw body with the instance's app secret), the GET
 * verification by the verify token.
 */
const InstanceParams = z.object({ instanceId: z.uuid() });
const providerAccess = { tag: 'Provider webhooks', auth: 'none', ipProfile: 'webhookIn' } as const;

async function requireInstance(ctx: Context, instanceId: string, provider: Provider = 'cloud'): Promise<WebhookInstance> {
  const instance = await findWebhookInstance(ctx.deps.db, ctx.deps.config.encryptionKeys!, instanceId, provider);
  if (!instance) throw new ApiError('NOT_FOUND', 'Instance not found');
  return instance;
}

/**
 * Records a parsed delivery; an archived instance's is acknowledged (so the sender stops retrying)
 * and records nothing. One over the item cap is refused first, whatever the instance's state.
 */
async function apply(ctx: Context, instance: WebhookInstance, parsed: ParsedWebhook): Promise<WebhookOutcome> {
  refuseOversizedDelivery(instance, parsed, ctx.state.log);
  if (instance.archived) {
    const ignored = parsed.messages.length + parsed.statuses.length + parsed.skipped.length;
    ctx.state.log.info(
      { instanceId: instance.id, workspaceId: instance.workspace_id, ignored },
      'inbound webhook for an archived instance: nothing recorded',
    );
    return { received: 0, duplicates: 0, statuses: 0, ignored };
  }
  return applyProviderWebhook(ctx.deps.db, instance, parsed, ctx.state.log);
}

const Outcome = z
  .object({
    received: z.number().describe('Messages recorded by this delivery'),
    duplicates: z.number().describe('Messages already recorded by an earlier delivery of the same provider message id'),
    statuses: z.number().describe('Outbound messages whose status moved forward'),
    ignored: z.number().describe('Items skipped: groups, echoes, other numbers, unsupported types, unknown or stale status ids'),
  })
  .openapi('ProviderWebhookOutcome');

/** What both inbound delivery routes take and answer. */
const inboundDelivery = {
  params: InstanceParams,
  response: z.object({ data: Outcome }),
  errors: ['UNAUTHORIZED', 'NOT_FOUND', 'PAYLOAD_TOO_LARGE'] as ErrorCode[],
};

/** What both inbound delivery routes say about the size of a delivery and its transactions. */
const BOUNDS =
  `A delivery carrying more than ${MAX_DELIVERY_ITEMS.toLocaleString('en')} items (counted before any is skipped) is 413 \`PAYLOAD_TOO_LARGE\` and records ` +
  'nothing; no real provider delivery comes near it. Below that, a delivery is recorded in transactions of at most ' +
  `${ITEMS_PER_TRANSACTION} messages and statuses (messages first, each with its events in the same transaction; a contact's ` +
  'messages in the order delivered). A delivery cut off between two of them and sent again records only what the first ' +
  'did not: messages are deduplicated by provider message id, and a status already applied moves nothing.';

/** Meta's verification GET of a callback URL (the Cloud API's and Instagram's alike). */
function verificationRoute(path: 'whatsapp' | 'instagram', provider: Provider, operationId: string, who: string): AnyRoute {
  return route({
    method: 'get',
    path: `/webhooks/${path}/{instanceId}`,
    operationId,
    ...providerAccess,
    summary: `${who} webhook verification (hub.challenge)`,
    description:
      'Meta calls this once when the callback URL is saved in the app dashboard. With `hub.mode=subscribe` and ' +
      "`hub.verify_token` equal to the instance's `config.verifyToken` (an instance without one refuses every " +
      'verification: the app secret is never used as a verify token), the answer is 200 `text/plain` with the `hub.challenge` value; otherwise 401 `UNAUTHORIZED`. ' +
      `An unknown instance id (or one of another provider than ${provider}) is 404 \`NOT_FOUND\`.`,
    params: InstanceParams,
    query: z.object({
      'hub.mode': z.string().max(64).optional(),
      'hub.verify_token': z.string().max(512).optional(),
      'hub.challenge': z.string().max(1024).optional(),
    }),
    errors: ['UNAUTHORIZED', 'NOT_FOUND'],
    handler: async (ctx, { params, query }) => {
      const instance = await requireInstance(ctx, params.instanceId, provider);
      const challenge = query['hub.challenge'];
      if (query['hub.mode'] !== 'subscribe' || !challenge || !sameToken(query['hub.verify_token'], expectedVerifyToken(instance.config))) {
        throw new ApiError('UNAUTHORIZED', 'Webhook verification failed', {
          hint: 'Send hub.mode=subscribe, hub.challenge and the verify token configured for this instance.',
        });
      }
      ctx.type = 'text/plain';
      ctx.set('X-Content-Type-Options', 'nosniff');
      return challenge;
    },
  });
}

/** 401 unless the body carries Meta's signature with the instance's app secret (X-Hub-Signature-256). */
function requireMetaSignature(ctx: Context, instance: WebhookInstance): void {
  if (validSignature(instance.config.appSecret, rawBody(ctx), ctx.get('x-hub-signature-256') || undefined)) return;
  if (!instance.config.appSecret)
    ctx.state.log.warn({ instanceId: instance.id }, 'inbound webhook: the instance has no appSecret configured');
  throw new ApiError('UNAUTHORIZED', 'Missing or invalid webhook signature', {
    hint: 'Send X-Hub-Signature-256: sha256=<hex HMAC-SHA256 of the raw body with the app secret>.',
  });
}

export const providerWebhookRoutes: AnyRoute[] = [
  verificationRoute('whatsapp', 'cloud', 'verifyWhatsAppWebhook', 'WhatsApp Cloud API'),
  verificationRoute('instagram', 'instagram', 'verifyInstagramWebhook', 'Instagram'),
  route({
    method: 'post',
    path: '/webhooks/whatsapp/{instanceId}',
    operationId: 'receiveWhatsAppWebhook',
    ...providerAccess,
    summary: 'WhatsApp Cloud API webhook (inbound messages and status callbacks)',
    description:
      'The Cloud API notification body as Meta sends it (`object: whatsapp_business_account`, `entry[].changes[].value` ' +
      'with `messages`, `contacts` and `statuses`). Header `X-Hub-Signature-256: sha256=<hex>`: HMAC-SHA256 of the raw ' +
      "body with the instance's app secret; missing or wrong is 401 `UNAUTHORIZED` and nothing changes.\n\n" +
      'An inbound message from a contact creates the ' +
      'contact and the conversation when new, is stored as direction `in`, status `received`, opens the 24-hour window ' +
      'and emits `contact.created` (new contact) and `message.received`. The same provider message id delivered again ' +
      'records nothing. Group messages, echoes of our own number, senders outside Brazil and unsupported types are ' +
      'skipped. Status callbacks move our outbound messages forward (`sent` → `delivered` → `read`; `failed` only from ' +
      '`sent`); unknown ids are ignored. A `message_template_status_update` change sets the status of the template it names ' +
      '(by provider template id, else name and language) at once: `APPROVED`/`REINSTATED` approved, `PAUSED` paused, `REJECTED` ' +
      'rejected, `DISABLED` (and deleted, archived) disabled; `FLAGGED` changes nothing. An archived instance answers 200 and records nothing.\n\n' +
      'Items: the `messages`, `statuses` and `contacts` of every change of every entry. ' +
      BOUNDS,
    ...inboundDelivery,
    handler: async (ctx, { params }) => {
      const instance = await requireInstance(ctx, params.instanceId);
      requireMetaSignature(ctx, instance);
      const body = requestBody(ctx);
      const outcome = await apply(ctx, instance, parseCloudWebhook(body, instance));
      // A template's status the provider changed (field message_template_status_update) applies at once.
      if (!instance.archived) await applyTemplateStatusUpdates(ctx.deps.db, instance, parseTemplateStatusUpdates(body));
      return { data: outcome };
    },
  }),
  route({
    method: 'post',
    path: '/webhooks/web/{instanceId}',
    operationId: 'receiveWebGatewayWebhook',
    ...providerAccess,
    summary: 'Web gateway webhook (inbound messages of a web gateway instance)',
    description:
      "The gateway's `messages.upsert` event as Evolution-API-style gateways post it (`{ event, instance, data: { key: " +
      '{ remoteJid, fromMe, id }, pushName, message, messageType, messageTimestamp }, apikey }`; `data` may be a list). ' +
      "Authenticated by the instance's API key, in the body's `apikey` or the `apikey` header (compared in constant time); " +
      'missing or wrong is 401 `UNAUTHORIZED` and nothing changes. A message from a person is recorded as for the Cloud API ' +
      '(contact and conversation when new, direction `in`, `contact.created`, `message.received`; a text that is only STOP ' +
      'or START sets the opt-out); our own sends (`fromMe`), groups and other events are skipped. An archived instance ' +
      'answers 200 and records nothing.\n\n' +
      'Items: the messages of `data`. ' +
      BOUNDS,
    ...inboundDelivery,
    handler: async (ctx, { params }) => {
      const instance = await requireInstance(ctx, params.instanceId, 'web');
      const body = requestBody(ctx);
      const given =
        (body && typeof body === 'object' && typeof (body as { apikey?: unknown }).apikey === 'string'
          ? (body as { apikey: string }).apikey
          : undefined) ??
        (ctx.get('apikey') || undefined);
      if (!sameToken(given, instance.config.accessToken)) {
        throw new ApiError('UNAUTHORIZED', 'Missing or invalid gateway API key', {
          hint: "Configure the gateway's webhook for this instance: its events carry the instance's apikey.",
        });
      }
      return { data: await apply(ctx, instance, parseWebGatewayWebhook(body)) };
    },
  }),
  route({
    method: 'post',
    path: '/webhooks/instagram/{instanceId}',
    operationId: 'receiveInstagramWebhook',
    ...providerAccess,
    summary: 'Instagram messaging webhook (DMs and seen events)',
    description:
      'The Instagram notification body as Meta sends it (`object: instagram`, `entry[].messaging[]` with `sender.id` (the ' +
      "person's Instagram-scoped id), `timestamp` (ms) and `message: { mid, text?, attachments? }` or `read: { mid }`). Header " +
      "`X-Hub-Signature-256: sha256=<hex>`: HMAC-SHA256 of the raw body with the instance's app secret; missing or wrong is 401 " +
      '`UNAUTHORIZED` and nothing changes.\n\n' +
      "A DM creates the contact (keyed by the instance and the sender's id, no phone; name and username from the Graph API " +
      'profile when it answers) and the conversation when new, is stored as direction `in`, status `received` (deduplicated by ' +
      '`mid`), opens the 24-hour window at its own time (capped at now: an old DM leaves the window closed) and emits ' +
      '`contact.created` and `message.received`. Each attachment is a message of its own (image, video, audio, file as ' +
      '`document`), its file fetched and stored like WhatsApp media; a story reply is a message, a story mention one with the ' +
      'text `[story mention]`. Echoes of what the business sent (`is_echo`), deleted and unsupported messages, reactions and ' +
      "other accounts' traffic are skipped. A seen event (`read: { mid }`) moves our message `mid` to `read` and emits " +
      '`message.status_updated`. An archived instance answers 200 and records nothing.\n\n' +
      'Items: the `messaging` events of every entry. ' +
      BOUNDS,
    ...inboundDelivery,
    handler: async (ctx, { params }) => {
      const instance = await requireInstance(ctx, params.instanceId, 'instagram');
      requireMetaSignature(ctx, instance);
      const parsed = parseInstagramWebhook(requestBody(ctx), instance);
      refuseOversizedDelivery(instance, parsed, ctx.state.log);
      if (!instance.archived) await addInstagramProfiles(ctx.deps.db, instance, parsed, ctx.state.log);
      return { data: await apply(ctx, instance, parsed) };
    },
  }),
];
