import { z } from 'zod';
import { pingDatabase } from '../../domain/db';
import { route } from '../route';

const READY_TIMEOUT_MS = 2000;

function withTimeout<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  return Promise.race([
    promise,
    new Promise<T>((_, reject) => setTimeout(() => reject(new Error(`${what} did not answer in ${ms} ms`)), ms).unref()),
  ]);
}

export const systemRoutes = [
  route({
    method: 'get',
    path: '/health',
    tag: 'System',
    auth: 'none',
    summary: 'Liveness: the process is up',
    response: z.object({ status: z.literal('ok') }),
    handler: async () => ({ status: 'ok' }),
  }),
  route({
    method: 'get',
    path: '/ready',
    tag: 'System',
    auth: 'none',
    summary: 'Readiness: PostgreSQL and Temporal are reachable (503 otherwise)',
    response: z.object({ status: z.enum(['ready', 'unavailable']), checks: z.object({ database: z.string(), temporal: z.string() }) }),
    handler: async (ctx) => {
      const check = async (what: string, probe: () => Promise<unknown>): Promise<string> => {
        try {
          await withTimeout(probe(), READY_TIMEOUT_MS, what);
          return 'ok';
        } catch (err) {
          return `unavailable: ${(err as Error).message}`;
        }
      };
      const [database, temporal] = await Promise.all([
        check('database', () => pingDatabase(ctx.deps.db)),
        check('temporal', async () => (await ctx.deps.temporal()).workflowService.getSystemInfo({})),
      ]);
      const ready = database === 'ok' && temporal === 'ok';
      ctx.status = ready ? 200 : 503;
      return { status: ready ? 'ready' : 'unavailable', checks: { database, temporal } };
    },
  }),
];
