import type { Knex } from 'knex';

// Every request upserted the same `ip:<profile>:<ip>` and `key:<id>` rows: under load the
// authentication statement mostly waited for those row locks. A bucket with a large limit is now
// counted on several rows (`shard`, one per database connection), and its count is their sum.
export async function up(knex: Knex): Promise<void> {
  await knex.raw(`
ALTER TABLE rate_limit_counters DROP CONSTRAINT rate_limit_counters_pkey;
ALTER TABLE rate_limit_counters ADD COLUMN shard smallint NOT NULL DEFAULT 0;
ALTER TABLE rate_limit_counters ADD PRIMARY KEY (bucket, window_start, shard);
  `);
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw(`
-- Counters are disposable (one-minute windows): the sharded rows are dropped rather than merged.
DELETE FROM rate_limit_counters WHERE shard <> 0;
ALTER TABLE rate_limit_counters DROP CONSTRAINT rate_limit_counters_pkey;
ALTER TABLE rate_limit_counters DROP COLUMN shard;
ALTER TABLE rate_limit_counters ADD PRIMARY KEY (bucket, window_start);
  `);
}
