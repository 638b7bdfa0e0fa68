import type { Knex } from 'knex';

// One run per (automation, business event): the dispatcher taking an outbox row again after a
// crash finds the run it already recorded instead of adding a second.
export async function up(knex: Knex): Promise<void> {
  await knex.raw(`CREATE UNIQUE INDEX automation_runs_event_uq ON automation_runs (automation_id, event_id) WHERE event_id IS NOT NULL;`);
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw(`DROP INDEX automation_runs_event_uq;`);
}
