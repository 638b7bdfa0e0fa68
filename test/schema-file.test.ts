import fs from 'node:fs';
import { describeSchema, SCHEMA_FILE } from '../scripts/schema';
import { ensureDatabase, migrateLatest } from '../scripts/stack';

/** docs/schema.sql is what the migrations build: a migration added without regenerating it fails here. */
describe('docs/schema.sql', () => {
  it('matches a freshly migrated database', async () => {
    // A database of its own: other suites' objects in the shared test database must not show up.
    const url = await ensureDatabase(process.env.TEST_ADMIN_DATABASE_URL!, 'crm_schema_file_test', true);
    await migrateLatest(url, () => undefined);
    const actual = await describeSchema(url);
    const committed = fs.existsSync(SCHEMA_FILE) ? fs.readFileSync(SCHEMA_FILE, 'utf8') : '';
    if (committed !== actual) {
      const want = actual.split('\n');
      const have = committed.split('\n');
      let line = 0;
      while (line < want.length && want[line] === have[line]) line += 1;
      throw new Error(
        `docs/schema.sql does not match the migrated schema: run \`npm run schema\` and commit docs/schema.sql.\n` +
          `First difference at line ${line + 1}:\n  file:       ${have[line] ?? '(end of file)'}\n  migrations: ${want[line] ?? '(end of file)'}`,
      );
    }
  });
});
