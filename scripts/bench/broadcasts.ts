import fs from 'node:fs';
import type { Client as TemporalClient } from '@temporalio/client';
import { temporal as proto } from '@temporalio/proto';

/**
 * What the broadcast rows of `npm run bench` read besides the API (scripts/bench.ts
 * broadcastScenario): a process's resident memory over time, and a workflow's history run by run.
 */

/** A process's resident set (VmRSS) in MB; NaN when it cannot be read (not Linux, or the process ended). */
export function rssMb(pid: number): number {
  try {
    const kb = /VmRSS:\s+(\d+)/.exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1];
    return kb === undefined ? NaN : Number(kb) / 1024;
  } catch {
    return NaN;
  }
}

export interface RssSeries {
  /** The first sample, taken when the series started. */
  first: number;
  max: number;
  /** The last sample, taken when the series stopped. */
  last: number;
  samples: number;
  /** At most 50 samples evenly spread over the series, [seconds from its start, MB]: growth that levels off or keeps going. */
  shape: Array<[number, number]>;
}

/** Samples a process's RSS now and every `everyMs` until stop(): the growth from the first sample is max - first. */
export function rssSeries(pid: number, everyMs = 500): { stop: () => RssSeries } {
  const started = Date.now();
  const samples: Array<[number, number]> = [];
  const take = () => {
    const mb = rssMb(pid);
    if (!Number.isNaN(mb)) samples.push([Math.round((Date.now() - started) / 100) / 10, Math.round(mb)]);
  };
  take();
  const timer = setInterval(take, everyMs);
  return {
    stop: () => {
      clearInterval(timer);
      take();
      const step = Math.max(1, Math.ceil(samples.length / 50));
      return {
        first: samples[0]?.[1] ?? NaN,
        max: samples.length ? Math.max(...samples.map(([, mb]) => mb)) : NaN,
        last: samples.at(-1)?.[1] ?? NaN,
        samples: samples.length,
        shape: samples.filter((_, i) => i % step === 0 || i === samples.length - 1),
      };
    },
  };
}

export interface RunHistory {
  runId: string;
  events: number;
  /** The history's size as the server holds it (encoded protobuf, payloads as stored). */
  bytes: number;
}

/**
 * Every run of a workflow id, oldest first, each with its history's event count and size: from
 * the latest run back through each run's `continuedExecutionRunId` (continue-as-new).
 */
export async function workflowRuns(client: TemporalClient, workflowId: string): Promise<RunHistory[]> {
  const runs: RunHistory[] = [];
  let runId: string | undefined = (await client.workflow.getHandle(workflowId).describe()).runId;
  while (runId) {
    const history = await client.workflow.getHandle(workflowId, runId).fetchHistory();
    runs.unshift({ runId, events: history.events?.length ?? 0, bytes: proto.api.history.v1.History.encode(history).finish().length });
    runId = history.events?.[0]?.workflowExecutionStartedEventAttributes?.continuedExecutionRunId || undefined;
  }
  return runs;
}
