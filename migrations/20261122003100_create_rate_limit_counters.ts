import type { Knex } from 'knex';

export async function up(knex: Knex): Promise<void> {
  await knex.raw(`
-- UNLOGGED: counters are cheap to lose on a crash and hot on every request.
CREATE UNLOGGED TABLE rate_limit_counters (
  bucket text NOT NULL,
  window_start timestamptz NOT NULL,
  count integer NOT NULL CHECK (count >= 0),
  PRIMARY KEY (bucket, window_start)
);
CREATE INDEX rate_limit_counters_window_idx ON rate_limit_counters (window_start);
  `);
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw(`DROP TABLE rate_limit_counters;`);
}
