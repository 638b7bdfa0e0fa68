import { type Config, databaseNow, type Db } from '../domain/platform';
import { createAutomationActivities } from './automations';
import { createBroadcastActivities } from './broadcasts';
import { createInboundMediaActivities } from './inbound-media';
import { createInsightActivities } from './insights';
import { createMediaActivities } from './media';
import { createMessagingActivities } from './messaging';
import { createTemplateActivities } from './templates';
import { createWebhookActivities } from './webhooks';

/**
 * Activities are built by a factory that takes their dependencies, so the worker wires real ones
 * and nothing in a workflow touches the world directly.
 */
export interface ActivityDeps {
  db: Db;
  config: Pick<Config, 'allowPrivateUrls' | 'encryptionKeys'> &
    Partial<Pick<Config, 'sendReconcileWindowMs' | 'broadcastBatchSize' | 'rateLimitScale' | 'ai'>>;
}

export function createActivities({ db, config }: ActivityDeps) {
  return {
    /** Proves a workflow can reach PostgreSQL through an activity: returns the database clock. */
    async databaseTime(): Promise<string> {
      return (await databaseNow(db)).toISOString();
    },
    ...createMessagingActivities({ db, config }),
    ...createMediaActivities({ db, config }),
    ...createInboundMediaActivities({ db, config }),
    ...createWebhookActivities({ db, config }),
    ...createAutomationActivities({ db }),
    ...createBroadcastActivities({ db, config }),
    ...createTemplateActivities({ db, config }),
    ...createInsightActivities({ db, config }),
  };
}

export type Activities = ReturnType<typeof createActivities>;
