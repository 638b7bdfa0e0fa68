import { paceBatch, pacingFor, type BatchResult, type PacedBatch } from '../../domain/broadcasts/pacing';

/**
 * A broadcast batch's pacing (domain/broadcasts/pacing.ts) on a virtual clock: the provider
 * calls a recipient sees are spaced by the broadcast's rate, shared by the lanes, the batch stops
 * at its size, its deadline and the first stop, and a pause is seen before the next call.
 */

/** A clock whose sleeps end in time order, as fast as the promises settle. */
function virtualClock() {
  let now = 0;
  const timers: { at: number; wake: () => void }[] = [];
  let idle: ReturnType<typeof setImmediate> | undefined;
  const pump = () => {
    idle = undefined;
    timers.sort((a, b) => a.at - b.at);
    const next = timers.shift();
    if (!next) return;
    now = Math.max(now, next.at);
    next.wake();
    schedule();
  };
  // Wakes the earliest sleeper once every promise that could add an earlier one has settled.
  const schedule = () => {
    idle ??= setImmediate(pump);
  };
  return {
    now: () => now,
    sleep: (ms: number) =>
      new Promise<void>((wake) => {
        timers.push({ at: now + ms, wake });
        schedule();
      }),
  };
}

/** A batch over `pending` recipients numbered 1..n whose every call succeeds, recording each call's time. */
function batchOf(pending: number, options: Partial<PacedBatch<number>> & { callsPerSecond: number }) {
  const clock = virtualClock();
  let next = 1;
  const calls: { recipient: number; at: number }[] = [];
  const batch: PacedBatch<number> = {
    batchSize: 500,
    deadline: 30_000,
    lastCallAt: null,
    nextPage: async (size) => {
      const page: number[] = [];
      while (page.length < size && next <= pending) page.push(next++);
      return page;
    },
    sendPage: async (page, slot) => {
      for (const recipient of page) {
        if (!(await slot())) return undefined;
        calls.push({ recipient, at: clock.now() });
      }
      return undefined;
    },
    now: clock.now,
    sleep: clock.sleep,
    ...options,
  };
  return { batch, calls, clock };
}

const gaps = (calls: { at: number }[]) => calls.slice(1).map((c, i) => c.at - calls[i].at);

describe('a broadcast batch is paced', () => {
  it('sizes pages to a quarter second of the rate and adds a lane per 20 calls a second, within bounds', () => {
    expect(pacingFor(1)).toEqual({ pageSize: 1, lanes: 1, intervalMs: 1000 });
    expect(pacingFor(10)).toEqual({ pageSize: 2, lanes: 1, intervalMs: 100 });
    expect(pacingFor(80)).toEqual({ pageSize: 20, lanes: 4, intervalMs: 12.5 });
    expect(pacingFor(100_000)).toMatchObject({ pageSize: 25, lanes: 8 });
  });

  it('spaces every call by the rate and sends each recipient once, in order, when one lane runs', async () => {
    const { batch, calls } = batchOf(12, { callsPerSecond: 10 });
    await expect(paceBatch(batch)).resolves.toEqual({ state: 'done' });
    expect(calls.map((c) => c.recipient)).toEqual([1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]);
    expect(gaps(calls).every((gap) => gap === 100)).toBe(true);
  });

  it('shares the rate between lanes: 80 calls a second over 4 lanes is one call every 12.5 ms, none twice', async () => {
    const { batch, calls } = batchOf(200, { callsPerSecond: 80 });
    await expect(paceBatch(batch)).resolves.toEqual({ state: 'done' });
    expect(new Set(calls.map((c) => c.recipient)).size).toBe(200);
    expect(calls).toHaveLength(200);
    expect(Math.min(...gaps(calls))).toBeGreaterThanOrEqual(12.5);
    // 200 calls at 80 a second take 199 gaps of 12.5 ms.
    expect(calls[calls.length - 1].at).toBe(199 * 12.5);
  });

  it('carries the gap over from the broadcast’s last call (a pause and a quick resume do not shorten it)', async () => {
    const { batch, calls } = batchOf(2, { callsPerSecond: 1, lastCallAt: -400 });
    await paceBatch(batch);
    expect(calls.map((c) => c.at)).toEqual([600, 1600]);
  });

  it('stops at the batch size, leaving the rest pending', async () => {
    const { batch, calls } = batchOf(100, { callsPerSecond: 40, batchSize: 30 });
    await expect(paceBatch(batch)).resolves.toEqual({ state: 'more' });
    expect(calls).toHaveLength(30);
  });

  it('stops taking pages at its deadline', async () => {
    const { batch, calls } = batchOf(100, { callsPerSecond: 4, deadline: 2000 });
    await expect(paceBatch(batch)).resolves.toEqual({ state: 'more' });
    // One call every 250 ms until the deadline; the page in flight at the deadline finishes.
    expect(calls.length).toBeGreaterThanOrEqual(8);
    expect(calls.length).toBeLessThanOrEqual(9);
  });

  it('ends every lane at the first stop: after a pause no lane makes another call', async () => {
    const { batch, calls, clock } = batchOf(400, { callsPerSecond: 80 });
    let pausedAt: number | undefined;
    const send = batch.sendPage;
    batch.sendPage = async (page, slot) => {
      if (calls.length >= 50) {
        pausedAt ??= clock.now();
        return { state: 'paused' } satisfies BatchResult;
      }
      return send(page, slot);
    };
    await expect(paceBatch(batch)).resolves.toEqual({ state: 'paused' });
    expect(calls.filter((c) => c.at > pausedAt!)).toEqual([]);
    expect(calls.length).toBeLessThan(50 + 4 * pacingFor(80).pageSize);
  });

  it('reports the broadcast’s own state over a lane’s wait when lanes stop for different reasons', async () => {
    const { batch } = batchOf(400, { callsPerSecond: 80 });
    let pages = 0;
    batch.sendPage = async () => {
      pages += 1;
      if (pages === 1) return { state: 'reconciling' };
      if (pages === 2) return { state: 'cancelled' };
      return undefined;
    };
    await expect(paceBatch(batch)).resolves.toEqual({ state: 'cancelled' });
  });

  it('fails the batch when a lane throws, once the others have ended', async () => {
    const { batch, calls } = batchOf(400, { callsPerSecond: 80 });
    const send = batch.sendPage;
    batch.sendPage = async (page, slot) => {
      if (calls.length >= 20) throw new Error('database gone');
      return send(page, slot);
    };
    await expect(paceBatch(batch)).rejects.toThrow('database gone');
    const after = calls.length;
    expect(after).toBeLessThan(20 + 4 * pacingFor(80).pageSize);
  });
});
