import { type Db, SyncRead, syncPage } from '../platform';
import { ApiError, isPgError, Page, pageWithTotal, likeContains, isUuid, iso } from '../kernel';

/**
 * A product of the workspace by id or case-insensitive name; a name that does not exist is
 * created (the rule for `product` on deal creation). Safe under concurrency: two requests
 * naming the same new product end with one product.
 */
export async function resolveOrCreateProduct(trx: Db, workspaceId: string, ref: string): Promise<{ id: string; name: string }> {
  const name = ref.trim();
  if (isUuid(name)) {
    // An id names an existing product; it is never taken as the name of a new one.
    const byId = await trx('products').where({ workspace_id: workspaceId, id: name }).first('id', 'name');
    if (!byId) throw new ApiError('NOT_FOUND', 'Product not found', { hint: 'Pass an existing product id, or a name to create one.' });
    return byId;
  }
  if (name.length === 0 || name.length > 200) throw new ApiError('VALIDATION', 'Invalid body.product: 1 to 200 characters');
  const byName = await trx('products').where({ workspace_id: workspaceId }).whereRaw('lower(name) = lower(?)', [name]).first('id', 'name');
  if (byName) return byName;
  await trx.raw(`INSERT INTO products (workspace_id, name) VALUES (?, ?) ON CONFLICT (workspace_id, lower(name)) DO NOTHING`, [
    workspaceId,
    name,
  ]);
  return trx('products').where({ workspace_id: workspaceId }).whereRaw('lower(name) = lower(?)', [name]).first('id', 'name');
}

export interface ProductRow {
  id: string;
  workspace_id: string;
  name: string;
  description: string | null;
  sku: string | null;
  price: string | null;
  active: boolean;
  created_at: Date;
  updated_at: Date;
}

/** The Product record: `price` is always a decimal string with two places ("10.50") or null. */
export function serializeProduct(row: ProductRow) {
  return {
    id: row.id,
    name: row.name,
    description: row.description,
    sku: row.sku,
    price: row.price === null || row.price === undefined ? null : String(row.price),
    active: row.active,
    createdAt: iso(row.created_at)!,
    updatedAt: iso(row.updated_at)!,
  };
}
export type Product = ReturnType<typeof serializeProduct>;

/** Up to 12 integer digits and 2 decimal places: what numeric(14,2) holds. */
const PRICE = /^(\d{1,12})(?:\.(\d{0,2}))?$/;
const PRICE_HINT = 'A decimal >= 0 with at most 2 decimal places and 12 integer digits, as a string ("10.50") or a number (10.5).';

/**
 * A price from a request (string, number or null) as the decimal string stored in numeric(14,2);
 * anything else (wrong type, non-numeric, negative, more than 2 decimals, too large) is 400
 * INVALID_PRICE. `undefined` means "not sent".
 */
export function parsePrice(input: unknown): string | null | undefined {
  if (input === undefined) return undefined;
  if (input === null) return null;
  let text: string;
  if (typeof input === 'number') {
    if (!Number.isFinite(input)) throw invalidPrice(String(input));
    // String(0.1 + 0.2) is "0.30000000000000004": too many decimals, rejected like the string.
    text = Object.is(input, -0) ? '0' : String(input);
  } else if (typeof input === 'string') {
    text = input.trim();
  } else {
    throw invalidPrice(`a ${Array.isArray(input) ? 'array' : typeof input}`);
  }
  const match = PRICE.exec(text);
  if (!match) throw invalidPrice(JSON.stringify(input));
  return `${BigInt(match[1]).toString()}.${(match[2] ?? '').padEnd(2, '0')}`;
}

function invalidPrice(what: string): ApiError {
  return new ApiError('INVALID_PRICE', `Invalid price: ${what.slice(0, 60)}`, { hint: PRICE_HINT });
}

export interface ProductInput {
  name?: string;
  description?: string | null;
  sku?: string | null;
  /** string, number or null as received; validated by parsePrice. */
  price?: unknown;
  active?: boolean;
}

function columns(input: ProductInput): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  if (input.name !== undefined) out.name = input.name.trim();
  if (input.description !== undefined) out.description = input.description;
  // A blank SKU is none.
  if (input.sku !== undefined) out.sku = input.sku?.trim() || null;
  const price = parsePrice(input.price);
  if (price !== undefined) out.price = price;
  if (input.active !== undefined) out.active = input.active;
  return out;
}

