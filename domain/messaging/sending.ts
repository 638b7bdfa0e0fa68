import { z } from 'zod';
import { ApiError, HTTP_URL } from '../kernel';
import type { DailyCounter } from './send/daily';
import type { TemplateComponents } from './templates';
import type { Provider } from './instances';
import {
  isMediaType,
  MESSAGE_TYPES,
  OUTCOME_UNKNOWN_HINT,
  outcomeUnknownMessage,
  SEND_OUTCOME_UNKNOWN,
  type MessageContent,
  type MessageType,
  type TemplateWireComponent,
} from '../../types/messaging';

/**
 * The rules of sending a message, in one place: what each message type needs and carries, which
 * instance a cold send uses, what refuses a send (disconnected instance, opt-out, template, the
 * 24-hour window) and which daily counters a send takes. Plain functions over data the caller
 * loads: the send saga's prepare activity (activities/messaging.ts) keeps the transaction and
 * the recording; the API and the automation `send_message` action use the same content rule.
 * See docs/messaging.md.
 */

/* ------------------------------------------------------------------------------------------------
 * Message content
 * ---------------------------------------------------------------------------------------------- */

/**
 * Text the provider limits: zod's `max` counts code points, WhatsApp counts UTF-16 units (an
 * emoji is 2), so a text zod accepts could still be refused by the provider after the saga
 * started (502 SEND_FAILED). Both are checked here, so such a text is 400 VALIDATION up front.
 */
function providerText(max: number) {
  return z
    .string()
    .min(1)
    .max(max)
    .refine((s) => s.length <= max, {
      message: `at most ${max} characters, counted in UTF-16 units as the provider counts them (an emoji counts 2)`,
    });
}

/** A template's header text parameter: WhatsApp limits a header's text to 60 characters. */
export const TEMPLATE_HEADER_TEXT_MAX = 60;
/** A URL button's variable suffix: WhatsApp limits a button's URL to 2000 characters. */
export const TEMPLATE_URL_VARIABLE_MAX = 2000;
/** WhatsApp templates have at most 10 buttons (indexes 0 to 9). */
export const MAX_TEMPLATE_BUTTONS = 10;

const MEDIA_URL = z.string().min(1).max(2048).meta({ pattern: HTTP_URL });

/** `templateHeader`: `{ text }` or `{ mediaUrl }`, exactly one (the rules against the template: templateComponents). */
export const TEMPLATE_HEADER = z
  .object({
    text: providerText(TEMPLATE_HEADER_TEXT_MAX).optional().describe('For a text header with a variable: its value'),
    mediaUrl: MEDIA_URL.optional().describe("For an image, video or document header: the file's https URL (checked like `mediaUrl`)"),
  })
  .refine((h) => (h.text === undefined) !== (h.mediaUrl === undefined), { message: 'expected exactly one of text and mediaUrl' })
  .meta({ oneOf: [{ required: ['text'] }, { required: ['mediaUrl'] }] });

/** `templateButtons`: the variable suffix of each URL button that has one, by the button's index in the template. */
export const TEMPLATE_BUTTONS = z
  .array(
    z.object({
      index: z
        .number()
        .int()
        .min(0)
        .max(MAX_TEMPLATE_BUTTONS - 1)
        .describe("The button's position among the template's buttons (0-based)"),
      urlVariable: providerText(TEMPLATE_URL_VARIABLE_MAX).describe("What fills the `{{1}}` of the button's URL"),
    }),
  )
  .max(MAX_TEMPLATE_BUTTONS);

