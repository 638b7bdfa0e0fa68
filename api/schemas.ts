import { z } from 'zod';
import { extendZodWithOpenApi } from '@asteasolutions/zod-to-openapi';
import type { Context } from 'koa';
import { JsonRecords, listEnvelope, type Page, type Pagination as PaginationOfPage, paginationOf } from '../domain/kernel';

extendZodWithOpenApi(z);

/** Response schemas shared by several endpoints (documentation only; handlers build the bodies). */
export const Pagination = z
  .object({ total: z.number(), limit: z.number(), offset: z.number(), hasMore: z.boolean() })
  .openapi('Pagination');

export const listOf = <T extends z.ZodType>(item: T) => z.object({ data: z.array(item), pagination: Pagination });
/**
 * An answer whose body is JSON already: a page of records PostgreSQL wrote (JsonRecords) in its
 * envelope, as UTF-8 bytes. Bytes, not a string: a string body is copied twice more on V8's heap
 * (flattened to measure it, then joined to the headers when written), and a page's text is most of
 * what the API's read rows promote; a Buffer's bytes are outside the heap.
 */
export class JsonBody {
  readonly bytes: Buffer;
  constructor(parts: readonly string[]) {
    this.bytes = Buffer.concat(parts.map((part) => Buffer.from(part)));
  }
}
/** A handler's answer as the response body: an object as Koa writes it (JSON), a JsonBody's bytes as they are. */
export function setBody(ctx: Context, answer: unknown): void {
  if (answer instanceof JsonBody) {
    ctx.type = 'json';
    ctx.body = answer.bytes;
  } else ctx.body = answer;
}
/** A sync page whose records PostgreSQL wrote (syncJsonPage), in the envelope `cursorListOf` documents, as bytes. */
export async function syncPageOf(page: Promise<{ rows: JsonRecords; pagination: z.infer<typeof CursorPagination> }>): Promise<JsonBody> {
  const { rows, pagination } = await page;
  return new JsonBody(['{"data":', rows.json, `,"pagination":${JSON.stringify(pagination)}}`]);
}
/** The answer `listOf` documents, from a domain list's offset page (`{ rows, total }`; rows PostgreSQL wrote pass through as text). */
export async function pageOf(list: Promise<{ rows: JsonRecords; total: number }>, page: Page): Promise<JsonBody>;
export async function pageOf<T>(
  list: Promise<{ rows: T[]; total: number }>,
  page: Page,
): Promise<{ data: T[]; pagination: PaginationOfPage }>;
export async function pageOf<T>(list: Promise<{ rows: T[] | JsonRecords; total: number }>, page: Page) {
  const { rows, total } = await list;
  if (rows instanceof JsonRecords)
    return new JsonBody(['{"data":', rows.json, `,"pagination":${JSON.stringify(paginationOf(total, page, rows.count))}}`]);
  return listEnvelope(rows, total, page);
}
/**
 * The page of a cursor-paged read (the events feed, incremental sync): no total and no offset,
 * whose cost would grow with depth. `nextCursor` is always given: the position after this page,
 * to store and resume from, also when `hasMore` is false (the next run continues there).
 */
export const CursorPagination = z
  .object({
    limit: z.number(),
    hasMore: z.boolean().openapi({ description: 'More rows are readable now: ask again with `cursor=nextCursor`.' }),
    nextCursor: z.string().openapi({ description: 'Opaque position after this page; pass it back as `cursor`.' }),
  })
  .openapi('CursorPagination');
export const cursorListOf = <T extends z.ZodType>(item: T) => z.object({ data: z.array(item), pagination: CursorPagination });
/** A list that also syncs (domain/platform/sync.ts): its offset page, or with cursor paging its cursor page of `syncItem` (default: the same records). */
export const listOrSyncOf = <T extends z.ZodType, S extends z.ZodType = T>(item: T, syncItem?: S) =>
  z.union([listOf(item), cursorListOf(syncItem ?? item)]);
export const single = <T extends z.ZodType>(item: T) => z.object({ data: item });

/** `{id}` path parameter: a malformed id answers 404 like a missing record (see router). */
export const IdParams = z.object({ id: z.uuid() });

/** The body of every delete: `{ id, deleted: true }`. */
export const Deleted = single(z.object({ id: z.string(), deleted: z.literal(true) }));

export const Tag = z.object({ id: z.string(), name: z.string(), color: z.string() }).openapi('Tag');

export const Lead = z
  .object({
    id: z.string(),
    name: z.string(),
    phone: z
      .string()
      .nullable()
      .openapi({ example: '5511987654321', description: 'Null for a contact met on Instagram, until a phone joins it.' }),
    email: z.string().nullable(),
    instagram: z
      .object({ id: z.string().describe('Instagram-scoped id of the person'), username: z.string().nullable() })
      .nullable()
      .openapi({ description: 'The Instagram person this contact wrote as (their latest identity), or null.' }),
    notes: z.string(),
    tags: z.array(Tag),
    optedOut: z.boolean().openapi({ description: 'The contact asked not to be messaged: every send to it is 403 OPTED_OUT.' }),
    createdAt: z.string(),
    updatedAt: z.string(),
  })
  .openapi('Lead');

/** A lead that left, in a sync with `includeDeleted=true`: the other system removes its copy. */
export const LeadTombstone = z
  .object({
    id: z.string(),
    deleted: z.literal(true),
    deletedAt: z.string().openapi({ description: 'When the lead was deleted, or merged into another.' }),
    mergedIntoId: z.string().nullable().openapi({ description: 'The lead it was merged into (which carries on); null for a deletion.' }),
    updatedAt: z.string(),
  })
  .openapi('LeadTombstone');
