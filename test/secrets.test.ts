import { createWorkspace, startApi } from './helpers';

describe('secrets in logs', () => {
  it('never logs API keys, the admin token, provider tokens or inbound webhook tokens', async () => {
    const api = await startApi();
    try {
      const ws = await createWorkspace(api, { scopes: ['pipelines:read'] });
      await api.request('GET', '/api/v1/pipelines', { key: ws.key });
      await api.request('GET', '/api/v1/pipelines', { key: `${ws.key}x` });
      await api.admin('POST', `/admin/v1/workspaces/${ws.id}/instances`, {
        name: 'n',
        channel: 'whatsapp',
        provider: 'cloud',
        config: { accessToken: 'EAAG-token-never-logged', appSecret: 'app-secret-never-logged' },
      });
      await api.request('POST', '/api/automations/webhook-in/tok_secret_in_the_url', { body: {} });
      const all = api.logs.join('\n');
      expect(api.logs.length).toBeGreaterThan(3);
      expect(all).not.toContain(ws.key.slice(8));
      expect(all).not.toContain(api.config.adminToken);
      expect(all).not.toContain('EAAG-token-never-logged');
      expect(all).not.toContain('app-secret-never-logged');
      expect(all).not.toContain('tok_secret_in_the_url');
      expect(all).toContain('/webhook-in/[redacted]');
    } finally {
      await api.close();
    }
  });
});
