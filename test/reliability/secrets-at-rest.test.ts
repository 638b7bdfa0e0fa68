/**
 * Secrets the service stores are sealed at rest (AES-256-GCM with ENCRYPTION_KEYS, key id beside
 * the value): provider access tokens, app secrets and verify tokens, webhook signing secrets. They
 * still work where they are used, rows written before encryption are sealed by the worker's pass,
 * and a key rotates by listing the new key first.
 */
import { randomUUID } from 'node:crypto';
import { newKeyRingValue, openText, parseKeyRing, sealedWith, sealText } from '../../domain/platform/encryption';
import { openInstanceConfig } from '../../domain/messaging/instances';
import { createDb } from '../../domain/platform/db';
import { sealStoredSecrets } from '../../domain/maintenance/secrets-at-rest';
import { migrationConfig } from '../../knexfile';
import { ensureDatabase } from '../../scripts/stack';
import { createWorkspace, expectError, startApi, TestApi } from '../helpers';

let api: TestApi;
beforeAll(async () => {
  api = await startApi();
});
afterAll(() => api.close());

it('stores provider tokens and webhook secrets sealed, and still verifies, signs and sends with them', async () => {
  const ws = await createWorkspace(api, { scopes: ['webhooks:write', 'automations:write'] });
  const plain = { accessToken: `tok-${randomUUID()}`, appSecret: `app-${randomUUID()}`, verifyToken: `ver-${randomUUID()}` };
  const instance = await api.admin('POST', `/admin/v1/workspaces/${ws.id}/instances`, {
    name: 'Sealed',
    channel: 'whatsapp',
    provider: 'cloud',
    connected: true,
    config: { baseUrl: process.env.EMULATOR_URL, phoneNumberId: `PN-${randomUUID().slice(0, 8)}`, ...plain },
  });
  expect(instance.status).toBe(201);
  const subscription = await api.request('POST', '/api/v1/webhooks', {
    key: ws.key,
    body: { url: 'https://hooks.example.com/in', events: ['*'], active: false },
  });
  expect(subscription.status).toBe(201);

  const stored = await api.db('instances').where({ id: instance.body.data.id }).first('config');
  const secret = await api.db('webhook_subscriptions').where({ id: subscription.body.data.id }).first('secret');
  const rows = JSON.stringify([stored, secret]);
  for (const value of [...Object.values(plain), subscription.body.data.secret]) expect(rows).not.toContain(value);
  for (const field of Object.keys(plain)) expect(sealedWith(stored.config[field])).toBe(api.config.encryptionKeys!.current.id);
  expect(openText(api.config.encryptionKeys!, secret.secret)).toBe(subscription.body.data.secret);

  // An inbound automation token: stored sealed, found by its hash, its URL still works.
  const automation = await api.request('POST', '/api/v1/automations', {
    key: ws.key,
    body: { name: 'in', trigger: { type: 'webhook_received' }, actions: [{ type: 'wait', seconds: 1 }] },
  });
  const token = automation.body.data.webhookUrl.split('/').pop();
  const storedToken = await api.db('automations').where({ id: automation.body.data.id }).first('webhook_token', 'webhook_token_hash');
  expect(JSON.stringify(storedToken)).not.toContain(token);
  expect(openText(api.config.encryptionKeys!, storedToken.webhook_token)).toBe(token);
  expect((await api.request('POST', new URL(automation.body.data.webhookUrl).pathname, { body: { a: 1 } })).status).toBe(202);

  // Used where they are needed: Meta's verification handshake reads the sealed verify token.
  const challenge = await api.request(
    'GET',
    `/webhooks/whatsapp/${instance.body.data.id}?hub.mode=subscribe&hub.challenge=42&hub.verify_token=${plain.verifyToken}`,
  );
  expect(challenge.status).toBe(200);
  expect(challenge.text).toBe('42');
  expectError(
    await api.request('GET', `/webhooks/whatsapp/${instance.body.data.id}?hub.mode=subscribe&hub.challenge=42&hub.verify_token=wrong`),
    401,
    'UNAUTHORIZED',
  );
});

