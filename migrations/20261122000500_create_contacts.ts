import type { Knex } from 'knex';

export async function up(knex: Knex): Promise<void> {
  await knex.raw(`
CREATE TABLE contacts (
  id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
  workspace_id uuid NOT NULL REFERENCES workspaces(id) ON DELETE CASCADE,
  name text NOT NULL DEFAULT '' CHECK (length(name) <= 200),
  -- phone as stored (digits, international form, or a group id ending in @g.us)
  phone text NOT NULL CHECK (length(phone) BETWEEN 1 AND 64),
  -- canonical matching key: a Brazilian mobile with and without its ninth digit share it
  phone_key text NOT NULL,
  wa_id text,
  email text CHECK (email IS NULL OR length(email) <= 320),
  notes text NOT NULL DEFAULT '' CHECK (length(notes) <= 10000),
  is_group boolean NOT NULL DEFAULT false,
  opted_out boolean NOT NULL DEFAULT false,
  merged_into_id uuid REFERENCES contacts(id) ON DELETE SET NULL,
  deleted_at timestamptz,
  created_at timestamptz NOT NULL DEFAULT now(),
  updated_at timestamptz NOT NULL DEFAULT now(),
  UNIQUE (workspace_id, id),
  CHECK (is_group = (phone LIKE '%@g.us')),
  CHECK (merged_into_id IS NULL OR merged_into_id <> id)
);
-- One canonical contact per phone key per workspace.
CREATE UNIQUE INDEX contacts_canonical_phone_uq ON contacts (workspace_id, phone_key)
  WHERE merged_into_id IS NULL AND deleted_at IS NULL;
CREATE INDEX contacts_canonical_created_idx ON contacts (workspace_id, created_at DESC, id DESC)
  WHERE merged_into_id IS NULL AND deleted_at IS NULL AND NOT is_group;
CREATE INDEX contacts_canonical_updated_idx ON contacts (workspace_id, updated_at DESC, id DESC)
  WHERE merged_into_id IS NULL AND deleted_at IS NULL AND NOT is_group;
CREATE INDEX contacts_canonical_name_idx ON contacts (workspace_id, lower(name), id)
  WHERE merged_into_id IS NULL AND deleted_at IS NULL AND NOT is_group;
CREATE INDEX contacts_search_trgm_idx ON contacts
  USING gin ((lower(name) || ' ' || phone || ' ' || coalesce(lower(email), '')) gin_trgm_ops)
  WHERE merged_into_id IS NULL AND deleted_at IS NULL AND NOT is_group;
  `);
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw(`DROP TABLE contacts;`);
}
