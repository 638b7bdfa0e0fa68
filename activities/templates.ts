import { ApplicationFailure } from '@temporalio/activity';
import {
  liveInstanceConfig,
  openInstanceConfig,
  parseProviderTemplate,
  templateSyncInstances,
  upsertProviderTemplates,
  type ProviderTemplate,
} from '../domain/messaging';
import type { Config, Db } from '../domain/platform';
import type { TemplateSyncInput, TemplateSyncResult, TemplateSyncTarget } from '../types/templates';
import { listCloudTemplates } from './providers/cloud-templates';
import { heartbeat } from './providers/heartbeat';
import { isProviderError } from './providers/types';

/**
 * The template sync (docs/messaging.md, "Templates"): one instance's templates read from the
 * Cloud API and upserted, the only code path for both the API's `POST /api/v1/instances/{id}/templates/sync`
 * and the hourly schedule (workflows/template-sync.ts). A refusal that trying again cannot fix (a web
 * gateway instance, no wabaId, a token the provider refuses) is the result, not a failure, so
 * the API answers it; throttling and outages fail retryably.
 */
export function createTemplateActivities({ db, config }: { db: Db; config: Pick<Config, 'encryptionKeys'> }) {
  return {
    async syncInstanceTemplates(input: TemplateSyncInput): Promise<TemplateSyncResult> {
      const instance = await liveInstanceConfig(db, input.workspaceId, input.instanceId);
      if (!instance) return { refused: { code: 'INSTANCE_NOT_FOUND', message: 'Instance not found in this workspace' } };
      if (instance.provider !== 'cloud') {
        return {
          refused: {
            code: 'TEMPLATE_UNSUPPORTED',
            message: 'A web gateway instance has no template API: templates are a WhatsApp Cloud API feature',
          },
        };
      }
      const settings = openInstanceConfig(config.encryptionKeys!, instance.config, input.workspaceId);
      if (!settings.wabaId) {
        return {
          refused: {
            code: 'TEMPLATE_UNSUPPORTED',
            message: 'The instance has no wabaId configured: its WhatsApp Business account id is needed to read its templates',
          },
        };
      }
      let listing: Awaited<ReturnType<typeof listCloudTemplates>>;
      try {
        listing = await listCloudTemplates(settings, heartbeat);
      } catch (err) {
        if (isProviderError(err) && !err.retryable) return { refused: { code: 'SEND_FAILED', message: err.message } };
        throw ApplicationFailure.retryable(err instanceof Error ? err.message : String(err), 'TemplateListUnavailable');
      }
      const kept: ProviderTemplate[] = [];
      const skipped: string[] = [];
      for (const raw of listing.templates) {
        const parsed = parseProviderTemplate(raw);
        if ('template' in parsed) kept.push(parsed.template);
        else skipped.push(parsed.skipped);
      }
      const counts = await upsertProviderTemplates(db, { id: instance.id, workspace_id: input.workspaceId }, kept, listing.complete);
      return { counts, skipped: skipped.length, pages: listing.pages, complete: listing.complete };
    },

    /**
     * The next `limit` Cloud API instances with a wabaId after `afterId` (by id, so instances of all
     * workspaces interleave), for the scheduled sync.
     */
    async templateSyncTargets(input: { afterId?: string; limit: number }): Promise<TemplateSyncTarget[]> {
      return templateSyncInstances(db, input.afterId, input.limit);
    },
  };
}

export type TemplateActivities = ReturnType<typeof createTemplateActivities>;
