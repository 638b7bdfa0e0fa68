import type { Knex } from 'knex';
import type { Db } from './db';
import { ApiError } from './errors';
import { isUuid } from './refs';

type Writer = Db | Knex.Transaction;

/**
 * A product of the workspace by id or case-insensitive name; a name that does not exist is
 * created (the spec's rule for `product` on deal creation). Safe under concurrency: two requests
 * naming the same new product end with one product.
 */
export async function resolveOrCreateProduct(trx: Writer, workspaceId: string, ref: string): Promise<{ id: string; name: string }> {
  const name = ref.trim();
  if (isUuid(name)) {
    const byId = await trx('products').where({ workspace_id: workspaceId, id: name }).first('id', 'name');
    if (byId) return byId;
  }
  if (name.length === 0 || name.length > 200) throw new ApiError('VALIDATION', 'Invalid body.product: 1 to 200 characters');
  const byName = await trx('products').where({ workspace_id: workspaceId }).whereRaw('lower(name) = lower(?)', [name]).first('id', 'name');
  if (byName) return byName;
  await trx.raw(
    `INSERT INTO products (workspace_id, name) VALUES (?, ?) ON CONFLICT (workspace_id, lower(name)) DO NOTHING`,
    [workspaceId, name],
  );
  return trx('products').where({ workspace_id: workspaceId }).whereRaw('lower(name) = lower(?)', [name]).first('id', 'name');
}
