import type { Knex } from 'knex';

// The Idempotency-Key of a batch request (POST /api/v1/leads/batch, /api/v1/deals/batch) and its
// answer, kept in PostgreSQL (the sends keep theirs in Temporal). One row per key and workspace:
// `claim` names the request that holds it while `state` is 'running', until `locked_until` (a
// process that died lets another request with the same body take over after that). `results`
// holds the item answers as JSON text, appended by each chunk in the chunk's own transaction, so
// a takeover resumes after the last committed chunk and replays what was done, byte for byte.
// `id` is what the retention job deletes by; rows are pruned 24 hours after `created_at`.
export async function up(knex: Knex): Promise<void> {
  await knex.raw(`
CREATE TABLE idempotent_requests (
  id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  workspace_id uuid NOT NULL REFERENCES workspaces(id) ON DELETE CASCADE,
  key text NOT NULL,
  operation text NOT NULL,
  request_hash text NOT NULL,
  state text NOT NULL DEFAULT 'running' CHECK (state IN ('running', 'done')),
  claim uuid NOT NULL,
  results text[] NOT NULL DEFAULT '{}',
  locked_until timestamptz NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now(),
  UNIQUE (workspace_id, key)
);
CREATE INDEX idempotent_requests_created_idx ON idempotent_requests (created_at);`);
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw(`DROP TABLE idempotent_requests;`);
}
