import type { Knex } from 'knex';

// The exact number of canonical contacts with at least one deal matching the lead list's deal
// filters (`pipelineId`, `stageId`, `status`, alone or `stageId`/`pipelineId` with `status`), kept
// by triggers in the same transaction as the change: `GET /api/v1/leads?stageId=
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

-- One contact's deals in each facet move by d; a facet's count moves when that number crosses zero
-- and the contact is canonical. A contact already gone (its workspace being deleted) counts nothing.
CREATE FUNCTION deal_facets_move(ws uuid, contact uuid, facets text[], d integer) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
  one text;
  after integer;
  counted boolean;
BEGIN
  SELECT ${CANONICAL('k')} INTO counted FROM contacts k WHERE k.id = contact;
  IF NOT FOUND THEN
    RETURN;
  END IF;
  FOREACH one IN ARRAY facets LOOP
    INSERT INTO contact_deal_facets AS f (workspace_id, contact_id, facet, deals) VALUES (ws, contact, one, d)
    ON CONFLICT (contact_id, facet) DO UPDATE SET deals = f.deals + EXCLUDED.deals
    RETURNING f.deals INTO after;
    IF counted AND (after > 0) <> (after - d > 0) THEN
      INSERT INTO deal_facet_counts AS n (workspace_id, facet, shard, contacts)
        VALUES (ws, one, pg_backend_pid() % ${SHARDS}, CASE WHEN after > 0 THEN 1 ELSE -1 END)
      ON CONFLICT (workspace_id, facet, shard) DO UPDATE SET contacts = n.contacts + EXCLUDED.contacts;
    END IF;
    IF after = 0 THEN
      DELETE FROM contact_deal_facets c WHERE c.contact_id = contact AND c.facet = one;
    END IF;
  END LOOP;
END $$;

-- Per row: a stage move is one row, and touches only the facets it leaves and enters.
CREATE FUNCTION deal_facet_counts_on_deal_row() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  left_facets text[];
  entered text[];
BEGIN
  IF TG_OP = 'INSERT' THEN
    PERFORM deal_facets_move(NEW.workspace_id, NEW.contact_id, deal_facets(NEW.pipeline_id, NEW.stage_id, NEW.status), 1);
  ELSIF TG_OP = 'DELETE' THEN
    PERFORM deal_facets_move(OLD.workspace_id, OLD.contact_id, deal_facets(OLD.pipeline_id, OLD.stage_id, OLD.status), -1);
  ELSIF NEW.contact_id IS DISTINCT FROM OLD.contact_id THEN
    PERFORM deal_facets_move(OLD.workspace_id, OLD.contact_id, deal_facets(OLD.pipeline_id, OLD.stage_id, OLD.status), -1);
    PERFORM deal_facets_move(NEW.workspace_id, NEW.contact_id, deal_facets(NEW.pipeline_id, NEW.stage_id, NEW.status), 1);
  ELSE
    left_facets := ARRAY(SELECT unnest(deal_facets(OLD.pipeline_id, OLD.stage_id, OLD.status)) EXCEPT SELECT unnest(deal_facets(NEW.pipeline_id, NEW.stage_id, NEW.status)));
    entered := ARRAY(SELECT unnest(deal_facets(NEW.pipeline_id, NEW.stage_id, NEW.status)) EXCEPT SELECT unnest(deal_facets(OLD.pipeline_id, OLD.stage_id, OLD.status)));
    PERFORM deal_facets_move(OLD.workspace_id, OLD.contact_id, left_facets, -1);
    PERFORM deal_facets_move(NEW.workspace_id, NEW.contact_id, entered, 1);
  END IF;
  RETURN NULL;
END $$;

-- A contact becoming or ceasing to be canonical moves every facet it has deals in.
CREATE FUNCTION deal_facet_counts_on_contact_row() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO deal_facet_counts AS c (workspace_id, facet, shard, contacts)
  SELECT NEW.workspace_id, f.facet, pg_backend_pid() % ${SHARDS}, CASE WHEN ${CANONICAL('NEW')} THEN 1 ELSE -1 END
    FROM contact_deal_facets f WHERE f.contact_id = NEW.id AND f.deals > 0
   ORDER BY f.facet
  ON CONFLICT (workspace_id, facet, shard) DO UPDATE SET contacts = c.contacts + EXCLUDED.contacts;
  RETURN NULL;
END $$;

-- Row triggers with WHEN: an update that changes none of what the counts read costs nothing.
CREATE TRIGGER deal_facet_counts_insert AFTER INSERT ON deals FOR EACH ROW EXECUTE FUNCTION deal_facet_counts_on_deal_row();
CREATE TRIGGER deal_facet_counts_update AFTER UPDATE OF contact_id, pipeline_id, stage_id, status ON deals FOR EACH ROW
  WHEN ((OLD.contact_id, OLD.pipeline_id, OLD.stage_id, OLD.status) IS DISTINCT FROM (NEW.contact_id, NEW.pipeline_id, NEW.stage_id, NEW.status))
  EXECUTE FUNCTION deal_facet_counts_on_deal_row();
CREATE TRIGGER deal_facet_counts_delete AFTER DELETE ON deals FOR EACH ROW EXECUTE FUNCTION deal_facet_counts_on_deal_row();
CREATE TRIGGER deal_facet_counts_contact_update AFTER UPDATE ON contacts FOR EACH ROW
  WHEN (${CANONICAL('OLD')} IS DISTINCT FROM ${CANONICAL('NEW')})
  EXECUTE FUNCTION deal_facet_counts_on_contact_row();

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
DROP FUNCTION deal_facet_counts_on_deal_row();
DROP FUNCTION deal_facet_counts_on_contact_row();
DROP FUNCTION deal_facets_move(uuid, uuid, text[], integer);
DROP TABLE deal_facet_counts;
DROP TABLE contact_deal_facets;
DROP FUNCTION deal_facets(uuid, uuid, text);
DROP FUNCTION deal_facet_key(uuid, uuid, text);`);
}
