/**
 * Integration files that measure elapsed time under a load they make themselves, and so need the
 * machine to themselves: `npm test` runs them after every other file, one at a time
 * (jest.alone.config.js), instead of beside another file whose load would decide their figures.
 */
module.exports = ['<rootDir>/test/reliability/fairness.test.ts'];
