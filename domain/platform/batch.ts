import type { Knex } from 'knex';
import type { Db } from './db';
import { ApiError, constraintConflict, ErrorCode } from '../kernel';

/** Items one batch request may carry. */
export const BATCH_MAX = 100;
/**
 * Items per transaction: what one request can hold locked at a time. A batch is as many short
 * transactions as it needs, each committed before the next begins.
 */
export const BATCH_CHUNK = 25;

/** One item's answer: the status and body the single call would give, or its error. */
export interface ItemAnswer {
  index: number;
  status: number;
  data?: unknown;
  error?: { code: ErrorCode; message: string; hint?: string };
}

export interface BatchInput<T> {
  index: number;
  input: T;
}

/** The answer of an item refused with `err` (what the single call would answer). */
export function refused(index: number, err: ApiError): ItemAnswer {
  return {
    index,
    status: err.status,
    error: err.hint === undefined ? { code: err.code, message: err.message } : { code: err.code, message: err.message, hint: err.hint },
  };
}

/**
 * Runs `work` for one item and answers it: a refusal (an ApiError, or a constraint the single call
 * answers 409 CONFLICT) is that item's answer. `work` must write inside its own `db.transaction`,
 * which is a savepoint in the chunk's transaction, so a refused item rolls back alone. Any other
 * error fails the chunk (and the request).
 */
export async function answerItem(index: number, work: () => Promise<{ status: number; data: unknown }>): Promise<ItemAnswer> {
  try {
    return { index, ...(await work()) };
  } catch (err) {
    if (err instanceof ApiError) return refused(index, err);
    const conflict = constraintConflict(err);
    if (conflict) return refused(index, conflict);
    throw err;
  }
}

/** Lock order conflicts PostgreSQL resolved by aborting this transaction: nothing of it committed, so it can run again. */
const RETRYABLE = new Set(['40P01', '40001']);
const ATTEMPTS = 4;

/**
 * Runs a batch's items, in request order, in transactions of at most BATCH_CHUNK items:
 * `runChunk` answers every item of its chunk inside the chunk's transaction, taking its row locks
 * in a deterministic order so two concurrent batches queue instead of deadlocking (a deadlock
 * PostgreSQL still detects, with a trigger's lock, rolls the chunk back and runs it again).
 * `afterChunk` runs last in each chunk's transaction (an Idempotency-Key's progress commits with
 * the items). A batch is not atomic: each committed chunk stays when a later one fails.
 */
export async function runInChunks<T>(
  db: Db,
  items: BatchInput<T>[],
  runChunk: (trx: Knex.Transaction, chunk: BatchInput<T>[]) => Promise<ItemAnswer[]>,
  afterChunk?: (trx: Knex.Transaction, answers: ItemAnswer[]) => Promise<void>,
): Promise<ItemAnswer[]> {
  const answers: ItemAnswer[] = [];
  for (let start = 0; start < items.length; start += BATCH_CHUNK) {
    const chunk = items.slice(start, start + BATCH_CHUNK);
    for (let attempt = 1; ; attempt++) {
      try {
        answers.push(
          ...(await db.transaction(async (trx) => {
            const done = await runChunk(trx, chunk);
            if (afterChunk) await afterChunk(trx, done);
            return done;
          })),
        );
        break;
      } catch (err) {
        if (attempt >= ATTEMPTS || !RETRYABLE.has((err as { code?: string }).code ?? '')) throw err;
        await new Promise((resolve) => setTimeout(resolve, 10 * attempt + Math.random() * 20));
      }
    }
  }
  return answers;
}
