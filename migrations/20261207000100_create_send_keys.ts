import type { Knex } from 'knex';

// The Idempotency-Key of a send the API makes itself (api/send.ts): one row per key and
// workspace, naming the send_requests row of the send that holds it. `state`: 'sending' while
// the API makes the first provider attempt; 'answered' once it recorded the message (`answer`
// is the 201 body, replayed for 10 minutes after `updated_at`); 'refused' when the rules refused
// it (the key is free again); 'workflow' once a send workflow (id send/<workspace>/key/<key>)
// carries it on, from then on Temporal's own id rules decide the key. A row left 'sending' by an
// API process that died is handed to a workflow by the worker's sweep (workers/send-sweep.ts).
// `fingerprint`: the request's canonical hash, so a key reused for another message is refused.
export async function up(knex: Knex): Promise<void> {
  await knex.raw(`
CREATE TABLE send_keys (
  workspace_id uuid NOT NULL REFERENCES workspaces(id) ON DELETE CASCADE,
  key text NOT NULL,
  request_id text NOT NULL,
  fingerprint text NOT NULL,
  state text NOT NULL CHECK (state IN ('sending', 'answered', 'refused', 'workflow')),
  answer jsonb,
  updated_at timestamptz NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (workspace_id, key)
);
CREATE INDEX send_keys_sending_idx ON send_keys (updated_at) WHERE state = 'sending';
CREATE INDEX send_keys_created_idx ON send_keys (created_at);`);
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw(`DROP TABLE send_keys;`);
}
