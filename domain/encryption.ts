import { createCipheriv, createDecipheriv, randomBytes } from 'node:crypto';

/**
 * The service's encryption keys (ENCRYPTION_KEYS) and AES-256-GCM with them, for what must not be
 * readable where it is stored: secrets at rest in PostgreSQL and payloads in Temporal's history.
 *
 * ENCRYPTION_KEYS is `id:base64key[,id:base64key...]`, each key 32 random bytes. The first key
 * encrypts; every listed key decrypts, and each sealed value names the key that sealed it, so a
 * key rotates by putting the new one first and keeping the old one listed until nothing uses it.
 */
export interface KeyRing {
  current: { id: string; key: Buffer };
  byId: ReadonlyMap<string, Buffer>;
}

const KEY_ID = /^[A-Za-z0-9_-]{1,32}$/;

export function parseKeyRing(value: string): KeyRing {
  const entries = value
    .split(',')
    .map((part) => part.trim())
    .filter(Boolean)
    .map((part) => {
      const at = part.indexOf(':');
      const id = part.slice(0, at);
      const key = Buffer.from(part.slice(at + 1), 'base64');
      if (at < 1 || !KEY_ID.test(id)) throw new Error('ENCRYPTION_KEYS: each entry is id:base64key, the id letters, digits, _ or - (at most 32)');
      if (key.length !== 32) throw new Error(`ENCRYPTION_KEYS: key "${id}" must be 32 bytes (base64 of 32 random bytes), got ${key.length}`);
      return [id, key] as const;
    });
  if (entries.length === 0) throw new Error('ENCRYPTION_KEYS is empty');
  const byId = new Map(entries);
  if (byId.size !== entries.length) throw new Error('ENCRYPTION_KEYS: a key id appears twice');
  return { current: { id: entries[0][0], key: entries[0][1] }, byId };
}

/** A new ENCRYPTION_KEYS value with one fresh key (what `npm start` and the tests generate). */
export function newKeyRingValue(id = `k${Date.now().toString(36)}`): string {
  return `${id}:${randomBytes(32).toString('base64')}`;
}

/** iv (12 bytes) | tag (16) | ciphertext, with the current key. */
export function seal(ring: KeyRing, plaintext: Buffer): { keyId: string; data: Buffer } {
  const iv = randomBytes(12);
  const cipher = createCipheriv('aes-256-gcm', ring.current.key, iv);
  const body = Buffer.concat([cipher.update(plaintext), cipher.final()]);
  return { keyId: ring.current.id, data: Buffer.concat([iv, cipher.getAuthTag(), body]) };
}

export function unseal(ring: KeyRing, keyId: string, data: Buffer): Buffer {
  const key = ring.byId.get(keyId);
  if (!key) throw new Error(`Encrypted with key "${keyId}", which ENCRYPTION_KEYS does not list`);
  const decipher = createDecipheriv('aes-256-gcm', key, data.subarray(0, 12));
  decipher.setAuthTag(data.subarray(12, 28));
  return Buffer.concat([decipher.update(data.subarray(28)), decipher.final()]);
}

/** A text at rest: `enc:v1:<keyId>:<base64>`. */
const TEXT_PREFIX = 'enc:v1:';

export function sealText(ring: KeyRing, text: string): string {
  const { keyId, data } = seal(ring, Buffer.from(text, 'utf8'));
  return `${TEXT_PREFIX}${keyId}:${data.toString('base64')}`;
}

/** A sealed value's key id and body; null for a value written before encryption (no prefix). */
function parseSealed(value: string): { keyId: string; body: string } | null {
  if (!value.startsWith(TEXT_PREFIX)) return null;
  const rest = value.slice(TEXT_PREFIX.length);
  const at = rest.indexOf(':');
  return { keyId: rest.slice(0, at), body: rest.slice(at + 1) };
}

/** The text behind a sealed value; a value written before encryption (no prefix) is read as it is. */
export function openText(ring: KeyRing, value: string): string {
  const sealed = parseSealed(value);
  return sealed ? unseal(ring, sealed.keyId, Buffer.from(sealed.body, 'base64')).toString('utf8') : value;
}

/** The id of the key a sealed value names (rotation: what still uses an old key), or null. */
export function sealedWith(value: string): string | null {
  return parseSealed(value)?.keyId ?? null;
}
