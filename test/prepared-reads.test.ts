import { ensureDatabase, migrateLatest } from '../scripts/stack';
import { createWorkspace, seedContact, seedPipeline, startApi, TestApi } from './helpers';
import { uniqueMobile } from './phones';

/**
 * The hot reads run as named prepared statements (domain/platform/db.ts `prepared`): deal activities,
 * pipelines, the unfiltered lead page and a filtered list's prefix (tag, deal and search filters). What a client must never
 * notice: a migration adding a column while the API serves, or a client asking for many list
 * shapes (each a statement text of its own).
 */
let api: TestApi;
const newPhone = (): string => uniqueMobile('21');

// A database of its own: adding a column to contacts locks the table and holds back every other
// test file's transactions (a sync reading beside it sees its cursor held back and reads a row twice).
beforeAll(async () => {
  const databaseUrl = await ensureDatabase(process.env.TEST_ADMIN_DATABASE_URL!, 'crm_prepared_reads_test', true);
  await migrateLatest(databaseUrl, () => undefined);
  api = await startApi({ config: { databaseUrl } });
});
afterAll(() => api.close());

describe('prepared reads', () => {
  it('keep answering deal activities, pipelines and lead lists while a migration adds a column to their tables', async () => {
    const w = await createWorkspace(api, {
      scopes: ['deals:read', 'deals:write', 'activities:read', 'pipelines:read', 'leads:read', 'leads:write'],
    });
    const p = await seedPipeline(api, w.id, { name: 'Rollout', stages: ['A', 'B'] });
    const lead = (
      await api.request('POST', '/api/v1/leads', { key: w.key, body: { phone: newPhone(), name: 'Rollout lead', tags: ['rollout'] } })
    ).body.data;
    await seedContact(api, w.id, { phone: newPhone(), name: 'Other lead' });
    const deal = (await api.request('POST', '/api/v1/deals', { key: w.key, body: { contactId: lead.id, pipeline: 'rollout' } })).body.data;
    await api.request('PATCH', `/api/v1/deals/${deal.id}`, { key: w.key, body: { stageId: p.stages[1].id } });
    const read = async () => {
      const answers = await Promise.all([
        api.request('GET', `/api/v1/deals/${deal.id}/activities`, { key: w.key }),
        api.request('GET', '/api/v1/pipelines', { key: w.key }),
        api.request('GET', '/api/v1/leads', { key: w.key }),
        api.request('GET', '/api/v1/leads?tag=rollout', { key: w.key }),
        api.request('GET', '/api/v1/leads?q=rollout', { key: w.key }),
        api.request('GET', `/api/v1/leads?stageId=${p.stages[1].id}&status=open`, { key: w.key }),
      ]);
      const [activities, pipelines, leads, tagged, searched, staged] = answers;
      return {
        status: answers.map((a) => a.status),
        entries: activities.body.data,
        pipelines: pipelines.body.pipelines,
        leads: leads.body,
        tagged: tagged.body,
        searched: searched.body,
        staged: staged.body,
      };
    };
    // Enough reads that every pooled connection has prepared each statement, past the five
    // executions after which PostgreSQL may keep a generic plan.
    const before = await read();
    expect(before.status).toEqual([200, 200, 200, 200, 200, 200]);
    expect(before.entries).toHaveLength(1);
    expect(before.leads.data.map((l: { name: string }) => l.name)).toEqual(['Other lead', 'Rollout lead']);
    expect(before.tagged.data.map((l: { id: string }) => l.id)).toEqual([lead.id]);
    expect(before.searched.data.map((l: { id: string }) => l.id)).toEqual([lead.id]);
    expect(before.staged.data.map((l: { id: string }) => l.id)).toEqual([lead.id]);
    for (let round = 0; round < 8; round++) await Promise.all(Array.from({ length: 10 }, read));
    // What a deploy's migration does while the running API keeps serving.
    await api.db.raw(
      'ALTER TABLE deal_activities ADD COLUMN rollout_probe int; ALTER TABLE pipelines ADD COLUMN rollout_probe int; ALTER TABLE contacts ADD COLUMN rollout_probe int',
    );
    try {
      const after = await Promise.all(Array.from({ length: 20 }, read));
      for (const answer of after) expect(answer).toEqual(before);
    } finally {
      await api.db.raw(
        'ALTER TABLE deal_activities DROP COLUMN rollout_probe; ALTER TABLE pipelines DROP COLUMN rollout_probe; ALTER TABLE contacts DROP COLUMN rollout_probe',
      );
    }
  });

  it('answer every lead list shape a client asks for, while each database connection keeps at most 200 prepared statements', async () => {
    const w = await createWorkspace(api, { scopes: ['leads:read'] });
    const names = ['Ana', 'Bia', 'Caio'];
    for (const name of names) await seedContact(api, w.id, { phone: newPhone(), name });
    // Every page size with both orders of two sorts: 400 statement texts of the unfiltered page.
    for (let limit = 1; limit <= 100; limit++) {
      const pages = await Promise.all(
        ['sort=name&order=asc', 'sort=name&order=desc', 'sort=createdAt&order=asc', 'sort=createdAt&order=desc'].map((sort) =>
          api.request('GET', `/api/v1/leads?limit=${limit}&${sort}`, { key: w.key }),
        ),
      );
      const [nameAsc, nameDesc, createdAsc, createdDesc] = pages.map((page) => {
        expect(page.status).toBe(200);
        expect(page.body.pagination).toMatchObject({ total: 3, limit, hasMore: limit < 3 });
        return page.body.data.map((l: { name: string }) => l.name);
      });
      expect(nameAsc).toEqual(names.slice(0, limit));
      expect(nameDesc).toEqual([...names].reverse().slice(0, limit));
      expect(createdAsc).toEqual(names.slice(0, limit));
      expect(createdDesc).toEqual([...names].reverse().slice(0, limit));
    }
    // Held at once, each query takes a connection of its own: every connection of the pool.
    const pool = (api.db.client.pool as { max: number }).max;
    const counts = await Promise.all(
      Array.from({ length: pool }, () =>
        api.db.raw('SELECT pg_sleep(0.2), (SELECT count(*)::int FROM pg_prepared_statements) AS n').then((r) => r.rows[0].n as number),
      ),
    );
    expect(Math.max(...counts)).toBeGreaterThan(0);
    expect(Math.max(...counts)).toBeLessThanOrEqual(200);
  });
});
