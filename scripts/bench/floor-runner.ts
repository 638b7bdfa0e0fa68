import { performance } from 'node:perf_hooks';
import { loadConfig } from '../../domain/platform';
import { workerHost } from '../../workers/send-worker';
import { benchActivities } from './activities';
import { floorActivityWorkflow, floorEmptyWorkflow, floorLocalActivityWorkflow } from './floor';

/**
 * Temporal's floor for the bench (scripts/bench.ts runs this as a process of its own): starts and
 * awaits each no-op workflow of scripts/bench/floor.ts from `concurrency` loops for `seconds`, the
 * way the API starts its sends: eagerly, hosting a worker with the project's settings (workerHost).
 * A process apart, so the bench's own (the load generator, the webhook receiver) never carries a
 * Temporal runtime. Prints `{ empty, local?, activity? }`, each `{ latencies, errors, seconds }`.
 * Usage: floor-runner.ts <address> <concurrency> <seconds> <all|empty>; ENCRYPTION_KEYS in the environment.
 */
async function main(): Promise<void> {
  const [address, concurrency, seconds, which] = process.argv.slice(2);
  const config = loadConfig({ TEMPORAL_ADDRESS: address, TEMPORAL_NAMESPACE: 'default', ENCRYPTION_KEYS: process.env.ENCRYPTION_KEYS });
  const logger = { info: () => undefined, error: (_fields: object, message: string) => console.error(`floor worker: ${message}`) };
  const host = workerHost(
    config,
    { taskQueue: 'crm-bench-floor', activities: benchActivities, workflowsPath: require.resolve('./floor'), nonLocalActivities: true },
    logger,
  );
  const temporal = await host.get();
  await host.hostedWorker();
  const measure = async (workflow: typeof floorEmptyWorkflow, name: string) => {
    const latencies: number[] = [];
    let errors = 0;
    let n = 0;
    const started = Date.now();
    const until = started + Number(seconds) * 1000;
    await Promise.all(
      Array.from({ length: Number(concurrency) }, async () => {
        while (Date.now() < until) {
          const t0 = performance.now();
          try {
            await temporal.workflow.execute(workflow, {
              taskQueue: 'crm-bench-floor',
              workflowId: `floor/${name}/${process.pid}/${started}/${++n}`,
              requestEagerStart: true,
            });
            latencies.push(performance.now() - t0);
          } catch {
            errors++;
          }
        }
      }),
    );
    return { latencies, errors, seconds: (Date.now() - started) / 1000 };
  };
  try {
    const empty = await measure(floorEmptyWorkflow, 'empty');
    if (which === 'empty') return void process.stdout.write(JSON.stringify({ empty }));
    const local = await measure(floorLocalActivityWorkflow, 'local');
    const activity = await measure(floorActivityWorkflow, 'activity');
    process.stdout.write(JSON.stringify({ empty, local, activity }));
  } finally {
    await host.close();
  }
}

main().then(
  () => process.exit(0),
  (err) => {
    console.error('floor runner failed:', err);
    process.exit(1);
  },
);
