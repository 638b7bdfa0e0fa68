import { Client, WorkflowExecutionAlreadyStartedError, WorkflowIdReusePolicy } from '@temporalio/client';
import type { Logger } from 'pino';
import { type Db, START_DEADLINE_MS, withDeadline, workspacePriority } from '../domain/platform';
import { claimMediaToStart, mediaWorkflowId, unclaimMedia } from '../domain/messaging';
import { inboundMediaWorkflow } from '../workflows/inbound-media';

/** Rows one pass takes. */
const BATCH = 50;

/**
 * Starts the media fetch of inbound media messages (workflows/inbound-media.ts). The webhook's
 * transaction writes the message and its `pending` message_media row together, so the row is the
 * durable work item: this loop, beside the outbox dispatcher in the worker, claims rows never
 * started (`started_at` set; fair between workspaces, at most MEDIA_FETCHES_PER_WORKSPACE of one
 * workspace in flight: domain/messaging/media.ts claimMediaToStart) and starts one workflow per message, id
 * `media/<workspaceId>/<messageId>`. A start that fails gives the row back; a worker that dies
 * after claiming leaves it `pending` with `started_at` set, and it is claimed again after
 * RESTART_AFTER_MINUTES (domain/messaging/media.ts), like a row whose workflow was terminated:
 * ALLOW_DUPLICATE_FAILED_ONLY starts a new run only when the last one failed, and a workflow
 * still running is found already started. Nothing is fetched twice: the fetch returns at once
 * for media no longer `pending`.
 */
export function createMediaDispatcher(options: {
  db: Db;
  temporal: () => Promise<Client>;
  taskQueue: string;
  logger: Logger;
  pollMs: number;
}) {
  const { db, logger } = options;
  let running = false;
  let loop: Promise<void> | undefined;

  async function pass(): Promise<number> {
    const rows = await claimMediaToStart(db, BATCH);
    if (rows.length === 0) return 0;
    const client = await options.temporal().catch(async (err) => {
      await unclaimMedia(
        db,
        rows.map((r) => r.message_id),
      );
      throw err;
    });
    const failed: string[] = [];
    await Promise.all(
      rows.map(async (r) => {
        try {
          await withDeadline(client, START_DEADLINE_MS, () =>
            client.workflow.start(inboundMediaWorkflow, {
              workflowId: mediaWorkflowId(r.workspace_id, r.message_id),
              taskQueue: options.taskQueue,
              args: [{ workspaceId: r.workspace_id, messageId: r.message_id }],
              workflowIdReusePolicy: WorkflowIdReusePolicy.ALLOW_DUPLICATE_FAILED_ONLY,
              priority: workspacePriority(r.workspace_id),
              searchAttributes: { WorkspaceId: [r.workspace_id] },
            }),
          );
        } catch (err) {
          if (!(err instanceof WorkflowExecutionAlreadyStartedError)) failed.push(r.message_id);
        }
      }),
    );
    if (failed.length > 0) {
      await unclaimMedia(db, failed);
      throw new Error(`${failed.length} media fetch workflows could not be started`);
    }
    return rows.length;
  }

  return {
    start(): void {
      if (running) return;
      running = true;
      loop = (async () => {
        let backoff = 0;
        while (running) {
          try {
            const n = await pass();
            backoff = 0;
            if (n === BATCH) continue;
          } catch (err) {
            backoff = Math.min(Math.max(backoff * 2, 500), 30_000);
            logger.warn({ err: (err as Error).message, retryInMs: backoff }, 'media dispatcher: pass failed');
          }
          await new Promise((resolve) => setTimeout(resolve, backoff || options.pollMs));
        }
      })();
    },
    async stop(): Promise<void> {
      running = false;
      await loop;
    },
  };
}
