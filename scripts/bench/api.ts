import { sampleHeapUntilExit } from './heap-profile';
import { runApi } from '../../api/server';
import { benchRoutes } from './routes';

/**
 * The bench's API process (`tsx scripts/bench/api.ts`, started by scripts/bench.ts): the production
 * API process (api/server.ts), from the same configuration, with the bench's yardsticks in front.
 */
sampleHeapUntilExit();
runApi({ front: benchRoutes }).catch((err) => {
  console.error('API failed to start:', err);
  process.exit(1);
});
