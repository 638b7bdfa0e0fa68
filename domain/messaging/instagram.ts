import type { Logger } from 'pino';
import { storable } from '../kernel';
import { safeRequest, type Db } from '../platform';
import { knownInstagramPerson } from '../leads';
import type { InboundMessage, ParsedWebhook, WebhookInstance } from './inbound';

/**
 * Instagram's messaging webhook (docs/messaging.md, "Instagram"), posted by Meta to
 * `/webhooks/instagram/{instanceId}` and signed like the Cloud API's (`X-Hub-Signature-256`, the
 * instance's app secret):
 *
 * `{ object: 'instagram', entry: [{ id: <the business's IG user id>, time, messaging: [{ sender: {
 * id }, recipient: { id }, timestamp: <ms>, message: { mid, text?, attachments?: [{ type, payload:
 * { url } }], is_echo?, is_deleted?, is_unsupported?, reply_to?: { mid } | { story: { url, id } } }
 * } | { ..., read: { mid } }] }] }`.
 *
 * A person writes with their Instagram-scoped id (IGSID) as `sender.id`; what the business sent
 * comes back as an echo (`is_echo`, the business as sender) and is not a customer's message. A
 * story reply is a message like any other; a story mention is a message with a `story_mention`
 * attachment. Each attachment of a message is recorded as a message of its own (the first under
 * `mid`, the next as `mid:1`, ...), its CDN URL kept as the internal media reference the media
 * dispatcher fetches, never shown. `read` (messaging_seen) moves our message `mid` to `read`.
 * Lenient like the other parsers: what it does not understand is skipped with a reason.
 */

type Json = Record<string, unknown>;
const obj = (v: unknown): Json | undefined => (typeof v === 'object' && v !== null && !Array.isArray(v) ? (v as Json) : undefined);
const arr = (v: unknown): unknown[] => (Array.isArray(v) ? v : []);
const str = (v: unknown): string | undefined => {
  const s = typeof v === 'string' ? storable(v) : typeof v === 'number' ? String(v) : undefined;
  return s === undefined || s.length === 0 ? undefined : s;
};

/** Instagram-scoped ids (a person's IGSID, the business's IG user id) are digits at the Graph API. */
export const INSTAGRAM_ID = /^\d{1,32}$/;

/** Attachment types we take in, as our message types. */
const ATTACHMENT_TYPES: Record<string, InboundMessage['type']> = { image: 'image', video: 'video', audio: 'audio', file: 'document' };

/** What a story mention reads as in the conversation (it carries no text of its own). */
export const STORY_MENTION_TEXT = '[story mention]';

/** Milliseconds since the epoch as a date, never in the future; now when absent. */
function providerTime(value: unknown, now: Date): Date {
  const ms = Number(value);
  if (!Number.isFinite(ms) || ms <= 0) return now;
  return new Date(Math.min(ms, now.getTime()));
}

