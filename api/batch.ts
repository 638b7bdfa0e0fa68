import type { Context } from 'koa';
import type { Knex } from 'knex';
import { z } from 'zod';
import {
  BATCH_MAX,
  BatchInput,
  claimKey,
  completeKey,
  fingerprint,
  ItemAnswer,
  recordProgress,
  refused,
  releaseKey,
  runInChunks,
  STORED_ANSWER_HOURS,
} from '../domain/platform';
import { ERROR_CODES, ErrorCode } from '../domain/kernel';
import type { BatchItem } from './route';
import { idempotencyKey } from './send';

/** The body of a batch route: `{ <field>: [item, ...] }`, 1 to BATCH_MAX items (RouteDef.batch). */
export function batchBody<T extends z.ZodType>(field: string, item: T) {
  return z.object({ [field]: z.array(item).min(1).max(BATCH_MAX) });
}

/** One of these statuses (a union of literals: the document lists each). */
const oneOf = (statuses: number[]) =>
  statuses.length === 1
    ? z.literal(statuses[0])
    : z.union(statuses.map((s) => z.literal(s)) as [z.ZodLiteral<number>, z.ZodLiteral<number>]);

/**
 * The answer of a batch route: one entry per item in request order, with the status the single
 * call would answer and its body's `data`, or its error (`codes`: those an item can answer).
 */
export function batchAnswer(name: string, data: z.ZodType, codes: ErrorCode[]) {
  const Error = z.object({ code: z.enum(codes as [ErrorCode, ...ErrorCode[]]), message: z.string(), hint: z.string().optional() });
  const statuses = [...new Set(codes.map((c) => ERROR_CODES[c]))];
  return z.object({
    data: z.array(
      z
        .union([
          z.object({ index: z.number().int(), status: oneOf([201, 200]), data }),
          z.object({ index: z.number().int(), status: oneOf(statuses), error: Error }),
        ])
        .openapi(name),
    ),
  });
}

/**
 * Answers a batch: items that failed validation answer for themselves, the others run in chunks
 * (domain/platform/batch.ts runInChunks with `runChunk`), and the answers come back in request order. With
 * an `Idempotency-Key` the key is claimed before any work (domain/platform/idempotency.ts): a repeat is
 * replayed (200, `Idempotent-Replayed: true`), a concurrent one is 409 IN_PROGRESS, another body
 * 422 IDEMPOTENCY_KEY_REUSED; each chunk records its answers in its own transaction, so a request
 * taking over a dead one resumes where it stopped and never does an item twice.
 */
export async function answerBatch<T>(
  ctx: Context,
  operation: string,
  items: BatchItem[],
  runChunk: (trx: Knex.Transaction, chunk: BatchInput<T>[]) => Promise<ItemAnswer[]>,
): Promise<{ data: ItemAnswer[] }> {
  const db = ctx.deps.db;
  const invalid = items.flatMap((item) => (item.error ? [refused(item.index, item.error)] : []));
  const valid = items.flatMap((item) => (item.error ? [] : [{ index: item.index, input: item.input as T }]));
  const inOrder = (answers: ItemAnswer[]) => ({ data: [...answers].sort((a, b) => a.index - b.index) });
  const key = idempotencyKey(ctx);
  if (!key) return inOrder([...invalid, ...(await runInChunks(db, valid, runChunk))]);

  ctx.set('Idempotency-Key', key);
  const request = fingerprint(
    operation,
    items.map((item) => (item.error ? { invalid: item.raw } : item.input)),
  );
  const claimed = await claimKey<ItemAnswer>(db, ctx.state.auth!.workspaceId, key, operation, request);
  if ('replay' in claimed) {
    ctx.set('Idempotent-Replayed', 'true');
    return inOrder(claimed.replay);
  }
  const { claim } = claimed;
  try {
    const done = new Set(claim.answers.map((a) => a.index));
    const answers = await runInChunks(
      db,
      valid.filter((item) => !done.has(item.index)),
      runChunk,
      (trx, chunk) => recordProgress(trx, claim, chunk),
    );
    await completeKey(db, claim, invalid);
    return inOrder([...claim.answers, ...answers, ...invalid]);
  } catch (err) {
    await releaseKey(db, claim).catch(() => undefined);
    throw err;
  }
}

/** How the batch routes describe their Idempotency-Key (in each operation's description). */
export const BATCH_IDEMPOTENCY_TEXT =
  `With an \`Idempotency-Key\` header the whole batch is done once: a repeat with the same key and body within ${STORED_ANSWER_HOURS} hours ` +
  'answers 200 with the first answer and `Idempotent-Replayed: true`, while the first still runs 409 `IN_PROGRESS`, with another ' +
  'body or on another endpoint 422 `IDEMPOTENCY_KEY_REUSED`.';
