import type { Knex } from 'knex';

export async function up(knex: Knex): Promise<void> {
  await knex.raw(`
CREATE TABLE broadcast_tags (
  workspace_id uuid NOT NULL,
  broadcast_id uuid NOT NULL,
  tag_id uuid NOT NULL,
  PRIMARY KEY (broadcast_id, tag_id),
  FOREIGN KEY (workspace_id, broadcast_id) REFERENCES broadcasts (workspace_id, id) ON DELETE CASCADE,
  FOREIGN KEY (workspace_id, tag_id) REFERENCES tags (workspace_id, id) ON DELETE CASCADE
);
CREATE INDEX broadcast_tags_tag_idx ON broadcast_tags (tag_id);
  `);
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw(`DROP TABLE broadcast_tags;`);
}
