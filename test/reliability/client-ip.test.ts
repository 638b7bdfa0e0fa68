/**
 * Per-IP limits hold behind proxies: the client IP is the address our outermost proxy appended to
 * X-Forwarded-For (TRUST_PROXY = how many proxies we run), never an entry the client wrote itself.
 */
import { randomInt } from 'node:crypto';
import { IP_PROFILES } from '../../domain/access/rate-limit';
import { resetClock } from '../../domain/kernel/clock';
import { expectError, pinRateClock, startApi, TestApi } from '../helpers';

const apis: TestApi[] = [];
afterAll(() => Promise.all(apis.map((a) => a.close())));
afterEach(() => resetClock());

const forged = (): string => `${randomInt(1, 223)}.${randomInt(0, 255)}.${randomInt(0, 255)}.${randomInt(1, 254)}`;

/** Exhausts GET /api/v1/pipelines' per-IP limit with a new forged left-most entry on every request. */
async function rotating(api: TestApi, header: () => string): Promise<number[]> {
  const statuses: number[] = [];
  for (let i = 0; i <= IP_PROFILES.pipelines; i++)
    statuses.push((await api.request('GET', '/api/v1/pipelines', { headers: { 'x-forwarded-for': header() } })).status);
  return statuses;
}

it.each([1, 2])('with %i trusted proxy hop(s), forging X-Forwarded-For does not rotate the per-IP limit', async (hops) => {
  const api = await startApi({ config: { trustProxy: hops } });
  apis.push(api);
  pinRateClock(5);
  const seen = `198.${50 + hops}.${randomInt(0, 255)}.${randomInt(1, 254)}`;
  // What reaches the API: the client's own entries, then what each of our proxies appended.
  const header = () => [forged(), forged(), seen, ...(hops === 2 ? ['10.0.0.2'] : [])].join(', ');
  const statuses = await rotating(api, header);
  expect(statuses.slice(0, IP_PROFILES.pipelines).every((s) => s === 401)).toBe(true);
  expect(statuses[IP_PROFILES.pipelines]).toBe(429);
  const refused = await api.request('GET', '/api/v1/pipelines', { headers: { 'x-forwarded-for': header() } });
  expectError(refused, 429, 'IP_RATE_LIMITED');
  expect(refused.headers.get('retry-after')).toBe('55');
  // Another client behind the same proxies is untouched.
  expect(
    (
      await api.request('GET', '/api/v1/pipelines', {
        headers: {
          'x-forwarded-for': [forged(), `198.${50 + hops}.${randomInt(0, 255)}.255`, ...(hops === 2 ? ['10.0.0.2'] : [])].join(', '),
        },
      })
    ).status,
  ).toBe(401);
});
