import { Context } from '@temporalio/activity';

/**
 * Tells Temporal the running activity is alive: what an adapter calls as a long exchange with a
 * provider makes progress (a chunk stored, a page read). Outside an activity (a unit test) it does
 * nothing.
 */
export function heartbeat(): void {
  try {
    Context.current().heartbeat();
  } catch {
    // outside an activity
  }
}

/**
 * Runs `work` heartbeating every second whatever it is doing (a provider call may take its whole
 * timeout), so a dead worker is noticed by the heartbeat timeout. A local activity cannot
 * heartbeat (its worker holds the workflow task, which times out instead): it just runs.
 */
export async function heartbeating<T>(work: () => Promise<T>): Promise<T> {
  let local = true;
  try {
    local = Context.current().info.isLocal;
  } catch {
    // outside an activity
  }
  if (local) return work();
  heartbeat();
  const timer = setInterval(heartbeat, 1000);
  try {
    return await work();
  } finally {
    clearInterval(timer);
  }
}