it('seals rows written in plain text and re-seals with a new key after a rotation', async () => {
  // Its own database: the pass re-seals every row it finds, and the shared test stack's worker
  // must keep reading the rows of the other test files with its own key.
  const url = await ensureDatabase(process.env.TEST_ADMIN_DATABASE_URL!, 'crm_secrets_rotation_test', true);
  const db = createDb(url, { max: 2 });
  try {
    await db.migrate.latest(migrationConfig);
    const [ws] = await db('workspaces').insert({ name: 'Rotation', ai_api_key: 'sk-legacy' }).returning('id');
    const [instance] = await db('instances')
      .insert({
        workspace_id: ws.id,
        name: 'Legacy',
        channel: 'whatsapp',
        provider: 'cloud',
        connected: false,
        config: JSON.stringify({ phoneNumberId: 'PN-legacy', accessToken: 'legacy-token' }),
      })
      .returning('id');
    const [subscription] = await db('webhook_subscriptions')
      .insert({ workspace_id: ws.id, url: 'https://hooks.example.com/legacy', events: ['*'], secret: 'whsec_legacy' })
      .returning('id');
    const read = async () => ({
      token: (await db('instances').where({ id: instance.id }).first('config')).config.accessToken as string,
      secret: (await db('webhook_subscriptions').where({ id: subscription.id }).first('secret')).secret as string,
      aiKey: (await db('workspaces').where({ id: ws.id }).first('ai_api_key')).ai_api_key as string,
    });

    const old = parseKeyRing(newKeyRingValue('first'));
    await sealStoredSecrets(db, old);
    const sealed = await read();
    expect([sealedWith(sealed.token), sealedWith(sealed.secret), sealedWith(sealed.aiKey)]).toEqual(['first', 'first', 'first']);
    expect([openText(old, sealed.token), openText(old, sealed.secret), openText(old, sealed.aiKey)]).toEqual([
      'legacy-token',
      'whsec_legacy',
      'sk-legacy',
    ]);

    // Rotation: the new key first, the old one still listed; the pass moves every value to the new key.
    const rotated = parseKeyRing(
      `${newKeyRingValue('rotated')},${[...old.byId].map(([id, key]) => `${id}:${key.toString('base64')}`).join(',')}`,
    );
    await sealStoredSecrets(db, rotated);
    const moved = await read();
    expect([sealedWith(moved.token), sealedWith(moved.secret), sealedWith(moved.aiKey)]).toEqual(['rotated', 'rotated', 'rotated']);
    expect([openText(rotated, moved.token), openText(rotated, moved.secret)]).toEqual(['legacy-token', 'whsec_legacy']);
    expect(() => openText(old, moved.token)).toThrow(/key "rotated", which ENCRYPTION_KEYS does not list/);
  } finally {
    await db.destroy();
  }
});

