import type { Knex } from 'knex';

// The exact number of canonical contacts with at least one deal matching the lead list's deal
// filters (`pipelineId`, `stageId`, `status`, alone or `stageId`/`pipelineId` with `status`), kept
// by statement-level triggers in the same transaction as the change: `GET /api/v1/leads?stageId=
// &status=` reads its total here instead of counting every matching contact.
//
// A contact with two deals in one stage counts once, so each contact keeps how many of its deals
// fall in each facet (contact_deal_facets): the count moves only when that number crosses zero, or
// when a contact with deals in the facet becomes or ceases to be canonical. The counts are spread
// over SHARDS rows per facet (backend pid modulo SHARDS), like contact_counts; the total is the sum.
//
// deal_facet_key is the one place a filter combination becomes a facet name; the lead list asks it
// for the key of its filters, and a combination without a key (pipelineId with stageId) counts.
const SHARDS = 32;
const CANONICAL = (t: string) => `(${t}.merged_into_id IS NULL AND ${t}.deleted_at IS NULL AND NOT ${t}.is_group)`;

export async function up(knex: Knex): Promise<void> {
  await knex.raw(`
CREATE FUNCTION deal_facet_key(pipeline uuid, stage uuid, status text) RETURNS text LANGUAGE sql IMMUTABLE AS $$
  SELECT CASE
    WHEN stage IS NOT NULL AND pipeline IS NULL THEN 'stage:' || stage || coalesce(':' || status, '')
    WHEN pipeline IS NOT NULL AND stage IS NULL THEN 'pipeline:' || pipeline || coalesce(':' || status, '')
    WHEN pipeline IS NULL AND stage IS NULL AND status IS NOT NULL THEN 'status:' || status
  END
$$;

-- Every facet one deal belongs to.
CREATE FUNCTION deal_facets(pipeline uuid, stage uuid, status text) RETURNS text[] LANGUAGE sql IMMUTABLE AS $$
  SELECT ARRAY[deal_facet_key(pipeline, NULL, NULL), deal_facet_key(pipeline, NULL, status),
               deal_facet_key(NULL, stage, NULL), deal_facet_key(NULL, stage, status), deal_facet_key(NULL, NULL, status)]
$$;

CREATE TABLE contact_deal_facets (
  workspace_id uuid NOT NULL,
  contact_id uuid NOT NULL,
  facet text NOT NULL,
  deals integer NOT NULL,
  PRIMARY KEY (contact_id, facet),
  FOREIGN KEY (workspace_id, contact_id) REFERENCES contacts (workspace_id, id) ON DELETE CASCADE
);

CREATE TABLE deal_facet_counts (
  workspace_id uuid NOT NULL REFERENCES workspaces (id) ON DELETE CASCADE,
  facet text NOT NULL,
  shard smallint NOT NULL,
  contacts bigint NOT NULL,
  PRIMARY KEY (workspace_id, facet, shard)
);

-- changes: (workspace_id, contact_id, facet, d) with d the change in that contact's deals in the facet.
CREATE FUNCTION deal_facet_counts_apply(changes jsonb) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
  WITH change AS (
    -- A contact being deleted with its workspace (its deals cascading) may already be gone.
    SELECT workspace_id, contact_id, facet, d FROM jsonb_to_recordset(changes) AS x(workspace_id uuid, contact_id uuid, facet text, d integer)
     WHERE EXISTS (SELECT 1 FROM contacts k WHERE k.id = x.contact_id)
  ), applied AS (
    INSERT INTO contact_deal_facets AS f (workspace_id, contact_id, facet, deals)
    SELECT workspace_id, contact_id, facet, d FROM change ORDER BY contact_id, facet
    ON CONFLICT (contact_id, facet) DO UPDATE SET deals = f.deals + EXCLUDED.deals
    RETURNING f.workspace_id, f.contact_id, f.facet, f.deals
  ), crossed AS (
    SELECT a.workspace_id, a.facet, sum(CASE WHEN a.deals > 0 THEN 1 ELSE -1 END)::bigint AS d
      FROM applied a
      JOIN change c ON c.contact_id = a.contact_id AND c.facet = a.facet
      JOIN contacts k ON k.id = a.contact_id AND ${CANONICAL('k')}
     WHERE (a.deals > 0) <> (a.deals - c.d > 0)
     GROUP BY a.workspace_id, a.facet
  )
  INSERT INTO deal_facet_counts AS n (workspace_id, facet, shard, contacts)
  SELECT workspace_id, facet, pg_backend_pid() % ${SHARDS}, d FROM crossed
   WHERE d <> 0 AND EXISTS (SELECT 1 FROM workspaces w WHERE w.id = crossed.workspace_id)
   ORDER BY workspace_id, facet
  ON CONFLICT (workspace_id, facet, shard) DO UPDATE SET contacts = n.contacts + EXCLUDED.contacts;

  DELETE FROM contact_deal_facets f USING jsonb_to_recordset(changes) AS x(contact_id uuid, facet text)
   WHERE f.contact_id = x.contact_id AND f.facet = x.facet AND f.deals = 0;
END $$;

-- Each branch reads only the transition tables its event has.
CREATE FUNCTION deal_facet_counts_on_deal_change() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  changes jsonb;
BEGIN
  IF TG_OP = 'INSERT' THEN
    SELECT jsonb_agg(x) INTO changes FROM (
      SELECT workspace_id, contact_id, facet, count(*)::int AS d FROM new_rows, unnest(deal_facets(pipeline_id, stage_id, status)) AS facet
       GROUP BY workspace_id, contact_id, facet) x;
  ELSIF TG_OP = 'DELETE' THEN
    SELECT jsonb_agg(x) INTO changes FROM (
      SELECT workspace_id, contact_id, facet, -count(*)::int AS d FROM old_rows, unnest(deal_facets(pipeline_id, stage_id, status)) AS facet
       GROUP BY workspace_id, contact_id, facet) x;
  ELSE
    SELECT jsonb_agg(x) INTO changes FROM (
      SELECT workspace_id, contact_id, facet, sum(d)::int AS d FROM (
        SELECT workspace_id, contact_id, facet, 1 AS d FROM new_rows, unnest(deal_facets(pipeline_id, stage_id, status)) AS facet
        UNION ALL
        SELECT workspace_id, contact_id, facet, -1 AS d FROM old_rows, unnest(deal_facets(pipeline_id, stage_id, status)) AS facet
      ) c GROUP BY workspace_id, contact_id, facet HAVING sum(d) <> 0) x;
  END IF;
  IF changes IS NOT NULL THEN
    PERFORM deal_facet_counts_apply(changes);
  END IF;
  RETURN NULL;
END $$;

CREATE FUNCTION deal_facet_counts_on_contact_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO deal_facet_counts AS c (workspace_id, facet, shard, contacts)
  SELECT n.workspace_id, f.facet, pg_backend_pid() % ${SHARDS}, sum(CASE WHEN ${CANONICAL('n')} THEN 1 ELSE -1 END)::bigint
    FROM new_rows n JOIN old_rows o ON o.id = n.id JOIN contact_deal_facets f ON f.contact_id = n.id AND f.deals > 0
   WHERE ${CANONICAL('n')} IS DISTINCT FROM ${CANONICAL('o')}
   GROUP BY n.workspace_id, f.facet
  HAVING sum(CASE WHEN ${CANONICAL('n')} THEN 1 ELSE -1 END) <> 0
   ORDER BY n.workspace_id, f.facet
  ON CONFLICT (workspace_id, facet, shard) DO UPDATE SET contacts = c.contacts + EXCLUDED.contacts;
  RETURN NULL;
END $$;

CREATE TRIGGER deal_facet_counts_insert AFTER INSERT ON deals REFERENCING NEW TABLE AS new_rows
  FOR EACH STATEMENT EXECUTE FUNCTION deal_facet_counts_on_deal_change();
CREATE TRIGGER deal_facet_counts_update AFTER UPDATE ON deals REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
  FOR EACH STATEMENT EXECUTE FUNCTION deal_facet_counts_on_deal_change();
CREATE TRIGGER deal_facet_counts_delete AFTER DELETE ON deals REFERENCING OLD TABLE AS old_rows
  FOR EACH STATEMENT EXECUTE FUNCTION deal_facet_counts_on_deal_change();
CREATE TRIGGER deal_facet_counts_contact_update AFTER UPDATE ON contacts REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
  FOR EACH STATEMENT EXECUTE FUNCTION deal_facet_counts_on_contact_change();

INSERT INTO contact_deal_facets (workspace_id, contact_id, facet, deals)
  SELECT workspace_id, contact_id, facet, count(*) FROM deals, unnest(deal_facets(pipeline_id, stage_id, status)) AS facet
   GROUP BY workspace_id, contact_id, facet;
INSERT INTO deal_facet_counts (workspace_id, facet, shard, contacts)
  SELECT f.workspace_id, f.facet, 0, count(*) FROM contact_deal_facets f JOIN contacts k ON k.id = f.contact_id AND ${CANONICAL('k')}
   GROUP BY f.workspace_id, f.facet;
  `);
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw(`
DROP TRIGGER deal_facet_counts_insert ON deals;
DROP TRIGGER deal_facet_counts_update ON deals;
DROP TRIGGER deal_facet_counts_delete ON deals;
DROP TRIGGER deal_facet_counts_contact_update ON contacts;
DROP FUNCTION deal_facet_counts_on_deal_change();
DROP FUNCTION deal_facet_counts_on_contact_change();
DROP FUNCTION deal_facet_counts_apply(jsonb);
DROP TABLE deal_facet_counts;
DROP TABLE contact_deal_facets;
DROP FUNCTION deal_facets(uuid, uuid, text);
DROP FUNCTION deal_facet_key(uuid, uuid, text);`);
}
