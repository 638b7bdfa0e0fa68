import { proxyActivities, proxyLocalActivities } from '@temporalio/workflow';
import type { BenchActivities } from './activities';
import { DATABASE } from '../../workflows/profiles';

/**
 * Temporal's own floor, for the bench: what starting and awaiting a workflow costs on this
 * server and worker with nothing in it, with one local activity, and with one activity (each a
 * no-op, with the service's DATABASE profile). The send saga's figures are read against these:
 * what the saga adds is its own. Bundled only into the bench worker's workflows (scripts/bench/workflows.ts).
 */
const { floorNoop } = proxyActivities<BenchActivities>(DATABASE);
const local = proxyLocalActivities<BenchActivities>(DATABASE);

export async function floorEmptyWorkflow(): Promise<void> {}

export async function floorLocalActivityWorkflow(): Promise<void> {
  await local.floorNoop();
}

export async function floorActivityWorkflow(): Promise<void> {
  await floorNoop();
}
