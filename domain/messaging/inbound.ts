import { createHash, createHmac, timingSafeEqual } from 'node:crypto';
import type { Knex } from 'knex';
import type { Logger } from 'pino';
import type { Db, KeyRing } from '../platform';
import { ApiError, isUuid, storable } from '../kernel';
import { InstanceRow, openInstanceConfig, type Provider } from './instances';
import { findOrCreateConversations } from './conversations';
import { recordStatusEvent } from './send/record';
import { recordEvent } from '../webhooks';
import {
  digitsOfPersonJid,
  findOrCreateContact,
  findOrCreateInstagramContact,
  parsePhone,
  Phone,
  recordConsent,
  recordWaIds,
} from '../leads';
import { consentFromMessage } from './sending';
import { MEDIA_TYPES } from '../../types/messaging';
import { type InboundMediaType, recordPendingMedia } from './media';
import { recordConversationActivity } from './activity';
import { aiEnabled } from '../access';

/**
 * Inbound provider traffic of the WhatsApp Cloud API (docs/messaging.md):
 * the webhook Meta posts to `/webhooks/whatsapp/{instanceId}`, signed with the app secret.
 *
 * Payload: `{ object: 'whatsapp_business_account', entry: [{ id, changes: [{ field: 'messages',
 * value: { messaging_product, metadata: { display_phone_number, phone_number_id },
 * contacts: [{ profile: { name }, wa_id }], messages: [...], statuses: [...] } }] }] }`; a status is
 * `{ id: <wamid>, status, timestamp, recipient_id, biz_opaque_callback_data? }`, the last one echoing
 * the reference our send put on the message.
 *
 * Parsing (`parseCloudWebhook`) is pure and lenient: anything it does not understand is skipped
 * with a reason, never an error, because a non-2xx answer only makes Meta retry the same bytes.
 * The one refusal is size: a delivery of more items than any provider sends (MAX_DELIVERY_ITEMS).
 * Applying (`applyProviderWebhook`) runs in transactions of at most ITEMS_PER_TRANSACTION items,
 * so a large delivery never holds one transaction (and every tenant's sync horizon) open for long.
 *
 * The web gateway (Evolution-API-like) posts its `messages.upsert` events to
 * `/webhooks/web/{instanceId}` with the instance's API key in the body (`apikey`); parsed by
 * `parseWebGatewayWebhook` into the same shape and applied the same way.
 */

// ---------------------------------------------------------------------------------------------
// Instance, signature and verify token

export type WebhookInstance = Pick<InstanceRow, 'id' | 'workspace_id' | 'channel' | 'provider' | 'archived' | 'config'>;

/** The instance a webhook URL names (any workspace: the URL carries no workspace), or undefined. */
export async function findWebhookInstance(
  db: Db,
  ring: KeyRing,
  instanceId: string,
  provider: Provider,
): Promise<WebhookInstance | undefined> {
  if (!isUuid(instanceId)) return undefined;
  const row: WebhookInstance | undefined = await db('instances')
    .where({ id: instanceId, channel: provider === 'instagram' ? 'instagram' : 'whatsapp', provider })
    .first('id', 'workspace_id', 'channel', 'provider', 'archived', 'config');
  return row && { ...row, config: openInstanceConfig(ring, row.config, row.workspace_id) };
}

const SIGNATURE = /^sha256=([0-9a-f]{64})$/i;

/**
 * `X-Hub-Signature-256: sha256=<hex HMAC-SHA256(appSecret, raw body)>`, compared in constant
 * time on two 32-byte buffers. The raw body is the exact text received (never re-serialised JSON).
 */
export function validSignature(appSecret: string | undefined, rawBody: string, header: string | undefined): boolean {
  if (!appSecret || !header) return false;
  const match = SIGNATURE.exec(header.trim());
  if (!match) return false;
  const given = Buffer.from(match[1], 'hex');
  const expected = createHmac('sha256', appSecret).update(rawBody, 'utf8').digest();
  return given.length === expected.length && timingSafeEqual(given, expected);
}

