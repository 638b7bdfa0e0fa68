import type { Db } from '../domain/db';

/**
 * Activities are built by a factory that takes their dependencies, so the worker wires real ones
 * and nothing in a workflow touches the world directly.
 */
export interface ActivityDeps {
  db: Db;
}

export function createActivities({ db }: ActivityDeps) {
  return {
    /** Proves a workflow can reach PostgreSQL through an activity: returns the database clock. */
    async databaseTime(): Promise<string> {
      const { rows } = await db.raw<{ rows: { now: Date }[] }>('SELECT now() AS now');
      return rows[0].now.toISOString();
    },
  };
}

export type Activities = ReturnType<typeof createActivities>;
