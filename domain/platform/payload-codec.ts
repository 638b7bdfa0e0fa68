import type { Payload, PayloadCodec, SerializationContext } from '@temporalio/common';
import { temporal } from '@temporalio/proto';
import { KeyRing, seal, unseal } from './encryption';

/**
 * Temporal's payload codec for this service: every payload (workflow and activity inputs and
 * results, memos, failures' details) is stored in Temporal's history encrypted with the current key
 * of ENCRYPTION_KEYS, so the history (and the UI, without the codec endpoint) shows no tenant's
 * data. The worker and every client use it. Operators read payloads through the admin codec endpoint.
 *
 * Associated data (format v2, `encryption-format: v2`): the format, the key id and the workspace
 * the payload names (`workspace-id`, from a JSON object's `workspaceId`: our workflow and activity
 * inputs and results), so none of the visible metadata can be changed without the payload failing
 * to decode. Not the workflow id: the Temporal UI's and CLI's codec endpoint is given payloads
 * without it, and must still decode them. Where the SDK tells the codec whose payload it is (the
 * worker and our clients: a SerializationContext naming the workflow), a payload naming another
 * workspace than the workflow id's (`send/<workspaceId>/...`, `automation/<workspaceId>/...`,
 * `webhook/<workspaceId>/...`) is refused: a ciphertext copied into another tenant's workflow does
 * not run there. A payload sealed before v2 (no format) decodes without associated data.
 *
 * Plain payloads: one written before encryption (no encryption metadata) is read as it is, except
 * a workflow input in a shape only encrypting clients ever wrote (isInputStartedEncrypted): that
 * was not started by this service (someone with access to Temporal but not to the keys), and
 * decoding it is refused, so the worker never runs it.
 */
export const ENCRYPTED_ENCODING = 'binary/encrypted';
const KEY_ID = 'encryption-key-id';
const FORMAT = 'encryption-format';
const WORKSPACE = 'workspace-id';
const V2 = 'v2';

const text = (value: string): Uint8Array => new TextEncoder().encode(value);
const read = (value: Uint8Array | null | undefined): string => (value ? new TextDecoder().decode(value) : '');

function associatedData(keyId: string, workspaceId: string): Buffer {
  return Buffer.from(`temporal-payload\0${V2}\0${keyId}\0${workspaceId}`, 'utf8');
}

/** A JSON payload's top-level object, or undefined (another encoding, not an object, not JSON). */
function jsonObject(payload: Payload): Record<string, unknown> | undefined {
  if (read(payload.metadata?.encoding) !== 'json/plain' || !payload.data) return undefined;
  try {
    const value: unknown = JSON.parse(read(payload.data));
    return value && typeof value === 'object' && !Array.isArray(value) ? (value as Record<string, unknown>) : undefined;
  } catch {
    return undefined;
  }
}

/**
 * Whether a plain payload is a workflow input whose shape says it was started encrypted: a send
 * that names its send_requests row (`requestId`), or an automation run that names its run
 * (`runId`) without an inline `trigger`. Both shapes came after payload encryption (2026-11-23);
 * every client that writes them encrypts, so a plain one was forged or written without our codec.
 */
export function isInputStartedEncrypted(value: Record<string, unknown> | undefined): boolean {
  if (!value || typeof value.workspaceId !== 'string') return false;
  if (typeof value.requestId === 'string') return true;
  return typeof value.runId === 'string' && typeof value.automationId === 'string' && value.trigger === undefined;
}

/** The workspace a workflow id names (ours all start `<kind>/<workspaceId>/`), or undefined. */
function workspaceOf(context: SerializationContext | undefined): string | undefined {
  const workflowId = context?.workflowId;
  return workflowId ? /^(?:send|automation|webhook)\/([0-9a-f-]{36})\//.exec(workflowId)?.[1] : undefined;
}

/** A payload the codec refuses to decode, its error named for what it is. */
const refused = (name: 'PlaintextPayloadRefused' | 'PayloadOfAnotherWorkspace', message: string): Error =>
  Object.assign(new Error(message), { name });

export class EncryptionCodec implements PayloadCodec {
  constructor(private readonly ring: KeyRing) {}

  async encode(payloads: Payload[]): Promise<Payload[]> {
    return payloads.map((payload) => {
      const named = jsonObject(payload)?.workspaceId;
      const workspaceId = typeof named === 'string' ? named : '';
      const { keyId, data } = seal(
        this.ring,
        Buffer.from(temporal.api.common.v1.Payload.encode(payload).finish()),
        associatedData(this.ring.current.id, workspaceId),
      );
      return {
        metadata: {
          encoding: text(ENCRYPTED_ENCODING),
          [KEY_ID]: text(keyId),
          [FORMAT]: text(V2),
          ...(workspaceId ? { [WORKSPACE]: text(workspaceId) } : {}),
        },
        data: new Uint8Array(data),
      };
    });
  }

  async decode(payloads: Payload[], context?: SerializationContext): Promise<Payload[]> {
    const owner = workspaceOf(context);
    return payloads.map((payload) => {
      if (read(payload.metadata?.encoding) !== ENCRYPTED_ENCODING) {
        if (isInputStartedEncrypted(jsonObject(payload))) {
          throw refused(
            'PlaintextPayloadRefused',
            'A plain (unencrypted) payload in a shape this service only writes encrypted was refused: it was not written by this service (ENCRYPTION_KEYS)',
          );
        }
        return payload;
      }
      const keyId = read(payload.metadata?.[KEY_ID]);
      const format = read(payload.metadata?.[FORMAT]);
      const named = read(payload.metadata?.[WORKSPACE]);
      if (format === V2 && owner && named && named !== owner) {
        throw refused('PayloadOfAnotherWorkspace', "An encrypted payload naming another workspace than its workflow's was refused");
      }
      const associated = format === V2 ? associatedData(keyId, named) : undefined;
      const plain = unseal(this.ring, keyId, Buffer.from(payload.data ?? new Uint8Array()), associated);
      return temporal.api.common.v1.Payload.decode(plain) as Payload;
    });
  }
}
