import type { Knex } from 'knex';

// Stored inbound media have a plan limit per workspace (mediaStorageMb, default 10,240 MB): the
// files a workspace's contacts send are kept in the shared PostgreSQL, so their total is a count the
// tenant controls like the others, never unlimited (domain/messaging/media.ts markStored).
export async function up(knex: Knex): Promise<void> {
  await knex.raw(`
ALTER TABLE workspaces
  ADD COLUMN media_storage_mb integer NOT NULL DEFAULT 10240 CHECK (media_storage_mb >= 0);
CREATE INDEX message_media_stored_size ON message_media (workspace_id) INCLUDE (size) WHERE status = 'stored';
  `);
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw(`
DROP INDEX message_media_stored_size;
ALTER TABLE workspaces DROP COLUMN media_storage_mb;
  `);
}
