/**
 * The OpenAPI document the API serves passes the linters third-party tools run on a contract:
 * Redocly CLI (`recommended`) and Spectral (`spectral:oas`), with the rule files at the repository
 * root. An error fails; so does a warning that docs/clients.md does not list with its reason.
 */
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { startApi, TestApi } from './helpers';

const run = promisify(execFile);
const ROOT = path.resolve(__dirname, '..');
const bin = (...parts: string[]) => path.join(ROOT, 'node_modules', ...parts);

/** The warnings deliberately left, by rule (docs/clients.md#linting says why). */
const ACCEPTED_WARNINGS = {
  redocly: ['info-license', 'no-server-example.com', 'operation-4xx-response'],
  spectral: ['info-contact'],
};

let api: TestApi;
let dir: string;
let document: string;

beforeAll(async () => {
  api = await startApi();
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'openapi-lint-'));
  document = path.join(dir, 'openapi.json');
  const res = await api.request('GET', '/api/v1/openapi.json');
  expect(res.status).toBe(200);
  fs.writeFileSync(document, res.text);
});

afterAll(async () => {
  await api.close();
  fs.rmSync(dir, { recursive: true, force: true });
});

/** Runs a linter CLI; a non-zero exit (it found errors) still yields its report. */
async function lint(args: string[]): Promise<string> {
  const env = { ...process.env, REDOCLY_TELEMETRY: 'off', REDOCLY_SUPPRESS_UPDATE_NOTICE: 'true', NO_COLOR: '1' };
  try {
    return (await run(process.execPath, args, { cwd: ROOT, env, maxBuffer: 64 * 1024 * 1024 })).stdout;
  } catch (err) {
    const failed = err as { stdout?: string; stderr?: string };
    if (!failed.stdout) throw new Error(`linter failed without a report: ${failed.stderr ?? String(err)}`, { cause: err });
    return failed.stdout;
  }
}

describe('the served OpenAPI document, linted', () => {
  it('has no Redocly error, and only the warnings the docs explain', async () => {
    const report = JSON.parse(
      await lint([bin('@redocly', 'cli', 'bin', 'cli.js'), 'lint', document, '--config', path.join(ROOT, 'redocly.yaml'), '--format=json']),
    );
    const problems: { ruleId: string; severity: string; message: string; location: { pointer: string }[] }[] = report.problems;
    expect(problems.filter((p) => p.severity === 'error').map((p) => `${p.ruleId} at ${p.location[0]?.pointer}: ${p.message}`)).toEqual([]);
    const unexplained = problems.filter((p) => !ACCEPTED_WARNINGS.redocly.includes(p.ruleId));
    expect(unexplained.map((p) => `${p.ruleId} at ${p.location[0]?.pointer}: ${p.message}`)).toEqual([]);
  }, 120_000);

  it('has no Spectral error, and only the warnings the docs explain', async () => {
    const output = await lint([
      bin('@stoplight', 'spectral-cli', 'dist', 'index.js'),
      'lint',
      document,
      '--ruleset',
      path.join(ROOT, '.spectral.yaml'),
      '--format',
      'json',
      '--quiet',
    ]);
    const problems: { code: string; severity: number; message: string; path: string[] }[] = output.trim() ? JSON.parse(output) : [];
    // Spectral's severities: 0 error, 1 warning, 2 information, 3 hint.
    expect(problems.filter((p) => p.severity === 0).map((p) => `${p.code} at ${p.path.join('.')}: ${p.message}`)).toEqual([]);
    const unexplained = problems.filter((p) => !ACCEPTED_WARNINGS.spectral.includes(p.code));
    expect(unexplained.map((p) => `${p.code} at ${p.path.join('.')}: ${p.message}`)).toEqual([]);
  }, 120_000);
});
