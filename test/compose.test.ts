import fs from 'node:fs';
import path from 'node:path';
import YAML from 'yaml';
import { API_NODE_FLAGS, NODE_PROCESS_ENV, temporalDynamicConfig, WORKER_NODE_FLAGS } from '../scripts/stack';

/** No Docker engine runs here: this checks the production topology file instead of running it. */
const root = path.resolve(__dirname, '..');
const compose = YAML.parse(fs.readFileSync(path.join(root, 'docker-compose.yml'), 'utf8'), { merge: true });
const readme = fs.readFileSync(path.join(root, 'README.md'), 'utf8');

describe('docker-compose.yml', () => {
  it('defines PostgreSQL, Temporal on PostgreSQL, the Temporal UI, the API and the worker', () => {
    for (const name of ['postgres', 'temporal', 'temporal-ui', 'api', 'worker', 'migrate']) expect(compose.services).toHaveProperty(name);
    expect(compose.services.temporal.environment).toMatchObject({ DB: 'postgres12', POSTGRES_SEEDS: 'postgres' });
    expect(compose.services['temporal-ui'].environment.TEMPORAL_ADDRESS).toBe('temporal:7233');
  });

  it("runs Temporal with task queue fairness, from the same file the dev server's flags come from", () => {
    const temporal = compose.services.temporal;
    expect(temporal.volumes).toContain('./deploy/temporal-dynamic-config.yaml:/etc/temporal/config/dynamicconfig/crm.yaml:ro');
    expect(temporal.environment.DYNAMIC_CONFIG_FILE_PATH).toBe('config/dynamicconfig/crm.yaml');
    expect(temporalDynamicConfig()).toMatchObject({ 'matching.useNewMatcher': true, 'matching.enableFairness': true });
  });

  it('builds the API, the worker and the migration job from the one Dockerfile, which runs the compiled service', () => {
    for (const name of ['api', 'worker', 'migrate']) expect(compose.services[name].build).toBe('.');
    expect(compose.services.api.command).toEqual(['node', ...API_NODE_FLAGS, 'dist/api/server.js']);
    expect(compose.services.worker.command).toEqual(['node', ...WORKER_NODE_FLAGS, 'dist/workers/main.js']);
    expect(compose.services.migrate.command).toEqual(['node', 'dist/scripts/migrate.js', 'latest']);
    // Each is the compiled form of a source of ours (test/compiled-build.test.ts builds and runs them).
    for (const name of ['api', 'worker', 'migrate'])
      expect(
        fs.existsSync(
          path.join(
            root,
            (compose.services[name].command as string[])
              .find((arg) => arg.startsWith('dist/'))!
              .replace(/^dist\//, '')
              .replace(/\.js$/, '.ts'),
          ),
        ),
      ).toBe(true);
    // Built in a stage of its own; the image keeps the production dependencies and dist/, and runs no TypeScript.
    const dockerfile = fs.readFileSync(path.join(root, 'Dockerfile'), 'utf8');
    expect(dockerfile).toMatch(/^FROM \S+ AS build$/m);
    expect(dockerfile).toMatch(/^RUN npm run build$/m);
    expect(dockerfile).toMatch(/^RUN npm ci --omit=dev /m);
    expect(dockerfile).toMatch(/^COPY --from=build \/app\/dist \.\/dist$/m);
    expect(dockerfile).toContain(`\nCMD ["${['node', ...API_NODE_FLAGS, 'dist/api/server.js'].join('", "')}"]`);
    expect(dockerfile).not.toContain('--import');
    // The processes' environment, as everywhere else the project starts them.
    for (const [name, value] of Object.entries(NODE_PROCESS_ENV)) expect(dockerfile).toMatch(new RegExp(`^ENV ${name}=${value}$`, 'm'));
  });

  it('wires the API and the worker with the environment they read', () => {
    for (const name of ['api', 'worker']) {
      const env = compose.services[name].environment;
      for (const variable of [
        'DATABASE_URL',
        'TEMPORAL_ADDRESS',
        'TEMPORAL_NAMESPACE',
        'ADMIN_TOKEN',
        'ENCRYPTION_KEYS',
        'PUBLIC_BASE_URL',
        'ALLOW_PRIVATE_URLS',
        'WEBHOOK_RETRY_SCALE',
      ]) {
        expect(env).toHaveProperty(variable);
      }
      expect(env.DATABASE_URL).toContain('@postgres:5432/');
      expect(env.TEMPORAL_ADDRESS).toBe('temporal:7233');
    }
    expect(compose.services.api.environment.PORT).toBe('3000');
  });

  it('publishes nothing unauthenticated beyond the host: only the API listens on every interface', () => {
    const published: string[] = [];
    for (const [name, service] of Object.entries<{ ports?: (string | number | { host_ip?: string; published?: unknown })[] }>(
      compose.services,
    )) {
      if (name === 'api') continue;
      for (const port of service.ports ?? []) {
        // Short syntax "[HOST_IP:]HOST:CONTAINER"; the long syntax names host_ip.
        const hostIp =
          typeof port === 'object' ? port.host_ip : String(port).split(':').length === 3 ? String(port).split(':')[0] : undefined;
        published.push(`${name} ${JSON.stringify(port)} on ${hostIp ?? 'every interface'}`);
      }
    }
    expect(published.length).toBeGreaterThan(0);
    for (const line of published) expect(line).toMatch(/ on 127\.0\.0\.1$/);
    // The Temporal frontend and UI have no authentication: loopback only.
    expect(compose.services.temporal.ports).toEqual(['127.0.0.1:7233:7233']);
    expect(compose.services['temporal-ui'].ports).toEqual(['127.0.0.1:8233:8080']);
  });

  it('is described in the README, service by service, and every variable the config reads is documented', () => {
    for (const name of ['postgres', 'temporal', 'temporal-ui', 'api', 'worker', 'migrate']) expect(readme).toContain(`\`${name}\``);
    const configSource = fs.readFileSync(path.join(root, 'domain/platform/config.ts'), 'utf8');
    const read = [...configSource.matchAll(/env\.([A-Z_]+)/g)].map((m) => m[1]);
    expect(read.length).toBeGreaterThan(5);
    for (const variable of new Set(read)) expect(readme).toContain(`\`${variable}\``);
  });
});
