import type { Knex } from 'knex';

/**
 * Instagram conversations: a person who writes to a business's Instagram has no phone, only an
 * Instagram-scoped id (IGSID) per business account. Such a contact is keyed by (instance, IGSID) in
 * `contact_identities`, and its `phone` and `phone_key` are null (the partial unique index on
 * `phone_key` ignores nulls). `instagram_id` and `instagram_username` repeat the contact's latest
 * identity on its row, where the lead record and the lead search read them without a join (`q=`
 * matches the username); the search index's expression gains it and copes with a null phone. Instances gain the provider `instagram` (for channel `instagram` only).
 */
export async function up(knex: Knex): Promise<void> {
  await knex.raw(`
ALTER TABLE contacts
  ALTER COLUMN phone DROP NOT NULL,
  ALTER COLUMN phone_key DROP NOT NULL,
  ADD COLUMN instagram_id text CHECK (instagram_id IS NULL OR instagram_id ~ '^[0-9]{1,32}$'),
  ADD COLUMN instagram_username text CHECK (instagram_username IS NULL OR length(instagram_username) BETWEEN 1 AND 64),
  -- A phoneless contact is never a group; a contact has a phone or an Instagram identity (contact_identities).
  DROP CONSTRAINT contacts_check,
  ADD CONSTRAINT contacts_group_check CHECK (is_group = coalesce(phone LIKE '%@g.us', false)),
  ADD CONSTRAINT contacts_phone_key_check CHECK ((phone IS NULL) = (phone_key IS NULL));

DROP INDEX contacts_workspace_search_trgm_idx;
CREATE INDEX contacts_workspace_search_trgm_idx ON contacts USING gin (
  workspace_id,
  (lower(name) || ' ' || coalesce(phone, '') || ' ' || coalesce(lower(email), '') || ' ' || coalesce(lower(instagram_username), '')) gin_trgm_ops
) WHERE merged_into_id IS NULL AND deleted_at IS NULL AND NOT is_group;

DROP TRIGGER contact_search_changed ON contacts;
CREATE TRIGGER contact_search_changed AFTER UPDATE OF name, phone, email, instagram_username, created_at, merged_into_id, deleted_at, is_group ON contacts
  FOR EACH ROW WHEN (
    OLD.name IS DISTINCT FROM NEW.name OR OLD.phone IS DISTINCT FROM NEW.phone OR OLD.email IS DISTINCT FROM NEW.email
    OR OLD.instagram_username IS DISTINCT FROM NEW.instagram_username OR OLD.created_at IS DISTINCT FROM NEW.created_at
    OR (OLD.merged_into_id IS NULL AND OLD.deleted_at IS NULL AND NOT OLD.is_group)
       IS DISTINCT FROM (NEW.merged_into_id IS NULL AND NEW.deleted_at IS NULL AND NOT NEW.is_group))
  EXECUTE FUNCTION contact_search_changed();

CREATE TABLE contact_identities (
  id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
  workspace_id uuid NOT NULL,
  contact_id uuid NOT NULL,
  instance_id uuid NOT NULL,
  channel text NOT NULL CHECK (channel = 'instagram'),
  -- The provider's id of the person as this instance's account sees it (an IGSID: digits).
  external_id text NOT NULL CHECK (external_id ~ '^[0-9]{1,32}$'),
  username text CHECK (username IS NULL OR length(username) BETWEEN 1 AND 64),
  created_at timestamptz NOT NULL DEFAULT now(),
  updated_at timestamptz NOT NULL DEFAULT now(),
  UNIQUE (instance_id, external_id),
  FOREIGN KEY (workspace_id, contact_id) REFERENCES contacts (workspace_id, id) ON DELETE CASCADE,
  FOREIGN KEY (workspace_id, instance_id) REFERENCES instances (workspace_id, id) ON DELETE CASCADE
);
-- A send's recipient (instance and contact, domain/leads instagramIdOn) and a merge's move (contact).
CREATE INDEX contact_identities_contact_idx ON contact_identities (contact_id, instance_id);
CREATE INDEX contact_identities_external_idx ON contact_identities (workspace_id, external_id);

ALTER TABLE instances DROP CONSTRAINT instances_provider_check;
ALTER TABLE instances ADD CONSTRAINT instances_provider_check CHECK (provider IN ('cloud', 'web', 'instagram'));
-- Instagram's inbound files are referenced by their signed CDN URL (several hundred characters).
ALTER TABLE message_media DROP CONSTRAINT message_media_media_ref_check;
ALTER TABLE message_media ADD CONSTRAINT message_media_media_ref_check CHECK (length(media_ref) BETWEEN 1 AND 2048);
-- A broadcast's audience may hold a phoneless contact: it is frozen with the others and skipped (PHONE_REQUIRED).
ALTER TABLE broadcast_recipients ALTER COLUMN phone DROP NOT NULL;
-- The Instagram provider carries only Instagram; an Instagram instance recorded with another provider stays as it was (it sends nothing).
ALTER TABLE instances ADD CONSTRAINT instances_instagram_provider_check CHECK (provider <> 'instagram' OR channel = 'instagram');
  `);
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw(`
ALTER TABLE instances DROP CONSTRAINT instances_instagram_provider_check;
ALTER TABLE instances DROP CONSTRAINT instances_provider_check;
DELETE FROM instances WHERE provider = 'instagram';
DELETE FROM broadcast_recipients WHERE phone IS NULL;
DELETE FROM message_media WHERE length(media_ref) > 256;
ALTER TABLE message_media DROP CONSTRAINT message_media_media_ref_check;
ALTER TABLE message_media ADD CONSTRAINT message_media_media_ref_check CHECK (length(media_ref) >= 1 AND length(media_ref) <= 256);
ALTER TABLE broadcast_recipients ALTER COLUMN phone SET NOT NULL;
ALTER TABLE instances ADD CONSTRAINT instances_provider_check CHECK (provider IN ('cloud', 'web'));
DROP TABLE contact_identities;

DROP TRIGGER contact_search_changed ON contacts;
CREATE TRIGGER contact_search_changed AFTER UPDATE OF name, phone, email, created_at, merged_into_id, deleted_at, is_group ON contacts
  FOR EACH ROW WHEN (
    OLD.name IS DISTINCT FROM NEW.name OR OLD.phone IS DISTINCT FROM NEW.phone OR OLD.email IS DISTINCT FROM NEW.email
    OR OLD.created_at IS DISTINCT FROM NEW.created_at
    OR (OLD.merged_into_id IS NULL AND OLD.deleted_at IS NULL AND NOT OLD.is_group)
       IS DISTINCT FROM (NEW.merged_into_id IS NULL AND NEW.deleted_at IS NULL AND NOT NEW.is_group))
  EXECUTE FUNCTION contact_search_changed();
DROP INDEX contacts_workspace_search_trgm_idx;
CREATE INDEX contacts_workspace_search_trgm_idx ON contacts USING gin (
  workspace_id, (lower(name) || ' ' || phone || ' ' || coalesce(lower(email), '')) gin_trgm_ops
) WHERE merged_into_id IS NULL AND deleted_at IS NULL AND NOT is_group;

-- Phoneless contacts cannot survive the way back.
DELETE FROM contacts WHERE phone IS NULL;
ALTER TABLE contacts
  DROP CONSTRAINT contacts_phone_key_check,
  DROP CONSTRAINT contacts_group_check,
  ADD CONSTRAINT contacts_check CHECK (is_group = (phone LIKE '%@g.us')),
  DROP COLUMN instagram_username,
  DROP COLUMN instagram_id,
  ALTER COLUMN phone SET NOT NULL,
  ALTER COLUMN phone_key SET NOT NULL;
  `);
}
