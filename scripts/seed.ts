import fs from 'node:fs';
import { type Db, type KeyRing, sealText } from '../domain/platform';
import { ALL_SCOPES, createWorkspace, generateApiKey, hashApiKey } from '../domain/access';
import { createPipeline } from '../domain/sales';
import { openInstanceConfig, sealInstanceConfig } from '../domain/messaging';

export interface DemoSeed {
  workspaceId: string;
  apiKey: string;
}

/**
 * What `.data/demo.json` holds, rewritten on every start: the demo key (the database keeps only its
 * hash), the demo instance's id, phone number id and app secret (demo values, so the README tour can
 * sign a provider webhook), and where the API and the emulator listen this time.
 */
export interface DemoState extends DemoSeed {
  instanceId: string | null;
  phoneNumberId: string | null;
  appSecret: string | null;
  /** The demo Instagram instance's account id at the emulator (the tour makes a person write to it). */
  igUserId: string | null;
  apiUrl: string;
  emulatorUrl: string;
}

const DEMO_NAME = 'Demo workspace';
const DEMO_PLAN = { dealLimit: 1000, dailyMessageQuota: 1000, broadcastLimit: 2000, webhookQuota: 1000, automationLimit: 1000 };

/**
 * Seeds, once, a demo workspace: a pipeline with stages and custom fields, a member, a connected
 * instance pointed at the emulator, an approved template and a few tags. Writes `stateFile`
 * (git-ignored, mode 0600) on every call: see DemoState.
 */
export async function seedDemo(
  db: Db,
  opts: { stateFile: string; emulatorUrl: string; apiUrl: string; ring: KeyRing },
): Promise<DemoState & { created: boolean }> {
  const seed = await seedDemoWorkspace(db, opts);
  // Every run of the README tour adds a webhook subscription and an automation: the demo's plan
  // holds far more than the defaults (10 and 100), also for a demo seeded before they existed.
  await db('workspaces')
    .where({ id: seed.workspaceId })
    .update({
      webhook_quota: db.raw('greatest(webhook_quota, ?)', [DEMO_PLAN.webhookQuota]),
      automation_limit: db.raw('greatest(automation_limit, ?)', [DEMO_PLAN.automationLimit]),
      // The demo, and only the demo, derives AI insights, from the emulator's model (docs/insights.md).
      ai_enabled: true,
      ai_base_url: opts.emulatorUrl,
      ai_model: 'emulated-model',
      ai_api_key: sealText(opts.ring, 'demo-ai-key', { workspaceId: seed.workspaceId, purpose: 'workspace.aiApiKey' }),
    });
  const instance = await db('instances')
    .where({ workspace_id: seed.workspaceId, provider: 'cloud', archived: false })
    .orderBy('created_at')
    .first('id', 'config');
  const config = instance ? openInstanceConfig(opts.ring, instance.config, seed.workspaceId) : undefined;
  const instagram = await ensureDemoInstagram(db, seed.workspaceId, opts);
  const state: DemoState = {
    workspaceId: seed.workspaceId,
    apiKey: seed.apiKey,
    instanceId: instance?.id ?? null,
    phoneNumberId: config?.phoneNumberId ?? null,
    appSecret: config?.appSecret ?? null,
    igUserId: instagram.igUserId,
    apiUrl: opts.apiUrl,
    emulatorUrl: opts.emulatorUrl,
  };
  fs.writeFileSync(opts.stateFile, `${JSON.stringify(state, null, 2)}\n`, { mode: 0o600 });
  return { ...state, created: seed.created };
}

/**
 * The demo's Instagram instance pointed at the emulator, added to a demo seeded before Instagram
 * too. Its account id is derived from the workspace id (digits, like Instagram's), so demos of
 * several databases on one emulator do not share an account.
 */
async function ensureDemoInstagram(
  db: Db,
  workspaceId: string,
  opts: { emulatorUrl: string; ring: KeyRing },
): Promise<{ igUserId: string }> {
  const igUserId = `1784${BigInt(`0x${workspaceId.replace(/-/g, '').slice(0, 12)}`)
    .toString()
    .padStart(15, '0')}`;
  const existing = await db('instances').where({ workspace_id: workspaceId, provider: 'instagram', archived: false }).first('id');
  if (!existing) {
    await db('instances').insert({
      workspace_id: workspaceId,
      name: 'Instagram (emulator)',
      channel: 'instagram',
      provider: 'instagram',
      connected: true,
      config: JSON.stringify(
        sealInstanceConfig(
          opts.ring,
          {
            baseUrl: opts.emulatorUrl,
            igUserId,
            accessToken: 'demo-instagram-token',
            appSecret: 'demo-instagram-secret',
            verifyToken: 'demo-instagram-verify',
          },
          workspaceId,
        ),
      ),
    });
  }
  return { igUserId };
}

