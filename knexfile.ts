import path from 'node:path';
import type { Knex } from 'knex';
import { loadConfig } from './domain/platform/config';

/** Migrations are the only way the schema changes: dated names, one change per file, reversible. */
export const migrationConfig: Knex.MigratorConfig = {
  directory: path.join(__dirname, 'migrations'),
  loadExtensions: ['.ts', '.js'],
  tableName: 'knex_migrations',
};

const config: Knex.Config = {
  client: 'pg',
  connection: loadConfig().databaseUrl,
  migrations: migrationConfig,
};

export default config;