it("binds each secret to its workspace and purpose: a value copied into another tenant's row is refused, and the pass binds values sealed before", async () => {
  const ring = api.config.encryptionKeys!;
  // Written through the API: bound at once.
  const ws = await createWorkspace(api, { scopes: ['webhooks:write'] });
  const instance = await api.admin('POST', `/admin/v1/workspaces/${ws.id}/instances`, {
    name: 'Bound',
    channel: 'whatsapp',
    provider: 'cloud',
    connected: false,
    config: { baseUrl: process.env.EMULATOR_URL, phoneNumberId: 'PN-bound', accessToken: 'tok-bound' },
  });
  const subscription = await api.request('POST', '/api/v1/webhooks', {
    key: ws.key,
    body: { url: 'https://hooks.example.com/bound', events: ['*'], active: false },
  });
  const stored = (await api.db('instances').where({ id: instance.body.data.id }).first('config')).config;
  const secret = (await api.db('webhook_subscriptions').where({ id: subscription.body.data.id }).first('secret')).secret;
  expect(stored.accessToken.startsWith(`enc:v2:${ring.current.id}:instance.accessToken:${ws.id}:`)).toBe(true);
  expect(secret.startsWith(`enc:v2:${ring.current.id}:webhook.secret:${ws.id}:`)).toBe(true);
  expect(openInstanceConfig(ring, stored, ws.id).accessToken).toBe('tok-bound');
  const other = randomUUID();
  expect(() => openInstanceConfig(ring, stored, other)).toThrow(/another workspace or purpose/);
  expect(() => openText(ring, secret, { workspaceId: other, purpose: 'webhook.secret' })).toThrow(/another workspace or purpose/);
  // Another field of the same row is another purpose.
  expect(() => openText(ring, stored.accessToken, { workspaceId: ws.id, purpose: 'instance.appSecret' })).toThrow(
    /another workspace or purpose/,
  );
  // The binding is authenticated: rewriting it in the value breaks the value.
  const rebound = stored.accessToken.replace(ws.id, other);
  expect(() => openText(ring, rebound, { workspaceId: other, purpose: 'instance.accessToken' })).toThrow();

  // The worker's pass, on its own database (it rewrites every row it finds).
  const url = await ensureDatabase(process.env.TEST_ADMIN_DATABASE_URL!, 'crm_secrets_binding_test', true);
  const db = createDb(url, { max: 2 });
  try {
    await db.migrate.latest(migrationConfig);
    const [a] = await db('workspaces').insert({ name: 'Tenant A' }).returning('id');
    const [b] = await db('workspaces').insert({ name: 'Tenant B' }).returning('id');
    // Sealed before bindings (enc:v1): still opens, and the pass binds it.
    const legacy = { phoneNumberId: 'PN-a', accessToken: sealText(ring, 'token-a'), appSecret: sealText(ring, 'app-a') };
    expect(legacy.accessToken.startsWith('enc:v1:')).toBe(true);
    const [instanceA] = await db('instances')
      .insert({ workspace_id: a.id, name: 'A', channel: 'whatsapp', provider: 'cloud', connected: false, config: JSON.stringify(legacy) })
      .returning('id');
    const [subA] = await db('webhook_subscriptions')
      .insert({ workspace_id: a.id, url: 'https://hooks.example.com/a', events: ['*'], secret: sealText(ring, 'whsec_a') })
      .returning('id');
    expect(await sealStoredSecrets(db, ring)).toMatchObject({ instances: 1, webhookSubscriptions: 1, refused: 0 });
    const configA = (await db('instances').where({ id: instanceA.id }).first('config')).config;
    const secretA = (await db('webhook_subscriptions').where({ id: subA.id }).first('secret')).secret;
    expect([configA.accessToken, configA.appSecret, secretA].map((v: string) => v.split(':').slice(0, 5).join(':'))).toEqual([
      `enc:v2:${ring.current.id}:instance.accessToken:${a.id}`,
      `enc:v2:${ring.current.id}:instance.appSecret:${a.id}`,
      `enc:v2:${ring.current.id}:webhook.secret:${a.id}`,
    ]);
    expect(openInstanceConfig(ring, configA, a.id)).toMatchObject({ accessToken: 'token-a', appSecret: 'app-a' });
    expect(openText(ring, secretA, { workspaceId: a.id, purpose: 'webhook.secret' })).toBe('whsec_a');

    // Tenant A's sealed token and secret copied into tenant B's rows: B cannot use them, and the pass does not launder them.
    const [instanceB] = await db('instances')
      .insert({
        workspace_id: b.id,
        name: 'B',
        channel: 'whatsapp',
        provider: 'cloud',
        connected: false,
        config: JSON.stringify({ phoneNumberId: 'PN-b', accessToken: configA.accessToken }),
      })
      .returning('id');
    const [subB] = await db('webhook_subscriptions')
      .insert({ workspace_id: b.id, url: 'https://hooks.example.com/b', events: ['*'], secret: secretA })
      .returning('id');
    expect(() => openInstanceConfig(ring, { accessToken: configA.accessToken }, b.id)).toThrow(/another workspace or purpose/);
    expect(await sealStoredSecrets(db, ring)).toEqual({
      instances: 0,
      webhookSubscriptions: 0,
      automationTokens: 0,
      aiKeys: 0,
      refused: 2,
    });
    expect((await db('instances').where({ id: instanceB.id }).first('config')).config.accessToken).toBe(configA.accessToken);
    expect((await db('webhook_subscriptions').where({ id: subB.id }).first('secret')).secret).toBe(secretA);
  } finally {
    await db.destroy();
  }
});
