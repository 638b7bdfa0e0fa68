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
      if (at < 1 || !KEY_ID.test(id))
        throw new Error('ENCRYPTION_KEYS: each entry is id:base64key, the id letters, digits, _ or - (at most 32)');
      if (key.length !== 32)
        throw new Error(`ENCRYPTION_KEYS: key "${id}" must be 32 bytes (base64 of 32 random bytes), got ${key.length}`);
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

/**
 * iv (12 bytes) | tag (16) | ciphertext, with the current key. `associated` (AES-GCM associated
 * data) is authenticated, not encrypted: opening needs the same bytes.
 */
export function seal(ring: KeyRing, plaintext: Buffer, associated?: Buffer): { keyId: string; data: Buffer } {
  const iv = randomBytes(12);
  const cipher = createCipheriv('aes-256-gcm', ring.current.key, iv);
  if (associated) cipher.setAAD(associated);
  const body = Buffer.concat([cipher.update(plaintext), cipher.final()]);
  return { keyId: ring.current.id, data: Buffer.concat([iv, cipher.getAuthTag(), body]) };
}

export function unseal(ring: KeyRing, keyId: string, data: Buffer, associated?: Buffer): Buffer {
  const key = ring.byId.get(keyId);
  if (!key) throw new Error(`Encrypted with key "${keyId}", which ENCRYPTION_KEYS does not list`);
  const decipher = createDecipheriv('aes-256-gcm', key, data.subarray(0, 12));
  if (associated) decipher.setAAD(associated);
  decipher.setAuthTag(data.subarray(12, 28));
  return Buffer.concat([decipher.update(data.subarray(28)), decipher.final()]);
}

/**
 * What a secret at rest is bound to: its workspace and its purpose (which column or field holds
 * it). A value sealed for one binding does not open for another, so a sealed value copied into
 * another tenant's row (or into another field) is refused instead of used.
 */
export interface SealBinding {
  workspaceId: string;
  purpose: SecretPurpose;
}
export type SecretPurpose =
  | 'instance.accessToken'
  | 'instance.appSecret'
  | 'instance.verifyToken'
  | 'webhook.secret'
  | 'automation.webhookToken'
  | 'workspace.aiApiKey';

/**
 * A text at rest. `enc:v2:<keyId>:<purpose>:<workspaceId>:<base64>`: bound; the header (all before
 * the body) is the associated data, so the binding cannot be changed without the value failing to
 * open, and an opener that says which binding it expects refuses any other. `enc:v1:<keyId>:<base64>`:
 * sealed before bindings (no associated data); it still opens, and the worker's pass at start
 * (domain/maintenance/secrets-at-rest.ts) re-seals it bound. No prefix: written before encryption, read as it is.
 */
const V1 = 'enc:v1:';
const V2 = 'enc:v2:';

/** Sealed without a binding (v1) only for callers not yet passing one; the worker's pass binds it later. */
export function sealText(ring: KeyRing, text: string, binding?: SealBinding): string {
  if (!binding) return `${V1}${ring.current.id}:${seal(ring, Buffer.from(text, 'utf8')).data.toString('base64')}`;
  const header = `${V2}${ring.current.id}:${binding.purpose}:${binding.workspaceId}:`;
  const { data } = seal(ring, Buffer.from(text, 'utf8'), Buffer.from(header, 'utf8'));
  return `${header}${data.toString('base64')}`;
}

interface Sealed {
  keyId: string;
  body: string;
  /** v2: the header authenticated with the body, and the binding it names. */
  header?: string;
  binding?: { purpose: string; workspaceId: string };
}

/** A sealed value's parts; null for a value written before encryption (no prefix). */
function parseSealed(value: string): Sealed | null {
  if (value.startsWith(V1)) {
    const rest = value.slice(V1.length);
    const at = rest.indexOf(':');
    return { keyId: rest.slice(0, at), body: rest.slice(at + 1) };
  }
  if (value.startsWith(V2)) {
    const parts = value.slice(V2.length).split(':');
    if (parts.length !== 4) throw new Error('A sealed value (enc:v2) is malformed');
    const [keyId, purpose, workspaceId, body] = parts;
    return { keyId, body, header: value.slice(0, value.length - body.length), binding: { purpose, workspaceId } };
  }
  return null;
}

/**
 * The text behind a sealed value. With `expected`, a bound value sealed for another workspace or
 * purpose is refused (an error naming neither value). A value sealed before bindings (v1) or
 * written before encryption (no prefix) opens as it is, whatever `expected` says: the worker's pass
 * binds it at its next start.
 */
export function openText(ring: KeyRing, value: string, expected?: SealBinding): string {
  const sealed = parseSealed(value);
  if (!sealed) return value;
  if (sealed.binding && expected && (sealed.binding.purpose !== expected.purpose || sealed.binding.workspaceId !== expected.workspaceId)) {
    throw new Error(`A sealed ${expected.purpose} belongs to another workspace or purpose: refused`);
  }
  const associated = sealed.header === undefined ? undefined : Buffer.from(sealed.header, 'utf8');
  return unseal(ring, sealed.keyId, Buffer.from(sealed.body, 'base64'), associated).toString('utf8');
}

/** The id of the key a sealed value names (rotation: what still uses an old key), or null. */
export function sealedWith(value: string): string | null {
  return parseSealed(value)?.keyId ?? null;
}

/** Whether a value is sealed with the current key and bound as `binding` says (nothing left for the pass to do). */
export function sealedAs(ring: KeyRing, value: string, binding: SealBinding): boolean {
  return value.startsWith(`${V2}${ring.current.id}:${binding.purpose}:${binding.workspaceId}:`);
}
