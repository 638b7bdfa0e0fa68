import { syncTemplates, templateSyncInstances } from '../domain/messaging';
import type { Config, Db } from '../domain/platform';
import type { TemplateSyncInput, TemplateSyncResult, TemplateSyncTarget } from '../types/templates';
import { listCloudTemplatesForSync } from './providers/cloud-template-lister';

/** The template sync's activities (workflows/template-sync.ts): one instance's sync (domain/messaging syncTemplates), and the schedule's targets. */
export function createTemplateActivities({ db, config }: { db: Db; config: Pick<Config, 'encryptionKeys'> }) {
  return {
    async syncInstanceTemplates(input: TemplateSyncInput): Promise<TemplateSyncResult> {
      return syncTemplates(db, config.encryptionKeys!, input, listCloudTemplatesForSync);
    },

    /** The next `limit` Cloud API instances with a wabaId after `afterId` (by id, so instances of all workspaces interleave), for the scheduled sync. */
    async templateSyncTargets(input: { afterId?: string; limit: number }): Promise<TemplateSyncTarget[]> {
      return templateSyncInstances(db, input.afterId, input.limit);
    },
  };
}

export type TemplateActivities = ReturnType<typeof createTemplateActivities>;