/** The signature header value for a body (tests, the emulator, the README's curl example). */
export function signBody(appSecret: string, rawBody: string): string {
  return `sha256=${createHmac('sha256', appSecret).update(rawBody, 'utf8').digest('hex')}`;
}

/**
 * The token Meta's verification GET must present: the instance's own `config.verifyToken`. Never
 * the app secret: it would travel in a query string and be typed into a dashboard, and whoever
 * knows it can sign inbound traffic.
 */
export function expectedVerifyToken(config: WebhookInstance['config']): string | undefined {
  const own = (config as Record<string, unknown>).verifyToken;
  return typeof own === 'string' && own.length > 0 ? own : undefined;
}

/** Constant-time comparison of two strings of any length (both are hashed first). */
export function sameToken(given: string | undefined, expected: string | undefined): boolean {
  if (!given || !expected) return false;
  const a = createHash('sha256').update(given, 'utf8').digest();
  const b = createHash('sha256').update(expected, 'utf8').digest();
  return timingSafeEqual(a, b);
}

// ---------------------------------------------------------------------------------------------
// Parsing

/** Our Message `type` for what the provider calls a message type. */
export type InboundType = 'text' | InboundMediaType;

/** The `type` vocabulary of the `message.received` event: `text`, else the web gateway's kind (`imageMessage`, ...). */
const eventType = (type: InboundType): string => (type === 'text' ? 'text' : `${type}Message`);

/** Inbound messages that carry a file: the media types we send, and stickers. */
const INBOUND_MEDIA_KINDS = new Set<string>([...MEDIA_TYPES, 'sticker']);

/** Who wrote: a WhatsApp number (and the provider's id of it), or on Instagram the person's Instagram-scoped id. */
type InboundSender =
  { phone: Phone; waId: string; igsid?: never; username?: never } | { igsid: string; username?: string; phone?: never; waId?: never };

/** The order deliveries lock their senders' contacts in (see applyProviderWebhook). */
const senderKey = (m: InboundMessage): string => (m.igsid !== undefined ? `ig:${m.igsid}` : m.phone.key);

export type InboundMessage = InboundSender & {
  providerMessageId: string;
  profileName?: string;
  type: InboundType;
  body: string;
  /** The provider's media id: an internal reference, never a public URL. */
  mediaRef: string | null;
  /** What the provider says of the file, when it does (the stored media's first MIME type and file name). */
  mediaMimeType?: string;
  mediaFileName?: string;
  timestamp: Date;
};

export interface StatusUpdate {
  providerMessageId: string;
  status: 'sent' | 'delivered' | 'read' | 'failed';
  /**
   * `biz_opaque_callback_data`: the reference our send put on the message (a send attempt's
   * `reference`), echoed by the provider in every status callback of a message it accepted.
   */
  reference?: string;
  /** `recipient_id`: the provider's identity (wa_id) of the recipient. */
  recipientId?: string;
  /** When the provider says the status happened (never later than when it reached us). */
  timestamp: Date;
  /** A failed status: the provider's error code (Cloud API `errors[0].code`, e.g. `131026`). */
  errorCode?: string;
}

export interface Skipped {
  reason: string;
  /** Provider message id when there is one (never a phone number: logs carry no contact data). */
  id?: string;
}

export interface ParsedWebhook {
  messages: InboundMessage[];
  statuses: StatusUpdate[];
  skipped: Skipped[];
  /**
   * The items the delivery carries, whatever became of them: for the Cloud API the messages,
   * statuses and contacts of every change of every entry; for the web gateway the messages of `data`.
   */
  items: number;
}

type Json = Record<string, unknown>;
/** A JSON object of a provider's payload (not an array), or undefined; `arr`: a JSON array, else empty. */
export const obj = (v: unknown): Json | undefined => (typeof v === 'object' && v !== null && !Array.isArray(v) ? (v as Json) : undefined);
export const arr = (v: unknown): unknown[] => (Array.isArray(v) ? v : []);
/** A string (or number) of the payload as storable text (domain/kernel/text: U+0000 dropped, unpaired surrogates U+FFFD); undefined when empty. */
const str = (v: unknown): string | undefined => {
  const s = typeof v === 'string' ? storable(v) : typeof v === 'number' ? String(v) : undefined;
  return s === undefined || s.length === 0 ? undefined : s;
};
const digitsOf = (v: string | undefined): string => (v ?? '').replace(/\D/g, '');

