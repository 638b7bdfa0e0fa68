import type { Knex } from 'knex';

// A send's daily units (messages, cold conversations) are taken at COMMIT instead of inside the
// transaction (domain/messaging/send/daily.ts). Every send of a workspace takes them from the same
// daily_counters rows, so a unit taken by a statement held that row's lock until the transaction's
// COMMIT came back from the API: a lock queue that made the p99 of 32 concurrent sends 2x their
// p50 (docs/performance.md). Now the transaction stages what it takes in daily_unit_takes, and a
// deferred constraint trigger applies each take at COMMIT, inside PostgreSQL: the row is locked
// for the commit alone. A take that does not fit under its cap raises SQLSTATE CRM01 (detail: the
// counter) and the whole transaction rolls back, so a refusal still leaves nothing behind.
// The staging rows live only inside their transaction (the trigger deletes each), hence UNLOGGED.
export async function up(knex: Knex): Promise<void> {
  await knex.raw(`
CREATE UNLOGGED TABLE daily_unit_takes (
  id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  workspace_id uuid NOT NULL,
  day date NOT NULL,
  kind text NOT NULL,
  units integer NOT NULL CHECK (units > 0),
  cap integer
);

CREATE FUNCTION take_daily_units() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  taken integer;
BEGIN
  INSERT INTO daily_counters AS c (workspace_id, day, kind, count)
  VALUES (NEW.workspace_id, NEW.day, NEW.kind, NEW.units)
  ON CONFLICT (workspace_id, day, kind) DO UPDATE SET count = c.count + EXCLUDED.count
    WHERE NEW.cap IS NULL OR c.count + EXCLUDED.count <= NEW.cap
  RETURNING count INTO taken;
  -- No row: the units do not fit; a row over the cap: the day's first take was larger than the cap.
  IF taken IS NULL OR (NEW.cap IS NOT NULL AND taken > NEW.cap) THEN
    RAISE EXCEPTION 'daily limit reached: %', NEW.kind USING ERRCODE = 'CRM01', DETAIL = NEW.kind;
  END IF;
  DELETE FROM daily_unit_takes WHERE id = NEW.id;
  RETURN NULL;
END
$$;

CREATE CONSTRAINT TRIGGER daily_unit_takes_at_commit
  AFTER INSERT ON daily_unit_takes
  DEFERRABLE INITIALLY DEFERRED
  FOR EACH ROW EXECUTE FUNCTION take_daily_units();`);
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw(`
DROP TABLE daily_unit_takes;
DROP FUNCTION take_daily_units();`);
}
