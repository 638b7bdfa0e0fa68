/**
 * Text PostgreSQL can store. `text` and `jsonb` refuse U+0000, and an unpaired UTF-16 surrogate
 * is not Unicode text (jsonb refuses its escape; a text column would silently get U+FFFD).
 * Input the API validates is refused with a VALIDATION naming the field (api/router); text taken
 * from third-party payloads (provider and inbound automation webhooks) is made storable instead.
 */

const NUL = /\u0000/g;
const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/g;

/** Why a text cannot be stored as it is, or undefined when it can. */
export function unstorableReason(text: string): string | undefined {
  if (text.includes('\u0000')) return 'must not contain the NUL character (U+0000)';
  LONE_SURROGATE.lastIndex = 0;
  if (LONE_SURROGATE.test(text)) return 'must not contain unpaired UTF-16 surrogates';
  return undefined;
}

/** The text with U+0000 dropped and each unpaired surrogate replaced by U+FFFD. */
export function storable(text: string): string {
  return text.replace(NUL, '').replace(LONE_SURROGATE, '\uFFFD');
}

/** The first `max` UTF-16 units of a text, without splitting a surrogate pair. */
export function cut(text: string, max: number): string {
  const head = text.slice(0, max);
  return /[\uD800-\uDBFF]$/.test(head) ? head.slice(0, -1) : head;
}

/** A JSON value with every string and key made storable (a third-party payload kept as jsonb). */
export function storableJson(value: unknown): unknown {
  if (typeof value === 'string') return storable(value);
  if (Array.isArray(value)) return value.map(storableJson);
  if (value !== null && typeof value === 'object') {
    const out: Record<string, unknown> = {};
    for (const [key, item] of Object.entries(value))
      Object.defineProperty(out, storable(key), { value: storableJson(item), enumerable: true, writable: true, configurable: true });
    return out;
  }
  return value;
}
