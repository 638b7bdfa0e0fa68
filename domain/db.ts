import knex, { Knex } from 'knex';
import { types } from 'pg';

// BIGINT (count(*)) as a JS number: our counts stay far below 2^53.
types.setTypeParser(types.builtins.INT8, (value: string) => Number(value));

export type Db = Knex;

export function createDb(databaseUrl: string, pool: { min?: number; max?: number } = {}): Db {
  return knex({
    client: 'pg',
    connection: databaseUrl,
    pool: { min: pool.min ?? 0, max: pool.max ?? 10 },
    acquireConnectionTimeout: 10_000,
  });
}