/** Unix seconds (a string in the payload) as a date, never in the future; now when absent. */
function providerTime(value: unknown, now: Date): Date {
  const seconds = Number(value);
  if (!Number.isFinite(seconds) || seconds <= 0) return now;
  return new Date(Math.min(seconds * 1000, now.getTime()));
}

/** Group traffic: a `@g.us` id anywhere we look, or a group marker on the message. */
function isGroup(message: Json): boolean {
  if (message.group_id !== undefined || message.group !== undefined || message.is_group === true) return true;
  const context = obj(message.context);
  if (context && (context.group_id !== undefined || context.group !== undefined)) return true;
  return [message.from, message.chat_id, message.recipient_id, message.to].some((v) => typeof v === 'string' && v.includes('@g.us'));
}

/** Our type and the text we keep for a message, or undefined for a type we do not take in. */
function content(
  message: Json,
): { type: InboundType; body: string; mediaRef: string | null; mediaMimeType?: string; mediaFileName?: string } | undefined {
  const kind = str(message.type);
  if (kind === 'text') return { type: 'text', body: str(obj(message.text)?.body) ?? '', mediaRef: null };
  if (kind && INBOUND_MEDIA_KINDS.has(kind)) {
    const media = obj(message[kind]) ?? {};
    return {
      type: kind as InboundType,
      body: str(media.caption) ?? '',
      mediaRef: str(media.id) ?? null,
      ...(str(media.mime_type) ? { mediaMimeType: str(media.mime_type) } : {}),
      ...(str(media.filename) ? { mediaFileName: str(media.filename) } : {}),
    };
  }
  // A tap on a template's quick-reply button or on an interactive reply is the contact's text.
  if (kind === 'button') return { type: 'text', body: str(obj(message.button)?.text) ?? '', mediaRef: null };
  if (kind === 'interactive') {
    const interactive = obj(message.interactive) ?? {};
    const reply = obj(interactive.button_reply) ?? obj(interactive.list_reply);
    if (reply) return { type: 'text', body: str(reply.title) ?? '', mediaRef: null };
  }
  return undefined;
}

/** The changes of every entry of a Cloud API notification; undefined for a body that is not one (`object`). */
export function cloudChanges(payload: unknown): { change?: Json; value?: Json }[] | undefined {
  const root = obj(payload);
  if (!root || root.object !== 'whatsapp_business_account') return undefined;
  return arr(root.entry).flatMap((entry) => arr(obj(entry)?.changes).map((c) => ({ change: obj(c), value: obj(obj(c)?.value) })));
}

/**
 * Reads a Cloud API webhook body. Only `field: 'messages'` changes for this instance's phone
 * number id count; inbound messages must come from a Brazilian phone number that is not our own
 * (echoes) and not a group.
 */
