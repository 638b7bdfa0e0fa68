import { z } from 'zod';
import { extendZodWithOpenApi } from '@asteasolutions/zod-to-openapi';

extendZodWithOpenApi(z);

/** Response schemas shared by several endpoints (documentation only; handlers build the bodies). */
export const Pagination = z
  .object({ total: z.number(), limit: z.number(), offset: z.number(), hasMore: z.boolean() })
  .openapi('Pagination');

export const listOf = <T extends z.ZodType>(item: T) => z.object({ data: z.array(item), pagination: Pagination });
export const single = <T extends z.ZodType>(item: T) => z.object({ data: item });
