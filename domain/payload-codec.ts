import type { Payload, PayloadCodec } from '@temporalio/common';
import { temporal } from '@temporalio/proto';
import { KeyRing, seal, unseal } from './encryption';

/**
 * Temporal's payload codec for this service: every payload (workflow and activity inputs and
 * results, memos, failures' details) is stored in Temporal's history encrypted with the current key
 * of ENCRYPTION_KEYS, so the history (and the UI, without the codec endpoint) shows no tenant's
 * data. The worker and every client use it; a payload written before it (no encryption metadata)
 * is read as it is. Operators read payloads through the admin codec endpoint.
 */
export const ENCRYPTED_ENCODING = 'binary/encrypted';
const KEY_ID = 'encryption-key-id';

const text = (value: string): Uint8Array => new TextEncoder().encode(value);
const read = (value: Uint8Array | null | undefined): string => (value ? new TextDecoder().decode(value) : '');

export class EncryptionCodec implements PayloadCodec {
  constructor(private readonly ring: KeyRing) {}

  async encode(payloads: Payload[]): Promise<Payload[]> {
    return payloads.map((payload) => {
      const { keyId, data } = seal(this.ring, Buffer.from(temporal.api.common.v1.Payload.encode(payload).finish()));
      return { metadata: { encoding: text(ENCRYPTED_ENCODING), [KEY_ID]: text(keyId) }, data: new Uint8Array(data) };
    });
  }

  async decode(payloads: Payload[]): Promise<Payload[]> {
    return payloads.map((payload) => {
      if (read(payload.metadata?.encoding) !== ENCRYPTED_ENCODING) return payload;
      const plain = unseal(this.ring, read(payload.metadata?.[KEY_ID]), Buffer.from(payload.data ?? new Uint8Array()));
      return temporal.api.common.v1.Payload.decode(plain) as Payload;
    });
  }
}
