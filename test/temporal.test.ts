import { loadConfig } from '../domain/platform/config';
import { temporalClientFactory, SEARCH_ATTRIBUTES } from '../domain/platform/temporal';
import { startApi } from './helpers';

describe('Temporal', () => {
  it('runs a workflow through the real dev server and worker, reaching PostgreSQL from an activity', async () => {
    const config = loadConfig();
    const temporal = temporalClientFactory(config);
    try {
      const client = await temporal.get();
      const before = Date.now();
      const result = await client.workflow.execute('systemCheckWorkflow', {
        taskQueue: config.taskQueue,
        workflowId: `system-check-${before}-${Math.random().toString(36).slice(2)}`,
        workflowExecutionTimeout: '30 seconds',
      });
      expect(result.databaseTime).toMatch(/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/);
      expect(Math.abs(new Date(result.databaseTime).getTime() - before)).toBeLessThan(30_000);
    } finally {
      await temporal.close();
    }
  });

  it('has the custom search attributes the workflows use registered', async () => {
    const config = loadConfig();
    const temporal = temporalClientFactory(config);
    try {
      const client = await temporal.get();
      const res = await client.connection.operatorService.listSearchAttributes({ namespace: config.temporalNamespace });
      for (const name of Object.keys(SEARCH_ATTRIBUTES)) expect(Object.keys(res.customAttributes ?? {})).toContain(name);
    } finally {
      await temporal.close();
    }
  });
});

describe('health and readiness', () => {
  it('reports ready when PostgreSQL and Temporal answer', async () => {
    const api = await startApi();
    try {
      expect((await api.request('GET', '/health')).body).toEqual({ status: 'ok' });
      const ready = await api.request('GET', '/ready');
      expect(ready.status).toBe(200);
      expect(ready.body).toEqual({ status: 'ready', checks: { database: 'ok', temporal: 'ok' } });
    } finally {
      await api.close();
    }
  });

  it('answers 503 naming the missing dependency when Temporal is unreachable, while /health stays up', async () => {
    const api = await startApi({ config: { temporalAddress: '127.0.0.1:1' } });
    try {
      expect((await api.request('GET', '/health')).status).toBe(200);
      const ready = await api.request('GET', '/ready');
      expect(ready.status).toBe(503);
      expect(ready.body.status).toBe('unavailable');
      expect(ready.body.checks.database).toBe('ok');
      expect(ready.body.checks.temporal).toMatch(/^unavailable/);
    } finally {
      await api.close();
    }
  });

  it('answers 503 when the database is unreachable', async () => {
    const api = await startApi({ config: { databaseUrl: 'postgres://postgres@127.0.0.1:1/none' } });
    try {
      const ready = await api.request('GET', '/ready');
      expect(ready.status).toBe(503);
      expect(ready.body.checks.database).toMatch(/^unavailable/);
    } finally {
      await api.close();
    }
  });
});
