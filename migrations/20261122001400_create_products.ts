import type { Knex } from 'knex';

export async function up(knex: Knex): Promise<void> {
  await knex.raw(`
CREATE TABLE products (
  id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
  workspace_id uuid NOT NULL REFERENCES workspaces(id) ON DELETE CASCADE,
  name text NOT NULL CHECK (length(name) BETWEEN 1 AND 200),
  description text CHECK (length(description) <= 2000),
  sku text CHECK (length(sku) <= 120),
  price numeric(14, 2) CHECK (price >= 0),
  active boolean NOT NULL DEFAULT true,
  created_at timestamptz NOT NULL DEFAULT now(),
  updated_at timestamptz NOT NULL DEFAULT now(),
  UNIQUE (workspace_id, id)
);
CREATE UNIQUE INDEX products_workspace_name_uq ON products (workspace_id, lower(name));
CREATE INDEX products_workspace_sku_idx ON products (workspace_id, lower(sku));
CREATE INDEX products_workspace_created_idx ON products (workspace_id, created_at);
CREATE INDEX products_workspace_updated_idx ON products (workspace_id, updated_at);
CREATE INDEX products_workspace_price_idx ON products (workspace_id, price);
  `);
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw(`DROP TABLE products;`);
}
