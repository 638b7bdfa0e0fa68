/**
 * Secrets the service stores are sealed at rest (AES-256-GCM with ENCRYPTION_KEYS, key id beside
 * the value): provider access tokens, app secrets and verify tokens, webhook signing secrets. They
 * still work where they are used, rows written before encryption are sealed by the worker's pass,
 * and a key rotates by listing the new key first.
 */
import { randomUUID } from 'node:crypto';
import { newKeyRingValue, openText, parseKeyRing, sealedWith } from '../../domain/encryption';
import { createDb } from '../../domain/db';
import { sealStoredSecrets } from '../../domain/secrets-at-rest';
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
    name: 'Sealed', channel: 'whatsapp', provider: 'cloud', connected: true, config: { baseUrl: process.env.EMULATOR_URL, phoneNumberId: `PN-${randomUUID().slice(0, 8)}`, ...plain },
  });
  expect(instance.status).toBe(201);
  const subscription = await api.request('POST', '/api/v1/webhooks', { key: ws.key, body: { url: 'https://hooks.example.com/in', events: ['*'], active: false } });
  expect(subscription.status).toBe(201);

  const stored = await api.db('instances').where({ id: instance.body.data.id }).first('config');
  const secret = await api.db('webhook_subscriptions').where({ id: subscription.body.data.id }).first('secret');
  const rows = JSON.stringify([stored, secret]);
  for (const value of [...Object.values(plain), subscription.body.data.secret]) expect(rows).not.toContain(value);
  for (const field of Object.keys(plain)) expect(sealedWith(stored.config[field])).toBe(api.config.encryptionKeys!.current.id);
  expect(openText(api.config.encryptionKeys!, secret.secret)).toBe(subscription.body.data.secret);

  // An inbound automation token: stored sealed, found by its hash, its URL still works.
  const automation = await api.request('POST', '/api/v1/automations', { key: ws.key, body: { name: 'in', trigger: { type: 'webhook_received' }, actions: [{ type: 'wait', seconds: 1 }] } });
  const token = automation.body.data.webhookUrl.split('/').pop();
  const storedToken = await api.db('automations').where({ id: automation.body.data.id }).first('webhook_token', 'webhook_token_hash');
  expect(JSON.stringify(storedToken)).not.toContain(token);
  expect(openText(api.config.encryptionKeys!, storedToken.webhook_token)).toBe(token);
  expect((await api.request('POST', new URL(automation.body.data.webhookUrl).pathname, { body: { a: 1 } })).status).toBe(202);

  // Used where they are needed: Meta's verification handshake reads the sealed verify token.
  const challenge = await api.request('GET', `/webhooks/whatsapp/${instance.body.data.id}?hub.mode=subscribe&hub.challenge=42&hub.verify_token=${plain.verifyToken}`);
  expect(challenge.status).toBe(200);
  expect(challenge.text).toBe('42');
  expectError(await api.request('GET', `/webhooks/whatsapp/${instance.body.data.id}?hub.mode=subscribe&hub.challenge=42&hub.verify_token=wrong`), 401, 'UNAUTHORIZED');
});

it('seals rows written in plain text and re-seals with a new key after a rotation', async () => {
  // Its own database: the pass re-seals every row it finds, and the shared test stack's worker
  // must keep reading the rows of the other test files with its own key.
  const url = await ensureDatabase(process.env.TEST_ADMIN_DATABASE_URL!, 'crm_secrets_rotation_test', true);
  const db = createDb(url, { max: 2 });
  try {
    await db.migrate.latest(migrationConfig);
    const [ws] = await db('workspaces').insert({ name: 'Rotation' }).returning('id');
    const [instance] = await db('instances')
      .insert({ workspace_id: ws.id, name: 'Legacy', channel: 'whatsapp', provider: 'cloud', connected: false, config: JSON.stringify({ phoneNumberId: 'PN-legacy', accessToken: 'legacy-token' }) })
      .returning('id');
    const [subscription] = await db('webhook_subscriptions').insert({ workspace_id: ws.id, url: 'https://hooks.example.com/legacy', events: ['*'], secret: 'whsec_legacy' }).returning('id');
    const read = async () => ({
      token: (await db('instances').where({ id: instance.id }).first('config')).config.accessToken as string,
      secret: (await db('webhook_subscriptions').where({ id: subscription.id }).first('secret')).secret as string,
    });

    const old = parseKeyRing(newKeyRingValue('first'));
    await sealStoredSecrets(db, old);
    const sealed = await read();
    expect([sealedWith(sealed.token), sealedWith(sealed.secret)]).toEqual(['first', 'first']);
    expect([openText(old, sealed.token), openText(old, sealed.secret)]).toEqual(['legacy-token', 'whsec_legacy']);

    // Rotation: the new key first, the old one still listed; the pass moves every value to the new key.
    const rotated = parseKeyRing(`${newKeyRingValue('rotated')},${[...old.byId].map(([id, key]) => `${id}:${key.toString('base64')}`).join(',')}`);
    await sealStoredSecrets(db, rotated);
    const moved = await read();
    expect([sealedWith(moved.token), sealedWith(moved.secret)]).toEqual(['rotated', 'rotated']);
    expect([openText(rotated, moved.token), openText(rotated, moved.secret)]).toEqual(['legacy-token', 'whsec_legacy']);
    expect(() => openText(old, moved.token)).toThrow(/key "rotated", which ENCRYPTION_KEYS does not list/);
  } finally {
    await db.destroy();
  }
});
