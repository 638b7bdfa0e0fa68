import { digitsOfPersonJid, parsePhone, PHONE_PATTERN, PHONE_TEXT_SCHEMA } from '../../domain/leads/phone';

/**
 * Brazilian phone numbers (domain/leads/phone.ts): what parsePhone accepts, the key that makes a
 * mobile with and without its ninth digit one contact, and the documented pattern agreeing with it.
 * Numbers are written out here (32 characters, the area codes), so a changed rule fails.
 */

/** A text for a test's name: quoted, with every character outside printable ASCII escaped. */
function shown(text: string): string {
  return JSON.stringify(text).replace(/[^\x20-\x7e]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`);
}

function parsed(input: string) {
  const result = parsePhone(input);
  if (!result.ok) throw new Error(`${shown(input)} should parse, got: ${result.reason}`);
  return result.phone;
}

function reasonOf(input: string): string {
  const result = parsePhone(input);
  if (result.ok) throw new Error(`${shown(input)} should be refused, got key ${result.phone.key}`);
  return result.reason;
}

describe('parsePhone: separators', () => {
  it.each(
    [
      '5511987654321',
      '+5511987654321',
      '+55 11 98765 4321',
      '+55 (11) 98765-4321',
      '+55 (11) 9 8765-4321',
      '55-11-98765-4321',
      '(55)(11)987654321',
      ' 5511987654321 ',
      '55\t11\n987654321\r',
      '55\u00a011\u3000987654321', // no-break and ideographic spaces (ECMA whitespace)
      '55\ufeff11\u2028987654321\u202f',
      '++55 -- (11) --- 98765 ---- 4321', // longer runs than the documented pattern shows
    ].map((input) => [shown(input), input]),
  )('%s is +55 11 98765-4321', (_shown, input) => {
    expect(parsed(input)).toEqual({ digits: '5511987654321', key: '5511987654321', e164: '5511987654321', mobile: true });
  });

  it.each(
    [
      '55.11.98765.4321',
      '55/11/98765/4321',
      '55_11_98765_4321',
      '+55 11 98765\u20134321', // en dash
      '+55 11 98765\u20104321', // hyphen
      '+55 11 98765-4321 ext',
      '55[11]987654321',
      '\uff15\uff15 11 98765 4321', // full-width digits
      '55\u200b11987654321', // zero-width space is not whitespace
      '',
      '  ',
      '+-()',
    ].map((input) => [shown(input), input]),
  )('%s is refused: only digits and the separators', (_shown, input) => {
    expect(reasonOf(input)).toBe('only digits, +, spaces, parentheses and dashes are allowed');
  });
});

describe('parsePhone: length of the input', () => {
  const phone = '+55 (11) 98765-4321';

  it('accepts exactly 32 characters', () => {
    const input = phone.padEnd(32, ' ');
    expect(input).toHaveLength(32);
    expect(parsed(input).key).toBe('5511987654321');
  });

  it('refuses 33 characters, even when they are a valid number', () => {
    const input = phone.padEnd(33, ' ');
    expect(reasonOf(input)).toBe('at most 32 characters');
  });

  it('refuses an overlong input before looking at it', () => {
    expect(reasonOf('x'.repeat(33))).toBe('at most 32 characters');
    expect(reasonOf('x'.repeat(32))).toBe('only digits, +, spaces, parentheses and dashes are allowed');
  });
});

describe('parsePhone: country code', () => {
  it.each(['11987654321', '5411987654321', '0551198765432', '1 415 555 0100', '5', '15511987654321'])(
    '%p lacks the country code 55',
    (input) => {
      expect(reasonOf(input)).toBe('must start with the country code 55');
    },
  );
});

describe('parsePhone: area codes', () => {
  // Anatel's area codes (DDD).
  const KNOWN = new Set([
    11, 12, 13, 14, 15, 16, 17, 18, 19, 21, 22, 24, 27, 28, 31, 32, 33, 34, 35, 37, 38, 41, 42, 43, 44, 45, 46, 47, 48, 49, 51, 53, 54, 55,
    61, 62, 63, 64, 65, 66, 67, 68, 69, 71, 73, 74, 75, 77, 79, 81, 82, 83, 84, 85, 86, 87, 88, 89, 91, 92, 93, 94, 95, 96, 97, 98, 99,
  ]);
  const codes = Array.from({ length: 100 }, (_, n) => String(n).padStart(2, '0'));

  it.each(codes.filter((code) => KNOWN.has(Number(code))))('area code %s is accepted', (code) => {
    expect(parsed(`55${code}987654321`).key).toBe(`55${code}987654321`);
  });

  it.each(codes.filter((code) => !KNOWN.has(Number(code))))('area code %s is refused', (code) => {
    expect(reasonOf(`55${code}987654321`)).toBe('missing or unknown area code');
  });

  it.each(['55', '551', '+55 ()'])('%p has no area code', (input) => {
    expect(reasonOf(input)).toBe('missing or unknown area code');
  });
});

describe('parsePhone: the local number', () => {
  it.each([
    ['a 9-digit mobile', '5511987654321', { digits: '5511987654321', key: '5511987654321', e164: '5511987654321', mobile: true }],
    [
      'a 9-digit mobile, all nines',
      '5599999999999',
      { digits: '5599999999999', key: '5599999999999', e164: '5599999999999', mobile: true },
    ],
    // 8 digits: the first digit says landline (2-5, unchanged) or old-form mobile (6-9, gains its ninth digit).
    [
      'an 8-digit landline starting 2',
      '552123456789',
      { digits: '552123456789', key: '552123456789', e164: '552123456789', mobile: false },
    ],
    [
      'an 8-digit landline starting 5',
      '551155554444',
      { digits: '551155554444', key: '551155554444', e164: '551155554444', mobile: false },
    ],
    [
      'an 8-digit old mobile starting 6',
      '551166554444',
      { digits: '551166554444', key: '5511966554444', e164: '5511966554444', mobile: true },
    ],
    [
      'an 8-digit old mobile starting 9',
      '554899887766',
      { digits: '554899887766', key: '5548999887766', e164: '5548999887766', mobile: true },
    ],
  ])('%s: %s', (_label, input, phone) => {
    expect(parsed(input)).toEqual(phone);
  });

  it.each(['5511887654321', '5511087654321', '5511187654321', '5511587654321'])('9 digits not starting with 9: %p is refused', (input) => {
    expect(reasonOf(input)).toBe('a 9-digit number must start with 9');
  });

  it.each([
    ['no local number', '5511'],
    ['7 digits', '55119876543'],
    ['10 digits', '55119876543210'],
    ['11 digits', '551199876543210'],
  ])('%s (%p) is refused', (_label, input) => {
    expect(reasonOf(input)).toBe('expected 8 or 9 digits after the area code');
  });
});

describe('parsePhone: one contact per number', () => {
  it.each([
    ['5511987654321', '551187654321'],
    ['+55 (48) 99123-4567', '+55 (48) 9123-4567'],
    ['5521966554433', '55 21 6655-4433'],
    ['5599977776666', '559977776666'],
  ])('%p and %p (with and without the ninth digit) have the same key', (with9, without9) => {
    const a = parsed(with9);
    const b = parsed(without9);
    expect(b.key).toBe(a.key);
    expect(b.e164).toBe(a.e164);
    expect(b.digits).not.toBe(a.digits);
  });

  it.each([
    ['551133334444', '5511933334444'],
    ['552122223333', '5521922223333'],
    ['551155554444', '5511955554444'],
  ])('the landline %p is never the mobile %p that ends in its 8 digits', (landline, mobile) => {
    const fixed = parsed(landline);
    expect(fixed.mobile).toBe(false);
    expect(parsed(mobile).key).not.toBe(fixed.key);
  });
});

describe('digitsOfPersonJid', () => {
  it.each([
    ['5511987654321@s.whatsapp.net', '5511987654321'],
    ['5511987654321:12@s.whatsapp.net', '5511987654321'],
    ['5511987654321@c.us', '5511987654321'],
    ['5511987654321:3@c.us', '5511987654321'],
  ])('%p is the person %p', (jid, digits) => {
    expect(digitsOfPersonJid(jid)).toBe(digits);
  });

  it.each([
    '120363025246125486@g.us', // a group
    '5511987654321@lid',
    '123456789@lid',
    '5511987654321@broadcast',
    '5511987654321@s.whatsapp.net.evil.test',
    '5511987654321@s_whatsapp_net',
    '5511987654321@c_us',
    '5511987654321@S.WHATSAPP.NET',
    ' 5511987654321@c.us',
    '+5511987654321@c.us',
    '@c.us',
    ':12@c.us',
    '5511987654321:@c.us',
    '5511987654321:ab@c.us',
    '5511987654321',
    '',
    5511987654321,
    null,
    undefined,
    { user: '5511987654321', server: 'c.us' },
  ])('%p is not a person', (jid) => {
    expect(digitsOfPersonJid(jid)).toBeUndefined();
  });
});

describe('PHONE_PATTERN: the documented rule agrees with parsePhone', () => {
  // The document states the pattern with maxLength; a JSON Schema pattern is ECMA-262 with the u flag.
  const patterns = [
    ['with the u flag', new RegExp(PHONE_PATTERN, 'u')],
    ['without flags', new RegExp(PHONE_PATTERN)],
  ] as const;
  const documented = (pattern: RegExp, text: string) => pattern.test(text) && text.length <= PHONE_TEXT_SCHEMA.maxLength;

  // Two separators before each of the first nine digits and one at the end: 32 characters, all within the pattern.
  const spaced32 = ' -5 -5 -1 -1 -9 -8 -7 -6 -54321 ';

  it('states 32 characters at most', () => {
    expect(spaced32).toHaveLength(32);
    expect(PHONE_TEXT_SCHEMA.maxLength).toBe(32);
  });

  const inputs = [
    '5511987654321',
    '+55 (11) 98765-4321',
    '+55 11 9 8765-4321',
    '(55)(11)987654321',
    '55\u00a011\u3000987654321',
    '55\ufeff11\u2028987654321\u202f',
    '551187654321',
    '552123456789',
    '551155554444',
    '551166554444',
    '5599999999999',
    '5511887654321',
    '55119876543',
    '55119876543210',
    '5520987654321',
    '5523987654321',
    '5510987654321',
    '5530987654321',
    '5590987654321',
    '5411987654321',
    '11987654321',
    '55.11.98765.4321',
    '55\u200b11987654321',
    spaced32,
    `${spaced32}-`,
    '',
  ];

  it.each(patterns.flatMap(([flags, pattern]) => inputs.map((input) => [shown(input), flags, pattern, input] as const)))(
    '%s: the pattern (%s) and parsePhone agree',
    (_shown, _flags, pattern, input) => {
      expect(documented(pattern, input)).toBe(parsePhone(input).ok);
    },
  );

  it('is narrower than parsePhone only in runs of separators: three in a row are accepted, not documented', () => {
    const input = '+55 (11) 98765---4321';
    expect(parsePhone(input).ok).toBe(true);
    expect(new RegExp(PHONE_PATTERN, 'u').test(input)).toBe(false);
  });
});
