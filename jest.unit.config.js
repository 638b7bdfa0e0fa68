/**
 * The unit tier (npm run test:unit): pure rules only. No global setup, so no PostgreSQL, Temporal,
 * worker or emulator: a file here imports a rule module and calls it. The one exception,
 * broadcast-workflow.test.ts, starts Temporal's time-skipping test server of its own (no network
 * after its first install; docs/reliability.md). Runs in seconds, first in `npm test`.
 * @type {import('jest').Config}
 */
module.exports = {
  testEnvironment: 'node',
  roots: ['<rootDir>/test/unit'],
  testMatch: ['**/*.test.ts'],
  transform: { '^.+\\.ts$': ['@swc/jest'] },
  testTimeout: 10000,
  errorOnDeprecated: true,
};
