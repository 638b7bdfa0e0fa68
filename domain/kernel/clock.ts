/**
 * The service's notion of "now" for the API's time windows: which calendar minute a request is
 * counted in for rate limits (domain/access/rate-limit.ts) and the seconds until that minute ends,
 * and whether a send's Idempotency-Key is still within its 10-minute replay window (api/send.ts). It is the
 * process's own clock (`Date.now()`), so the replicas of a deployment agree on the window to
 * within their clocks' skew (NTP keeps it to milliseconds).
 *
 * Only tests move it: `setNow` pins it to an instant (or a function of real time) for the process
 * they run the API in, so a test counting up to a limit never meets a minute boundary by chance
 * and can put one exactly where it wants; `resetClock` gives the real clock back. Production code
 * never calls either. Nothing else reads this clock: key caching, expiry and every timestamp the
 * service stores keep the real time.
 */

const realNow = (): number => Date.now();
let source: () => number = realNow;

export const clock = {
  /** Milliseconds since the epoch, as `Date.now()` unless a test set it. */
  now: (): number => source(),
};

/** Tests only: pins the clock to `at` (ms since the epoch), or makes it `at()` on each reading. */
export function setNow(at: number | (() => number)): void {
  source = typeof at === 'number' ? () => at : at;
}

/** Tests only: the real clock again. */
export function resetClock(): void {
  source = realNow;
}