async function seedDemoWorkspace(
  db: Db,
  opts: { stateFile: string; emulatorUrl: string; ring: KeyRing },
): Promise<DemoSeed & { created: boolean }> {
  if (fs.existsSync(opts.stateFile)) {
    const saved = JSON.parse(fs.readFileSync(opts.stateFile, 'utf8')) as DemoSeed;
    const key = await db('api_keys')
      .where({ key_hash: hashApiKey(saved.apiKey), workspace_id: saved.workspaceId })
      .whereNull('revoked_at')
      .first('id');
    if (key) return { workspaceId: saved.workspaceId, apiKey: saved.apiKey, created: false };
  }
  const existing = await db('workspaces').where({ name: DEMO_NAME }).first('id');
  const workspaceId: string = existing?.id ?? (await createWorkspace(db, DEMO_NAME, DEMO_PLAN)).id;
  if (!existing) {
    await createPipeline(db, workspaceId, {
      name: 'Sales',
      stages: [{ name: 'New' }, { name: 'Qualified' }, { name: 'Proposal' }, { name: 'Negotiation' }],
      customFields: [
        { key: 'budget', label: 'Budget', type: 'number' },
        { key: 'source_campaign', label: 'Campaign', type: 'text' },
        { key: 'expected_close', label: 'Expected close', type: 'date' },
      ],
    });
    await db('members').insert({ workspace_id: workspaceId, name: 'Ana Souza', email: 'ana@example.com' });
    const [instance] = await db('instances')
      .insert({
        workspace_id: workspaceId,
        name: 'WhatsApp (emulator)',
        channel: 'whatsapp',
        provider: 'cloud',
        connected: true,
        config: JSON.stringify(
          sealInstanceConfig(
            opts.ring,
            {
              baseUrl: opts.emulatorUrl,
              apiVersion: 'v21.0',
              phoneNumberId: '100000000000001',
              accessToken: 'demo-access-token',
              appSecret: 'demo-app-secret',
            },
            workspaceId,
          ),
        ),
      })
      .returning('id');
    await db('templates').insert({
      workspace_id: workspaceId,
      instance_id: instance.id,
      name: 'welcome',
      language: 'pt_BR',
      variable_count: 1,
      status: 'approved',
    });
    await db('tags').insert([
      { workspace_id: workspaceId, name: 'hot', color: '#dc2626' },
      { workspace_id: workspaceId, name: 'customer', color: '#16a34a' },
      { workspace_id: workspaceId, name: 'newsletter', color: '#2563eb' },
    ]);
  }
  const { key, hash, prefix } = generateApiKey();
  await db('api_keys').insert({
    workspace_id: workspaceId,
    name: 'Demo key (all scopes)',
    key_hash: hash,
    key_prefix: prefix,
    scopes: [...ALL_SCOPES],
    rate_limit_per_minute: 1000,
  });
  return { workspaceId, apiKey: key, created: !existing };
}

/**
 * Plays the part of Meta's app dashboard for instances that point at the emulator: registers
 * each one's webhook URL and app secret, so the emulator delivers signed status callbacks (which
 * reconcile an interrupted send). Called on every start: the emulator keeps this in memory.
 */
export async function connectEmulatorWebhooks(
  db: Db,
  opts: { emulatorUrl: string; apiUrl: string; ring: KeyRing; workspaceId?: string },
): Promise<number> {
  const instances = await db('instances')
    .whereIn('provider', ['cloud', 'instagram'])
    .where({ archived: false })
    .modify((q) => {
      // One workspace's only, where other instances on the same emulator belong to someone else (tests).
      if (opts.workspaceId) q.where({ workspace_id: opts.workspaceId });
    })
    .whereRaw(`config->>'baseUrl' = ?`, [opts.emulatorUrl])
    .select('id', 'workspace_id', 'provider', 'config');
  for (const instance of instances) {
    const appSecret = openInstanceConfig(opts.ring, instance.config, instance.workspace_id).appSecret;
    const instagram = instance.provider === 'instagram';
    const res = await fetch(`${opts.emulatorUrl}/__emulator/${instagram ? 'instagram/webhook' : 'webhook'}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(
        instagram
          ? { igUserId: instance.config.igUserId, url: `${opts.apiUrl}/webhooks/instagram/${instance.id}`, appSecret }
          : { phoneNumberId: instance.config.phoneNumberId, url: `${opts.apiUrl}/webhooks/whatsapp/${instance.id}`, appSecret },
      ),
    });
    if (!res.ok) throw new Error(`emulator refused the webhook of instance ${instance.id}: HTTP ${res.status}`);
  }
  return instances.length;
}