/** The message fields of both send endpoints and of the automation send_message action, with their bounds. */
export const MESSAGE_CONTENT_FIELDS = {
  text: providerText(4096).optional(),
  mediaUrl: MEDIA_URL.optional(),
  caption: providerText(1024).optional(),
  fileName: z.string().min(1).max(255).optional(),
  templateName: z.string().min(1).max(512).optional(),
  templateLanguage: z.string().min(2).max(15).optional(),
  templateVariables: z.array(z.string().max(1024)).max(20).optional(),
  templateHeader: TEMPLATE_HEADER.optional().describe(
    "A template's header parameter (type `template`): `{ text }` for a text header with a variable (at most " +
      `${TEMPLATE_HEADER_TEXT_MAX} characters), \`{ mediaUrl }\` for an image, video or document header (an https URL, checked like ` +
      '`mediaUrl`: 400 `INVALID_URL`). Required when the template has such a header; given to a template without one, with a ' +
      'fixed text header, or of the other kind (or a `mediaUrl` whose file extension is of another format, a `.pdf` for an image ' +
      'header), 422 `TEMPLATE_INVALID` with a hint naming `header`.',
  ),
  templateButtons: TEMPLATE_BUTTONS.optional().describe(
    "A template's URL button variables (type `template`): one `{ index, urlVariable }` for each URL button of the template " +
      "whose URL ends in a variable, `index` the button's position among the template's buttons (0-based), `urlVariable` (1 to " +
      `${TEMPLATE_URL_VARIABLE_MAX} characters) what fills it. A missing, unknown or repeated index, or one naming a button ` +
      'without a URL variable, is 422 `TEMPLATE_INVALID` with a hint naming `buttons[<index>]`.',
  ),
};

/** The fields a message of `type` cannot go without. */
export function requiredFields(type: MessageType): (keyof MessageContent)[] {
  if (type === 'text') return ['text'];
  if (type === 'template') return ['templateName', 'templateLanguage'];
  return ['mediaUrl'];
}

/**
 * `requiredFields` as JSON Schema, for the OpenAPI document: one variant per set of types that
 * need the same fields. `type` may be left out for the default type, so that variant does not
 * require it; the variants exclude each other (`oneOf`).
 */
export function messageRequirements(typeKey: string, defaultType: MessageType = 'text'): { oneOf: object[] } {
  const groups = new Map<string, { types: MessageType[]; fields: string[] }>();
  for (const type of MESSAGE_TYPES) {
    const fields = requiredFields(type);
    const group = groups.get(fields.join()) ?? { types: [], fields };
    group.types.push(type);
    groups.set(fields.join(), group);
  }
  return {
    oneOf: [...groups.values()].map(({ types, fields }) => ({
      properties: { [typeKey]: { enum: types } },
      required: types.includes(defaultType) ? fields : [typeKey, ...fields],
    })),
  };
}

/** The required fields of its type that `content` lacks (empty: complete). */
export function missingFields(content: MessageContent): (keyof MessageContent)[] {
  return requiredFields(content.type).filter((field) => content[field] === undefined);
}

/**
 * The message as it travels on: only the fields its type carries (an audio has no caption, only
 * a document has a file name), so nothing else shows in the workflow history or reaches the provider.
 */
export function messageContent(content: MessageContent): MessageContent {
  const message: MessageContent = { type: content.type };
  if (content.type === 'text') message.text = content.text;
  if (isMediaType(content.type)) {
    Object.assign(message, {
      mediaUrl: content.mediaUrl,
      caption: content.type === 'audio' ? undefined : content.caption,
      fileName: content.type === 'document' ? content.fileName : undefined,
    });
  }
  if (content.type === 'template') {
    const header = content.templateHeader;
    Object.assign(message, {
      templateName: content.templateName,
      templateLanguage: content.templateLanguage,
      templateVariables: content.templateVariables ?? [],
      ...(header ? { templateHeader: header.text !== undefined ? { text: header.text } : { mediaUrl: header.mediaUrl } } : {}),
      ...(content.templateButtons?.length
        ? { templateButtons: content.templateButtons.map(({ index, urlVariable }) => ({ index, urlVariable })) }
        : {}),
    });
  }
  return message;
}

/* ------------------------------------------------------------------------------------------------
 * Template parameters
 * ---------------------------------------------------------------------------------------------- */

/** A template as a send reads it: an operator's row (components null) has a body only, no header and no buttons. */
export interface SendableTemplate {
  variable_count: number;
  components?: TemplateComponents | null;
}

