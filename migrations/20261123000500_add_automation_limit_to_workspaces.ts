import type { Knex } from 'knex';

// The plan's cap on a workspace's automations (NULL: no cap), like deal_limit.
export async function up(knex: Knex): Promise<void> {
  await knex.raw(`ALTER TABLE workspaces ADD COLUMN automation_limit integer CHECK (automation_limit >= 0);`);
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw(`ALTER TABLE workspaces DROP COLUMN automation_limit;`);
}
