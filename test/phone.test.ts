import fc from 'fast-check';
import { parsePhone, PHONE_INTEGER_SCHEMA, PHONE_PATTERN } from '../domain/leads/phone';

describe('phone canonicalisation', () => {
  it.each([
    ['+55 (11) 98765-4321', '5511987654321', '5511987654321', true],
    ['5511987654321', '5511987654321', '5511987654321', true],
    ['55 11 8765-4321', '551187654321', '5511987654321', true],
    ['+55 21 3456-7890', '552134567890', '552134567890', false],
  ])('%s → digits %s, key %s', (input, digits, key, mobile) => {
    const result = parsePhone(input);
    expect(result).toEqual({ ok: true, phone: expect.objectContaining({ digits, key, mobile }) });
  });

  it('gives a mobile with and without its ninth digit the same key and the same full form', () => {
    const with9 = parsePhone('5548991234567');
    const without9 = parsePhone('554891234567');
    if (!with9.ok || !without9.ok) throw new Error('both must parse');
    expect(with9.phone.key).toBe(without9.phone.key);
    expect(without9.phone.e164).toBe('5548991234567');
  });

  it('keeps a landline apart from mobiles', () => {
    const landline = parsePhone('551133334444');
    const mobile = parsePhone('5511933334444');
    if (!landline.ok || !mobile.ok) throw new Error('both must parse');
    expect(landline.phone.mobile).toBe(false);
    expect(landline.phone.e164).toBe('551133334444');
    // The mobile that ends in the landline's 8 digits is another number, so another contact.
    expect(landline.phone.key).not.toBe(mobile.phone.key);
  });

  it.each([
    ['11987654321', 'country code'],
    ['1 415 555 0100', 'country code'],
    ['55987654321', 'area code'],
    ['55 20 98765-4321', 'area code'],
    ['5511887654321', 'start with 9'],
    ['55119876543', '8 or 9 digits'],
    ['55119876543210', '8 or 9 digits'],
    ['55 11 9876a4321', 'only digits'],
    ['5511987654321'.padEnd(33, '0'), 'at most 32'],
  ])('rejects %p (%s)', (input, reason) => {
    const result = parsePhone(input);
    expect(result.ok).toBe(false);
    if (!result.ok) expect(result.reason).toContain(reason);
  });
});

describe('the phone rule in the OpenAPI document', () => {
  const pattern = new RegExp(PHONE_PATTERN);
  const inRange = (n: number) => PHONE_INTEGER_SCHEMA.anyOf.some((r) => n >= r.minimum && n <= r.maximum);

  it('describes exactly the texts parsePhone accepts, among those it states (up to two separators per place)', () => {
    const separator = fc.constantFrom(' ', '-', '(', ')', '+', '\t', '\u00a0');
    const place = fc.array(separator, { maxLength: 2 }).map((s) => s.join(''));
    const digits = fc.oneof(fc.constantFrom('55'), fc.stringMatching(/^[0-9]{2}$/));
    const phone = fc
      .tuple(digits, fc.stringMatching(/^[0-9]{2}$/), fc.stringMatching(/^[0-9]{7,10}$/), fc.array(place, { minLength: 15, maxLength: 15 }))
      .map(([country, area, local, seps]) => [...`${country}${area}${local}`].map((d, i) => seps[i] + d).join('') + seps[14]);
    fc.assert(
      fc.property(phone, (text) => {
        expect({ text, documented: pattern.test(text) && text.length <= 32 }).toEqual({ text, documented: parsePhone(text).ok });
      }),
      { numRuns: 2000 },
    );
  });

  it('describes exactly the integers whose digits parsePhone accepts', () => {
    fc.assert(
      fc.property(
        fc.oneof(
          fc.integer({ min: 550_000_000_000, max: 559_999_999_999 }),
          fc.integer({ min: 5_500_000_000_000, max: 5_599_999_999_999 }),
        ),
        (n) => {
          expect({ n, documented: inRange(n) }).toEqual({ n, documented: parsePhone(String(n)).ok });
        },
      ),
      { numRuns: 5000 },
    );
  });
});
