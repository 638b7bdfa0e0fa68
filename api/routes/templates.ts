import { z } from 'zod';
import { WorkflowFailedError } from '@temporalio/client';
import { apiKey, route } from '../route';
import { IdParams, listOf, pageOf, single } from '../schemas';
import { withTemporal } from '../context';
import { ApiError, pageQuery } from '../../domain/kernel';
import { isTemporalUnreachable, workspacePriority } from '../../domain/platform';
import { HEADER_FORMATS, instanceForTemplateSync, listTemplates, TEMPLATE_STATUSES } from '../../domain/messaging';
import { MAX_TEMPLATE_PAGES, TEMPLATE_PAGE_SIZE } from '../../activities/providers/cloud-templates';
import { templateSyncWorkflowId } from '../../types/templates';
import { templateSyncWorkflow } from '../../workflows/template-sync';

const Template = z
  .object({
    id: z.string(),
    instanceId: z.string(),
    name: z.string(),
    language: z.string(),
    status: z.enum(TEMPLATE_STATUSES).describe('Only `approved` is sendable; any other is 422 `TEMPLATE_INVALID` at send'),
    category: z
      .string()
      .nullable()
      .describe(
        "The provider's category, lower case (`marketing`, `utility`, `authentication`); null for a template registered by the operator",
      ),
    components: z.object({
      header: z.object({ format: z.enum(HEADER_FORMATS), variableCount: z.number().int() }).nullable(),
      body: z.object({
        text: z.string().nullable().describe('With its `{{1}}` placeholders; null for a template registered by the operator'),
        variableCount: z.number().int().describe('How many `templateVariables` a send gives'),
      }),
      buttons: z.array(
        z.object({
          type: z.string().describe('Lower case: `quick_reply`, `url`, `phone_number`, `copy_code`, ...'),
          text: z.string(),
          urlVariable: z.boolean().describe('A `url` button whose URL ends in a variable'),
        }),
      ),
    }),
    updatedAt: z.string(),
  })
  .openapi('Template');

/** How long the API waits for a sync's result before answering 409 IN_PROGRESS (the sync goes on). */
const SYNC_WAIT_MS = 30_000;
const SERVICE = 'The template sync';

export const templateRoutes = [
  route({
    method: 'get',
    path: '/api/v1/templates',
    operationId: 'listTemplates',
    ...apiKey('Instances', 'templates:read', 'read'),
    summary: "List the message templates of the workspace's instances",
    description:
      'Oldest first. `instanceId` and `status` filter. A Cloud API instance with a `wabaId` follows its WhatsApp Business ' +
      'account: synced hourly and by `POST /api/v1/instances/{id}/templates/sync`, and a status change the provider ' +
      'notifies (paused, disabled, approved again) applies at once. `status`, `category`, `header.format` and button ' +
      '`type` are lower case.',
    query: pageQuery().extend({ instanceId: z.uuid().optional(), status: z.enum(TEMPLATE_STATUSES).optional() }),
    response: listOf(Template),
    handler: async (ctx, { query }) => pageOf(listTemplates(ctx.deps.db, ctx.state.auth!.workspaceId, query), query),
  }),
  route({
    method: 'post',
    path: '/api/v1/instances/{id}/templates/sync',
    operationId: 'syncInstanceTemplates',
    ...apiKey('Instances', 'templates:write', 'write'),
    summary: "Sync an instance's templates from its WhatsApp Business account now",
    description:
      "Reads the account's templates from the WhatsApp Cloud API (`GET /{version}/{wabaId}/message_templates`, every page, " +
      `at most ${MAX_TEMPLATE_PAGES} pages of ${TEMPLATE_PAGE_SIZE}) and upserts them: a template is identified by instance, name and language, so ` +
      "one the operator registered becomes the provider's. `created`, `updated` and `unchanged` count the provider's " +
      'templates (`updated` also counts templates the provider no longer lists, now `disabled`). One sync runs per instance ' +
      'at a time: a call while one runs waits for it. A web gateway instance, or a Cloud API instance without `wabaId` in ' +
      'its configuration, is 422 `TEMPLATE_UNSUPPORTED`; a provider refusal (a token it refuses, an unknown account) is ' +
      `502 \`SEND_FAILED\`; a sync still running after ${SYNC_WAIT_MS / 1000} s is 409 \`IN_PROGRESS\` (it goes on; call again for its counts).`,
    params: IdParams,
    response: single(z.object({ created: z.number().int(), updated: z.number().int(), unchanged: z.number().int() })),
    errors: ['INSTANCE_NOT_FOUND', 'TEMPLATE_UNSUPPORTED', 'SEND_FAILED', 'IN_PROGRESS', 'UNAVAILABLE'],
    handler: async (ctx, { params }) => {
      const workspaceId = ctx.state.auth!.workspaceId;
      const instance = await instanceForTemplateSync(ctx.deps.db, workspaceId, params.id);
      if (!instance) throw new ApiError('INSTANCE_NOT_FOUND', 'Instance not found in this workspace');
      if (instance.provider !== 'cloud')
        throw new ApiError(
          'TEMPLATE_UNSUPPORTED',
          'A web gateway instance has no template API: templates are a WhatsApp Cloud API feature',
          {
            hint: "Register this instance's templates with the admin API, or sync a Cloud API instance.",
          },
        );
      const workflowId = templateSyncWorkflowId(workspaceId, instance.id);
      const handle = await withTemporal(ctx, SERVICE, (client) =>
        client.workflow.start(templateSyncWorkflow, {
          workflowId,
          taskQueue: ctx.deps.config.taskQueue,
          args: [{ workspaceId, instanceId: instance.id }],
          workflowIdConflictPolicy: 'USE_EXISTING',
          priority: workspacePriority(workspaceId),
          searchAttributes: { WorkspaceId: [workspaceId], InstanceId: [instance.id] },
        }),
      );
      // The wait is abandoned (its long poll cancelled, the sync goes on) after SYNC_WAIT_MS.
      const wait = new AbortController();
      const timer = setTimeout(() => wait.abort(), SYNC_WAIT_MS);
      let result: Awaited<ReturnType<typeof templateSyncWorkflow>>;
      try {
        result = await handle.client.withAbortSignal(wait.signal, () => handle.result());
      } catch (err) {
        if (wait.signal.aborted)
          throw new ApiError('IN_PROGRESS', 'The template sync is still running', {
            hint: 'Call again in a moment: the call joins the running sync and answers its counts.',
          });
        if (err instanceof WorkflowFailedError) throw new ApiError('SEND_FAILED', 'The template sync failed', { hint: err.message });
        if (isTemporalUnreachable(err)) throw new ApiError('UNAVAILABLE', `${SERVICE} is unavailable`, { hint: 'Retry in a few seconds.' });
        throw err;
      } finally {
        clearTimeout(timer);
      }
      if ('refused' in result) {
        const { code, message } = result.refused;
        throw new ApiError(code, message, {
          hint:
            code === 'TEMPLATE_UNSUPPORTED'
              ? "Set the instance's config.wabaId (admin API) to its WhatsApp Business account id."
              : code === 'SEND_FAILED'
                ? "Check the instance's access token and wabaId."
                : undefined,
        });
      }
      return { data: result.counts };
    },
  }),
];
