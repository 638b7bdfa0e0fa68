import { ApiError } from '../../domain/kernel/errors';
import {
  checkMediaSize,
  chooseInstance,
  coldCap,
  consentFromMessage,
  dailyLimitRefusal,
  dailyLimitRefusalOf,
  dailyUnits,
  isDailyLimitCode,
  messageContent,
  messageRequirements,
  missingFields,
  outcomeUnknown,
  refuseUnsendable,
  refuseUnsupported,
  requiredFields,
  saoPauloDay,
  secondsUntilSaoPauloMidnight,
  windowOpen,
  type SendInstance,
} from '../../domain/messaging/sending';
import { MESSAGE_TYPES, OUTCOME_UNKNOWN_HINT, type MessageContent, type MessageType } from '../../types/messaging';

/**
 * The send rules of domain/messaging/sending.ts, each at its exact boundary. Every constant here is
 * written out (24 h, 200, 0.1, 5 MiB, ...) rather than read from the module, so a changed rule fails.
 */

const HOUR = 60 * 60 * 1000;
const DAY = 24 * HOUR;
const MiB = 1024 * 1024;

/** A text for a test's name: quoted, with every character outside printable ASCII escaped. */
function shown(text: string): string {
  return JSON.stringify(text).replace(/[^\x20-\x7e]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`);
}

/** The ApiError `fn` throws (anything else, or nothing, fails the test). */
function refusal(fn: () => unknown): ApiError {
  try {
    fn();
  } catch (err) {
    if (err instanceof ApiError) return err;
    throw err;
  }
  throw new Error('expected an ApiError, nothing was thrown');
}

describe('windowOpen: the 24-hour customer-service window', () => {
  const now = new Date('2025-03-10T12:00:00.000Z');
  const ago = (ms: number) => new Date(now.getTime() - ms);

  it.each([
    ['an inbound message just now', ago(0), true],
    ['an inbound message 1 h old', ago(HOUR), true],
    ['an inbound message 24 h minus 1 ms old', ago(DAY - 1), true],
    ['an inbound message exactly 24 h old', ago(DAY), false],
    ['an inbound message 24 h plus 1 ms old', ago(DAY + 1), false],
    ['an inbound message 25 h old', ago(25 * HOUR), false],
    ['no inbound message at all', null, false],
  ])('with %s: open = %p', (_label, lastInboundAt, open) => {
    expect(windowOpen(lastInboundAt, now)).toBe(open);
  });
});

describe('coldCap: max(200, ceil(0.1 x broadcastLimit)) new numbers a day', () => {
  it.each([
    [null, 200],
    [0, 200],
    [1999, 200],
    [2000, 200],
    [2001, 201],
    [2009, 201],
    [2010, 201],
    [2011, 202],
    [5000, 500],
    [123456, 12346],
  ])('broadcast limit %p -> cap %p', (broadcastLimit, cap) => {
    expect(coldCap(broadcastLimit)).toBe(cap);
  });
});

describe('dailyUnits: the daily counters a send takes', () => {
  const plan = (daily_message_quota: number | null, broadcast_limit: number | null) => ({ daily_message_quota, broadcast_limit });
  const shape = (units: ReturnType<typeof dailyUnits>) => units.map(({ counter, cap }) => ({ counter, cap }));

  it.each([
    [
      'a new conversation takes a cold slot, then a message',
      plan(1000, 5000),
      true,
      [
        ['cold_conversations', 500],
        ['messages', 1000],
      ],
    ],
    [
      'a new conversation with no broadcast limit: the cold cap is 200',
      plan(1000, null),
      true,
      [
        ['cold_conversations', 200],
        ['messages', 1000],
      ],
    ],
    ['an existing conversation takes only a message', plan(1000, 5000), false, [['messages', 1000]]],
    ['an unlimited quota is still counted (cap null)', plan(null, null), false, [['messages', null]]],
    ['a daily quota of 0 stays a cap of 0 (nothing may be sent), not unlimited', plan(0, null), false, [['messages', 0]]],
    [
      'a daily quota of 0 on a new conversation',
      plan(0, 0),
      true,
      [
        ['cold_conversations', 200],
        ['messages', 0],
      ],
    ],
  ] as const)('%s', (_label, p, opensConversation, expected) => {
    expect(shape(dailyUnits(p, opensConversation))).toEqual(expected.map(([counter, cap]) => ({ counter, cap })));
  });

  it.each([
    ['cold_conversations', 'COLD_LIMIT_REACHED', 'The daily cap of new numbers is reached'],
    ['messages', 'MESSAGE_LIMIT_REACHED', "The plan's daily message quota is reached"],
  ] as const)('the %s unit is refused with 429 %s and a Retry-After', (counter, code, message) => {
    const err = dailyLimitRefusalOf(counter);
    expect(err).toBeInstanceOf(ApiError);
    expect({ code: err.code, status: err.status, message: err.message, hint: err.hint }).toEqual({
      code,
      status: 429,
      message,
      hint: 'It resets at midnight (America/Sao_Paulo).',
    });
    const retryAfter = Number(err.headers?.['Retry-After']);
    expect(Number.isInteger(retryAfter) && retryAfter >= 1 && retryAfter <= 86_400).toBe(true);
  });
});

describe('saoPauloDay: the day the daily counters belong to (UTC-3, no daylight saving)', () => {
  it.each([
    ['2024-06-15T02:59:59.999Z', '2024-06-14'],
    ['2024-06-15T03:00:00.000Z', '2024-06-15'],
    ['2024-06-15T15:00:00.000Z', '2024-06-15'],
    ['2024-06-15T23:59:59.999Z', '2024-06-15'],
    ['2024-06-16T00:00:00.000Z', '2024-06-15'],
    // Year end: the São Paulo year turns three hours after UTC's.
    ['2024-12-31T02:59:59.999Z', '2024-12-30'],
    ['2024-12-31T03:00:00.000Z', '2024-12-31'],
    ['2025-01-01T00:00:00.000Z', '2024-12-31'],
    ['2025-01-01T02:59:59.999Z', '2024-12-31'],
    ['2025-01-01T03:00:00.000Z', '2025-01-01'],
    // Leap day.
    ['2024-02-29T02:59:59.999Z', '2024-02-28'],
    ['2024-03-01T02:59:59.999Z', '2024-02-29'],
    ['2024-03-01T03:00:00.000Z', '2024-03-01'],
    // Southern summer (daylight saving time until 2019): still UTC-3.
    ['2025-11-15T02:59:59.999Z', '2025-11-14'],
    ['2025-11-15T03:00:00.000Z', '2025-11-15'],
  ])('%s is São Paulo day %s', (instant, day) => {
    expect(saoPauloDay(new Date(instant))).toBe(day);
  });
});

describe('secondsUntilSaoPauloMidnight: the Retry-After of a daily refusal', () => {
  it.each([
    ['2024-06-15T03:00:00.000Z', 86_400], // São Paulo midnight: a whole day to the next one
    ['2024-06-15T03:00:00.001Z', 86_400],
    ['2024-06-15T03:00:00.500Z', 86_400],
    ['2024-06-15T03:00:01.000Z', 86_399],
    ['2024-06-15T15:00:00.000Z', 43_200], // noon in São Paulo
    ['2024-06-16T02:00:00.000Z', 3_600],
    ['2024-06-16T02:59:58.500Z', 2],
    ['2024-06-16T02:59:59.000Z', 1],
    ['2024-06-16T02:59:59.001Z', 1],
    ['2024-06-16T02:59:59.999Z', 1], // the last millisecond: still at least 1, never 0
    ['2024-12-31T03:00:00.000Z', 86_400],
    ['2025-01-01T02:59:59.999Z', 1],
  ])('at %s: %p s', (instant, seconds) => {
    expect(secondsUntilSaoPauloMidnight(new Date(instant))).toBe(seconds);
  });
});

describe('dailyLimitRefusal and isDailyLimitCode', () => {
  it.each([
    ['COLD_LIMIT_REACHED', 'The daily cap of new numbers is reached'],
    ['MESSAGE_LIMIT_REACHED', "The plan's daily message quota is reached"],
  ] as const)('%s: 429, its message, the reset hint and Retry-After counted from now', (code, message) => {
    const err = dailyLimitRefusal(code, new Date('2024-06-16T02:00:00.000Z'));
    expect({ code: err.code, status: err.status, message: err.message, hint: err.hint, headers: err.headers }).toEqual({
      code,
      status: 429,
      message,
      hint: 'It resets at midnight (America/Sao_Paulo).',
      headers: { 'Retry-After': '3600' },
    });
  });

  it('keeps a message and hint given by the caller', () => {
    const err = dailyLimitRefusal('COLD_LIMIT_REACHED', new Date('2024-06-15T03:00:01.000Z'), 'custom', 'later');
    expect({ message: err.message, hint: err.hint, headers: err.headers }).toEqual({
      message: 'custom',
      hint: 'later',
      headers: { 'Retry-After': '86399' },
    });
  });

  it.each([
    ['COLD_LIMIT_REACHED', true],
    ['MESSAGE_LIMIT_REACHED', true],
    ['RATE_LIMITED', false],
    ['SEND_RATE_LIMITED', false],
    ['COLD_SEND_RATE_LIMITED', false],
    ['cold_limit_reached', false],
    ['', false],
  ])('isDailyLimitCode(%p) = %p', (code, expected) => {
    expect(isDailyLimitCode(code)).toBe(expected);
  });
});

describe('consentFromMessage: opt-out and opt-in by message', () => {
  // The text is folded (accents dropped, lower case), runs of whitespace, "." "!" and "?" become
  // one space, the ends are trimmed; then the whole text must be one of the words.
  const STOP = ['stop', 'parar', 'pare', 'sair', 'cancelar', 'descadastrar'];
  const START = ['start', 'voltar', 'receber'];
  const forms = (word: string): string[] => [
    word.toUpperCase(),
    word,
    word[0].toUpperCase() + word.slice(1),
    [...word].map((c, i) => (i % 2 ? c.toUpperCase() : c)).join(''),
    `  ${word.toUpperCase()}  `,
    `\t${word}\n`,
    `${word}\u00a0`,
    `${word.toUpperCase()}!`,
    `${word}.`,
    `${word}?!`,
    `${word} !!!`,
    `...${word}`,
  ];

  it.each(STOP.flatMap((word) => forms(word).map((text) => [shown(text), word, text])))('%s (%s) opts out', (_shown, _word, text) => {
    expect(consentFromMessage(text)).toBe('opt_out');
  });

  it.each(START.flatMap((word) => forms(word).map((text) => [shown(text), word, text])))('%s (%s) opts back in', (_shown, _word, text) => {
    expect(consentFromMessage(text)).toBe('opt_in');
  });

  it.each([
    ['SAÍR', 'opt_out'],
    ['Páre', 'opt_out'],
    ['CANCELÁR', 'opt_out'],
    ['s\u0301top', 'opt_out'], // a combining accent
    ['RECEBÊR', 'opt_in'],
    ['vóltar', 'opt_in'],
  ])('accents do not matter: %p -> %p', (text, consent) => {
    expect(consentFromMessage(text)).toBe(consent);
  });

  it.each([
    'stopped',
    'stops',
    'não pare',
    'nao pare',
    'please stop',
    'stop please',
    'stop stop',
    'STOP,',
    'STOP;',
    '"STOP"',
    '(stop)',
    's t o p',
    'st op',
    'para',
    'parei',
    'sai',
    'cancela',
    'restart',
    'started',
    'voltarei',
    'receba',
    'ｓｔｏｐ',
    '',
    '   ',
    '!!!',
  ])('%p changes nothing', (text) => {
    expect(consentFromMessage(text)).toBeUndefined();
  });
});

describe('message content per type', () => {
  const REQUIRED: Record<MessageType, string[]> = {
    text: ['text'],
    image: ['mediaUrl'],
    video: ['mediaUrl'],
    audio: ['mediaUrl'],
    document: ['mediaUrl'],
    template: ['templateName', 'templateLanguage'],
  };

  it('the table below covers every message type', () => {
    expect(Object.keys(REQUIRED).sort()).toEqual([...MESSAGE_TYPES].sort());
  });

  it.each(Object.entries(REQUIRED))('requiredFields(%p) = %p', (type, fields) => {
    expect(requiredFields(type as MessageType)).toEqual(fields);
  });

  it.each<[string, MessageContent, string[]]>([
    ['a text without text', { type: 'text' }, ['text']],
    ['a text with text', { type: 'text', text: 'hi' }, []],
    ['a text with only a media URL', { type: 'text', mediaUrl: 'https://x.test/a.png' }, ['text']],
    ['an image without a URL, captioned', { type: 'image', caption: 'c' }, ['mediaUrl']],
    ['an image with a URL', { type: 'image', mediaUrl: 'https://x.test/a.png' }, []],
    ['a video without a URL', { type: 'video', text: 'hi' }, ['mediaUrl']],
    ['an audio without a URL', { type: 'audio' }, ['mediaUrl']],
    ['a document without a URL', { type: 'document', fileName: 'a.pdf' }, ['mediaUrl']],
    ['a template with neither name nor language', { type: 'template' }, ['templateName', 'templateLanguage']],
    ['a template without language', { type: 'template', templateName: 'hello' }, ['templateLanguage']],
    ['a template without name', { type: 'template', templateLanguage: 'pt_BR' }, ['templateName']],
    ['a complete template', { type: 'template', templateName: 'hello', templateLanguage: 'pt_BR' }, []],
  ])('missingFields of %s: %p', (_label, content, missing) => {
    expect(missingFields(content)).toEqual(missing);
  });

  const everything = {
    text: 'hello',
    mediaUrl: 'https://x.test/f',
    caption: 'a caption',
    fileName: 'f.pdf',
    templateName: 'welcome',
    templateLanguage: 'pt_BR',
    templateVariables: ['Ana'],
  };

  // What travels on is JSON (workflow history, provider call): the fields a type does not carry must be absent from it.
  it.each<[MessageType, object]>([
    ['text', { type: 'text', text: 'hello' }],
    ['image', { type: 'image', mediaUrl: 'https://x.test/f', caption: 'a caption' }],
    ['video', { type: 'video', mediaUrl: 'https://x.test/f', caption: 'a caption' }],
    ['audio', { type: 'audio', mediaUrl: 'https://x.test/f' }],
    ['document', { type: 'document', mediaUrl: 'https://x.test/f', caption: 'a caption', fileName: 'f.pdf' }],
    ['template', { type: 'template', templateName: 'welcome', templateLanguage: 'pt_BR', templateVariables: ['Ana'] }],
  ])('messageContent of a %s carries only its fields', (type, carried) => {
    expect(JSON.parse(JSON.stringify(messageContent({ type, ...everything })))).toStrictEqual(carried);
  });

  it('messageContent gives a template without variables an empty list', () => {
    expect(messageContent({ type: 'template', templateName: 'welcome', templateLanguage: 'pt_BR' })).toStrictEqual({
      type: 'template',
      templateName: 'welcome',
      templateLanguage: 'pt_BR',
      templateVariables: [],
    });
  });

  it.each<[MessageType, object[]]>([
    [
      'text',
      [
        { properties: { type: { enum: ['text'] } }, required: ['text'] },
        { properties: { type: { enum: ['image', 'video', 'audio', 'document'] } }, required: ['type', 'mediaUrl'] },
        { properties: { type: { enum: ['template'] } }, required: ['type', 'templateName', 'templateLanguage'] },
      ],
    ],
    [
      'image',
      [
        { properties: { type: { enum: ['text'] } }, required: ['type', 'text'] },
        { properties: { type: { enum: ['image', 'video', 'audio', 'document'] } }, required: ['mediaUrl'] },
        { properties: { type: { enum: ['template'] } }, required: ['type', 'templateName', 'templateLanguage'] },
      ],
    ],
  ])('messageRequirements with default type %p: one variant per set of required fields', (defaultType, oneOf) => {
    expect(messageRequirements('type', defaultType)).toEqual({ oneOf });
  });

  it('messageRequirements uses the given name of the type field, and the default type is text', () => {
    const { oneOf } = messageRequirements('messageType') as { oneOf: { properties: Record<string, unknown>; required: string[] }[] };
    expect(oneOf.map((v) => [Object.keys(v.properties), v.required])).toEqual([
      [['messageType'], ['text']],
      [['messageType'], ['messageType', 'mediaUrl']],
      [['messageType'], ['messageType', 'templateName', 'templateLanguage']],
    ]);
  });
});

describe('checkMediaSize: the provider limit per media type', () => {
  it.each([
    ['image', 5 * MiB],
    ['video', 16 * MiB],
    ['audio', 16 * MiB],
    ['document', 100 * MiB],
  ])('a %s of exactly its limit (%p bytes) is accepted', (type, limit) => {
    expect(() => checkMediaSize(type, limit)).not.toThrow();
    expect(() => checkMediaSize(type, limit, { atLeast: true })).not.toThrow();
  });

  it.each([
    ['image', 5 * MiB + 1, 'The image is 5.0 MB; the limit is 5 MB'],
    ['video', 16 * MiB + 1, 'The video is 16.0 MB; the limit is 16 MB'],
    ['audio', 16 * MiB + 1, 'The audio is 16.0 MB; the limit is 16 MB'],
    ['document', 100 * MiB + 1, 'The document is 100.0 MB; the limit is 100 MB'],
    ['image', 7.5 * MiB, 'The image is 7.5 MB; the limit is 5 MB'],
  ])('a %s of %p bytes is 422 MEDIA_TOO_LARGE', (type, bytes, message) => {
    const err = refusal(() => checkMediaSize(type, bytes));
    expect({ code: err.code, status: err.status, message: err.message }).toEqual({ code: 'MEDIA_TOO_LARGE', status: 422, message });
  });

  it.each([
    ['image', 5 * MiB + 1, 'The image is more than 5 MB; the limit is 5 MB'],
    ['document', 100 * MiB + 1, 'The document is more than 100 MB; the limit is 100 MB'],
  ])('atLeast: a %s download stopped past its limit (%p bytes read) says "more than"', (type, bytes, message) => {
    const err = refusal(() => checkMediaSize(type, bytes, { atLeast: true }));
    expect({ code: err.code, status: err.status, message: err.message }).toEqual({ code: 'MEDIA_TOO_LARGE', status: 422, message });
  });

  it.each([
    ['an image of unknown size', 'image', null],
    ['a text, whatever its size', 'text', 1024 * MiB],
    ['a template, whatever its size', 'template', 1024 * MiB],
  ])('%s is not checked', (_label, type, bytes) => {
    expect(() => checkMediaSize(type, bytes)).not.toThrow();
  });
});

describe('chooseInstance: the instance of a cold send', () => {
  const a: SendInstance = { id: '0b6c9f1e-0000-4000-8000-00000000000a', channel: 'whatsapp', provider: 'cloud', connected: true };
  const b: SendInstance = { id: '0b6c9f1e-0000-4000-8000-00000000000b', channel: 'whatsapp', provider: 'web', connected: true };

  it.each<[string, SendInstance[], string | undefined, SendInstance]>([
    ['the only instance, when none is named', [a], undefined, a],
    ['the named instance, found', [b], b.id, b],
    ['the named instance, found by an id in upper case (the lookup matched it; no second comparison)', [a], a.id.toUpperCase(), a],
  ])('chooses %s', (_label, candidates, instanceId, chosen) => {
    expect(chooseInstance(candidates, instanceId)).toBe(chosen);
  });

  it.each<[string, string, number, SendInstance[], string | undefined]>([
    ['no instance at all, none named', 'NO_INSTANCE', 422, [], undefined],
    ['several instances, none named', 'INSTANCE_REQUIRED', 422, [a, b], undefined],
    ['a named instance that is not there', 'INSTANCE_NOT_FOUND', 404, [], a.id],
  ])('refuses %s: %s %p', (_label, code, status, candidates, instanceId) => {
    const err = refusal(() => chooseInstance(candidates, instanceId));
    expect({ code: err.code, status: err.status }).toEqual({ code, status });
  });

  it('tells the client how to choose between several instances', () => {
    expect(refusal(() => chooseInstance([a, b], undefined)).hint).toBe('Send instanceId (GET /api/v1/instances).');
  });
});

describe('refuseUnsupported: what an instance cannot carry', () => {
  it.each<[string, string, 'cloud' | 'web' | 'instagram', MessageType, string | undefined]>([
    ['a text on a WhatsApp Cloud API instance', 'whatsapp', 'cloud', 'text', undefined],
    ['a template on a WhatsApp Cloud API instance', 'whatsapp', 'cloud', 'template', undefined],
    ['a text on a WhatsApp web gateway', 'whatsapp', 'web', 'text', undefined],
    ['an image on a WhatsApp web gateway', 'whatsapp', 'web', 'image', undefined],
    ['a template on a WhatsApp web gateway', 'whatsapp', 'web', 'template', 'TEMPLATE_UNSUPPORTED'],
    ['a text on Instagram', 'instagram', 'cloud', 'text', 'CHANNEL_UNSUPPORTED'],
    ['a template on an Instagram web instance (the channel is checked first)', 'instagram', 'web', 'template', 'CHANNEL_UNSUPPORTED'],
    ['a text on an Instagram instance', 'instagram', 'instagram', 'text', undefined],
    ['an image on an Instagram instance', 'instagram', 'instagram', 'image', undefined],
    ['a template on an Instagram instance (no lookup: Instagram has none)', 'instagram', 'instagram', 'template', 'TEMPLATE_UNSUPPORTED'],
    ['a text on a WhatsApp instance of the Instagram provider', 'whatsapp', 'instagram', 'text', 'CHANNEL_UNSUPPORTED'],
  ])('%s: %p', (_label, channel, provider, type, code) => {
    const check = () => refuseUnsupported({ channel, provider }, { type });
    if (code === undefined) expect(check).not.toThrow();
    else expect({ code: refusal(check).code, status: refusal(check).status }).toEqual({ code, status: 422 });
  });
});

describe('refuseUnsendable: what refuses a send once everything is known', () => {
  const now = new Date('2025-03-10T12:00:00.000Z');
  const ago = (ms: number) => new Date(now.getTime() - ms);
  const cloud: SendInstance = { id: 'i1', channel: 'whatsapp', provider: 'cloud', connected: true };
  const web: SendInstance = { id: 'i2', channel: 'whatsapp', provider: 'web', connected: true };
  const instagram: SendInstance = { id: 'i3', channel: 'instagram', provider: 'instagram', connected: true };
  const text: MessageContent = { type: 'text', text: 'hi' };
  const template = (variables?: string[]): MessageContent => ({
    type: 'template',
    templateName: 'welcome',
    templateLanguage: 'pt_BR',
    templateVariables: variables,
  });
  type Send = Parameters<typeof refuseUnsendable>[0];
  const send = (over: Partial<Send> = {}): Send => ({
    instance: cloud,
    contact: { opted_out: false },
    conversation: { last_inbound_at: ago(HOUR) },
    message: text,
    now,
    ...over,
  });

  it.each<[string, Send]>([
    ['a text inside the window', send()],
    ['a text 24 h minus 1 ms after the last inbound', send({ conversation: { last_inbound_at: ago(DAY - 1) } })],
    [
      'a template outside the window',
      send({ message: template(['a', 'b']), template: { variable_count: 2 }, conversation: { last_inbound_at: null } }),
    ],
    ['a template without variables that takes none', send({ message: template(), template: { variable_count: 0 } })],
    [
      'a text through a web gateway with no inbound ever (no window there)',
      send({ instance: web, conversation: { last_inbound_at: null } }),
    ],
    ['a text on Instagram 23 h after the last inbound', send({ instance: instagram, conversation: { last_inbound_at: ago(23 * HOUR) } })],
    [
      "a panel's human agent reply on Instagram 6 days after the last inbound",
      send({ instance: instagram, message: { ...text, humanAgent: true }, conversation: { last_inbound_at: ago(6 * DAY) } }),
    ],
    [
      'an image through a web gateway 25 h after the last inbound',
      send({
        instance: web,
        message: { type: 'image', mediaUrl: 'https://x.test/a.png' },
        conversation: { last_inbound_at: ago(25 * HOUR) },
      }),
    ],
  ])('lets through %s', (_label, s) => {
    expect(() => refuseUnsendable(s)).not.toThrow();
  });

  it.each<[string, string, number, Send]>([
    ['a disconnected instance', 'INSTANCE_DISCONNECTED', 422, send({ instance: { ...cloud, connected: false } })],
    ['a contact who opted out', 'OPTED_OUT', 403, send({ contact: { opted_out: true } })],
    ['a template not approved on the instance', 'TEMPLATE_INVALID', 422, send({ message: template([]) })],
    ['a template with one variable too few', 'TEMPLATE_INVALID', 422, send({ message: template(['a']), template: { variable_count: 2 } })],
    [
      'a template with one variable too many',
      'TEMPLATE_INVALID',
      422,
      send({ message: template(['a', 'b', 'c']), template: { variable_count: 2 } }),
    ],
    [
      'a template without variables that takes one',
      'TEMPLATE_INVALID',
      422,
      send({ message: template(), template: { variable_count: 1 } }),
    ],
    ['a text exactly 24 h after the last inbound (Cloud API)', 'WINDOW_CLOSED', 422, send({ conversation: { last_inbound_at: ago(DAY) } })],
    ['a text with no inbound ever (Cloud API)', 'WINDOW_CLOSED', 422, send({ conversation: { last_inbound_at: null } })],
    [
      'an image outside the window (Cloud API)',
      'WINDOW_CLOSED',
      422,
      send({ message: { type: 'image', mediaUrl: 'https://x.test/a.png' }, conversation: { last_inbound_at: ago(25 * HOUR) } }),
    ],
    [
      'a template through a web gateway',
      'TEMPLATE_UNSUPPORTED',
      422,
      send({ instance: web, message: template([]), template: { variable_count: 0 } }),
    ],
    ['an Instagram instance of a WhatsApp provider', 'CHANNEL_UNSUPPORTED', 422, send({ instance: { ...cloud, channel: 'instagram' } })],
    [
      'a text on Instagram 24 h after the last inbound',
      'WINDOW_CLOSED',
      422,
      send({ instance: instagram, conversation: { last_inbound_at: ago(DAY) } }),
    ],
    [
      "a panel's human agent reply on Instagram 7 days after the last inbound",
      'WINDOW_CLOSED',
      422,
      send({ instance: instagram, message: { ...text, humanAgent: true }, conversation: { last_inbound_at: ago(7 * DAY) } }),
    ],
    [
      'an image with a caption on Instagram',
      'CHANNEL_UNSUPPORTED',
      422,
      send({
        instance: instagram,
        message: { type: 'image', mediaUrl: 'https://x.test/a.png', caption: 'veja' },
        conversation: { last_inbound_at: ago(HOUR) },
      }),
    ],
    // The order of the checks, where several apply.
    [
      'an Instagram instance that is also disconnected',
      'CHANNEL_UNSUPPORTED',
      422,
      send({ instance: { ...cloud, channel: 'instagram', connected: false } }),
    ],
    [
      'a disconnected instance and an opted-out contact',
      'INSTANCE_DISCONNECTED',
      422,
      send({ instance: { ...cloud, connected: false }, contact: { opted_out: true } }),
    ],
    [
      'an opted-out contact outside the window',
      'OPTED_OUT',
      403,
      send({ contact: { opted_out: true }, conversation: { last_inbound_at: null } }),
    ],
  ])('refuses %s: %s', (_label, code, status, s) => {
    const err = refusal(() => refuseUnsendable(s));
    expect({ code: err.code, status: err.status }).toEqual({ code, status });
  });

  it('names the variables a template takes and those given', () => {
    const err = refusal(() => refuseUnsendable(send({ message: template(['a']), template: { variable_count: 2 } })));
    expect(err.message).toBe('The template takes 2 variables, 1 given');
  });
});

describe('outcomeUnknown', () => {
  it('is 409 SEND_OUTCOME_UNKNOWN: never sent twice, check before sending again', () => {
    const err = outcomeUnknown('The provider did not answer');
    expect({ code: err.code, status: err.status, message: err.message, hint: err.hint }).toEqual({
      code: 'SEND_OUTCOME_UNKNOWN',
      status: 409,
      message: 'The provider did not answer; it is not sent twice',
      hint: OUTCOME_UNKNOWN_HINT,
    });
  });
});
