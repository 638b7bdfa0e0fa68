import type { Context, Next } from 'koa';
import type { AppDeps } from '../../api/context';
import type { Db } from '../../domain/platform';
import { listDealActivities, listPipelines, matchingDealsOfContact } from '../../domain/sales';
import { listLeads } from '../../domain/leads';
import { listEnvelope } from '../../domain/kernel';
import { pageOf, setBody } from '../../api/schemas';

/**
 * The benchmark's yardstick query: one contact by primary key, the least work a read can do
 * through the same pool. Deliberately not scoped by workspace: only the bench's own API process
 * (scripts/bench/api.ts) serves it, never the service's.
 */
export async function baselineContact(
  db: Db,
  id: string,
): Promise<{ id: string; name: string; phone: string; email: string | null; created_at: Date } | undefined> {
  return db('contacts').where({ id }).first('id', 'name', 'phone', 'email', 'created_at');
}

/**
 * The benchmark's yardsticks, with no auth, limits, logging or validation (scripts/bench/api.ts
 * puts them before the app's first middleware):
 * - `/__bench/baseline/<contactId>`: one contact by primary key through the same pool, what this
 *   machine does at best;
 * - `/__bench/floor/...`: each measured read's own domain call (the same SQL and the same JSON)
 *   with nothing around it, so a row's cost splits into what the data costs and what our layers add.
 * Any other path goes on to the app.
 */
export function benchRoutes(deps: AppDeps) {
  const floors: Record<string, (parts: string[], query: URLSearchParams) => Promise<unknown>> = {
    leads: async ([workspaceId], query) => {
      const filters = {
        sort: 'createdAt' as const,
        order: 'desc' as const,
        ...Object.fromEntries(query),
        limit: Number(query.get('limit') ?? 25),
        offset: Number(query.get('offset') ?? 0),
      };
      return pageOf(listLeads(deps.db, workspaceId, filters as never, matchingDealsOfContact), filters);
    },
    pipelines: async ([workspaceId]) => ({ pipelines: await listPipelines(deps.db, workspaceId) }),
    activities: async ([workspaceId, dealId]) => {
      const page = { limit: 25, offset: 0 };
      const { rows, total } = await listDealActivities(deps.db, workspaceId, dealId, page);
      return listEnvelope(rows, total, page);
    },
  };
  return async (ctx: Context, next: Next): Promise<void> => {
    if (ctx.method !== 'GET' || !ctx.path.startsWith('/__bench/')) return next();
    const [kind, ...parts] = ctx.path.slice('/__bench/'.length).split('/');
    if (kind === 'baseline') {
      const row = await baselineContact(deps.db, parts[0]);
      ctx.status = row ? 200 : 404;
      ctx.body = { data: row ?? null };
      return;
    }
    const floor = kind === 'floor' ? floors[parts[0]] : undefined;
    if (!floor) return next();
    setBody(ctx, await floor(parts.slice(1), new URLSearchParams(ctx.querystring)));
  };
}