export function parseCloudWebhook(payload: unknown, instance: Pick<WebhookInstance, 'config'>, now = new Date()): ParsedWebhook {
  const result: ParsedWebhook = { messages: [], statuses: [], skipped: [], items: 0 };
  const changes = cloudChanges(payload);
  if (!changes) {
    result.skipped.push({ reason: 'not a whatsapp_business_account notification' });
    return result;
  }
  for (const { change: c, value } of changes) {
    // Counted before any is skipped: the cap bounds what a delivery carries, not what we keep of it.
    result.items += arr(value?.messages).length + arr(value?.statuses).length + arr(value?.contacts).length;
    if (!c || !value || (c.field !== undefined && c.field !== 'messages')) {
      result.skipped.push({ reason: `change field ${String(c?.field ?? 'missing')} is not handled` });
      continue;
    }
    const metadata = obj(value.metadata) ?? {};
    const phoneNumberId = str(metadata.phone_number_id);
    const ours = instance.config.phoneNumberId;
    if (ours && phoneNumberId && phoneNumberId !== ours) {
      // One Meta app may serve several numbers: traffic of another number is not this instance's.
      result.skipped.push({ reason: 'notification for another phone number id' });
      continue;
    }
    const ownDigits = digitsOf(str(metadata.display_phone_number));
    const ownParsed = ownDigits ? parsePhone(ownDigits) : undefined;
    const names = new Map<string, string>();
    for (const contact of arr(value.contacts)) {
      const co = obj(contact);
      const waId = str(co?.wa_id);
      const name = str(obj(co?.profile)?.name);
      if (waId && name) names.set(waId, name);
    }

    for (const raw of arr(value.messages)) {
      const message = obj(raw);
      const id = str(message?.id);
      if (!message || !id) {
        result.skipped.push({ reason: 'message without id' });
        continue;
      }
      if (id.length > 256) {
        result.skipped.push({ reason: 'message id too long' });
        continue;
      }
      if (isGroup(message)) {
        result.skipped.push({ reason: 'group message', id });
        continue;
      }
      const from = str(message.from);
      if (!from) {
        result.skipped.push({ reason: 'message without sender', id });
        continue;
      }
      const parsed = parsePhone(from);
      if (!parsed.ok) {
        result.skipped.push({ reason: `sender is not a Brazilian phone number (${parsed.reason})`, id });
        continue;
      }
      const own = ownDigits === digitsOf(from) || (ownParsed?.ok === true && ownParsed.phone.key === parsed.phone.key);
      if (own) {
        result.skipped.push({ reason: 'echo of our own number', id });
        continue;
      }
      const body = content(message);
      if (!body) {
        result.skipped.push({ reason: `message type ${String(message.type ?? 'missing')} is not taken in`, id });
        continue;
      }
      result.messages.push({
        providerMessageId: id,
        phone: parsed.phone,
        waId: from,
        profileName: names.get(from) ?? (names.size === 1 ? [...names.values()][0] : undefined),
        ...body,
        timestamp: providerTime(message.timestamp, now),
      });
    }

    for (const raw of arr(value.statuses)) {
      const status = obj(raw);
      const id = str(status?.id);
      const state = str(status?.status);
      if (!id || (state !== 'sent' && state !== 'delivered' && state !== 'read' && state !== 'failed')) {
        result.skipped.push({ reason: `status ${String(state ?? 'missing')} is not handled`, id });
        continue;
      }
      const reference =
        typeof status?.biz_opaque_callback_data === 'string' && status.biz_opaque_callback_data.length <= 1000
          ? status.biz_opaque_callback_data
          : undefined;
      const recipientId = str(status?.recipient_id);
      const code = obj(arr(status?.errors)[0])?.code;
      const errorCode =
        state === 'failed' && (typeof code === 'number' || typeof code === 'string') ? String(code).slice(0, 32) : undefined;
      result.statuses.push({
        providerMessageId: id,
        status: state,
        ...(reference ? { reference } : {}),
        ...(recipientId && /^\d{8,20}$/.test(recipientId) ? { recipientId } : {}),
        timestamp: providerTime(status?.timestamp, now),
        ...(errorCode ? { errorCode } : {}),
      });
    }
  }
  return result;
}

/** Web gateway message kinds (`messageType`) we take in, and the key of their content in `message`. */
const WEB_KINDS: Record<string, InboundType> = {
  conversation: 'text',
  extendedTextMessage: 'text',
  imageMessage: 'image',
  audioMessage: 'audio',
  videoMessage: 'video',
  documentMessage: 'document',
  stickerMessage: 'sticker',
};

/**
 * The web gateway's acks (Baileys' WAMessageStatus, by name or number) as our statuses: the server
 * took it (sent), the phone got it (delivered), it was read or played (read), or an error.
 */
const WEB_ACKS: Record<string, StatusUpdate['status']> = {
  ERROR: 'failed',
  '0': 'failed',
  SERVER_ACK: 'sent',
  '2': 'sent',
  DELIVERY_ACK: 'delivered',
  '3': 'delivered',
  READ: 'read',
  '4': 'read',
  PLAYED: 'read',
  '5': 'read',
};

