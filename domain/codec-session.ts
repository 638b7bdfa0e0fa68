import { createHmac, timingSafeEqual } from 'node:crypto';

/**
 * A browser session for the Temporal codec endpoint. The Temporal UI decodes payloads by calling
 * the endpoint from the operator's browser and can add no header of ours, only cookies ("Include
 * cross-origin credentials" in its codec settings). So an operator proves the admin token once,
 * on the API's own origin, and gets this cookie: the expiry and an HMAC of it keyed by the admin
 * token. No state is kept; a changed ADMIN_TOKEN ends every session. The cookie is HttpOnly,
 * SameSite=Strict (sent only from the same site: the UI and the API under one registrable domain,
 * or both on localhost) and scoped to the codec path.
 */
export const CODEC_SESSION_COOKIE = 'crm_codec_session';
export const CODEC_SESSION_PATH = '/admin/v1/temporal-codec';
/** The page an operator opens to start a session (it posts the token to `${CODEC_SESSION_PATH}/session`). */
export const CODEC_SESSION_PAGE_PATH = '/admin/temporal-codec';
export const CODEC_SESSION_TTL_MS = 8 * 60 * 60 * 1000;

function mac(adminToken: string, expires: number): string {
  return createHmac('sha256', adminToken).update(`temporal-codec-session:v1:${expires}`).digest('base64url');
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
