import { z } from 'zod';
import { apiKey, route } from '../route';
import { Deleted, IdParams, listOrSyncOf, pageOf, single } from '../schemas';
import { atLeastOne, ECMA_WHITESPACE, pageQuery, queryBoolean, sortQuery, trimmedText } from '../../domain/kernel';
import { createProduct, deleteProduct, getProduct, listProducts, PRODUCT_SORTS, syncProducts, updateProduct } from '../../domain/sales';
import { syncDescription, syncParams, syncRead, updatedAfterParam } from '../../domain/platform';

const Product = z
  .object({
    id: z.string(),
    name: z.string(),
    description: z.string().nullable(),
    sku: z.string().nullable(),
    price: z
      .string()
      .nullable()
      .openapi({ description: 'Decimal string with two places ("10.50"), never a JSON number; null when unset.', example: '10.50' }),
    active: z.boolean(),
    createdAt: z.string(),
    updatedAt: z.string(),
  })
  .openapi('Product');

/** Checked by the domain (parsePrice) so that any bad price answers INVALID_PRICE, not VALIDATION. */
const price = z
  .unknown()
  .optional()
  .openapi({
    // The shapes parsePrice (domain/sales/products) accepts; a number's digits are those of String(n).
    anyOf: [
      { type: 'string', pattern: `^[${ECMA_WHITESPACE}]*[0-9]{1,12}(\\.[0-9]{0,2})?[${ECMA_WHITESPACE}]*$` },
      { type: 'number', minimum: 0, maximum: 999_999_999_999.99, multipleOf: 0.01 },
      { type: 'null' },
    ],
    description:
      'Decimal >= 0 with at most 2 decimal places and 12 integer digits (numeric(14,2)), as a string ("10.50") or a number; ' +
      'null clears. Anything else is 400 `INVALID_PRICE`.',
    example: '10.50',
  } as never);

const fields = {
  name: trimmedText(200),
  description: z.string().max(2000).nullable(),
  sku: z.string().trim().max(120).nullable().openapi({ description: 'Up to 120 characters; trimmed, and an empty one is stored as null.' }),
  price,
  active: z.boolean(),
};

const ProductQuery = pageQuery()
  .extend(sortQuery(PRODUCT_SORTS, { sort: 'name', order: 'asc' }).shape)
  .extend({
    q: z.string().max(200).optional().openapi({ description: 'Case-insensitive substring of the name or the SKU.' }),
    active: queryBoolean.optional().openapi({ description: '`true` or `false`.' }),
    updatedAfter: updatedAfterParam,
    ...syncParams('products'),
  });

export const productRoutes = [
  route({
    method: 'get',
    path: '/api/v1/products',
    operationId: 'listProducts',
    ...apiKey('Products', 'products:read', 'read'),
    summary: 'List products',
    description:
      '`sort` is `name` (default, case-insensitive), `createdAt`, `updatedAt` or `price`; `order` `asc` (default) or `desc`. ' +
      'Products without a price sort last in both orders; ties are broken by id, so pages are stable.\n\n' +
      syncDescription(' and `updatedAfter` (first page)') +
      ' A deleted product is gone: no tombstone.',
    query: ProductQuery,
    response: listOrSyncOf(Product),
    handler: async (ctx, { query }) => {
      const workspaceId = ctx.state.auth!.workspaceId;
      const read = syncRead(ctx.query, query, Object.keys(ProductQuery.shape));
      if (read) return syncProducts(ctx.deps.db, workspaceId, read);
      return pageOf(listProducts(ctx.deps.db, workspaceId, query), query);
    },
  }),
  route({
    method: 'post',
    path: '/api/v1/products',
    operationId: 'createProduct',
    ...apiKey('Products', 'products:write', 'write'),
    status: 201,
    summary: 'Create a product',
    description: 'Names are unique per workspace ignoring case: a duplicate is 409 `CONFLICT`. `active` defaults to true.',
    body: z.object(fields).partial().extend({ name: fields.name }),
    errors: ['INVALID_PRICE', 'CONFLICT'],
    response: single(Product),
    handler: async (ctx, { body }) => ({ data: await createProduct(ctx.deps.db, ctx.state.auth!.workspaceId, body) }),
  }),
  route({
    method: 'get',
    path: '/api/v1/products/{id}',
    operationId: 'getProduct',
    ...apiKey('Products', 'products:read', 'read'),
    summary: 'Get a product',
    params: IdParams,
    response: single(Product),
    handler: async (ctx, { params }) => ({ data: await getProduct(ctx.deps.db, ctx.state.auth!.workspaceId, params.id) }),
  }),
  route({
    method: 'patch',
    path: '/api/v1/products/{id}',
    operationId: 'updateProduct',
    ...apiKey('Products', 'products:write', 'write'),
    summary: 'Change a product',
    description: 'At least one field must be sent. `null` clears `description`, `sku` and `price`. A bad price is 400 `INVALID_PRICE`.',
    params: IdParams,
    body: atLeastOne(z.object(fields).partial(), 'send at least one of name, description, sku, price, active'),
    errors: ['INVALID_PRICE', 'CONFLICT'],
    response: single(Product),
    handler: async (ctx, { params, body }) => ({ data: await updateProduct(ctx.deps.db, ctx.state.auth!.workspaceId, params.id, body) }),
  }),
  route({
    method: 'delete',
    path: '/api/v1/products/{id}',
    operationId: 'deleteProduct',
    ...apiKey('Products', 'products:write', 'delete'),
    summary: 'Delete a product',
    description:
      'Deals that reference the product are kept and detached from it (their `productId` becomes null and their `updatedAt` ' +
      'moves) in the same transaction as the delete.',
    params: IdParams,
    response: Deleted,
    handler: async (ctx, { params }) => {
      const { id } = await deleteProduct(ctx.deps.db, ctx.state.auth!.workspaceId, params.id);
      return { data: { id, deleted: true } };
    },
  }),
];
