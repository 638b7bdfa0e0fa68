import type { Db } from './db';

/**
 * The benchmark's yardstick query (`npm run bench` only): one contact by primary key, the least
 * work a read can do through the same pool. Deliberately not scoped by workspace: the route that
 * runs it is mounted only when BENCH_BASELINE=1, which NODE_ENV=production refuses (domain/config.ts).
 */
export async function baselineContact(db: Db, id: string): Promise<{ id: string; name: string; phone: string; email: string | null; created_at: Date } | undefined> {
  return db('contacts').where({ id }).first('id', 'name', 'phone', 'email', 'created_at');
}
