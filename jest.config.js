const ALONE = require('./test/alone.js');

/** @type {import('jest').Config} */
module.exports = {
  testEnvironment: 'node',
  roots: ['<rootDir>/test'],
  testMatch: ['**/*.test.ts'],
  // The unit tier has its own configuration (jest.unit.config.js) and runs first, without the stack;
  // the files that need the machine to themselves run after this run (jest.alone.config.js).
  testPathIgnorePatterns: ['/node_modules/', '<rootDir>/test/unit/', ...ALONE],
  transform: { '^.+\\.ts$': ['@swc/jest'] },
  globalSetup: '<rootDir>/test/global-setup.ts',
  globalTeardown: '<rootDir>/test/global-teardown.ts',
  testTimeout: 60000,
  maxWorkers: 2,
  errorOnDeprecated: true,
  // A failed case can leave a socket or a child's pipe open; the run must still end (and fail)
  // instead of hanging CI until its time limit. Cases clean up after themselves regardless.
  forceExit: true,
};
