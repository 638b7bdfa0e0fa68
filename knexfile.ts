import fs from 'node:fs';
import path from 'node:path';
import type { Knex } from 'knex';
import { loadConfig } from './domain/platform/config';

const MIGRATIONS_DIR = path.join(__dirname, 'migrations');

/**
 * The files of migrations/, each recorded in `knex_migrations` under its source file's name
 * (`<stamp>_<change>.ts`) whether it runs from the sources (tsx, jest) or compiled (dist/, where
 * it is a .js): Knex's own loader records the file's name as it finds it, so the compiled
 * migration job would take every migration the sources applied for a missing one ("The migration
 * directory is corrupt") and a database it migrated for one the sources never ran.
 */
const migrationFiles: Knex.MigrationSource<string> = {
  async getMigrations() {
    const files = (await fs.promises.readdir(MIGRATIONS_DIR)).filter((f) => /\.(ts|js)$/.test(f) && !f.endsWith('.d.ts')).sort();
    const names = files.map(sourceName);
    const twice = names.filter((name, i) => names.indexOf(name) !== i);
    if (twice.length) throw new Error(`${MIGRATIONS_DIR} holds both the .ts and the .js of ${twice.join(', ')}`);
    return files;
  },
  getMigrationName: sourceName,
  async getMigration(file) {
    // Loaded as Knex loads a migration (require), through whatever runs this file: tsx, jest or plain node.
    // eslint-disable-next-line @typescript-eslint/no-require-imports
    return require(path.join(MIGRATIONS_DIR, file)) as Knex.Migration;
  },
};

function sourceName(file: string): string {
  return file.replace(/\.js$/, '.ts');
}

/** Migrations are the only way the schema changes: dated names, one change per file, reversible. */
export const migrationConfig: Knex.MigratorConfig = {
  migrationSource: migrationFiles,
  tableName: 'knex_migrations',
};

const config: Knex.Config = {
  client: 'pg',
  connection: loadConfig().databaseUrl,
  migrations: migrationConfig,
};

export default config;
