import { z } from 'zod';
import { apiKey, route } from '../route';
import { listOf, pageOf } from '../schemas';
import { listInstances, PROVIDERS } from '../../domain/messaging';
import { pageQuery } from '../../domain/kernel';
import { templateRoutes } from './templates';

const Instance = z
  .object({
    id: z.string(),
    name: z.string(),
    channel: z.enum(['whatsapp', 'instagram']),
    provider: z.enum(PROVIDERS),
    connected: z.boolean(),
    createdAt: z.string(),
  })
  .openapi('Instance');

export const instanceRoutes = [
  route({
    method: 'get',
    path: '/api/v1/instances',
    operationId: 'listInstances',
    ...apiKey('Instances', 'instances:read', 'read'),
    summary: 'List connections and their connected state (archived ones never appear)',
    query: pageQuery(),
    response: listOf(Instance),
    handler: async (ctx, { query }) => pageOf(listInstances(ctx.deps.db, ctx.state.auth!.workspaceId, query), query),
  }),
  ...templateRoutes,
];
