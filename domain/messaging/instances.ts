import { z } from 'zod';
import { type Db, KeyRing, openText, type Resealer, SealBinding, sealedAs, sealText } from '../platform';
import { ApiError, Page, pageWithTotal, iso, HTTP_URL } from '../kernel';

/** Operator configuration of a connection. Tokens and secrets never leave the service. */
export const instanceConfigSchema = z
  .object({
    baseUrl: z
      .url({ protocol: /^https?$/ })
      .max(2048)
      .meta({ pattern: HTTP_URL }),
    phoneNumberId: z.string().min(1).max(64),
    accessToken: z.string().min(1).max(4096),
    appSecret: z.string().min(1).max(512),
    /** Token Meta sends back when verifying the webhook URL (default: the app secret). */
    verifyToken: z.string().min(1).max(512),
    apiVersion: z
      .string()
      .regex(/^v\d+\.\d+$/)
      .max(16),
    /** "web" gateways name their connection instead of using a phone-number id. */
    instanceName: z.string().min(1).max(200),
    /** Instagram: the business's Instagram user id (the Graph API's IG user id: digits), the account its DMs reach. */
    igUserId: z
      .string()
      .regex(/^\d{1,32}$/)
      .max(32),
    /** Cloud API: the WhatsApp Business account id whose templates the instance follows (domain/messaging/templates.ts). */
    wabaId: z
      .string()
      .regex(/^\d{1,32}$/)
      .max(32),
  })
  .partial();
export type InstanceConfig = z.infer<typeof instanceConfigSchema>;

/** The configuration's secrets: stored sealed (domain/platform/encryption.ts), opened only where they are used. */
export const INSTANCE_SECRETS = ['accessToken', 'appSecret', 'verifyToken'] as const;

/** The configuration with `change` applied to each secret it holds. */
export function mapInstanceSecrets(config: InstanceConfig, change: (value: string, field: InstanceSecret) => string): InstanceConfig {
  const out = { ...config };
  for (const field of INSTANCE_SECRETS) if (typeof out[field] === 'string') out[field] = change(out[field], field);
  return out;
}
export type InstanceSecret = (typeof INSTANCE_SECRETS)[number];

/** Each secret is bound to the instance's workspace and to its field (domain/platform/encryption.ts SealBinding). */
export const instanceSecretBinding = (workspaceId: string, field: InstanceSecret): SealBinding => ({
  workspaceId,
  purpose: `instance.${field}`,
});

/**
 * `workspaceId`: the instance row's. Sealing without it writes the unbound form (the worker's pass
 * binds it); opening with it refuses a secret sealed for another workspace or field.
 */
export const sealInstanceConfig = (ring: KeyRing, config: InstanceConfig, workspaceId?: string): InstanceConfig =>
  mapInstanceSecrets(config, (value, field) => sealText(ring, value, workspaceId ? instanceSecretBinding(workspaceId, field) : undefined));
export const openInstanceConfig = (ring: KeyRing, config: InstanceConfig, workspaceId?: string): InstanceConfig =>
  mapInstanceSecrets(config, (value, field) => openText(ring, value, workspaceId ? instanceSecretBinding(workspaceId, field) : undefined));

/** Who carries an instance's messages: the WhatsApp Cloud API, a WhatsApp web gateway, or Instagram's Graph API (channel `instagram` only). */
export const PROVIDERS = ['cloud', 'web', 'instagram'] as const;
export type Provider = (typeof PROVIDERS)[number];
export const CHANNELS = ['whatsapp', 'instagram'] as const;

export interface InstanceRow {
  id: string;
  workspace_id: string;
  name: string;
  channel: (typeof CHANNELS)[number];
  provider: Provider;
  connected: boolean;
  archived: boolean;
  config: InstanceConfig;
  created_at: Date;
  updated_at: Date;
}

/** The public shape of an instance: no configuration, so no secrets. */
export function serializeInstance(row: InstanceRow) {
  return {
    id: row.id,
    name: row.name,
    channel: row.channel,
    provider: row.provider,
    connected: row.connected,
    createdAt: iso(row.created_at),
  };
}

/** The operator's view: configuration without its secrets, which only say whether they are set. */
export function serializeInstanceForAdmin(row: InstanceRow) {
  const { accessToken, appSecret, verifyToken, ...rest } = row.config;
  return {
    ...serializeInstance(row),
    archived: row.archived,
    config: { ...rest, accessTokenSet: Boolean(accessToken), appSecretSet: Boolean(appSecret), verifyTokenSet: Boolean(verifyToken) },
  };
}

/** Connections of the workspace, oldest first; archived ones never appear. */
export async function listInstances(db: Db, workspaceId: string, page: Page) {
  const scope = db('instances').where({ workspace_id: workspaceId, archived: false });
  const { rows, total } = await pageWithTotal<InstanceRow>(scope, page, (q) =>
    q.orderBy([{ column: 'created_at' }, { column: 'id' }]).select('*'),
  );
  return { rows: rows.map(serializeInstance), total };
}

