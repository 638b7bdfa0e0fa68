import type { Knex } from 'knex';

/**
 * A broadcast says why it waits (the daily counters, a disconnected instance, an inactive
 * subscription, a template no longer approved) or why the service cancelled it (its audience over
 * the plan's limit when frozen, its instance removed): `code`. And the throughput of one instance
 * is shared by its broadcasts: one row per instance holds the time of its next free provider-call
 * slot, which each broadcast reserves one call at a time.
 */
export async function up(knex: Knex): Promise<void> {
  await knex.raw(`
ALTER TABLE broadcasts ADD COLUMN code text CHECK (code IS NULL OR length(code) <= 100);

CREATE TABLE broadcast_instance_pacing (
  workspace_id uuid NOT NULL,
  instance_id uuid PRIMARY KEY,
  next_call_at timestamptz NOT NULL,
  FOREIGN KEY (workspace_id, instance_id) REFERENCES instances (workspace_id, id) ON DELETE CASCADE
);
  `);
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw(`
DROP TABLE broadcast_instance_pacing;
ALTER TABLE broadcasts DROP COLUMN code;
  `);
}
