import type { Knex } from 'knex';

// One row per workspace made every new contact of a workspace wait for the previous one's commit:
// the trigger's upsert holds that row's lock until the end of the creating transaction (a send's
// whole prepare step), so concurrent sends and lead upserts in one workspace ran one at a time.
// The count is now spread over SHARDS rows per workspace, one per database connection (backend pid
// modulo SHARDS): concurrent transactions on different connections touch different rows, and the
// total is their sum (at most SHARDS index entries). A shard may go negative (a contact counted in
// on one connection and out on another); only the sum is meaningful.
const SHARDS = 32;

export async function up(knex: Knex): Promise<void> {
  await knex.raw(`
ALTER TABLE contact_counts DROP CONSTRAINT contact_counts_pkey;
ALTER TABLE contact_counts DROP CONSTRAINT contact_counts_canonical_check;
ALTER TABLE contact_counts ADD COLUMN shard smallint NOT NULL DEFAULT 0;
ALTER TABLE contact_counts ADD PRIMARY KEY (workspace_id, shard);

CREATE OR REPLACE FUNCTION contact_counts_add(ws uuid, d bigint) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
  IF d = 0 THEN
    RETURN;
  END IF;
  -- A workspace being deleted (its contacts cascading) may already be gone: nothing to count then.
  INSERT INTO contact_counts AS c (workspace_id, shard, canonical)
    SELECT ws, pg_backend_pid() % ${SHARDS}, d WHERE EXISTS (SELECT 1 FROM workspaces WHERE id = ws)
  ON CONFLICT (workspace_id, shard) DO UPDATE SET canonical = c.canonical + EXCLUDED.canonical;
END $$;
  `);
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw(`
CREATE TEMPORARY TABLE contact_counts_sum ON COMMIT DROP AS SELECT workspace_id, sum(canonical)::bigint AS canonical FROM contact_counts GROUP BY workspace_id;
DELETE FROM contact_counts;
ALTER TABLE contact_counts DROP CONSTRAINT contact_counts_pkey;
ALTER TABLE contact_counts DROP COLUMN shard;
INSERT INTO contact_counts (workspace_id, canonical) SELECT workspace_id, canonical FROM contact_counts_sum;
ALTER TABLE contact_counts ADD PRIMARY KEY (workspace_id);
ALTER TABLE contact_counts ADD CONSTRAINT contact_counts_canonical_check CHECK (canonical >= 0);

CREATE OR REPLACE FUNCTION contact_counts_add(ws uuid, d bigint) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
  IF d > 0 THEN
    INSERT INTO contact_counts AS c (workspace_id, canonical) VALUES (ws, d)
    ON CONFLICT (workspace_id) DO UPDATE SET canonical = c.canonical + EXCLUDED.canonical;
  ELSIF d < 0 THEN
    UPDATE contact_counts SET canonical = canonical + d WHERE workspace_id = ws;
  END IF;
END $$;
  `);
}
