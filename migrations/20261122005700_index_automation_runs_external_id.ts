import type { Knex } from 'knex';

// One run per (automation, externalId) for ever: the run workflow's id refuses a concurrent
// repeat, and this index keeps refusing it after Temporal has forgotten the closed workflow
// (its namespace retention). Filtered and duplicate records do not take the id.
export async function up(knex: Knex): Promise<void> {
  await knex.raw(
    `CREATE UNIQUE INDEX automation_runs_external_id_uq ON automation_runs (automation_id, external_id)
       WHERE external_id IS NOT NULL AND status IN ('running', 'completed', 'failed');`,
  );
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw(`DROP INDEX automation_runs_external_id_uq;`);
}
