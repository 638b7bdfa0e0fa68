import { ensureDatabase, migrateLatest } from '../scripts/stack';
import { createDb, type Db } from '../domain/platform/db';
import { CLAIM_PENDING_SQL, claimPendingBindings, claimPendingFairly } from '../domain/webhooks/outbox';

/**
 * The outbox dispatcher's claim after a burst of events (a 50,000-recipient broadcast records as
 * many rows): PostgreSQL's statistics, taken while the outbox was drained as it is almost always,
 * say no row is pending. Seen in the bench: the claim then ran into the worker's statement timeout
 * (15 s), and no workspace's events were dispatched meanwhile. A database of its own: no
 * dispatcher claims its rows, and its statistics are this file's.
 */
let db: Db;
const workspaces: string[] = [];
beforeAll(async () => {
  const databaseUrl = await ensureDatabase(process.env.TEST_ADMIN_DATABASE_URL!, 'crm_outbox_claim_test', true);
  await migrateLatest(databaseUrl, () => undefined);
  db = createDb(databaseUrl);
  // Autovacuum must not refresh the statistics mid-test: the burst is new to them.
  await db.raw('ALTER TABLE outbox_events SET (autovacuum_enabled = false)');
  for (const name of ['burst', 'neighbour']) {
    const [{ id }] = await db('workspaces')
      .insert({ name: `outbox claim ${name}` })
      .returning('id');
    workspaces.push(id);
  }
});
afterAll(async () => {
  await db?.destroy();
});

const insertRows = (workspaceId: string, count: number, dispatched: boolean) =>
  db.raw(
    `INSERT INTO outbox_events (workspace_id, kind, name, payload, dispatched_at)
     SELECT ?, 'webhook', 'lead.created', '{}'::jsonb, CASE WHEN ? THEN now() END FROM generate_series(1, ?)`,
    [workspaceId, dispatched, count],
  );

describe('claiming outbox rows after a burst the statistics have not seen', () => {
  it('goes through the rows it claims, not the burst, and takes each workspace its oldest rows', async () => {
    const [burst, neighbour] = workspaces;
    // The usual state: everything dispatched, and analysed so.
    await insertRows(burst, 20_000, true);
    await db.raw('ANALYZE outbox_events');
    // Then the burst, and a neighbour's few rows behind it.
    await insertRows(burst, 5_000, false);
    await insertRows(neighbour, 10, false);

    const options = {
      busy: [],
      after: '00000000-0000-0000-0000-000000000000',
      workspaces: 8,
      rowsPerWorkspace: 50,
      leaseSeconds: 60,
    };
    // The plan as it runs (rolled back: its claims are given back): the most rows any of its steps
    // went through (returned or filtered out, over all its loops).
    type PlanNode = { 'Actual Rows': number; 'Actual Loops': number; 'Rows Removed by Filter'?: number; Plans?: PlanNode[] };
    const rowsThrough = (node: PlanNode): number[] => [
      (node['Actual Rows'] + (node['Rows Removed by Filter'] ?? 0)) * node['Actual Loops'],
      ...(node.Plans ?? []).flatMap(rowsThrough),
    ];
    const trx = await db.transaction();
    let most: number;
    try {
      const { rows } = await trx.raw(`EXPLAIN (ANALYZE, FORMAT JSON) ${CLAIM_PENDING_SQL}`, claimPendingBindings(options));
      most = Math.max(...rowsThrough(rows[0]['QUERY PLAN'][0].Plan as PlanNode));
    } finally {
      await trx.rollback();
    }
    // 60 rows claimed: no step goes through the burst's 5,000 (once, or once per row: 25 M before).
    expect(most).toBeLessThanOrEqual(120);

    const claimed = await claimPendingFairly(db, options);
    expect([...claimed.keys()].sort()).toEqual([burst, neighbour].sort());
    expect(claimed.get(burst)).toHaveLength(50);
    expect(claimed.get(neighbour)).toHaveLength(10);
    const { rows: oldest } = await db.raw(
      `SELECT seq::text FROM outbox_events WHERE workspace_id = ? AND dispatched_at IS NULL ORDER BY seq LIMIT 50`,
      [burst],
    );
    expect(claimed.get(burst)!.map((r) => Number(r.seq))).toEqual(oldest.map((r: { seq: string }) => Number(r.seq)));
    // Leased: a second claim takes the burst's next rows, and nothing of the neighbour's.
    const again = await claimPendingFairly(db, options);
    expect([...again.keys()]).toEqual([burst]);
    expect(Number(again.get(burst)![0].seq)).toBe(Number(claimed.get(burst)!.at(-1)!.seq) + 1);
  });
});
