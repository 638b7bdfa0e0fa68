import { createDb } from '../domain/platform/db';
import { migrationConfig } from '../knexfile';
import { ensureDatabase } from '../scripts/stack';

describe('migrations', () => {
  it('apply on an empty database, roll back completely, and apply again', async () => {
    const url = await ensureDatabase(process.env.TEST_ADMIN_DATABASE_URL!, 'crm_migrations_test', true);
    const db = createDb(url, { max: 1 });
    const tables = async (): Promise<string[]> =>
      (await db.raw(`SELECT tablename FROM pg_tables WHERE schemaname = 'public' AND tablename NOT LIKE 'knex_%' ORDER BY 1`)).rows.map(
        (r: { tablename: string }) => r.tablename,
      );
    try {
      const [, applied] = await db.migrate.latest(migrationConfig);
      expect(applied.length).toBeGreaterThan(20);
      const created = await tables();
      for (const table of [
        'workspaces',
        'api_keys',
        'contacts',
        'deals',
        'outbox_events',
        'webhook_deliveries',
        'automation_runs',
        'rate_limit_counters',
        'daily_counters',
      ]) {
        expect(created).toContain(table);
      }
      // Each migration reverses cleanly, one by one.
      for (let i = 0; i < applied.length; i += 1) await db.migrate.down(migrationConfig);
      expect(await tables()).toEqual([]);
      const [, again] = await db.migrate.latest(migrationConfig);
      expect(again).toEqual(applied);
      expect(await tables()).toEqual(created);
    } finally {
      await db.destroy();
    }
  });
});
