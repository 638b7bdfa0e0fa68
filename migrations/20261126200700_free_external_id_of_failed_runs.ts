import type { Knex } from 'knex';

// An inbound run that failed no longer holds its externalId: the sender's retry of the same call
// runs again. A running or completed run still does (a repeat is `duplicate`), for ever: this
// index outlives Temporal's retention of the closed workflow.
export async function up(knex: Knex): Promise<void> {
  await knex.raw(`DROP INDEX automation_runs_external_id_uq;`);
  await knex.raw(
    `CREATE UNIQUE INDEX automation_runs_external_id_uq ON automation_runs (automation_id, external_id)
       WHERE external_id IS NOT NULL AND status IN ('running', 'completed');`,
  );
}

export async function down(knex: Knex): Promise<void> {
  // Failed runs that share an externalId with a later run cannot go back under the old index: the
  // older failed ones give theirs up.
  await knex.raw(
    `UPDATE automation_runs r SET external_id = NULL
      WHERE r.status = 'failed' AND r.external_id IS NOT NULL
        AND EXISTS (SELECT 1 FROM automation_runs o
                     WHERE o.automation_id = r.automation_id AND o.external_id = r.external_id AND o.id <> r.id
                       AND (o.status IN ('running', 'completed') OR (o.status = 'failed' AND o.created_at > r.created_at)));`,
  );
  await knex.raw(`DROP INDEX automation_runs_external_id_uq;`);
  await knex.raw(
    `CREATE UNIQUE INDEX automation_runs_external_id_uq ON automation_runs (automation_id, external_id)
       WHERE external_id IS NOT NULL AND status IN ('running', 'completed', 'failed');`,
  );
}
