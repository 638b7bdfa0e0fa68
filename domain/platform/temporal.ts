import { createHmac, hkdfSync } from 'node:crypto';
import { Client, Connection } from '@temporalio/client';
import type { DataConverter } from '@temporalio/common';
import type { Config } from './config';
import type { KeyRing } from './encryption';
import { EncryptionCodec } from './payload-codec';

/**
 * Custom search attributes our workflows set, so operators can find a send or a run in the UI.
 * Search attributes are stored and shown in clear (the codec does not see them), so they hold ids
 * and, for the recipient, a keyed hash (`PhoneHash`, see searchHash), never a number. `Phone`, set
 * by earlier versions, stays registered on existing namespaces and is no longer written.
 */
export const SEARCH_ATTRIBUTES = {
  WorkspaceId: 'Keyword',
  PhoneHash: 'Keyword',
  InstanceId: 'Keyword',
  IdempotencyKey: 'Keyword',
  AutomationId: 'Keyword',
  BroadcastId: 'Keyword',
} as const;

/** What a keyed hash stands for: it is part of the hashed text, so a phone's hash never equals an externalId's. */
export type SearchHashPurpose = 'phone' | 'external-id';

/** The HMAC key of searchHash for one encryption key: derived (HKDF), never the encryption key itself. */
function searchHashKey(key: Buffer): Buffer {
  return Buffer.from(hkdfSync('sha256', key, Buffer.alloc(0), 'temporal-search-hash', 32));
}

/**
 * A value Temporal shows in clear (a search attribute, a workflow id) that must not be readable
 * there: HMAC-SHA256 of the purpose, the workspace and the value, with a key derived from the
 * current ENCRYPTION_KEYS key, as `<keyId>.<32 hex>`. Without the keys it reveals nothing (a
 * phone number's few billion candidates cannot be tried), and the same number in two workspaces
 * hashes differently. An operator computes it with `npx tsx scripts/search-hash.ts <workspaceId> <phone>`.
 */
export function searchHash(ring: KeyRing, purpose: SearchHashPurpose, workspaceId: string, value: string): string {
  return hashWith(ring.current.id, ring.current.key, purpose, workspaceId, value);
}

/** The value's hash under every listed key, current first: what to search for across a rotation. */
export function searchHashes(ring: KeyRing, purpose: SearchHashPurpose, workspaceId: string, value: string): string[] {
  return [...new Set([ring.current.id, ...ring.byId.keys()])].map((id) => hashWith(id, ring.byId.get(id)!, purpose, workspaceId, value));
}

function hashWith(keyId: string, key: Buffer, purpose: SearchHashPurpose, workspaceId: string, value: string): string {
  const mac = createHmac('sha256', searchHashKey(key)).update(`${purpose}\0${workspaceId}\0${value}`).digest('hex');
  return `${keyId}.${mac.slice(0, 32)}`;
}

/**
 * A failure message as Temporal may show it: runs of 8 or more digits (a phone number as a
 * provider quotes it, with or without +, spaces, dots, dashes or parentheses) become `[number]`.
 * Error codes and HTTP statuses (131056, 429) are shorter and stay.
 */
export function withoutPhoneNumbers(text: string): string {
  return text.replace(/\+?\d(?:[\s().-]{0,2}\d){7,}/g, '[number]');
}

/**
 * The priority every workflow of a workspace starts with (its activities inherit it): the
 * workspace is its fairness key, so where the Temporal server has task queue fairness on (the dev
 * server and docker-compose's do: `matching.enableFairness`), a task queue's backlog is dispatched
 * round-robin across workspaces instead of first in, first out. Without it the key is ignored.
 */
export function workspacePriority(workspaceId: string): { fairnessKey: string } {
  return { fairnessKey: workspaceId };
}

/** Every payload through the encryption codec (domain/platform/payload-codec.ts): the worker and every client alike. */
export function dataConverterFor(config: Pick<Config, 'encryptionKeys'>): DataConverter {
  if (!config.encryptionKeys) throw new Error(ENCRYPTION_KEYS_MISSING);
  return { payloadCodecs: [new EncryptionCodec(config.encryptionKeys)] };
}

export const ENCRYPTION_KEYS_MISSING =
  'ENCRYPTION_KEYS is not set: it encrypts Temporal payloads and secrets at rest. `npm start` and the tests generate one; elsewhere set it to "k1:" followed by base64 of 32 random bytes (for example `openssl rand -base64 32`).';

/**
 * A lazily connected, shared Temporal client. A failed connection is forgotten so the next call
 * retries: the API keeps serving reads while Temporal is down and recovers by itself.
 */
export interface TemporalClients {
  get: () => Promise<Client>;
  close: () => Promise<void>;
}

export function temporalClientFactory(config: Pick<Config, 'temporalAddress' | 'temporalNamespace' | 'encryptionKeys'>): TemporalClients {
  const { temporalAddress: address, temporalNamespace: namespace } = config;
  const dataConverter = dataConverterFor(config);
  let pending: Promise<Client> | undefined;
  let connection: Connection | undefined;
  return {
    get() {
      if (!pending) {
        pending = Connection.connect({ address, connectTimeout: 3000 })
          .then((conn) => {
            connection = conn;
            return new Client({ connection: conn, namespace, dataConverter });
          })
          .catch((err) => {
            pending = undefined;
            throw err;
          });
      }
      return pending;
    },
    async close() {
      // Let an in-flight connection attempt settle so no socket outlives the caller.
      await pending?.catch(() => undefined);
      await connection?.close();
      pending = undefined;
      connection = undefined;
    },
  };
}

/** How long one workflow start by the worker's dispatchers may take: a Temporal that went away must not hang the loop. */
export const START_DEADLINE_MS = 10_000;

/**
 * A call made under a deadline. Without one, a call made while the server is away can wait
 * forever; with it, the caller fails and tries again on its next pass (starts are idempotent by
 * workflow id, so a start that timed out but happened is found as already started).
 */
export function withDeadline<T>(client: Client, ms: number, call: () => Promise<T>): Promise<T> {
  return client.connection.withDeadline(Date.now() + ms, call);
}

const GRPC_DEADLINE_EXCEEDED = 4;
const GRPC_UNAVAILABLE = 14;

/** Whether an error means the Temporal server could not be reached (or did not answer in time). */
export function isTemporalUnreachable(err: unknown): boolean {
  for (let e = err as { code?: unknown; cause?: unknown } | undefined, depth = 0; e && depth < 4; e = e.cause as typeof e, depth++) {
    if (e.code === GRPC_UNAVAILABLE || e.code === GRPC_DEADLINE_EXCEEDED) return true;
  }
  return false;
}

/** Registers our search attributes on the namespace (idempotent: existing ones are left alone). */
export async function ensureSearchAttributes(address: string, namespace: string): Promise<void> {
  const connection = await Connection.connect({ address, connectTimeout: 10_000 });
  try {
    const existing = await connection.operatorService.listSearchAttributes({ namespace });
    const missing = Object.entries(SEARCH_ATTRIBUTES).filter(([name]) => !(name in (existing.customAttributes ?? {})));
    if (missing.length === 0) return;
    // IndexedValueType: KEYWORD = 2
    await connection.operatorService.addSearchAttributes({
      namespace,
      searchAttributes: Object.fromEntries(missing.map(([name]) => [name, 2])),
    });
  } finally {
    await connection.close();
  }
}
