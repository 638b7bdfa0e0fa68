import { z } from 'zod';
import { validationError } from '../../domain/kernel/errors';
import { atLeastOne, ECMA_WHITESPACE, emailAddress, NON_BLANK, onlyWith, trimmedText } from '../../domain/kernel/input-rules';
import { cut, storable, storableJson, unstorableReason } from '../../domain/kernel/text';

/**
 * The input rules of domain/kernel/input-rules.ts (what zod refuses, and the metadata the OpenAPI
 * document states for it) and the storable-text rules of domain/kernel/text.ts, at their boundaries.
 */

/** A text for a test's name: quoted, with every character outside printable ASCII escaped. */
function shown(text: string): string {
  return JSON.stringify(text).replace(/[^\x20-\x7e]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`);
}

/** What the router answers for a body: the parsed value, or the VALIDATION message. */
function answer(schema: z.ZodType, value: unknown): { data: unknown } | { code: string; status: number; message: string } {
  const result = schema.safeParse(value);
  if (result.success) return { data: result.data };
  const err = validationError(result.error, 'body');
  return { code: err.code, status: err.status, message: err.message };
}

/** ECMA-262 whitespace and line terminators: exactly what `trim()` removes and `\s` matches. */
const WHITESPACE = [
  '\t',
  '\n',
  '\v',
  '\f',
  '\r',
  ' ',
  '\u00a0',
  '\u1680',
  '\u2000',
  '\u2001',
  '\u2002',
  '\u2003',
  '\u2004',
  '\u2005',
  '\u2006',
  '\u2007',
  '\u2008',
  '\u2009',
  '\u200a',
  '\u2028',
  '\u2029',
  '\u202f',
  '\u205f',
  '\u3000',
  '\ufeff',
];
/** Invisible or space-like, yet not whitespace to ECMA-262: trim() keeps them. */
const NOT_WHITESPACE = ['\u200b', '\u180e', '\u0085', '\u00ad', '\u2060', '\u200c', '\u200d', '\u0000', '_', '.'];

describe('trimmedText', () => {
  it.each(WHITESPACE.map((c) => [shown(c), c]))('refuses %s alone, and repeated', (_shown, c) => {
    expect(trimmedText(100).safeParse(c).success).toBe(false);
    expect(trimmedText(100).safeParse(c.repeat(3)).success).toBe(false);
  });

  it.each(WHITESPACE.map((c) => [shown(c), c]))('trims %s from both ends', (_shown, c) => {
    expect(trimmedText(100).parse(`${c}a b${c}${c}`)).toBe('a b');
  });

  it.each(NOT_WHITESPACE.map((c) => [shown(c), c]))('keeps %s: not whitespace, so not blank', (_shown, c) => {
    expect(trimmedText(100).parse(` ${c} `)).toBe(c);
  });

  it.each([
    ['empty', '', 1, 5, undefined],
    ['all whitespace', ' \t\u3000\ufeff ', 1, 5, undefined],
    ['one character', 'a', 1, 5, 'a'],
    ['exactly max', 'abcde', 1, 5, 'abcde'],
    ['max plus one', 'abcdef', 1, 5, undefined],
    ['max once trimmed', '   abcde   ', 1, 5, 'abcde'],
    ['max plus one once trimmed, inner space counted', ' abc de ', 1, 5, undefined],
    ['min minus one', 'ab', 3, 5, undefined],
    ['min minus one, padded', '   ab   ', 3, 5, undefined],
    ['exactly min', 'abc', 3, 5, 'abc'],
  ])('%s (%p, min %p, max %p) -> %p', (_label, text, min, max, data) => {
    const result = trimmedText(max, min).safeParse(text);
    expect(result.success ? result.data : undefined).toBe(data);
  });

  it('documents the non-blank rule as its pattern', () => {
    expect(z.globalRegistry.get(trimmedText(10))).toEqual({ pattern: NON_BLANK });
  });

  // The documented pattern must accept exactly what the code keeps: every UTF-16 code unit, one by one.
  it('NON_BLANK holds exactly the characters trim() keeps', () => {
    const nonBlank = new RegExp(NON_BLANK, 'u');
    const disagree: string[] = [];
    for (let unit = 0; unit <= 0xffff; unit++) {
      const c = String.fromCharCode(unit);
      if (nonBlank.test(c) !== (c.trim() !== '')) disagree.push(shown(c));
    }
    expect(disagree).toEqual([]);
  });

  it('ECMA_WHITESPACE is exactly the set trim() removes', () => {
    const space = new RegExp(`^[${ECMA_WHITESPACE}]$`, 'u');
    const disagree: string[] = [];
    for (let unit = 0; unit <= 0xffff; unit++) {
      const c = String.fromCharCode(unit);
      if (space.test(c) !== (c.trim() === '')) disagree.push(shown(c));
    }
    expect(disagree).toEqual([]);
    expect(WHITESPACE.every((c) => space.test(c))).toBe(true);
  });
});

describe('emailAddress', () => {
  it.each([
    'user@example.com',
    'a@b.co',
    'first.last+tag@sub.example.co.uk',
    "o'neil@example.com",
    'user_name-1@my-host.example',
    'USER@EXAMPLE.COM',
  ])('accepts %p', (email) => {
    expect(answer(emailAddress(), email)).toEqual({ data: email });
  });

  it.each([
    '"a b"@example.com', // quoted local part
    'a@[127.0.0.1]', // IP literal
    'a@127.0.0.1',
    'a@localhost',
    'a@example.c',
    'a..b@example.com',
    '.a@example.com',
    'a.@example.com',
    "a'@example.com",
    'a@-example.com',
    'a@example..com',
    'a b@example.com',
    ' user@example.com',
    'user@example.com ',
    'usér@example.com',
    'user@exämple.com',
    'no-at-sign',
    'a@b@example.com',
    '',
  ])('refuses %p: 400 VALIDATION "Invalid email address"', (email) => {
    expect(answer(emailAddress(), email)).toEqual({ code: 'VALIDATION', status: 400, message: 'Invalid body: Invalid email address' });
  });

  it.each([
    ['exactly 320 characters by default', `${'a'.repeat(308)}@example.com`, undefined, true],
    ['321 characters by default', `${'a'.repeat(309)}@example.com`, undefined, false],
    ['exactly a given max', 'abcdefgh@example.com', 20, true],
    ['one over a given max', 'abcdefghi@example.com', 20, false],
  ])('%s: accepted %p', (_label, email, max, accepted) => {
    expect(email.length).toBe(max === undefined ? (accepted ? 320 : 321) : accepted ? max : max + 1);
    expect(emailAddress(max).safeParse(email).success).toBe(accepted);
  });
});

describe('atLeastOne', () => {
  const patch = atLeastOne(z.object({ name: z.string().optional(), value: z.number().optional() }), 'Send at least one field to change');

  it.each([
    ['one field', { name: 'x' }],
    ['the other field', { value: 1 }],
    ['a falsy value (0)', { value: 0 }],
    ['an empty string', { name: '' }],
    ['both fields', { name: 'x', value: 2 }],
  ])('accepts %s', (_label, body) => {
    expect(answer(patch, body)).toEqual({ data: body });
  });

  it.each([
    ['an empty body', {}],
    ['only unknown fields (they do not count)', { other: 1 }],
    ['fields sent as undefined', { name: undefined }],
  ])('refuses %s with its message', (_label, body) => {
    expect(answer(patch, body)).toEqual({ code: 'VALIDATION', status: 400, message: 'Invalid body: Send at least one field to change' });
  });

  it('documents minProperties 1 and that one of its fields is present', () => {
    expect(z.globalRegistry.get(patch)).toEqual({ minProperties: 1, anyOf: [{ required: ['name'] }, { required: ['value'] }] });
  });
});

describe('onlyWith', () => {
  const trigger = onlyWith(
    z.object({
      type: z.enum(['card_created', 'card_moved', 'message_received']),
      pipelineId: z.string().optional(),
      stageId: z.string().optional(),
    }),
    'type',
    { pipelineId: ['card_created', 'card_moved'], stageId: ['card_moved'] },
    'trigger',
  );

  it.each([
    ['pipelineId with card_created', { type: 'card_created', pipelineId: 'p' }],
    ['pipelineId and stageId with card_moved', { type: 'card_moved', pipelineId: 'p', stageId: 's' }],
    ['neither field, with any type', { type: 'message_received' }],
  ])('accepts %s', (_label, body) => {
    expect(answer(trigger, body)).toEqual({ data: body });
  });

  it.each([
    [
      'pipelineId with message_received',
      { type: 'message_received', pipelineId: 'p' },
      'Invalid body.pipelineId: only for trigger card_created, card_moved',
    ],
    ['stageId with card_created', { type: 'card_created', stageId: 's' }, 'Invalid body.stageId: only for trigger card_moved'],
  ])('refuses %s, naming the field', (_label, body, message) => {
    expect(answer(trigger, body)).toEqual({ code: 'VALIDATION', status: 400, message });
  });

  it('names the discriminator when no word is given', () => {
    const schema = onlyWith(z.object({ kind: z.enum(['a', 'b']), extra: z.string().optional() }), 'kind', { extra: ['a'] });
    expect(answer(schema, { kind: 'b', extra: 'x' })).toEqual({
      code: 'VALIDATION',
      status: 400,
      message: 'Invalid body.extra: only for kind a',
    });
  });

  it('documents each rule as if / then', () => {
    expect(z.globalRegistry.get(trigger)).toEqual({
      allOf: [
        {
          if: { properties: { pipelineId: {} }, required: ['pipelineId'] },
          then: { properties: { type: { enum: ['card_created', 'card_moved'] } } },
        },
        { if: { properties: { stageId: {} }, required: ['stageId'] }, then: { properties: { type: { enum: ['card_moved'] } } } },
      ],
    });
  });
});

describe('unstorableReason and storable', () => {
  const NUL = 'must not contain the NUL character (U+0000)';
  const SURROGATE = 'must not contain unpaired UTF-16 surrogates';

  const cases: [string, string, string | undefined, string][] = [
    ['empty', '', undefined, ''],
    ['plain text', 'Olá, mundo', undefined, 'Olá, mundo'],
    ['an emoji (a surrogate pair)', 'a\uD83D\uDE00b', undefined, 'a\uD83D\uDE00b'],
    ['U+FFFD itself', '\uFFFD', undefined, '\uFFFD'],
    ['U+0001 (only U+0000 is refused)', '\u0001', undefined, '\u0001'],
    ['a NUL', 'a\u0000b', NUL, 'ab'],
    ['only NULs', '\u0000\u0000', NUL, ''],
    ['a lone high surrogate', 'a\uD800b', SURROGATE, 'a\uFFFDb'],
    ['a lone high surrogate at the end', 'ab\uD83D', SURROGATE, 'ab\uFFFD'],
    ['a lone low surrogate', 'a\uDC00b', SURROGATE, 'a\uFFFDb'],
    ['a lone low surrogate at the start', '\uDE00ab', SURROGATE, '\uFFFDab'],
    ['a pair in the wrong order', '\uDE00\uD83D', SURROGATE, '\uFFFD\uFFFD'],
    ['a high surrogate before a pair', '\uD83D\uD83D\uDE00', SURROGATE, '\uFFFD\uD83D\uDE00'],
    ['a NUL and a lone surrogate (NUL named first)', '\uD800\u0000', NUL, '\uFFFD'],
  ];

  it.each(cases.map(([label, text, reason, stored]) => [label, shown(text), reason, shown(stored), text, stored] as const))(
    '%s (%s): reason %p, stored as %s',
    (_label, _text, reason, _stored, text, stored) => {
      expect(unstorableReason(text)).toBe(reason);
      expect(storable(text)).toBe(stored);
      expect(unstorableReason(storable(text))).toBeUndefined();
    },
  );

  it('answers the same when asked twice in a row (no state kept between calls)', () => {
    const text = 'abcdef\uD800';
    expect([unstorableReason(text), unstorableReason(text), unstorableReason('\uD800')]).toEqual([SURROGATE, SURROGATE, SURROGATE]);
    expect([storable(text), storable(text)]).toEqual(['abcdef\uFFFD', 'abcdef\uFFFD']);
  });
});

describe('cut', () => {
  const cases: [string, string, number, string][] = [
    ['shorter than max', 'ab', 3, 'ab'],
    ['exactly max', 'abc', 3, 'abc'],
    ['longer than max', 'abcdef', 3, 'abc'],
    ['max 0', 'abc', 0, ''],
    ['a pair ending exactly at max', 'ab\uD83D\uDE00', 4, 'ab\uD83D\uDE00'],
    ['a pair split by max: the pair is dropped', 'ab\uD83D\uDE00', 3, 'ab'],
    ['only a pair, max 1', '\uD83D\uDE00', 1, ''],
    ['a pair before max', '\uD83D\uDE00ab', 3, '\uD83D\uDE00a'],
  ];

  it.each(cases.map(([label, text, max, head]) => [label, shown(text), max, shown(head), text, head] as const))(
    '%s: cut(%s, %p) = %s',
    (_label, _text, max, _head, text, head) => {
      expect(cut(text, max)).toBe(head);
    },
  );
});

describe('storableJson', () => {
  it('makes every string and key storable, at any depth, and keeps other values', () => {
    const value = { 'k\u0000': ['a\u0000', { deep: '\uD800' }, 1, true, null], n: 2.5, ok: 'fine' };
    expect(storableJson(value)).toStrictEqual({ k: ['a', { deep: '\uFFFD' }, 1, true, null], n: 2.5, ok: 'fine' });
  });

  it('keeps a "__proto__" key as data, without changing the prototype', () => {
    const out = storableJson(JSON.parse('{"__proto__": {"polluted": true}}')) as Record<string, unknown>;
    expect(Object.getPrototypeOf(out)).toBe(Object.prototype);
    expect(Object.keys(out)).toEqual(['__proto__']);
    expect(out.polluted).toBeUndefined();
  });
});