/**
 * File extensions each header format takes (the Cloud API's media types), and the other media
 * extensions we know: a header `mediaUrl` naming a known extension its format does not take
 * (a `.pdf` for an image header) is refused before the provider is called. A URL without a
 * known extension is the provider's to judge.
 */
const HEADER_EXTENSIONS: Record<'image' | 'video' | 'document', readonly string[]> = {
  image: ['jpg', 'jpeg', 'png'],
  video: ['mp4', '3gp'],
  document: ['pdf', 'txt', 'doc', 'docx', 'xls', 'xlsx', 'ppt', 'pptx'],
};
const KNOWN_EXTENSIONS = new Set([...Object.values(HEADER_EXTENSIONS).flat(), 'webp', 'aac', 'amr', 'mp3', 'm4a', 'ogg', 'opus']);

/** The known media extension of a URL's path that `format` does not take, if any. */
function foreignExtension(format: 'image' | 'video' | 'document', url: string): string | undefined {
  let path: string;
  try {
    path = new URL(url).pathname;
  } catch {
    return undefined;
  }
  const ext = /\.([A-Za-z0-9]+)$/.exec(path)?.[1]?.toLowerCase();
  return ext && KNOWN_EXTENSIONS.has(ext) && !HEADER_EXTENSIONS[format].includes(ext) ? ext : undefined;
}

const invalid = (message: string, hint: string) => new ApiError('TEMPLATE_INVALID', message, { hint });
const article = (format: string) => (format === 'image' ? 'an image' : `a ${format}`);

/**
 * A template message's parameters checked against the template's components, and what the Cloud
 * API is sent (`template.components`: header, body, URL buttons, in that order). 422
 * TEMPLATE_INVALID, its hint naming the component (`header`, `body`, `buttons[<index>]`), when:
 * - body: `templateVariables` are not exactly as many as the body's variables;
 * - header: given to a template without one, or with a fixed text one; missing when the template
 *   needs it (a media header, or a text header with a variable); of the other kind (`text` for a
 *   media header, `mediaUrl` for a text one); a `mediaUrl` naming a file type of another format;
 * - buttons: an entry whose `index` is no button of the template, or a button without a URL
 *   variable, or an index given twice; a URL button with a variable left without its entry.
 * The one place these rules live: the send saga's prepare, automations' send_message (through
 * it), a broadcast's creation and each of its recipients (refuseUnsendable), and the provider call.
 */