/** The operator creates a connection; the answer hides its secrets. */
export async function createInstance(
  db: Db,
  ring: KeyRing,
  workspaceId: string,
  input: Omit<InstanceRow, 'id' | 'workspace_id' | 'created_at' | 'updated_at'>,
) {
  if (input.provider === 'instagram' && input.channel !== 'instagram')
    throw new ApiError('VALIDATION', 'Provider instagram carries channel instagram only', { hint: 'body.channel' });
  const [row]: InstanceRow[] = await db('instances')
    .insert({ workspace_id: workspaceId, ...input, config: JSON.stringify(sealInstanceConfig(ring, input.config, workspaceId)) })
    .returning('*');
  return serializeInstanceForAdmin(row);
}

/** Changes the flags given; `config` keys are merged into the stored ones (a key not sent keeps its value). */
export async function updateInstance(
  db: Db,
  ring: KeyRing,
  workspaceId: string,
  instanceId: string,
  patch: { connected?: boolean; archived?: boolean; config?: InstanceConfig },
) {
  const [row]: InstanceRow[] = await db('instances')
    .where({ id: instanceId, workspace_id: workspaceId })
    .update({
      ...(patch.connected !== undefined ? { connected: patch.connected } : {}),
      ...(patch.archived !== undefined ? { archived: patch.archived } : {}),
      ...(patch.config
        ? { config: db.raw('config || ?::jsonb', [JSON.stringify(sealInstanceConfig(ring, patch.config, workspaceId))]) }
        : {}),
      updated_at: db.fn.now(),
    })
    .returning('*');
  if (!row) throw new ApiError('INSTANCE_NOT_FOUND', 'Instance not found');
  return serializeInstanceForAdmin(row);
}

/**
 * The live instances a send may use: the named one (found whatever its channel, so another
 * channel is refused as unsupported), or the oldest two WhatsApp ones (two, so a choice between
 * several is refused: domain/messaging/sending.ts chooseInstance).
 */
export async function sendCandidates(
  trx: Db,
  workspaceId: string,
  instanceId: string | undefined,
): Promise<Pick<InstanceRow, 'id' | 'channel' | 'provider' | 'connected'>[]> {
  const live = trx('instances').where({ workspace_id: workspaceId, archived: false }).select('id', 'channel', 'provider', 'connected');
  return instanceId ? live.where({ id: instanceId }).limit(1) : live.where({ channel: 'whatsapp' }).orderBy('created_at').limit(2);
}

/** A live instance with its (sealed) configuration, for a provider call. */
export async function liveInstanceConfig(
  db: Db,
  workspaceId: string,
  instanceId: string,
): Promise<Pick<InstanceRow, 'id' | 'provider' | 'config'> | undefined> {
  return db('instances').where({ workspace_id: workspaceId, id: instanceId, archived: false }).first('id', 'provider', 'config');
}

/** An instance's id and channel, archived or not (a send already prepared on it). */
export async function instanceChannel(trx: Db, workspaceId: string, instanceId: string): Promise<{ id: string; channel: string }> {
  return trx('instances').where({ workspace_id: workspaceId, id: instanceId }).first('id', 'channel');
}

/**
 * The maintenance pass's re-seal of instances' secrets (domain/maintenance sealStoredSecrets):
 * each secret not sealed with the current key and bound to its workspace is given to `reseal`
 * (null: bound elsewhere, left as it is). Only the secrets are written, merged, so a concurrent
 * change of another key of the config is kept. The number of instances changed.
 */
export async function resealInstanceSecrets(db: Db, ring: KeyRing, reseal: Resealer): Promise<number> {
  let instances = 0;
  const rows: Pick<InstanceRow, 'id' | 'workspace_id' | 'config'>[] = await db('instances').select('id', 'workspace_id', 'config');
  for (const row of rows) {
    const stale = INSTANCE_SECRETS.filter(
      (field) =>
        typeof row.config[field] === 'string' && !sealedAs(ring, row.config[field]!, instanceSecretBinding(row.workspace_id, field)),
    );
    if (stale.length === 0) continue;
    let changed = false;
    const config = mapInstanceSecrets(row.config, (value, field) => {
      if (!stale.includes(field)) return value;
      const sealed = reseal(value, instanceSecretBinding(row.workspace_id, field));
      if (sealed === null) return value;
      changed = true;
      return sealed;
    });
    if (!changed) continue;
    // Only the secrets, merged: a concurrent change of another key of the config is kept.
    const secrets = Object.fromEntries(INSTANCE_SECRETS.filter((f) => config[f] !== row.config[f]).map((f) => [f, config[f]]));
    await db('instances')
      .where({ id: row.id })
      .update({ config: db.raw('config || ?::jsonb', [JSON.stringify(secrets)]) });
    instances++;
  }
  return instances;
}
