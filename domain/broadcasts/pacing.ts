/**
 * A broadcast batch's pacing, without the database: lanes of pages, each page's provider calls
 * spaced by the broadcast's rate (the slots shared by the lanes), the batch's size and deadline,
 * and which stop wins when lanes stop for different reasons. domain/broadcasts/batch.ts gives it
 * the real pages and calls; the unit tier gives it a clock.
 */

/** What the broadcast workflow (workflows/broadcast.ts) is told by one batch. */
export type BatchResult =
  | { state: 'more' }
  | { state: 'done' }
  | { state: 'paused' }
  | { state: 'cancelled' }
  | { state: 'completed' }
  /** The daily quota or the cold cap is reached: wait until `until` (the São Paulo reset). */
  | { state: 'waiting'; until: string }
  /** A recipient's earlier provider call may have been accepted: wait a little for its status callback. */
  | { state: 'reconciling' };

/**
 * A page holds a quarter of a second of the broadcast's rate (one recipient at 7 calls a second
 * or less, MAX_PAGE at most), so a slow broadcast prepares nothing ahead of its turn; up to
 * MAX_LANES pages are in flight at once when the rate allows (a lane per LANE_RATE calls a second).
 */
const MAX_PAGE = 25;
const PAGES_PER_SECOND = 4;
const MAX_LANES = 8;
const LANE_RATE = 20;

/** Page size, lanes and the gap between two provider calls, for a rate of provider calls a second. */
export function pacingFor(callsPerSecond: number): { pageSize: number; lanes: number; intervalMs: number } {
  return {
    pageSize: Math.max(1, Math.min(MAX_PAGE, Math.floor(callsPerSecond / PAGES_PER_SECOND))),
    lanes: Math.max(1, Math.min(MAX_LANES, Math.ceil(callsPerSecond / LANE_RATE))),
    intervalMs: 1000 / callsPerSecond,
  };
}

export interface PacedBatch<Item> {
  callsPerSecond: number;
  /** Recipients the batch takes at most. */
  batchSize: number;
  /** When the batch stops taking pages, by `now`. */
  deadline: number;
  /** The broadcast's last provider call, by `now`: the gap carries over (a pause and a quick resume do not shorten it). */
  lastCallAt: number | null;
  /** The next `size` pending recipients in order, each handed out once; none when none is left. */
  nextPage(size: number): Promise<Item[]>;
  /**
   * Prepares, calls and records a page. Before each provider call it awaits `slot()`, which waits
   * for the call's turn and answers false when the batch has stopped meanwhile (no call then).
   * Answers what stops the batch, if anything.
   */
  sendPage(page: Item[], slot: () => Promise<boolean>): Promise<BatchResult | undefined>;
  now(): number;
  sleep(ms: number): Promise<void>;
}

/** Which stop a batch reports when its lanes stop for different reasons: the broadcast's own state first. */
const STOP_RANK: Record<BatchResult['state'], number> = {
  more: 0,
  done: 1,
  reconciling: 2,
  waiting: 3,
  paused: 4,
  completed: 5,
  cancelled: 5,
};

/**
 * Runs the batch's lanes until a stop, the batch's size or its deadline. The first stop
 * (paused, cancelled, waiting, reconciling, done) ends every lane after its current call; a lane
 * that throws stops the others the same way, and the batch throws once all have ended.
 */
export async function paceBatch<Item>(batch: PacedBatch<Item>): Promise<BatchResult> {
  const { pageSize, lanes, intervalMs } = pacingFor(batch.callsPerSecond);
  let nextCallAt = batch.lastCallAt === null ? 0 : batch.lastCallAt + intervalMs;
  let taken = 0;
  let outcome: BatchResult | undefined;
  let failure: { error: unknown } | undefined;
  const stop = (result: BatchResult): void => {
    if (!outcome || STOP_RANK[result.state] > STOP_RANK[outcome.state]) outcome = result;
  };
  const going = () => !outcome && !failure && taken < batch.batchSize && batch.now() < batch.deadline;
  /** A stop that ends the calls of pages in flight too ('done' only means no page is left to take). */
  const halted = () => !!failure || (!!outcome && outcome.state !== 'done');
  /** At most callsPerSecond provider calls a second, the slots shared by the lanes. */
  const slot = async (): Promise<boolean> => {
    const slotAt = Math.max(batch.now(), nextCallAt);
    nextCallAt = slotAt + intervalMs;
    if (slotAt > batch.now()) await batch.sleep(slotAt - batch.now());
    return !halted();
  };
  const lane = async (): Promise<void> => {
    while (going()) {
      // The page's share of the batch is counted before the read, so lanes reading together never take more than the batch's size.
      const want = Math.min(pageSize, batch.batchSize - taken);
      taken += want;
      const page = await batch.nextPage(want);
      taken -= want - page.length;
      if (page.length === 0) return stop({ state: 'done' });
      const stopped = await batch.sendPage(page, slot);
      if (stopped) return stop(stopped);
    }
  };
  await Promise.all(
    Array.from({ length: lanes }, () =>
      lane().catch((error: unknown) => {
        failure ??= { error };
      }),
    ),
  );
  if (failure) throw failure.error;
  return outcome ?? { state: 'more' };
}