/**
 * A web gateway `messages.update`: acks of our own messages (`fromMe`), as Evolution API v2
 * (`{ keyId, remoteJid, fromMe, status }`) or v1 (`{ key: { id, remoteJid, fromMe }, update: { status } }`) posts them.
 */
function parseWebAcks(items: unknown[], result: ParsedWebhook, now: Date): void {
  for (const item of items) {
    const data = obj(item);
    const key = obj(data?.key);
    const id = str(data?.keyId) ?? str(data?.messageId) ?? str(key?.id);
    const fromMe = data?.fromMe ?? key?.fromMe;
    const ack = obj(data?.update)?.status ?? data?.status;
    const status = WEB_ACKS[String(ack)];
    if (!id || id.length > 256 || fromMe !== true || !status) {
      result.skipped.push({ reason: `ack ${String(ack ?? 'missing')} is not handled`, ...(id && id.length <= 256 ? { id } : {}) });
      continue;
    }
    result.statuses.push({ providerMessageId: id, status, timestamp: providerTime(data?.timestamp, now) });
  }
}

/**
 * Reads a web gateway event: `messages.upsert` from a person (not our own `fromMe` sends, not
 * groups), and `messages.update`, the acks of the messages we sent; `data` may be one item or a
 * list. Same leniency as the Cloud parser.
 */
export function parseWebGatewayWebhook(payload: unknown, now = new Date()): ParsedWebhook {
  const result: ParsedWebhook = { messages: [], statuses: [], skipped: [], items: 0 };
  const root = obj(payload);
  const event = str(root?.event)?.toLowerCase().replace('_', '.');
  if (!root || (event !== 'messages.upsert' && event !== 'messages.update')) {
    result.skipped.push({ reason: `event ${String(root?.event ?? 'missing')} is not handled` });
    return result;
  }
  const items: unknown[] = Array.isArray(root.data) ? root.data : [root.data];
  result.items = items.length;
  if (event === 'messages.update') {
    parseWebAcks(items, result, now);
    return result;
  }
  for (const item of items) {
    const data = obj(item);
    const key = obj(data?.key);
    const id = str(key?.id);
    if (!data || !key || !id || id.length > 256) {
      result.skipped.push({ reason: 'message without a usable key' });
      continue;
    }
    if (key.fromMe === true) {
      result.skipped.push({ reason: 'echo of our own number', id });
      continue;
    }
    const jid = str(key.remoteJid);
    if (jid?.endsWith('@g.us') || str(key.participant) !== undefined) {
      result.skipped.push({ reason: 'group message', id });
      continue;
    }
    const from = digitsOfPersonJid(jid);
    const parsed = from ? parsePhone(from) : undefined;
    if (!from || !parsed?.ok) {
      result.skipped.push({ reason: 'sender is not a Brazilian phone number', id });
      continue;
    }
    const kind = str(data.messageType) ?? '';
    const type = WEB_KINDS[kind];
    const message = obj(data.message) ?? {};
    if (!type) {
      result.skipped.push({ reason: `message type ${kind || 'missing'} is not taken in`, id });
      continue;
    }
    const inner = obj(message[kind]) ?? {};
    const body =
      kind === 'conversation' ? str(message.conversation) : kind === 'extendedTextMessage' ? str(inner.text) : str(inner.caption);
    result.messages.push({
      providerMessageId: id,
      phone: parsed.phone,
      waId: from,
      profileName: str(data.pushName),
      type,
      body: body ?? '',
      // The gateway's media URLs are its own (encrypted WhatsApp media): never exposed.
      mediaRef: type === 'text' ? null : id,
      ...(type !== 'text' && str(inner.mimetype) ? { mediaMimeType: str(inner.mimetype) } : {}),
      ...(type !== 'text' && str(inner.fileName) ? { mediaFileName: str(inner.fileName) } : {}),
      timestamp: providerTime(data.messageTimestamp, now),
    });
  }
  return result;
}

// ---------------------------------------------------------------------------------------------
// Applying

/** Status moves forward only: sent → delivered → read; failed only from sent. */
const FROM: Record<StatusUpdate['status'], string[]> = {
  sent: [],
  delivered: ['sent'],
  read: ['sent', 'delivered'],
  failed: ['sent'],
};

