import type { Knex } from 'knex';

// The outbox dispatcher claims pending rows fairly across workspaces (workers/outbox-dispatcher.ts):
// it walks the workspaces that have pending rows (a skip scan over this index, one probe per
// workspace) and takes each one's oldest rows. Without it, finding the next workspace would read
// every pending row of a tenant with a large backlog, on every pass.
export async function up(knex: Knex): Promise<void> {
  await knex.raw(`CREATE INDEX outbox_events_pending_workspace_idx ON outbox_events (workspace_id, seq) WHERE dispatched_at IS NULL;`);
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw(`DROP INDEX outbox_events_pending_workspace_idx;`);
}
