import { createHash, randomBytes } from 'node:crypto';

export const API_KEY_PREFIX = 'vg_live_';

/** A new API key: the secret part is 32 random bytes, base64url. */
export function generateApiKey(): { key: string; hash: string; prefix: string } {
  const key = API_KEY_PREFIX + randomBytes(32).toString('base64url');
  return { key, hash: hashApiKey(key), prefix: key.slice(0, API_KEY_PREFIX.length + 4) };
}

/** Keys are stored only as this hash; SHA-256 suffices for 256-bit random secrets. */
export function hashApiKey(key: string): string {
  return createHash('sha256').update(key).digest('hex');
}

/** Cheap shape check before any database work. */
export function looksLikeApiKey(value: string): boolean {
  return value.startsWith(API_KEY_PREFIX) && value.length > API_KEY_PREFIX.length && value.length <= 200;
}
