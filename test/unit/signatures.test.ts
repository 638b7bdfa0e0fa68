import { createHmac } from 'node:crypto';
import { signWebhook, verifyWebhookSignature } from '../../domain/webhooks/webhook-signature';
import { expectedVerifyToken, sameToken, signBody, validSignature, type WebhookInstance } from '../../domain/messaging/inbound';
import { signedDeliveryChain } from '../../domain/automations/automation-receiver';

/**
 * The signatures, pure: our outbound `X-Service-Signature` (docs/webhooks.md), the provider's
 * `X-Hub-Signature-256` and verify token (docs/messaging.md), and the inbound automation receiver's
 * check of a call made by one of our own deliveries (docs/automations.md, loop protection).
 * Every expected HMAC is computed here with node:crypto from the documented definition, not by the
 * code under test.
 */

const hmacHex = (secret: string, data: string | Buffer): string => createHmac('sha256', secret).update(data).digest('hex');
/** The documented signature: `t=<t>,v1=<hex HMAC-SHA256(secret, "<t>.<raw body>")>`. */
const documented = (secret: string, t: number, body: string): string => `t=${t},v1=${hmacHex(secret, `${t}.${body}`)}`;

const SECRET = 'whsec_3f9c1b2a7d6e5f4a3b2c1d0e9f8a7b6c';
const BODY = '{"event":"card.won","data":{"id":"c1","value":1234.5}}';
const NOW = 1_700_000_000;

describe('signWebhook', () => {
  it.each([
    ['a JSON body', SECRET, NOW, BODY],
    ['an empty body', SECRET, NOW, ''],
    ['a non-ASCII body (signed as UTF-8)', SECRET, NOW, '{"name":"João 🚀"}'],
    ['timestamp 0', SECRET, 0, BODY],
    ['another secret', 'whsec_other', NOW, BODY],
  ])('%s: t=<unix seconds>,v1=<HMAC-SHA256 of "<t>.<raw body>"> in lowercase hex', (_label, secret, t, body) => {
    const header = signWebhook(secret, t, body);
    expect(header).toBe(documented(secret, t, body));
    expect(header).toMatch(/^t=\d+,v1=[0-9a-f]{64}$/);
  });

  it('signs a Buffer exactly as the same bytes as a string', () => {
    expect(signWebhook(SECRET, NOW, Buffer.from('{"name":"João"}', 'utf8'))).toBe(documented(SECRET, NOW, '{"name":"João"}'));
  });
});

