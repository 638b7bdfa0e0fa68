import type { Knex } from 'knex';

// A search's pages in creation order are remembered by id with the search version they were read
// at (domain/leads/lead-list.ts): which contacts a page holds, and in which order, depends on what a
// search reads and on each contact's creation instant. The service never changes created_at, but
// an operator's fix might; it now counts as a search change too, so such a fix cannot leave a
// remembered page in the wrong order. The trigger is restated whole; down restates it as it was.
const trigger = (columns: string, createdAt: string) => `
DROP TRIGGER contact_search_changed ON contacts;
CREATE TRIGGER contact_search_changed AFTER UPDATE OF ${columns} ON contacts
  FOR EACH ROW WHEN (
    old.name IS DISTINCT FROM new.name OR old.phone IS DISTINCT FROM new.phone OR old.email IS DISTINCT FROM new.email${createdAt}
    OR (old.merged_into_id IS NULL AND old.deleted_at IS NULL AND NOT old.is_group) IS DISTINCT FROM (new.merged_into_id IS NULL AND new.deleted_at IS NULL AND NOT new.is_group)
  ) EXECUTE FUNCTION contact_search_changed();`;

export async function up(knex: Knex): Promise<void> {
  await knex.raw(
    trigger('name, phone, email, created_at, merged_into_id, deleted_at, is_group', ' OR old.created_at IS DISTINCT FROM new.created_at'),
  );
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw(trigger('name, phone, email, merged_into_id, deleted_at, is_group', ''));
}
