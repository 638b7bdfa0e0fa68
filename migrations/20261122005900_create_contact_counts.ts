import type { Knex } from 'knex';

// The exact number of canonical contacts (not merged, deleted or a group) per workspace, kept by
// statement-level triggers in the same transaction as the change: the unfiltered lead list reads
// its total here instead of counting every row (count(*) grows with the workspace; this does not).
export async function up(knex: Knex): Promise<void> {
  await knex.raw(`
CREATE TABLE contact_counts (
  workspace_id uuid PRIMARY KEY REFERENCES workspaces(id) ON DELETE CASCADE,
  canonical bigint NOT NULL CHECK (canonical >= 0)
);

CREATE FUNCTION contact_counts_add(ws uuid, d bigint) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
  IF d > 0 THEN
    INSERT INTO contact_counts AS c (workspace_id, canonical) VALUES (ws, d)
    ON CONFLICT (workspace_id) DO UPDATE SET canonical = c.canonical + EXCLUDED.canonical;
  ELSIF d < 0 THEN
    -- A workspace being deleted may already have lost its row: nothing to update then.
    UPDATE contact_counts SET canonical = canonical + d WHERE workspace_id = ws;
  END IF;
END $$;

-- Each branch reads only the transition tables its event has.
CREATE FUNCTION contact_counts_apply() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  delta record;
BEGIN
  IF TG_OP = 'INSERT' THEN
    FOR delta IN SELECT workspace_id, count(*)::bigint AS d FROM new_rows
                  WHERE merged_into_id IS NULL AND deleted_at IS NULL AND NOT is_group GROUP BY workspace_id ORDER BY workspace_id LOOP
      PERFORM contact_counts_add(delta.workspace_id, delta.d);
    END LOOP;
  ELSIF TG_OP = 'DELETE' THEN
    FOR delta IN SELECT workspace_id, -count(*)::bigint AS d FROM old_rows
                  WHERE merged_into_id IS NULL AND deleted_at IS NULL AND NOT is_group GROUP BY workspace_id ORDER BY workspace_id LOOP
      PERFORM contact_counts_add(delta.workspace_id, delta.d);
    END LOOP;
  ELSE
    FOR delta IN SELECT workspace_id, sum(d)::bigint AS d FROM (
                    SELECT workspace_id, 1 AS d FROM new_rows WHERE merged_into_id IS NULL AND deleted_at IS NULL AND NOT is_group
                    UNION ALL
                    SELECT workspace_id, -1 AS d FROM old_rows WHERE merged_into_id IS NULL AND deleted_at IS NULL AND NOT is_group
                  ) changes GROUP BY workspace_id HAVING sum(d) <> 0 ORDER BY workspace_id LOOP
      PERFORM contact_counts_add(delta.workspace_id, delta.d);
    END LOOP;
  END IF;
  RETURN NULL;
END $$;
  `);
  await knex.raw(`
CREATE TRIGGER contact_counts_insert AFTER INSERT ON contacts REFERENCING NEW TABLE AS new_rows
  FOR EACH STATEMENT EXECUTE FUNCTION contact_counts_apply();
CREATE TRIGGER contact_counts_update AFTER UPDATE ON contacts REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
  FOR EACH STATEMENT EXECUTE FUNCTION contact_counts_apply();
CREATE TRIGGER contact_counts_delete AFTER DELETE ON contacts REFERENCING OLD TABLE AS old_rows
  FOR EACH STATEMENT EXECUTE FUNCTION contact_counts_apply();
INSERT INTO contact_counts (workspace_id, canonical)
  SELECT workspace_id, count(*) FROM contacts WHERE merged_into_id IS NULL AND deleted_at IS NULL AND NOT is_group GROUP BY workspace_id;
  `);
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw(`
DROP TRIGGER contact_counts_insert ON contacts;
DROP TRIGGER contact_counts_update ON contacts;
DROP TRIGGER contact_counts_delete ON contacts;
DROP FUNCTION contact_counts_apply();
DROP FUNCTION contact_counts_add(uuid, bigint);
DROP TABLE contact_counts;`);
}
