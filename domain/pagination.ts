import { z } from 'zod';

/** `limit` 1..max (default per endpoint) and `offset` >= 0, as numbers in the query string. */
export function pageQuery(options: { defaultLimit?: number; maxLimit?: number } = {}) {
  const max = options.maxLimit ?? 100;
  return z.object({
    limit: z.coerce.number().int().min(1).max(max).default(options.defaultLimit ?? 25),
    offset: z.coerce.number().int().min(0).max(10_000_000).default(0),
  });
}

export interface Page {
  limit: number;
  offset: number;
}

export interface Pagination extends Page {
  total: number;
  hasMore: boolean;
}

/** The spec's list envelope. */
export function listEnvelope<T>(data: T[], total: number, page: Page): { data: T[]; pagination: Pagination } {
  return {
    data,
    pagination: { total, limit: page.limit, offset: page.offset, hasMore: page.offset + data.length < total },
  };
}
