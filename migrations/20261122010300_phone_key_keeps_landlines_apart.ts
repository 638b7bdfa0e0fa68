import type { Knex } from 'knex';

// The matching key was 55 + area code + the last 8 digits for every number, so a landline and
// the mobile ending in the same 8 digits shared it (one contact for two people). The key is now
// the full modern form, which the `phone` column already holds for every canonicalised number
// (group chats and other identifiers keep theirs). Finer keys cannot collide where coarser did not.
export async function up(knex: Knex): Promise<void> {
  await knex.raw(`UPDATE contacts SET phone_key = phone WHERE phone ~ '^55[0-9]{10,11}$' AND phone_key <> phone`);
}

// Back to 55 + area code + last 8 digits; contacts created since as a landline and a mobile of the
// same 8 digits would collide again, so those keep the new key.
export async function down(knex: Knex): Promise<void> {
  await knex.raw(`
    UPDATE contacts c SET phone_key = left(c.phone, 4) || right(c.phone, 8)
     WHERE c.phone ~ '^55[0-9]{10,11}$'
       AND NOT EXISTS (
         SELECT 1 FROM contacts o
          WHERE o.workspace_id = c.workspace_id AND o.id <> c.id AND o.merged_into_id IS NULL AND o.deleted_at IS NULL
            AND left(o.phone, 4) || right(o.phone, 8) = left(c.phone, 4) || right(c.phone, 8))`);
}
