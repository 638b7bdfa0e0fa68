import { ECMA_WHITESPACE } from '../kernel';

/**
 * Brazilian phone numbers (docs/messaging.md): after dropping `+`, spaces, parentheses and dashes only
 * digits remain, and the number is 55 + a valid area code + 8 digits (landline or old-form mobile)
 * or 9 digits starting with 9 (mobile). A mobile with and without its ninth digit is one contact:
 * both share the same `key`. Only mobiles gained a ninth digit: a landline (8 digits starting 2-5)
 * is never the same number as the mobile that ends in its 8 digits.
 */
const AREA_CODES = new Set([
  11, 12, 13, 14, 15, 16, 17, 18, 19, 21, 22, 24, 27, 28, 31, 32, 33, 34, 35, 37, 38, 41, 42, 43, 44, 45, 46, 47, 48, 49, 51, 53, 54, 55,
  61, 62, 63, 64, 65, 66, 67, 68, 69, 71, 73, 74, 75, 77, 79, 81, 82, 83, 84, 85, 86, 87, 88, 89, 91, 92, 93, 94, 95, 96, 97, 98, 99,
]);

export const MAX_PHONE_INPUT = 32;

/** The phone digits of a person's WhatsApp JID (`<digits>@s.whatsapp.net`, `<digits>:<device>@c.us`); undefined for groups, lids and others. */
export function digitsOfPersonJid(jid: unknown): string | undefined {
  if (typeof jid !== 'string') return undefined;
  const m = /^(\d+)(?::\d+)?@(s\.whatsapp\.net|c\.us)$/.exec(jid);
  return m ? m[1] : undefined;
}

/**
 * The JSON Schema of a phone `parsePhone` accepts, for the OpenAPI document: as text, 55, a valid
 * area code and 8 digits or 9 starting with 9, with up to two of `+`, whitespace, parentheses and
 * dashes around each digit (`+55 (11) 98765-4321`), at most MAX_PHONE_INPUT characters; as an
 * integer (where an endpoint takes one), the same digits. Built from AREA_CODES, so the document
 * and parsePhone cannot disagree (test/phone.test.ts). parsePhone also takes longer runs of
 * separators; the pattern's bound keeps a generator from producing mostly overlong strings.
 */
export const PHONE_PATTERN = (() => {
  const sep = `[${ECMA_WHITESPACE}()+-]{0,2}`;
  const byTens = new Map<number, number[]>();
  for (const code of AREA_CODES) byTens.set(Math.floor(code / 10), [...(byTens.get(Math.floor(code / 10)) ?? []), code % 10]);
  const area = [...byTens].map(([tens, units]) => `${tens}${sep}[${units.join('')}]`).join('|');
  const digit = `[0-9]${sep}`;
  return `^${sep}5${sep}5${sep}(?:${area})${sep}(?:9${sep}(?:${digit}){8}|(?:${digit}){8})$`;
})();

export const PHONE_TEXT_SCHEMA = { type: 'string', pattern: PHONE_PATTERN, maxLength: MAX_PHONE_INPUT } as const;

/**
 * The integers whose digits are a valid phone: the 8-digit locals of each run of consecutive area
 * codes, and the 9-digit locals (starting with 9) of each area code.
 */
export const PHONE_INTEGER_SCHEMA = (() => {
  const codes = [...AREA_CODES].sort((a, b) => a - b);
  const runs: [number, number][] = [];
  for (const code of codes) {
    const last = runs[runs.length - 1];
    if (last && last[1] === code - 1) last[1] = code;
    else runs.push([code, code]);
  }
  const eight = runs.map(([first, last]) => ({ minimum: (5500 + first) * 1e8, maximum: (5500 + last) * 1e8 + 99_999_999 }));
  const nine = codes.map((code) => ({ minimum: (55_000 + code * 10 + 9) * 1e8, maximum: (55_000 + code * 10 + 9) * 1e8 + 99_999_999 }));
  return { type: 'integer', anyOf: [...eight, ...nine] } as const;
})();

export interface Phone {
  /** Digits as the client gave them (international form). */
  digits: string;
  /** Matching key: the full modern form (a mobile with its ninth digit; a landline as it is). */
  key: string;
  /** The full modern form: mobiles with their ninth digit. */
  e164: string;
  mobile: boolean;
}

export type PhoneResult = { ok: true; phone: Phone } | { ok: false; reason: string };

export function parsePhone(input: string): PhoneResult {
  if (input.length > MAX_PHONE_INPUT) return { ok: false, reason: `at most ${MAX_PHONE_INPUT} characters` };
  const digits = input.replace(/[\s()+-]/g, '');
  if (!/^\d+$/.test(digits)) return { ok: false, reason: 'only digits, +, spaces, parentheses and dashes are allowed' };
  if (!digits.startsWith('55')) return { ok: false, reason: 'must start with the country code 55' };
  const area = Number(digits.slice(2, 4));
  if (!AREA_CODES.has(area)) return { ok: false, reason: 'missing or unknown area code' };
  const local = digits.slice(4);
  if (local.length === 9) {
    if (local[0] !== '9') return { ok: false, reason: 'a 9-digit number must start with 9' };
    return { ok: true, phone: { digits, key: digits, e164: digits, mobile: true } };
  }
  if (local.length === 8) {
    // Old-form mobiles start with 6-9; landlines with 2-5.
    const mobile = /^[6-9]/.test(local);
    const e164 = mobile ? `55${area}9${local}` : digits;
    return { ok: true, phone: { digits, key: e164, e164, mobile } };
  }
  return { ok: false, reason: 'expected 8 or 9 digits after the area code' };
}
