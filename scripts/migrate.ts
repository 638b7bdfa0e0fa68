/** `npm run migrate` / `npm run migrate:rollback`: applies or reverts migrations on DATABASE_URL. */
import { createDb, loadConfig } from '../domain/platform';
import { migrationConfig } from '../knexfile';

async function main(): Promise<void> {
  const direction = process.argv[2] ?? 'latest';
  const db = createDb(loadConfig().databaseUrl, { max: 1 });
  try {
    if (direction === 'rollback') {
      const [batch, names] = await db.migrate.rollback(migrationConfig, true);
      console.log(`rolled back batch ${batch}: ${names.length} migrations`);
    } else {
      const [batch, names] = await db.migrate.latest(migrationConfig);
      console.log(names.length ? `batch ${batch}: ${names.length} migrations applied` : 'schema up to date');
    }
  } finally {
    await db.destroy();
  }
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