describe('verifyWebhookSignature', () => {
  const sig = (t: number, body = BODY, secret = SECRET) => documented(secret, t, body);

  describe('timestamp tolerance: |now - t| <= tolerance, in the past and in the future', () => {
    it.each([
      ['signed now, tolerance 300', true, NOW, 300],
      ['300 s old, tolerance 300', true, NOW - 300, 300],
      ['301 s old, tolerance 300', false, NOW - 301, 300],
      ['300 s ahead, tolerance 300', true, NOW + 300, 300],
      ['301 s ahead, tolerance 300', false, NOW + 301, 300],
      ['60 s old, tolerance 60', true, NOW - 60, 60],
      ['61 s old, tolerance 60', false, NOW - 61, 60],
      ['61 s ahead, tolerance 60', false, NOW + 61, 60],
      ['signed now, tolerance 0', true, NOW, 0],
      ['1 s old, tolerance 0', false, NOW - 1, 0],
      ['3000 s old, tolerance 3600', true, NOW - 3000, 3600],
    ])('%s: valid = %s', (_label, expected, t, tolerance) => {
      expect(verifyWebhookSignature(SECRET, sig(t), BODY, tolerance, NOW)).toBe(expected);
    });

    it.each([
      ['300 s old', true, NOW - 300],
      ['301 s old', false, NOW - 301],
      ['300 s ahead', true, NOW + 300],
      ['301 s ahead', false, NOW + 301],
    ])('the default tolerance is 5 minutes: %s, valid = %s', (_label, expected, t) => {
      expect(verifyWebhookSignature(SECRET, sig(t), BODY, undefined, NOW)).toBe(expected);
    });

    it('defaults now to the clock: a signature made a moment ago verifies, one from 2023 does not', () => {
      const now = Math.floor(Date.now() / 1000);
      expect(verifyWebhookSignature(SECRET, sig(now), BODY)).toBe(true);
      expect(verifyWebhookSignature(SECRET, sig(NOW), BODY)).toBe(false);
    });
  });

  describe('what is signed', () => {
    it.each([
      ['the exact body and secret', SECRET, sig(NOW), BODY, true],
      ['the same bytes as a Buffer', SECRET, sig(NOW), Buffer.from(BODY, 'utf8'), true],
      ['a changed body (one digit)', SECRET, sig(NOW), BODY.replace('1234.5', '9234.5'), false],
      ['the body re-serialised (spacing)', SECRET, sig(NOW), JSON.stringify(JSON.parse(BODY), null, 1), false],
      ['a body with a trailing newline', SECRET, sig(NOW), `${BODY}\n`, false],
      ['another secret', `${SECRET}x`, sig(NOW), BODY, false],
      ['the secret without its whsec_ prefix', SECRET.slice('whsec_'.length), sig(NOW), BODY, false],
      ['a changed timestamp with the old v1', SECRET, sig(NOW).replace(`t=${NOW}`, `t=${NOW + 1}`), BODY, false],
      ['an HMAC of the body alone (no "<t>.")', SECRET, `t=${NOW},v1=${hmacHex(SECRET, BODY)}`, BODY, false],
      ['an HMAC over "<t>:<body>"', SECRET, `t=${NOW},v1=${hmacHex(SECRET, `${NOW}:${BODY}`)}`, BODY, false],
    ])('%s', (_label, secret, header, body, expected) => {
      expect(verifyWebhookSignature(secret, header, body, 300, NOW)).toBe(expected);
    });

    it('refuses an empty secret, even with a signature made with it', () => {
      expect(verifyWebhookSignature('', sig(NOW, BODY, ''), BODY, 300, NOW)).toBe(false);
    });
  });

  describe('header format', () => {
    const v1 = hmacHex(SECRET, `${NOW}.${BODY}`);
    const zeros = '0'.repeat(64);
    it.each([
      ['entries in the other order', `v1=${v1},t=${NOW}`, true],
      ['spaces around names and values', ` t = ${NOW} , v1 = ${v1} `, true],
      ['the hex in upper case', `t=${NOW},v1=${v1.toUpperCase()}`, true],
      ['an unknown entry and a part without "="', `t=${NOW},v0=abc,garbage,v1=${v1}`, true],
      ['two v1 values, the right one second', `t=${NOW},v1=${zeros},v1=${v1}`, true],
      ['two v1 values, the right one first', `t=${NOW},v1=${v1},v1=${zeros}`, true],
      ['two v1 values, neither right', `t=${NOW},v1=${zeros},v1=${'f'.repeat(64)}`, false],
      ['no t', `v1=${v1}`, false],
      ['no v1', `t=${NOW}`, false],
      ['an empty header', '', false],
      ['v1 of 63 hex digits', `t=${NOW},v1=${v1.slice(0, 63)}`, false],
      ['v1 of 65 hex digits', `t=${NOW},v1=${v1}0`, false],
      ['v1 not hex', `t=${NOW},v1=${'g'.repeat(64)}`, false],
      ['v1 in base64', `t=${NOW},v1=${Buffer.from(v1, 'hex').toString('base64')}`, false],
      ['the signature under another name', `t=${NOW},v2=${v1}`, false],
      ['a sha256= header', `sha256=${v1}`, false],
      ['t with a fraction', `t=${NOW}.0,v1=${v1}`, false],
      ['t negative', `t=-${NOW},v1=${v1}`, false],
      ['t in hex', `t=0x${NOW.toString(16)},v1=${v1}`, false],
      ['";" as separator', `t=${NOW};v1=${v1}`, false],
    ])('%s', (_label, header, expected) => {
      expect(verifyWebhookSignature(SECRET, header, BODY, 300, NOW)).toBe(expected);
    });

    it.each([null, undefined])('refuses a missing header (%s)', (header) => {
      expect(verifyWebhookSignature(SECRET, header, BODY, 300, NOW)).toBe(false);
    });

    it.each([
      ['12 digits', 999_999_999_999, true],
      ['13 digits', 1_000_000_000_000, false],
    ])('t of %s (signed at now)', (_label, t, expected) => {
      expect(verifyWebhookSignature(SECRET, sig(t), BODY, 300, t)).toBe(expected);
    });
  });
});