export function templateComponents(
  template: SendableTemplate,
  message: Pick<MessageContent, 'templateVariables' | 'templateHeader' | 'templateButtons'>,
): TemplateWireComponent[] {
  const wire: TemplateWireComponent[] = [];
  const header = template.components?.header ?? null;
  const given = message.templateHeader;
  if (!header) {
    if (given)
      throw invalid('The template has no header, but templateHeader was given', 'header: leave templateHeader out for this template.');
  } else if (header.format === 'text') {
    if (header.variableCount === 0) {
      if (given)
        throw invalid(
          "The template's header is fixed text: it takes no templateHeader",
          'header: leave templateHeader out for this template.',
        );
    } else if (given?.text === undefined) {
      throw invalid(
        given
          ? "The template's header is text: templateHeader takes text, not mediaUrl"
          : "The template's header takes a variable: templateHeader is required",
        'header: give templateHeader { text }.',
      );
    } else {
      wire.push({ type: 'header', parameters: [{ type: 'text', text: given.text }] });
    }
  } else {
    const format = header.format;
    const hint = `header: give templateHeader { mediaUrl } with the https URL of ${article(format)} file.`;
    if (given?.mediaUrl === undefined) {
      throw invalid(
        given
          ? `The template's header is ${article(format)}: templateHeader takes mediaUrl, not text`
          : `The template's header is ${article(format)}: templateHeader is required`,
        hint,
      );
    }
    const ext = foreignExtension(format, given.mediaUrl);
    if (ext) throw invalid(`The template's header is ${article(format)}, but templateHeader.mediaUrl names a .${ext} file`, hint);
    const link = { link: given.mediaUrl };
    wire.push({
      type: 'header',
      parameters: [
        format === 'image'
          ? { type: 'image', image: link }
          : format === 'video'
            ? { type: 'video', video: link }
            : { type: 'document', document: link },
      ],
    });
  }

  const variables = message.templateVariables ?? [];
  if (variables.length !== template.variable_count)
    throw invalid(
      `The template takes ${template.variable_count} variables, ${variables.length} given`,
      `body: give exactly ${template.variable_count} templateVariables, in order.`,
    );
  if (variables.length > 0) wire.push({ type: 'body', parameters: variables.map((text) => ({ type: 'text', text })) });

  const buttons = template.components?.buttons ?? [];
  const filled = new Map<number, string>();
  (message.templateButtons ?? []).forEach(({ index, urlVariable }, i) => {
    const button = buttons[index];
    const hint = `buttons[${index}]: templateButtons takes one entry for each URL button with a variable, by its index.`;
    if (!button) throw invalid(`templateButtons[${i}]: the template has no button ${index}`, hint);
    if (!button.urlVariable) throw invalid(`templateButtons[${i}]: the template's button ${index} has no URL variable`, hint);
    if (filled.has(index)) throw invalid(`templateButtons[${i}]: button ${index} is given twice`, hint);
    filled.set(index, urlVariable);
  });
  buttons.forEach((button, index) => {
    if (!button.urlVariable) return;
    const text = filled.get(index);
    if (text === undefined)
      throw invalid(
        `The template's button ${index} takes a URL variable: templateButtons has no entry for it`,
        `buttons[${index}]: give templateButtons { index: ${index}, urlVariable }.`,
      );
    wire.push({ type: 'button', sub_type: 'url', index: String(index), parameters: [{ type: 'text', text }] });
  });
  return wire;
}

/** Largest media the provider accepts per type (WhatsApp Cloud API limits). */
export const MEDIA_LIMITS: Record<string, number> = {
  image: 5 * 1024 * 1024,
  video: 16 * 1024 * 1024,
  audio: 16 * 1024 * 1024,
  document: 100 * 1024 * 1024,
};

/**
 * 422 MEDIA_TOO_LARGE when a media file of known size is above its type's limit. `atLeast`: the
 * size is a lower bound (a download stopped reading past the limit).
 */
export function checkMediaSize(type: string, bytes: number | null, options: { atLeast?: boolean } = {}): void {
  const limit = MEDIA_LIMITS[type];
  if (limit !== undefined && bytes !== null && bytes > limit) {
    const size = options.atLeast ? `more than ${limit / 1048576} MB` : `${(bytes / 1048576).toFixed(1)} MB`;
    throw new ApiError('MEDIA_TOO_LARGE', `The ${type} is ${size}; the limit is ${limit / 1048576} MB`);
  }
}

/* ------------------------------------------------------------------------------------------------
 * Whether a send may happen
 * ---------------------------------------------------------------------------------------------- */

export interface SendInstance {
  id: string;
  channel: string;
  provider: Provider;
  connected: boolean;
}

/**
 * The instance of a cold send: the one named (404 INSTANCE_NOT_FOUND when it is not among the
 * workspace's live WhatsApp instances), else the workspace's only one (422 NO_INSTANCE, 422
 * INSTANCE_REQUIRED when there are several). `candidates`: the named instance if found, else the
 * first two live instances by creation.
 */
export function chooseInstance(candidates: SendInstance[], instanceId: string | undefined): SendInstance {
  if (instanceId !== undefined) {
    if (!candidates[0]) throw new ApiError('INSTANCE_NOT_FOUND', 'Instance not found in this workspace');
    return candidates[0];
  }
  if (candidates.length === 0)
    throw new ApiError('NO_INSTANCE', 'The workspace has no WhatsApp connection', { hint: 'Connect an instance first.' });
  if (candidates.length > 1)
    throw new ApiError('INSTANCE_REQUIRED', 'The workspace has several connections: say which one', {
      hint: 'Send instanceId (GET /api/v1/instances).',
    });
  return candidates[0];
}

