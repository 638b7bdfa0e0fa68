import type { Knex } from 'knex';

// The chain a run belongs to (the root event's id), indexed: starting a run counts the chain's
// runs (the run budget) and looks for the same automation on the same record in it (no self-retrigger).
export async function up(knex: Knex): Promise<void> {
  await knex.raw(`
ALTER TABLE automation_runs ADD COLUMN chain_id uuid;
CREATE INDEX automation_runs_chain_idx ON automation_runs (chain_id, automation_id) WHERE chain_id IS NOT NULL;`);
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw(`DROP INDEX automation_runs_chain_idx; ALTER TABLE automation_runs DROP COLUMN chain_id;`);
}
