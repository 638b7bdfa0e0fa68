import type { Knex } from 'knex';

// What a send is asked to deliver (recipient and content) lives here, not in the send workflow's
// input: Temporal's history then holds only ids, and an operator with UI access reads no message.
// The id is the workflow's handle on the row; an automation's send uses `<run id>/<action index>`
// so a retried action finds its own row. `replaces`: the run of the same Idempotency-Key whose
// refusal this request retries; unique, so two retries racing after one refusal start one send.
// Pruned after RETENTION_DAYS (domain/maintenance/retention.ts).
export async function up(knex: Knex): Promise<void> {
  await knex.raw(`
CREATE TABLE send_requests (
  workspace_id uuid NOT NULL REFERENCES workspaces(id) ON DELETE CASCADE,
  id text NOT NULL,
  phone text,
  instance_id uuid,
  conversation_id uuid,
  message jsonb NOT NULL,
  replaces text,
  created_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (workspace_id, id)
);
CREATE INDEX send_requests_created_idx ON send_requests (created_at);
CREATE UNIQUE INDEX send_requests_replaces_uq ON send_requests (workspace_id, replaces) WHERE replaces IS NOT NULL;`);
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw(`DROP TABLE send_requests;`);
}