/** The 24-hour customer-service window (Cloud API and Instagram): open while the last inbound message is younger than a day. */
export const WINDOW_MS = 24 * 60 * 60 * 1000;
/** Instagram's human agent window: a person's reply from the panel, tagged HUMAN_AGENT, up to 7 days after the customer's last message. */
export const HUMAN_AGENT_WINDOW_MS = 7 * WINDOW_MS;
export function windowOpen(lastInboundAt: Date | null, now: Date, windowMs = WINDOW_MS): boolean {
  return lastInboundAt !== null && now.getTime() - lastInboundAt.getTime() < windowMs;
}

/** Which provider carries each channel's messages: an instance of a channel with another provider carries none. */
const CARRIERS: Record<string, readonly Provider[]> = { whatsapp: ['cloud', 'web'], instagram: ['instagram'] };

/**
 * What an instance cannot carry at all, whatever the contact: a channel its provider does not run
 * (422 CHANNEL_UNSUPPORTED: an Instagram instance recorded with a WhatsApp provider), templates
 * through the web gateway or on Instagram (a Cloud API feature: 422 TEMPLATE_UNSUPPORTED, decided
 * before any template lookup), and a caption on Instagram, whose attachments have none.
 * Checked before anything is sent, so none is ever a provider error.
 */
export function refuseUnsupported(
  instance: Pick<SendInstance, 'channel' | 'provider'>,
  message: Pick<MessageContent, 'type' | 'caption'>,
): void {
  if (!CARRIERS[instance.channel]?.includes(instance.provider)) {
    throw new ApiError(
      'CHANNEL_UNSUPPORTED',
      `This ${instance.channel} instance has provider ${instance.provider}, which does not carry ${instance.channel} messages`,
      {
        hint:
          instance.channel === 'instagram'
            ? 'Instagram messages go through an instance of provider "instagram".'
            : 'Send through another instance (GET /api/v1/instances).',
      },
    );
  }
  if (instance.provider === 'instagram') {
    if (message.type === 'template')
      throw new ApiError('TEMPLATE_UNSUPPORTED', 'Instagram has no message templates', {
        hint: 'Reply with text or media while the conversation is open (24 hours after the customer last wrote).',
      });
    if (message.caption)
      throw new ApiError('CHANNEL_UNSUPPORTED', 'Instagram attachments carry no caption', {
        hint: 'Send the caption as a text message of its own.',
      });
    return;
  }
  if (message.type === 'template' && instance.provider === 'web') {
    throw new ApiError(
      'TEMPLATE_UNSUPPORTED',
      'Templates cannot be sent through a web gateway instance: they are a WhatsApp Cloud API feature',
      {
        hint: 'Send text or media through this instance, or the template through a Cloud API instance.',
      },
    );
  }
}

/**
 * A send addressed by phone (a cold send, a broadcast's recipient) goes through WhatsApp: an
 * Instagram person has no phone, and Instagram takes no message to someone who has not written.
 */
export function refuseByPhone(instance: Pick<SendInstance, 'channel'>): void {
  if (instance.channel !== 'whatsapp')
    throw new ApiError('CHANNEL_UNSUPPORTED', `A send by phone goes through WhatsApp, not ${instance.channel}`, {
      hint: 'Send through a WhatsApp instance; on Instagram, reply to the conversation (POST /api/v1/conversations/{id}/messages).',
    });
}

/**
 * What refuses a send once its instance, contact and conversation are known: what its instance
 * cannot carry (refuseUnsupported), what it and the template refuse (refuseOnInstance), then what
 * its recipient refuses (refuseForRecipient).
 */
export function refuseUnsendable(send: SendToRecipient): void {
  refuseUnsupported(send.instance, send.message);
  refuseOnInstance(send);
  refuseForRecipient(send);
}

