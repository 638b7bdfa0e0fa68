import { ApplicationFailure } from '@temporalio/activity';
import type { TemplateLister } from '../../domain/messaging';
import { listCloudTemplates } from './cloud-templates';
import { heartbeat } from './heartbeat';
import { ProviderError } from './types';

/**
 * The template sync's lister (domain/messaging syncTemplates) over the Cloud API adapter, its
 * answer classified: a final refusal (a token the provider refuses, an answer it cannot read) is
 * `refused`; throttling, an outage or anything else fails the activity retryably. It heartbeats
 * after each page.
 */
export const listCloudTemplatesForSync: TemplateLister = async (settings) => {
  try {
    return { outcome: 'listed', ...(await listCloudTemplates(settings, heartbeat)) };
  } catch (err) {
    if (err instanceof ProviderError && !err.retryable) return { outcome: 'refused', error: err.message };
    throw ApplicationFailure.retryable(err instanceof Error ? err.message : String(err), 'TemplateListUnavailable');
  }
};
