// ESLint over the whole tree (npm run lint, part of npm test). Formatting is Prettier's job, so no
// stylistic rule here; these rules catch mistakes.
import js from '@eslint/js';
import { defineConfig } from 'eslint/config';
import globals from 'globals';
import tseslint from 'typescript-eslint';

export default defineConfig(
  { ignores: ['node_modules/', '.data/', '.tools/', 'dist/', 'coverage/', 'bench-results/'] },
  js.configs.recommended,
  tseslint.configs.recommended,
  {
    languageOptions: { globals: { ...globals.node } },
    rules: {
      // A leading underscore says "deliberately unused" (a destructured field left out, a required parameter).
      '@typescript-eslint/no-unused-vars': [
        'error',
        { argsIgnorePattern: '^_', varsIgnorePattern: '^_', caughtErrorsIgnorePattern: '^_', ignoreRestSiblings: true },
      ],
      // NUL and other control characters are what the storable-text rules look for, on purpose.
      'no-control-regex': 'off',
      // `z.ZodObject<{}>` is zod's type of an object schema without fields (no path, no query).
      '@typescript-eslint/no-empty-object-type': ['error', { allowObjectTypes: 'always' }],
    },
  },
  {
    // Tests and the bench read JSON answers of every shape: typing each body would say nothing the assertions do not.
    files: ['test/**', 'scripts/bench.ts', 'scripts/bench/**'],
    rules: { '@typescript-eslint/no-explicit-any': 'off' },
  },
  {
    // Calls to providers, subscribers and media hosts go through Node's http (postJson, safe-http):
    // fetch left about 30 KB of old-generation garbage per call, which grew a broadcast's worker by
    // 80 MB (docs/performance.md, Broadcasts). The template list's hourly GET is the one exception.
    files: ['activities/**', 'domain/**', 'workers/**'],
    ignores: ['activities/providers/cloud-templates.ts'],
    rules: {
      'no-restricted-globals': [
        'error',
        { name: 'fetch', message: 'Use postJson (activities/providers/types.ts) or safe-http: see docs/performance.md, Broadcasts.' },
      ],
    },
  },
  {
    // The .js files are CommonJS (jest's configurations): require is how they load each other.
    files: ['**/*.js'],
    rules: { '@typescript-eslint/no-require-imports': 'off' },
  },
);