/** A send once its instance, contact and conversation are known. */
type SendToRecipient = {
  instance: SendInstance;
  contact: { opted_out: boolean };
  conversation: { last_inbound_at: Date | null };
  message: MessageContent;
  template?: SendableTemplate;
  now: Date;
};

/**
 * What refuses a message on an instance whoever receives it, once refuseUnsupported let it through
 * (before any template lookup): the instance disconnected, a template that is not approved on it.
 * `template` is the approved template of that name and language, when the message is one.
 */
export function refuseOnInstance(send: { instance: SendInstance; message: MessageContent; template?: SendableTemplate }): void {
  const { instance, message } = send;
  if (!instance.connected)
    throw new ApiError('INSTANCE_DISCONNECTED', 'The instance is not connected', {
      hint: 'Reconnect it, or send through another instance.',
    });
  if (message.type === 'template' && !send.template)
    throw new ApiError('TEMPLATE_INVALID', `No approved template "${message.templateName}" (${message.templateLanguage}) on this instance`);
}

/**
 * What refuses a message to one recipient: the contact opted out, template parameters that do not
 * fit the template (templateComponents), and (Cloud API only) anything but a template outside the
 * 24-hour window. A template's components at the provider's wire format when it passes.
 */
export function refuseForRecipient(send: SendToRecipient): TemplateWireComponent[] | undefined {
  const { instance, message } = send;
  if (send.contact.opted_out) throw new ApiError('OPTED_OUT', 'The contact opted out of messages');
  if (message.type === 'template') return templateComponents(send.template!, message);
  const lastInbound = send.conversation.last_inbound_at;
  if (instance.provider === 'cloud' && !windowOpen(lastInbound, send.now)) {
    throw new ApiError('WINDOW_CLOSED', 'No message from this number in the last 24 hours: only an approved template can be sent', {
      hint: 'Send type "template" with an approved template.',
    });
  }
  if (instance.provider === 'instagram' && !windowOpen(lastInbound, send.now, message.humanAgent ? HUMAN_AGENT_WINDOW_MS : WINDOW_MS)) {
    throw new ApiError(
      'WINDOW_CLOSED',
      message.humanAgent
        ? 'No message from this person in the last 7 days: Instagram takes no reply now'
        : 'No message from this person in the last 24 hours: Instagram takes only a human reply from the panel now (up to 7 days)',
      { hint: 'Wait for the customer to write again.' },
    );
  }
  return undefined;
}

/**
 * A send whose provider call may have been accepted, and we cannot tell: it is never sent again
 * (not by a retry of the workflow, nor by a repeat of its Idempotency-Key), and the answer is not
 * one the client should retry (409 SEND_OUTCOME_UNKNOWN, unlike 502 SEND_FAILED).
 */
export function outcomeUnknown(reason: string): ApiError {
  return new ApiError(SEND_OUTCOME_UNKNOWN, outcomeUnknownMessage(reason), { hint: OUTCOME_UNKNOWN_HINT });
}

/**
 * Opt-out by message, as people write it: a text that is only a stop word (STOP, PARAR, PARE,
 * SAIR, CANCELAR, DESCADASTRAR) opts the contact out; only a start word (START, VOLTAR, RECEBER)
 * opts it back in. Case, accents, spaces and trailing punctuation do not matter; a sentence that
 * merely contains the word changes nothing.
 */
const STOP_WORDS = new Set(['stop', 'parar', 'pare', 'sair', 'cancelar', 'descadastrar']);
const START_WORDS = new Set(['start', 'voltar', 'receber']);
export function consentFromMessage(text: string): 'opt_out' | 'opt_in' | undefined {
  const word = text
    .normalize('NFD')
    .replace(/\p{M}/gu, '')
    .toLowerCase()
    .replace(/[\s.!?]+/g, ' ')
    .trim();
  if (STOP_WORDS.has(word)) return 'opt_out';
  if (START_WORDS.has(word)) return 'opt_in';
  return undefined;
}

/* ------------------------------------------------------------------------------------------------
 * Daily counters
 * ---------------------------------------------------------------------------------------------- */

