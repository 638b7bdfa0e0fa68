/**
 * The "Low" findings of the security review, each proven against the running stack: what an
 * unauthenticated or ordinary caller can learn or reach that it should not.
 */
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
