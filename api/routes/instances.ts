import { z } from 'zod';
import { route } from '../route';
import { listOf } from '../schemas';
import { InstanceRow, serializeInstance } from '../../domain/instances';
import { listEnvelope, pageQuery, pageWithTotal } from '../../domain/pagination';

const Instance = z
  .object({
    id: z.string(),
    name: z.string(),
    channel: z.enum(['whatsapp', 'instagram']),
    provider: z.enum(['cloud', 'web']),
    connected: z.boolean(),
    createdAt: z.string(),
  })
  .openapi('Instance');

export const instanceRoutes = [
  route({
    method: 'get',
    path: '/api/v1/instances',
    tag: 'Instances',
    auth: 'apiKey',
    scopes: ['instances:read'],
    ipProfile: 'read',
    summary: 'List connections and their connected state (archived ones never appear)',
    query: pageQuery(),
    response: listOf(Instance),
    handler: async (ctx, { query }) => {
      const db = ctx.deps.db;
      const scope = db('instances').where({ workspace_id: ctx.state.auth!.workspaceId, archived: false });
      const { rows, total } = await pageWithTotal<InstanceRow>(scope, query, (q) => q.orderBy([{ column: 'created_at' }, { column: 'id' }]).select('*'));
      return listEnvelope(rows.map(serializeInstance), total, query);
    },
  }),
];