/** Built once: constructing a time-zone formatter costs more than the send's daily-counter statement (2% of a worker's CPU under load). */
const SAO_PAULO_DAY = new Intl.DateTimeFormat('en-CA', {
  timeZone: 'America/Sao_Paulo',
  year: 'numeric',
  month: '2-digit',
  day: '2-digit',
});

/** The day daily counters belong to: they reset at midnight in America/Sao_Paulo. */
export function saoPauloDay(now: Date): string {
  return SAO_PAULO_DAY.format(now);
}

const RESETS = 'It resets at midnight (America/Sao_Paulo).';

const SAO_PAULO_CLOCK = new Intl.DateTimeFormat('en-GB', {
  timeZone: 'America/Sao_Paulo',
  hourCycle: 'h23',
  hour: '2-digit',
  minute: '2-digit',
  second: '2-digit',
});

/** Whole seconds until the daily counters reset (the next midnight in America/Sao_Paulo), at least 1: a refusal's Retry-After. */
export function secondsUntilSaoPauloMidnight(now: Date): number {
  const [hour, minute, second] = SAO_PAULO_CLOCK.format(now).split(':').map(Number);
  // Brazil keeps no daylight saving time (since 2019): every São Paulo day is 86 400 s long.
  const elapsed = hour * 3600 + minute * 60 + second + (now.getTime() % 1000) / 1000;
  return Math.max(1, Math.ceil(86_400 - elapsed));
}

/** Daily caps: their refusals say when they reset (Retry-After, seconds to the next São Paulo midnight). */
export const DAILY_LIMIT_CODES = ['COLD_LIMIT_REACHED', 'MESSAGE_LIMIT_REACHED'] as const;
type DailyLimitCode = (typeof DAILY_LIMIT_CODES)[number];

const DAILY_LIMIT_MESSAGES: Record<DailyLimitCode, string> = {
  COLD_LIMIT_REACHED: 'The daily cap of new numbers is reached',
  MESSAGE_LIMIT_REACHED: "The plan's daily message quota is reached",
};

export function isDailyLimitCode(code: string): code is DailyLimitCode {
  return (DAILY_LIMIT_CODES as readonly string[]).includes(code);
}

/**
 * The 429 of a reached daily cap, Retry-After counted from `now`: built where the refusal is
 * answered (the send's refusal crosses Temporal without headers, domain/messaging/failures.ts fromRefusal).
 */
export function dailyLimitRefusal(code: DailyLimitCode, now = new Date(), message = DAILY_LIMIT_MESSAGES[code], hint = RESETS): ApiError {
  return new ApiError(code, message, { hint, headers: { 'Retry-After': String(secondsUntilSaoPauloMidnight(now)) } });
}

/** New conversations a workspace may open per day: max(200, ceil(0.1 × broadcast limit)). */
export function coldCap(broadcastLimit: number | null): number {
  return Math.max(200, Math.ceil(0.1 * (broadcastLimit ?? 0)));
}

/**
 * The daily units a send takes, in order: a slot of the cold cap when it opens a new
 * conversation, then one message of the plan's daily quota, each with its cap (null: unlimited,
 * still counted); dailyLimitRefusalOf is the refusal when one is full. The saga gives them back
 * when the send fails.
 */
export function dailyUnits(plan: { daily_message_quota: number | null; broadcast_limit: number | null }, opensConversation: boolean) {
  const units: { counter: DailyCounter; cap: number | null }[] = [];
  if (opensConversation) units.push({ counter: 'cold_conversations', cap: coldCap(plan.broadcast_limit) });
  units.push({ counter: 'messages', cap: plan.daily_message_quota });
  return units;
}

/** The refusal of a send whose daily counter is full: the cold cap or the plan's message quota. */
export function dailyLimitRefusalOf(counter: DailyCounter): ApiError {
  return dailyLimitRefusal(counter === 'cold_conversations' ? 'COLD_LIMIT_REACHED' : 'MESSAGE_LIMIT_REACHED');
}
