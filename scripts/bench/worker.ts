import { sampleHeapUntilExit } from './heap-profile';
import { runWorker } from '../../workers/main';
import { benchActivities } from './activities';

/**
 * The bench's worker process (`tsx scripts/bench/worker.ts`, started by scripts/bench.ts): the
 * service's worker, built by the same function from the same configuration, with the bench's
 * floor workflows added to its bundle and their no-op activity to its activities.
 */
sampleHeapUntilExit();
runWorker({ workflowsPath: require.resolve('./workflows'), activities: benchActivities }).catch((err) => {
  console.error('worker failed:', err);
  process.exit(1);
});
