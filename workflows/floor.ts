import { proxyActivities, proxyLocalActivities } from '@temporalio/workflow';
import type { Activities } from '../activities';
import { DATABASE } from './profiles';

/**
 * Temporal's own floor, for the bench: what starting and awaiting a workflow costs on this
 * server and worker with nothing in it, with one local activity, and with one activity (each a
 * no-op). The send saga's figures are read against these: what the saga adds is its own.
 */
const { floorNoop } = proxyActivities<Activities>(DATABASE);
const local = proxyLocalActivities<Activities>(DATABASE);

export async function floorEmptyWorkflow(): Promise<void> {}

export async function floorLocalActivityWorkflow(): Promise<void> {
  await local.floorNoop();
}

export async function floorActivityWorkflow(): Promise<void> {
  await floorNoop();
}
