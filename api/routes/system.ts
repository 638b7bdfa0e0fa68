import { z } from 'zod';
import { pingDatabase } from '../../domain/platform';
import { route } from '../route';

const READY_TIMEOUT_MS = 2000;

/**
 * A dependency's state as /ready answers it: a fixed word, never the error's text (a database or
 * gRPC message names hosts, ports, users and databases to an unauthenticated caller). Why a check
 * failed (its error, or no answer in time) goes to the log.
 */
const CHECK_STATES = ['ok', 'unavailable'] as const;
type CheckState = (typeof CHECK_STATES)[number];

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
    operationId: 'getHealth',
    tag: 'System',
    auth: 'none',
    summary: 'Liveness: the process is up',
    description: 'Answers 200 while the process serves requests, whatever the state of PostgreSQL and Temporal (see `/ready` for those).',
    response: z.object({ status: z.literal('ok') }),
    handler: async () => ({ status: 'ok' }),
  }),
  route({
    method: 'get',
    path: '/ready',
    operationId: 'getReadiness',
    tag: 'System',
    auth: 'none',
    // Each call pings PostgreSQL and Temporal: an unauthenticated caller may not make them without bound.
    ipProfile: 'ready',
    summary: 'Readiness: PostgreSQL and Temporal are reachable (503 otherwise)',
    alsoStatus: [503],
    description: `Each check is \`ok\` or \`unavailable\` (an error, or no answer within ${READY_TIMEOUT_MS / 1000} s); why is logged, not returned.`,
    response: z.object({
      status: z.enum(['ready', 'unavailable']),
      checks: z.object({ database: z.enum(CHECK_STATES), temporal: z.enum(CHECK_STATES) }),
    }),
    handler: async (ctx) => {
      const check = async (what: string, probe: () => Promise<unknown>): Promise<CheckState> => {
        try {
          await withTimeout(probe(), READY_TIMEOUT_MS, what);
          return 'ok';
        } catch (err) {
          ctx.state.log.warn({ check: what, err }, 'readiness check failed');
          return 'unavailable';
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