export interface WebhookOutcome {
  /** Messages recorded now. */
  received: number;
  /** Messages already recorded by an earlier delivery of the same provider message id. */
  duplicates: number;
  /** Outbound messages whose status moved. */
  statuses: number;
  /** Everything skipped (groups, echoes, foreign numbers, unknown types, unknown or stale status ids). */
  ignored: number;
}

/**
 * The most items (messages, statuses and contacts, as ParsedWebhook.items counts them) one
 * provider delivery may carry. No real delivery comes near it: Meta batches at most 1,000 updates
 * in one webhook notification, each a message with its sender's contact or a status, so about
 * 2,000 items at most; the web gateway posts one message per event. Anything larger is refused
 * whole, before anything is written.
 */
export const MAX_DELIVERY_ITEMS = 5_000;

/**
 * The most messages and statuses one transaction records. A delivery's transactions are short, so
 * none holds back the settled horizon every tenant's sync reads up to (domain/platform/cursor.ts), or a
 * connection, for the length of the whole delivery.
 */
export const ITEMS_PER_TRANSACTION = 50;

/**
 * Refuses a delivery carrying more than MAX_DELIVERY_ITEMS with 413 PAYLOAD_TOO_LARGE, logged for
 * the operator (such a delivery is a provider fault or forged by whoever holds the secret).
 */
export function refuseOversizedDelivery(instance: WebhookInstance, parsed: ParsedWebhook, log?: Logger): void {
  if (parsed.items <= MAX_DELIVERY_ITEMS) return;
  log?.warn(
    { instanceId: instance.id, workspaceId: instance.workspace_id, items: parsed.items, limit: MAX_DELIVERY_ITEMS },
    'inbound webhook refused: more items than one provider delivery carries',
  );
  throw new ApiError('PAYLOAD_TOO_LARGE', `The delivery carries ${parsed.items} items; at most ${MAX_DELIVERY_ITEMS} are taken`, {
    hint: `Messages, statuses and contacts over all entries and changes count; send at most ${MAX_DELIVERY_ITEMS} per delivery. Nothing was recorded.`,
  });
}

type WorkItem = { message: InboundMessage } | { status: StatusUpdate };

/**
 * Records a parsed webhook: for each new message the contact and conversation (found or created),
 * the message row (`in`, `received`, deduplicated on the provider message id), the conversation's
 * window (`last_inbound_at`) and `last_message_at`, and the events `contact.created` (new contact)
 * and `message.received`; then the status moves. In transactions of at most ITEMS_PER_TRANSACTION
 * items, each message with its events in one. A delivery cut off between two of them (a crash, a
 * lost connection) is sent again whole by the provider, and then records only the rest: a message
 * already recorded is a duplicate, a contact or conversation is found instead of created, and a
 * status moves only forward, so one applied again changes nothing.
 */
export async function applyProviderWebhook(
  db: Db,
  instance: WebhookInstance,
  parsed: ParsedWebhook,
  log?: Logger,
): Promise<WebhookOutcome> {
  refuseOversizedDelivery(instance, parsed, log);
  const outcome: WebhookOutcome = { received: 0, duplicates: 0, statuses: 0, ignored: parsed.skipped.length };
  const workspaceId = instance.workspace_id;
  // One lock order for every delivery (by phone key; stable, so one contact's messages keep theirs,
  // across transactions too, as they run one after the other): two deliveries creating the same two
  // contacts in opposite orders cannot deadlock. The statuses come after the messages, as they did
  // in one transaction.
  const ordered = [...parsed.messages].sort((a, b) => (senderKey(a) < senderKey(b) ? -1 : senderKey(a) > senderKey(b) ? 1 : 0));
  const work: WorkItem[] = [...ordered.map((message) => ({ message })), ...parsed.statuses.map((status) => ({ status }))];
  // Whether the workspace derives AI insights: read once for the delivery, not once per message.
  const aiOn = parsed.messages.length > 0 && (await aiEnabled(db, workspaceId));
  for (let start = 0; start < work.length; start += ITEMS_PER_TRANSACTION) {
    const chunk = work.slice(start, start + ITEMS_PER_TRANSACTION);
    // Counted once committed: a transaction that fails leaves the outcome as it was (the delivery then fails anyway).
    const counted: WebhookOutcome = { received: 0, duplicates: 0, statuses: 0, ignored: 0 };
    await db.transaction(async (trx) => {
      for (const item of chunk) {
        if ('message' in item) {
          if (await recordInbound(trx, instance, item.message, aiOn)) counted.received += 1;
          else counted.duplicates += 1;
        } else if (await applyStatus(trx, instance, item.status)) counted.statuses += 1;
        else counted.ignored += 1;
      }
    });
    for (const key of Object.keys(counted) as (keyof WebhookOutcome)[]) outcome[key] += counted[key];
  }
  if (parsed.skipped.length > 0) {
    log?.info({ instanceId: instance.id, workspaceId, skipped: parsed.skipped.slice(0, 20) }, 'inbound webhook: items skipped');
  }
  return outcome;
}