export function parseInstagramWebhook(payload: unknown, instance: Pick<WebhookInstance, 'config'>, now = new Date()): ParsedWebhook {
  const result: ParsedWebhook = { messages: [], statuses: [], skipped: [], items: 0 };
  const root = obj(payload);
  if (!root || root.object !== 'instagram') {
    result.skipped.push({ reason: 'not an instagram notification' });
    return result;
  }
  const ours = instance.config.igUserId;
  for (const rawEntry of arr(root.entry)) {
    const entry = obj(rawEntry);
    const events = arr(entry?.messaging);
    result.items += events.length + arr(entry?.changes).length;
    const account = str(entry?.id);
    if (ours && account !== ours) {
      // One Meta app may serve several accounts: another account's traffic is not this instance's.
      result.skipped.push({ reason: 'notification for another Instagram account' });
      continue;
    }
    if (arr(entry?.changes).length > 0) result.skipped.push({ reason: 'changes (comments, mentions in posts) are not handled' });
    for (const rawEvent of events) {
      const event = obj(rawEvent) ?? {};
      const sender = str(obj(event.sender)?.id);
      const timestamp = providerTime(event.timestamp, now);
      const read = obj(event.read);
      if (read) {
        const mid = str(read.mid);
        if (!mid || mid.length > 256) result.skipped.push({ reason: 'seen event without a usable mid' });
        else result.statuses.push({ providerMessageId: mid, status: 'read', timestamp });
        continue;
      }
      const message = obj(event.message);
      const mid = str(message?.mid);
      if (!message || !mid || mid.length > 250) {
        result.skipped.push({
          reason: `event ${Object.keys(event).find((k) => !['sender', 'recipient', 'timestamp'].includes(k)) ?? 'missing'} is not handled`,
        });
        continue;
      }
      if (message.is_echo === true || (sender !== undefined && sender === account)) {
        result.skipped.push({ reason: 'echo of our own message', id: mid });
        continue;
      }
      if (message.is_deleted === true) {
        result.skipped.push({ reason: 'deleted by the sender', id: mid });
        continue;
      }
      if (!sender || !INSTAGRAM_ID.test(sender)) {
        result.skipped.push({ reason: 'sender is not an Instagram-scoped id', id: mid });
        continue;
      }
      if (message.is_unsupported === true) {
        result.skipped.push({ reason: 'a message type Instagram does not pass on', id: mid });
        continue;
      }
      const text = str(message.text) ?? '';
      const attachments = arr(message.attachments)
        .map(obj)
        .filter((a): a is Json => a !== undefined);
      const kept: Omit<Extract<InboundMessage, { igsid: string }>, 'providerMessageId'>[] = [];
      for (const attachment of attachments) {
        const type = str(attachment.type) ?? '';
        const url = str(obj(attachment.payload)?.url);
        if (type === 'story_mention') kept.push({ igsid: sender, type: 'text', body: STORY_MENTION_TEXT, mediaRef: null, timestamp });
        else if (ATTACHMENT_TYPES[type] && url && /^https?:\/\//i.test(url) && url.length <= 2048)
          kept.push({ igsid: sender, type: ATTACHMENT_TYPES[type], body: '', mediaRef: url, timestamp });
        else result.skipped.push({ reason: `attachment type ${type || 'missing'} is not taken in`, id: mid });
      }
      // A text with attachments is its own message, first; a message with neither (a reaction, a shared post) is skipped.
      if (text) kept.unshift({ igsid: sender, type: 'text', body: text, mediaRef: null, timestamp });
      if (kept.length === 0 && attachments.length === 0) result.skipped.push({ reason: 'message without text or attachments', id: mid });
      kept.forEach((m, i) => result.messages.push({ providerMessageId: i === 0 ? mid : `${mid}:${i}`, ...m }));
    }
  }
  return result;
}

/** The Graph API version of profile reads when the instance names none. */
const DEFAULT_API_VERSION = 'v21.0';
/** A profile read is a courtesy: the DM is recorded without it after this long. */
const PROFILE_TIMEOUT_MS = 3000;
/** Profiles read per delivery at the most (a first DM each; Meta batches few). */
const PROFILES_PER_DELIVERY = 10;

/**
 * The name and username of the people who write for the first time in this delivery, read from
 * the Graph API's user profile (`GET {baseUrl}/{version}/{IGSID}?fields=name,username`, the
 * instance's token), set on their messages. Someone already known is not read again; a read that
 * fails or is slow leaves the message without them (the contact then has no name until a later DM
 * brings one).
 */
export async function addInstagramProfiles(db: Db, instance: WebhookInstance, parsed: ParsedWebhook, log?: Logger): Promise<void> {
  const { baseUrl, accessToken } = instance.config;
  if (!baseUrl || !accessToken) return;
  const people = [...new Set(parsed.messages.flatMap((m) => (m.igsid !== undefined ? [m.igsid] : [])))].slice(0, PROFILES_PER_DELIVERY);
  const version = instance.config.apiVersion || DEFAULT_API_VERSION;
  for (const igsid of people) {
    if (await knownInstagramPerson(db, instance.workspace_id, instance.id, igsid)) continue;
    try {
      const url = `${baseUrl.replace(/\/+$/, '')}/${encodeURIComponent(version)}/${igsid}?fields=name,username`;
      const res = await safeRequest(url, {
        method: 'GET',
        headers: { authorization: `Bearer ${accessToken}` },
        // The instance's own base URL: operator configuration, trusted like its sends.
        policy: { allowPrivate: true },
        field: 'baseUrl',
        timeoutMs: PROFILE_TIMEOUT_MS,
        maxBodyBytes: 4096,
      });
      if (res.status !== 200) throw new Error(`HTTP ${res.status}`);
      const profile = JSON.parse(res.body) as { name?: unknown; username?: unknown };
      const username =
        typeof profile.username === 'string' && /^[A-Za-z0-9._]{1,64}$/.test(profile.username) ? profile.username : undefined;
      const name = str(profile.name)?.slice(0, 200);
      for (const m of parsed.messages) {
        if (m.igsid !== igsid) continue;
        if (username) m.username = username;
        if (name) m.profileName = name;
      }
    } catch (err) {
      log?.info({ instanceId: instance.id, reason: err instanceof Error ? err.message : String(err) }, 'instagram profile not read');
    }
  }
}