describe('provider webhook signature (X-Hub-Signature-256)', () => {
  const APP_SECRET = 'app-secret-0123456789abcdef';
  const RAW = '{"object":"whatsapp_business_account","entry":[{"id":"1","changes":[]}]}';
  const hex = hmacHex(APP_SECRET, RAW);

  it.each([
    ['a JSON body', APP_SECRET, RAW],
    ['an empty body', APP_SECRET, ''],
    ['a non-ASCII body (its UTF-8 bytes)', APP_SECRET, '{"text":"ação 👍"}'],
  ])('signBody, %s: sha256=<hex HMAC-SHA256(app secret, raw body)>', (_label, secret, body) => {
    expect(signBody(secret, body)).toBe(`sha256=${createHmac('sha256', secret).update(Buffer.from(body, 'utf8')).digest('hex')}`);
  });

  it.each([
    ['what signBody makes', APP_SECRET, RAW, signBody(APP_SECRET, RAW), true],
    ['the hex in upper case', APP_SECRET, RAW, `sha256=${hex.toUpperCase()}`, true],
    ['the prefix in upper case', APP_SECRET, RAW, `SHA256=${hex}`, true],
    ['surrounding whitespace', APP_SECRET, RAW, `  sha256=${hex}\t`, true],
    ['a changed body', APP_SECRET, RAW.replace('"1"', '"2"'), `sha256=${hex}`, false],
    ['the body re-serialised', APP_SECRET, JSON.stringify(JSON.parse(RAW), null, 2), `sha256=${hex}`, false],
    ['another app secret', 'another-secret', RAW, `sha256=${hex}`, false],
    ['no prefix', APP_SECRET, RAW, hex, false],
    ['a sha1= prefix', APP_SECRET, RAW, `sha1=${hex}`, false],
    ['"sha256:" instead of "sha256="', APP_SECRET, RAW, `sha256:${hex}`, false],
    ['63 hex digits', APP_SECRET, RAW, `sha256=${hex.slice(0, 63)}`, false],
    ['65 hex digits', APP_SECRET, RAW, `sha256=${hex}0`, false],
    ['not hex', APP_SECRET, RAW, `sha256=${'z'.repeat(64)}`, false],
    ['two signatures in one header', APP_SECRET, RAW, `sha256=${hex},sha256=${hex}`, false],
    ['a right-length wrong value', APP_SECRET, RAW, `sha256=${'0'.repeat(64)}`, false],
    ['our own t=,v1= format', APP_SECRET, RAW, `t=${NOW},v1=${hex}`, false],
    ['an empty header', APP_SECRET, RAW, '', false],
    ['no header', APP_SECRET, RAW, undefined, false],
    ['no app secret configured', undefined, RAW, `sha256=${hmacHex('', RAW)}`, false],
    ['an empty app secret', '', RAW, `sha256=${hmacHex('', RAW)}`, false],
  ])('validSignature, %s', (_label, secret, body, header, expected) => {
    expect(validSignature(secret, body, header)).toBe(expected);
  });

  const config = (c: Record<string, unknown>) => c as WebhookInstance['config'];
  it.each([
    ['its own verifyToken', config({ verifyToken: 'verify-me', appSecret: APP_SECRET }), 'verify-me'],
    ['none set (never the app secret)', config({ appSecret: APP_SECRET }), undefined],
    ['an empty verifyToken', config({ verifyToken: '', appSecret: APP_SECRET }), undefined],
    ['a verifyToken that is not a string', config({ verifyToken: 12345 }), undefined],
    ['an empty config', config({}), undefined],
  ])('expectedVerifyToken: %s', (_label, c, expected) => {
    expect(expectedVerifyToken(c)).toBe(expected);
  });

  it.each([
    ['the same token', 'verify-me', 'verify-me', true],
    ['a long token compared with itself', 'x'.repeat(600), 'x'.repeat(600), true],
    ['another token of the same length', 'verify-mf', 'verify-me', false],
    ['a prefix of it', 'verify-m', 'verify-me', false],
    ['it with one more character', 'verify-me!', 'verify-me', false],
    ['another letter case', 'VERIFY-ME', 'verify-me', false],
    ['no token given', undefined, 'verify-me', false],
    ['an empty token given', '', 'verify-me', false],
    ['nothing expected', 'verify-me', undefined, false],
    ['both empty', '', '', false],
  ])('sameToken, %s', (_label, given, expected, result) => {
    expect(sameToken(given, expected)).toBe(result);
  });
});

