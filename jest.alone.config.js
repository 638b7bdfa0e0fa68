/**
 * The integration files that need the machine to themselves (test/alone.js), one at a time, after
 * the rest of the integration tier. `npm test` gives this run a stack directory of its own (a
 * subdirectory of the first run's), so the first run's logs stay.
 */
const base = require('./jest.config.js');

/** @type {import('jest').Config} */
module.exports = {
  ...base,
  testMatch: undefined,
  testRegex: require('./test/alone.js').map((file) => file.replace('<rootDir>/', '').replace(/[.]/g, '\\.') + '$'),
  testPathIgnorePatterns: ['/node_modules/'],
  maxWorkers: 1,
};
