/**
 * What the template sync workflows and their activities exchange (activities/templates.ts,
 * workflows/template-sync.ts). No imports: this file is bundled into the workflow sandbox.
 */

export interface TemplateSyncInput {
  workspaceId: string;
  instanceId: string;
}

export interface TemplateSyncTarget {
  workspaceId: string;
  instanceId: string;
}

/** A sync's outcome: the counts, or why it could not run (a refusal retrying cannot fix). */
export type TemplateSyncResult =
  | {
      counts: { created: number; updated: number; unchanged: number };
      /** Provider templates not kept (a header we cannot describe, too many variables). */
      skipped: number;
      pages: number;
      /** False when the page cap stopped the listing. */
      complete: boolean;
    }
  | { refused: { code: 'INSTANCE_NOT_FOUND' | 'TEMPLATE_UNSUPPORTED' | 'SEND_FAILED'; message: string } };

/** The scheduled sync: the Temporal schedule's id and how often it runs. */
export const TEMPLATE_SYNC_SCHEDULE_ID = 'template-sync';
export const TEMPLATE_SYNC_EVERY = '1 hour';

/** The workflow id of one instance's sync: one at a time per instance (the API's call joins a running one). */
export function templateSyncWorkflowId(workspaceId: string, instanceId: string): string {
  return `template-sync:${workspaceId}:${instanceId}`;
}