describe('inbound automation receiver: a call signed by one of our own deliveries (signedDeliveryChain)', () => {
  const SUB_SECRET = 'whsec_subscription_secret_0123456789';
  const RAW = '{"event":"deal.created","id":"e1"}';
  const delivery = { eventId: 'evt-1', depth: 2, chainId: 'chain-root', secret: SUB_SECRET };
  const signed = (t: number, body = RAW, secret = SUB_SECRET) => documented(secret, t, body);

  describe('the replay window: 5 minutes either way of now (the signature default), boundary included', () => {
    it.each([
      ['signed now', true, NOW],
      ['5 min old', true, NOW - 300],
      ['5 min + 1 s old', false, NOW - 301],
      ['10 min old', false, NOW - 600],
      ['5 min ahead', true, NOW + 300],
      ['5 min + 1 s ahead', false, NOW + 301],
    ])('%s: continues the chain = %s', (_label, continues, t) => {
      expect(signedDeliveryChain(delivery, signed(t), RAW, NOW)).toEqual(continues ? { depth: 3, chain: 'chain-root' } : null);
    });
  });

  it.each([
    ['a changed body', signed(NOW), `${RAW} `],
    ['signed with another secret', signed(NOW, RAW, 'whsec_someone_else'), RAW],
    ['no signature', '', RAW],
    ['a signature without v1', `t=${NOW}`, RAW],
    ['a provider-style sha256= signature', `sha256=${hmacHex(SUB_SECRET, RAW)}`, RAW],
  ])('%s: a root call (null)', (_label, signature, body) => {
    expect(signedDeliveryChain(delivery, signature, body, NOW)).toBeNull();
  });

  it.each([
    ['depth 2 in a chain', { depth: 2, chainId: 'chain-root' }, { depth: 3, chain: 'chain-root' }],
    ['depth 0 in a chain', { depth: 0, chainId: 'chain-root' }, { depth: 1, chain: 'chain-root' }],
    ['an event of unknown depth: counts as 0', { depth: null, chainId: 'chain-root' }, { depth: 1, chain: 'chain-root' }],
    ['an event without a chain id: its own id names the chain', { depth: 4, chainId: null }, { depth: 5, chain: 'evt-1' }],
  ])('%s', (_label, row, expected) => {
    expect(signedDeliveryChain({ ...delivery, ...row }, signed(NOW), RAW, NOW)).toEqual(expected);
  });

  it('defaults now to the clock', () => {
    const now = Math.floor(Date.now() / 1000);
    expect(signedDeliveryChain(delivery, signed(now), RAW)).toEqual({ depth: 3, chain: 'chain-root' });
    expect(signedDeliveryChain(delivery, signed(NOW), RAW)).toBeNull();
  });
});
