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
