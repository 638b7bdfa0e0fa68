import { ApplicationFailure } from '@temporalio/activity';
import { deriveInsight, InsightNotDerived } from '../domain/insights';
import type { Config, Db } from '../domain/platform';
import { ModelCallFailed, modelPort } from './providers/llm';

/**
 * The insight workflow's activity (workflows/insight.ts): one derivation (domain/insights). An
 * answer that is not an insight, a 429 (after its Retry-After), a 5xx or no answer are retried by
 * the workflow's retry policy; a refusal of the request itself (a wrong key) or no model at all is final.
 */
export function createInsightActivities(deps: { db: Db; config: Pick<Config, 'encryptionKeys'> & Partial<Pick<Config, 'ai'>> }) {
  const port = modelPort();
  return {
    async deriveInsight(input: { workspaceId: string; contactId: string }) {
      try {
        return await deriveInsight(
          deps.db,
          { keys: deps.config.encryptionKeys!, port, defaults: deps.config.ai ?? {} },
          input.workspaceId,
          input.contactId,
        );
      } catch (err) {
        if (err instanceof InsightNotDerived || err instanceof ModelCallFailed)
          throw ApplicationFailure.create({
            message: err.message,
            type: err.name,
            nonRetryable: err.final,
            ...(err instanceof ModelCallFailed && err.retryAfterMs !== undefined ? { nextRetryDelay: err.retryAfterMs } : {}),
          });
        throw err;
      }
    },
  };
}
