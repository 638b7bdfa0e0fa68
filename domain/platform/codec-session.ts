import { createHmac, hkdfSync, timingSafeEqual } from 'node:crypto';

/**
 * A browser session for the Temporal codec endpoint. The Temporal UI decodes payloads by calling
 * the endpoint from the operator's browser and can add no header of ours, only cookies ("Include
 * cross-origin credentials" in its codec settings). So an operator proves the admin token once,
 * on the API's own origin, and gets this cookie: the expiry and an HMAC of it, keyed by a key
 * derived from the admin token (HKDF), so the cookie is never a MAC keyed by the token itself. No
 * state is kept; a changed ADMIN_TOKEN ends every session. The cookie is HttpOnly, SameSite=Strict
 * (sent only from the same site: the UI and the API under one registrable domain, or both on
 * localhost), Secure whenever the API is not on loopback (codecSessionSecure), and scoped to the
 * codec path. Browsers send it cross-origin only to TEMPORAL_UI_ORIGIN (api/app.ts codecCors).
 */
export const CODEC_SESSION_COOKIE = 'crm_codec_session';
export const CODEC_SESSION_PATH = '/admin/v1/temporal-codec';
/** The page an operator opens to start a session (it posts the token to `${CODEC_SESSION_PATH}/session`). */
export const CODEC_SESSION_PAGE_PATH = '/admin/temporal-codec';
export const CODEC_SESSION_TTL_MS = 8 * 60 * 60 * 1000;

/** The MAC key of sessions, derived once per admin token (one per process: only the last is kept). */
let derived: { adminToken: string; key: Buffer } | undefined;
function macKey(adminToken: string): Buffer {
  if (derived?.adminToken !== adminToken) {
    derived = { adminToken, key: Buffer.from(hkdfSync('sha256', adminToken, 'crm-temporal-codec-session', 'session mac v1', 32)) };
  }
  return derived.key;
}

function mac(adminToken: string, expires: number): string {
  return createHmac('sha256', macKey(adminToken)).update(`temporal-codec-session:v1:${expires}`).digest('base64url');
}

/** A host name that is this machine only (the cookie may then go without Secure over plain http). */
export function isLoopbackHost(hostname: string): boolean {
  const host = hostname.replace(/^\[|\]$/g, '').toLowerCase();
  return host === 'localhost' || host.endsWith('.localhost') || host === '::1' || /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(host);
}

/**
 * Whether the session cookie carries `Secure`: always, unless both the API's PUBLIC_BASE_URL and
 * the request's host are loopback over plain http (a local stack, where browsers have no https).
 */
export function codecSessionSecure(publicBaseUrl: string, request: { protocol: string; hostname: string }): boolean {
  if (request.protocol === 'https') return true;
  if (!URL.canParse(publicBaseUrl)) return true;
  return !(isLoopbackHost(new URL(publicBaseUrl).hostname) && isLoopbackHost(request.hostname));
}

export function issueCodecSession(adminToken: string, now: number): { value: string; expiresAt: Date } {
  const expires = now + CODEC_SESSION_TTL_MS;
  return { value: `v1.${expires}.${mac(adminToken, expires)}`, expiresAt: new Date(expires) };
}

export function validCodecSession(adminToken: string, value: string | undefined, now: number): boolean {
  const match = /^v1\.(\d{13})\.([\w-]{43})$/.exec(value ?? '');
  if (!match) return false;
  const expires = Number(match[1]);
  if (expires <= now || expires > now + CODEC_SESSION_TTL_MS) return false;
  return timingSafeEqual(Buffer.from(match[2]), Buffer.from(mac(adminToken, expires)));
}
