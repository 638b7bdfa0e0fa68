import { z } from 'zod';
import { apiKey, route } from '../route';
import '../schemas';
import { listPipelines } from '../../domain/sales';

const Stage = z.object({ id: z.string(), name: z.string(), order: z.number() });
const CustomField = z.object({ id: z.string(), key: z.string(), label: z.string(), type: z.string() });
const Pipeline = z
  .object({ id: z.string(), name: z.string(), order: z.number(), stages: z.array(Stage), customFields: z.array(CustomField) })
  .openapi('Pipeline');

export const pipelineRoutes = [
  route({
    method: 'get',
    path: '/api/v1/pipelines',
    operationId: 'listPipelines',
    ...apiKey('Pipelines', 'pipelines:read', 'pipelines'),
    summary: 'List pipelines in display order, with stages and custom fields',
    description:
      'The one list without `data`/`pagination`: `{ pipelines: [...] }`. Identifiers and names listed here are the values ' +
      "accepted in `pipeline` and `stage` when creating deals; custom field keys (the pipeline's own and global ones) are " +
      'the keys accepted in `customValues`.',
    response: z.object({ pipelines: z.array(Pipeline) }),
    handler: async (ctx) => ({ pipelines: await listPipelines(ctx.deps.db, ctx.state.auth!.workspaceId) }),
  }),
];
