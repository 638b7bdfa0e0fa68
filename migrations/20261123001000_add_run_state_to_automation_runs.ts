import type { Knex } from 'knex';

// A run's private inputs and working state, kept on its row instead of in the run workflow's
// history: the inbound webhook's body, the actions as they were when the run began (the run's
// snapshot) and its context (contact, deal, variables). The activities load them by run id and
// finishRun clears them, so they are kept no longer than the run needs them.
export async function up(knex: Knex): Promise<void> {
  await knex.raw(`ALTER TABLE automation_runs ADD COLUMN webhook_body jsonb, ADD COLUMN actions jsonb, ADD COLUMN context jsonb;`);
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw(`ALTER TABLE automation_runs DROP COLUMN webhook_body, DROP COLUMN actions, DROP COLUMN context;`);
}