/** A product write's catch: the unique name taken in the workspace (ignoring case) is 409 CONFLICT. */
function nameTaken(name: string | undefined) {
  return (err: unknown): never => {
    if (!isPgError(err, '23505') || err.constraint !== 'products_workspace_name_uq') throw err;
    throw new ApiError('CONFLICT', `A product named "${name ?? ''}" already exists`, {
      hint: 'Product names are unique per workspace, ignoring case.',
    });
  };
}

/** Creates a product; a name already used in the workspace (ignoring case) is 409 CONFLICT. */
export async function createProduct(db: Db, workspaceId: string, input: ProductInput & { name: string }): Promise<Product> {
  const values = columns(input);
  const [row] = await db('products')
    .insert({ ...values, workspace_id: workspaceId })
    .returning('*')
    .catch(nameTaken(values.name as string));
  return serializeProduct(row);
}

export async function getProduct(db: Db, workspaceId: string, id: string): Promise<Product> {
  const row = await db('products').where({ workspace_id: workspaceId, id }).first();
  if (!row) throw new ApiError('NOT_FOUND', 'Product not found');
  return serializeProduct(row);
}

/** Changes the fields sent; null clears description, sku and price. */
export async function updateProduct(db: Db, workspaceId: string, id: string, input: ProductInput): Promise<Product> {
  const values = columns(input);
  const [row] = await db('products')
    .where({ workspace_id: workspaceId, id })
    .update({ ...values, updated_at: db.fn.now() })
    .returning('*')
    .catch(nameTaken(values.name as string | undefined));
  if (!row) throw new ApiError('NOT_FOUND', 'Product not found');
  return serializeProduct(row);
}

/**
 * Deletes a product. Deals that reference it keep existing and lose the link (`productId`
 * becomes null, their `updatedAt` moves), in the same transaction. The product row is locked
 * first, so a deal being created with it concurrently either commits before (and is detached)
 * or fails its foreign-key check after.
 */
export async function deleteProduct(
  db: Db,
  workspaceId: string,
  id: string,
): Promise<{ id: string; deleted: true; detachedDeals: number }> {
  return db.transaction(async (trx) => {
    const found = await trx('products').where({ workspace_id: workspaceId, id }).forUpdate().first('id');
    if (!found) throw new ApiError('NOT_FOUND', 'Product not found');
    const detachedDeals = await trx('deals')
      .where({ workspace_id: workspaceId, product_id: id })
      .update({ product_id: null, updated_at: trx.fn.now() });
    await trx('products').where({ workspace_id: workspaceId, id }).delete();
    return { id, deleted: true as const, detachedDeals };
  });
}

export const PRODUCT_SORTS = {
  name: 'lower(name)',
  createdAt: 'created_at',
  updatedAt: 'updated_at',
  price: 'price',
} as const;

export interface ProductFilter extends Page {
  q?: string;
  active?: boolean;
  updatedAfter?: Date;
  sort: keyof typeof PRODUCT_SORTS;
  order: 'asc' | 'desc';
}

/**
 * One page of the catalogue and the exact total (two queries). Products without a price sort
 * last in both directions; the id breaks ties so pages never overlap.
 */
export async function listProducts(db: Db, workspaceId: string, filter: ProductFilter): Promise<{ rows: Product[]; total: number }> {
  const scope = db('products').where({ workspace_id: workspaceId });
  const q = filter.q?.trim();
  if (q) {
    const pattern = likeContains(q);
    scope.where((w) => w.whereRaw(`lower(name) LIKE ? ESCAPE '\\'`, [pattern]).orWhereRaw(`lower(sku) LIKE ? ESCAPE '\\'`, [pattern]));
  }
  if (filter.active !== undefined) scope.where({ active: filter.active });
  if (filter.updatedAfter !== undefined) scope.where('updated_at', '>=', filter.updatedAfter);
  const dir = filter.order === 'desc' ? 'DESC' : 'ASC';
  const { rows, total } = await pageWithTotal<ProductRow>(scope, filter, (q) =>
    q.orderByRaw(`${PRODUCT_SORTS[filter.sort]} ${dir} NULLS LAST, id ${dir}`).select('*'),
  );
  return { rows: rows.map(serializeProduct), total };
}

/** One sync page of the catalogue (a deleted product is gone without a tombstone). */
export async function syncProducts(db: Db, workspaceId: string, read: SyncRead) {
  const source = {
    scope: db('products').where('products.workspace_id', workspaceId),
    updatedAt: 'products.updated_at',
    id: 'products.id',
    columns: ['products.*'],
  };
  const { rows, pagination } = await syncPage<ProductRow>(db, 'products', source, read);
  return { data: rows.map(serializeProduct), pagination };
}
