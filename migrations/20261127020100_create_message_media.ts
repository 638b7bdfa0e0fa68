import type { Knex } from 'knex';

/**
 * Inbound media (issue 37, item 2): the file of an inbound image, audio, video, document or sticker,
 * fetched from the provider by a workflow (workflows/inbound-media.ts) and kept here, in chunks of at
 * most 1 MiB, so neither the fetch nor the download holds a whole file. A row is written `pending` in
 * the webhook's transaction (it is also the work queue the worker's media dispatcher starts workflows
 * from: `started_at` null); it becomes `stored` or `unavailable` (with a reason). Both tables follow
 * their message's lifetime: deleting the message (its conversation, contact or workspace) deletes them.
 */
export async function up(knex: Knex): Promise<void> {
  await knex.raw(`
CREATE TABLE message_media (
  message_id uuid PRIMARY KEY REFERENCES messages (id) ON DELETE CASCADE,
  workspace_id uuid NOT NULL REFERENCES workspaces (id) ON DELETE CASCADE,
  instance_id uuid NOT NULL,
  type text NOT NULL CHECK (type IN ('image', 'audio', 'video', 'document', 'sticker')),
  media_ref text NOT NULL CHECK (length(media_ref) BETWEEN 1 AND 256),
  status text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'stored', 'unavailable')),
  mime_type text CHECK (length(mime_type) <= 255),
  size bigint CHECK (size >= 0),
  file_name text CHECK (length(file_name) <= 255),
  sha256 text CHECK (sha256 ~ '^[0-9a-f]{64}$'),
  reason text CHECK (length(reason) <= 1000),
  started_at timestamptz,
  created_at timestamptz NOT NULL DEFAULT now(),
  updated_at timestamptz NOT NULL DEFAULT now(),
  CHECK ((status = 'stored') = (sha256 IS NOT NULL AND size IS NOT NULL)),
  CHECK ((status = 'unavailable') = (reason IS NOT NULL))
);
CREATE INDEX message_media_workspace_idx ON message_media (workspace_id, message_id);
CREATE INDEX message_media_to_start_idx ON message_media (created_at) WHERE status = 'pending';
CREATE TABLE message_media_chunks (
  message_id uuid NOT NULL REFERENCES message_media (message_id) ON DELETE CASCADE,
  workspace_id uuid NOT NULL,
  seq integer NOT NULL CHECK (seq >= 0),
  data bytea NOT NULL CHECK (octet_length(data) BETWEEN 1 AND 1048576),
  PRIMARY KEY (message_id, seq)
);
  `);
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw(`DROP TABLE message_media_chunks; DROP TABLE message_media;`);
}
