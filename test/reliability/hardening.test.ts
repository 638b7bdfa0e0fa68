/**
 * The "Low" findings of the security review, each proven against the running stack: what an
 * unauthenticated or ordinary caller can learn or reach that it should not.
 */
import { once } from 'node:events';
import { freePort, nodeTs, startChild, waitForHttp } from '../../scripts/stack';
import { loadConfig } from '../../domain/config';
import { startApi, TestApi } from '../helpers';

jest.setTimeout(60_000);

describe('GET /ready', () => {
  let api: TestApi;
  const user = 'ready_probe_user';
  const database = 'ready_probe_missing_db';

  beforeAll(async () => {
    // The suite's PostgreSQL, asked for a database that does not exist (its error names it and the
    // user), and a Temporal address where nothing listens.
    const url = new URL(loadConfig().databaseUrl);
    url.username = user;
    url.password = 'ready-probe-password';
    url.pathname = `/${database}`;
    api = await startApi({ config: { databaseUrl: url.toString(), temporalAddress: '127.0.0.1:1' } });
  });
  afterAll(async () => {
    await api?.close();
  });

  it('names each failing dependency with a fixed word, never the error text, and logs the detail', async () => {
    const res = await api.request('GET', '/ready');
    expect(res.status).toBe(503);
    expect(res.body).toEqual({ status: 'unavailable', checks: { database: 'unavailable', temporal: 'unavailable' } });
    for (const leak of [user, database, '127.0.0.1', 'ECONNREFUSED', 'password']) expect(res.text).not.toContain(leak);
    const logged = api.logs.filter((line) => line.includes('readiness check failed')).join('\n');
    expect(logged).toContain('"check":"database"');
    expect(logged).toContain('"check":"temporal"');
    expect(logged).toMatch(new RegExp(`${user}|${database}`));
  });
});

describe('BENCH_BASELINE (unauthenticated /__bench routes)', () => {
  it('is refused by the configuration under NODE_ENV=production, whatever its value', () => {
    for (const value of ['1', 'true', 'yes']) {
      expect(() => loadConfig({ BENCH_BASELINE: value, NODE_ENV: 'production' })).toThrow(/BENCH_BASELINE/);
    }
    expect(loadConfig({ NODE_ENV: 'production' }).benchBaseline).toBe(false);
    expect(loadConfig({ BENCH_BASELINE: '1' }).benchBaseline).toBe(true);
    expect(loadConfig({ BENCH_BASELINE: '1', NODE_ENV: 'development' }).benchBaseline).toBe(true);
  });

  it('stops the API process before it listens; the same environment without it starts', async () => {
    const server = nodeTs('api/server.ts');
    const port = await freePort();
    const env = { NODE_ENV: 'production', PORT: String(port), LOG_LEVEL: 'warn' };
    const refused = startChild({ name: 'bench-prod-api', ...server, env: { ...env, BENCH_BASELINE: '1' } });
    try {
      const exit = once(refused.process, 'exit').then(([code]) => code as number);
      const code = await Promise.race([exit, new Promise((resolve) => setTimeout(() => resolve('still running after 20 s'), 20_000).unref())]);
      expect(code).toBe(1);
      expect(refused.output()).toContain('BENCH_BASELINE');
      await expect(fetch(`http://127.0.0.1:${port}/__bench/baseline/00000000-0000-0000-0000-000000000000`)).rejects.toThrow();
    } finally {
      await refused.stop();
    }
    // Control: the refusal is BENCH_BASELINE's, not the rest of the environment's.
    const started = startChild({ name: 'prod-api', ...server, env: { ...env, BENCH_BASELINE: '' } });
    try {
      await waitForHttp(`http://127.0.0.1:${port}/health`, started, 30_000);
      expect((await fetch(`http://127.0.0.1:${port}/__bench/baseline/00000000-0000-0000-0000-000000000000`)).status).toBe(404);
    } finally {
      await started.stop();
    }
  });
});