/** One status callback; false when it moved nothing (unknown id, stale or repeated status). */
async function applyStatus(trx: Knex.Transaction, instance: WebhookInstance, status: StatusUpdate): Promise<boolean> {
  const workspaceId = instance.workspace_id;
  // Reconciliation first: a callback for a send whose provider call was interrupted records
  // the provider's answer on the attempt, so the waiting send continues with it and never
  // calls the provider again (workflows/send-message.ts). Any status proves the message was
  // accepted: it has a provider message id.
  const reconciled = status.reference ? await reconcileAttempt(trx, workspaceId, status) : false;
  if (FROM[status.status].length === 0) return reconciled;
  // The attempt first: it is the row recordSent locks, so a status arriving while the message
  // is being recorded waits for it, and one arriving before is kept there and applied by it.
  const kept = await trx('send_attempts')
    .where({ workspace_id: workspaceId, provider_message_id: status.providerMessageId, state: 'sent' })
    .whereRaw(`coalesce(provider_status, 'sent') = ANY(?::text[])`, [FROM[status.status]])
    .update({ provider_status: status.status, updated_at: trx.fn.now() });
  // The row locked as it was, so the event can say what it moved from.
  const moved = await trx.raw<{ rows: { id: string; conversation_id: string; contact_id: string; previous: string }[] }>(
    `WITH before AS (
       SELECT m.id, m.status AS previous, c.contact_id
         FROM messages AS m
         JOIN conversations AS c ON c.workspace_id = m.workspace_id AND c.id = m.conversation_id AND c.instance_id = ?
        WHERE m.workspace_id = ? AND m.provider_message_id = ? AND m.direction = 'out' AND m.status = ANY(?::text[])
          FOR UPDATE OF m
     )
     UPDATE messages AS m SET status = ?, updated_at = now()
       FROM before
      WHERE m.workspace_id = ? AND m.id = before.id
     RETURNING m.id, m.conversation_id, before.contact_id, before.previous`,
    [instance.id, workspaceId, status.providerMessageId, FROM[status.status], status.status, workspaceId],
  );
  for (const row of moved.rows) {
    await recordStatusEvent(trx, workspaceId, {
      messageId: row.id,
      conversationId: row.conversation_id,
      contactId: row.contact_id,
      instanceId: instance.id,
      status: status.status,
      previous: row.previous,
      errorCode: status.errorCode ?? null,
      timestamp: status.timestamp,
    });
  }
  return moved.rows.length > 0 || kept > 0 || reconciled;
}

/**
 * Records the provider's answer (message id, recipient wa_id) on this workspace's send attempt
 * named by the callback's reference, if that attempt is not settled as sent: `in_flight` (its
 * provider call was interrupted), or `failed` (the send stopped waiting for this callback: a late
 * callback still tells the truth, and the send's next claim, which only takes a `failed` row, then
 * finds it `sent` instead of calling the provider again). One conditional update, in the webhook's
 * transaction; another workspace's reference never matches.
 */
