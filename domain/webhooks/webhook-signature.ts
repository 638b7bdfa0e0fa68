import { createHmac, timingSafeEqual } from 'node:crypto';

/**
 * The outbound webhook signature (docs/webhooks.md): `X-Service-Signature: t=<unix seconds>,v1=<hex>`
 * where hex is HMAC-SHA256 keyed with the subscription secret (the whole `whsec_...` string, as
 * UTF-8) over `<t>.<raw body>`. This file has no other dependency so an integrator can copy it.
 */
export function signWebhook(secret: string, timestampSeconds: number, rawBody: string | Buffer): string {
  const hmac = createHmac('sha256', secret).update(`${timestampSeconds}.`).update(rawBody).digest('hex');
  return `t=${timestampSeconds},v1=${hmac}`;
}

/**
 * True when `header` is a valid signature of `rawBody` (the exact bytes received, before any JSON
 * parsing) made with `secret` no more than `toleranceSeconds` away from now (default 5 minutes),
 * which stops a captured request from being replayed later. Several `v1=` entries are accepted
 * (one must match). Comparison is constant-time.
 */
export function verifyWebhookSignature(
  secret: string,
  header: string | null | undefined,
  rawBody: string | Buffer,
  toleranceSeconds = 300,
  nowSeconds: number = Math.floor(Date.now() / 1000),
): boolean {
  if (typeof header !== 'string' || !secret) return false;
  let timestamp: number | undefined;
  const signatures: string[] = [];
  for (const part of header.split(',')) {
    const eq = part.indexOf('=');
    if (eq < 0) continue;
    const name = part.slice(0, eq).trim();
    const value = part.slice(eq + 1).trim();
    if (name === 't' && /^\d{1,12}$/.test(value)) timestamp = Number(value);
    else if (name === 'v1' && /^[0-9a-f]{64}$/i.test(value)) signatures.push(value.toLowerCase());
  }
  if (timestamp === undefined || signatures.length === 0) return false;
  if (Math.abs(nowSeconds - timestamp) > toleranceSeconds) return false;
  const expected = Buffer.from(createHmac('sha256', secret).update(`${timestamp}.`).update(rawBody).digest('hex'), 'utf8');
  return signatures.some((candidate) => timingSafeEqual(Buffer.from(candidate, 'utf8'), expected));
}