async function reconcileAttempt(trx: Knex.Transaction, workspaceId: string, status: StatusUpdate): Promise<boolean> {
  const updated = await trx('send_attempts')
    .where({ workspace_id: workspaceId, reference: status.reference })
    .whereIn('state', ['in_flight', 'failed'])
    .update({
      state: 'sent',
      provider_message_id: status.providerMessageId,
      wa_id: status.recipientId ?? null,
      error: null,
      updated_at: trx.fn.now(),
    });
  return updated > 0;
}

/** One inbound message; false when the provider message id was already recorded (a redelivery). */
async function recordInbound(trx: Knex.Transaction, instance: WebhookInstance, message: InboundMessage, aiOn: boolean): Promise<boolean> {
  const workspaceId = instance.workspace_id;
  // Cheap early exit for a redelivery; the ON CONFLICT below is what holds under concurrency.
  const seen = await trx('messages').where({ workspace_id: workspaceId, provider_message_id: message.providerMessageId }).first('id');
  if (seen) return false;

  const { contact, created } =
    message.igsid !== undefined
      ? await findOrCreateInstagramContact(trx, workspaceId, {
          instanceId: instance.id,
          igsid: message.igsid,
          username: message.username,
          name: message.profileName,
        })
      : await findOrCreateContact(trx, workspaceId, message.phone, { name: message.profileName, waId: message.waId });
  if (message.waId !== undefined && !created && contact.wa_id !== message.waId) {
    // The provider's identity of the number reconciles ours (not a human edit: no contact.updated).
    await recordWaIds(trx, workspaceId, [{ contactId: contact.id, waId: message.waId }]);
  }
  const conversation = (await findOrCreateConversations(trx, workspaceId, [contact.id], instance)).get(contact.id)!;

  const inserted = await trx.raw(
    `INSERT INTO messages (workspace_id, conversation_id, direction, type, body, media_ref, status, provider_message_id, timestamp)
     VALUES (?, ?, 'in', ?, ?, ?, 'received', ?, ?)
     ON CONFLICT (workspace_id, provider_message_id) WHERE provider_message_id IS NOT NULL DO NOTHING
     RETURNING id`,
    [workspaceId, conversation.id, message.type, message.body, message.mediaRef, message.providerMessageId, message.timestamp],
  );
  // A phoneless contact (Instagram) is named by its Instagram id in the events.
  const instagramId = contact.phone === null ? { instagram_id: message.igsid ?? null } : {};
  if (created) {
    await recordEvent(trx, workspaceId, 'contact.created', {
      contact_id: contact.id,
      name: contact.name,
      phone: contact.phone,
      email: contact.email,
      ...instagramId,
    });
  }
  const row = inserted.rows[0] as { id: string } | undefined;
  if (!row) return false;

  // The file itself is fetched after the commit (domain/messaging/media.ts): this row is its work item.
  if (message.mediaRef && message.type !== 'text') {
    await recordPendingMedia(trx, {
      workspaceId,
      messageId: row.id,
      instanceId: instance.id,
      type: message.type,
      mediaRef: message.mediaRef,
      mimeType: message.mediaMimeType,
      fileName: message.mediaFileName,
    });
  }

  // The contact's own word on being messaged: STOP opts out, START back in.
  const consent = message.type === 'text' ? consentFromMessage(message.body) : undefined;
  if (consent) await recordConsent(trx, workspaceId, contact.id, consent === 'opt_out');

  // The window opens at the message's own time; out-of-order deliveries never move it back.
  await trx('conversations')
    .where({ workspace_id: workspaceId, id: conversation.id })
    .update({
      last_inbound_at: trx.raw('GREATEST(last_inbound_at, ?::timestamptz)', [message.timestamp]),
      last_message_at: trx.raw('GREATEST(last_message_at, ?::timestamptz)', [message.timestamp]),
      updated_at: trx.fn.now(),
    });
  await recordEvent(trx, workspaceId, 'message.received', {
    contact_id: contact.id,
    contact_name: contact.name,
    phone: contact.phone,
    ...instagramId,
    message_id: row.id,
    type: eventType(message.type),
    instance_id: instance.id,
    channel: instance.channel,
    conversation_id: conversation.id,
  });
  await recordConversationActivity(trx, workspaceId, [contact.id], aiOn);
  return true;
}
