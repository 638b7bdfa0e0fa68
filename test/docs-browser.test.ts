/**
 * The /docs page in a real headless Chromium: the page fetches /api/v1/openapi.json and builds
 * the reference in the browser, so only a browser proves it renders. Chromium comes from PATH or
 * is installed with apt-get (scripts/chromium.ts); when it truly cannot be had, this file says
 * why, loudly, and skips.
 */
import { dumpDom, ensureChromium, findChromium, which } from '../scripts/chromium';
import { startApi, TestApi } from './helpers';

const INSTALL_TIMEOUT_MS = 15 * 60_000;
const BROWSER_TIMEOUT_MS = 120_000;

/** Decided while collecting tests: a browser is on PATH or can be installed (root with apt-get). */
function preflight(): string | null {
  if (findChromium()) return null;
  if (!which(['apt-get'])) return 'no chromium/chromium-browser/google-chrome on PATH and no apt-get to install one';
  if (typeof process.getuid === 'function' && process.getuid() !== 0) {
    return 'no chromium/chromium-browser/google-chrome on PATH and not root, so apt-get cannot install chromium';
  }
  return null;
}

const unavailable = preflight();
if (unavailable) {
  console.warn(`\n!!! SKIPPING the /docs browser test: ${unavailable}.\n!!! Install Chromium (apt-get install -y chromium) or set CHROMIUM_PATH to run it.\n`);
}
const browserIt = unavailable ? it.skip : it;

interface Op {
  method: string;
  path: string;
  section: string;
}

/** The operations the page rendered, with the tag section each sits in. */
function renderedOps(dom: string): Op[] {
  const ops: Op[] = [];
  for (const section of dom.matchAll(/<section id="tag-([^"]+)">([\s\S]*?)<\/section>/g)) {
    for (const op of section[2].matchAll(/<details class="op" data-method="([a-z]+)" data-path="([^"]+)">/g)) {
      ops.push({ method: op[1], path: op[2].replace(/&amp;/g, '&'), section: section[1] });
    }
  }
  return ops;
}

describe('/docs in a headless browser', () => {
  let api: TestApi;
  let chromium: string | null = null;
  let dom = '';
  let openapi: { paths: Record<string, Record<string, { tags?: string[] }>> };

  beforeAll(async () => {
    if (unavailable) return;
    const result = await ensureChromium((m) => console.log(`[chromium] ${m}`));
    if (result.path === null) {
      // Root with apt-get should have been able to install it: that is a failure, not a skip.
      throw new Error(`Chromium could not be installed although apt-get is available: ${result.reason}`);
    }
    chromium = result.path;
    api = await startApi();
    openapi = (await api.request('GET', '/api/v1/openapi.json')).body;
    dom = await dumpDom(chromium, `${api.url}/docs`, { timeoutMs: BROWSER_TIMEOUT_MS });
  }, INSTALL_TIMEOUT_MS);
  afterAll(async () => api?.close());

  /** beforeAll either found a browser or threw; this only guards the types. */
  const ready = (): boolean => {
    if (!chromium) throw new Error('no Chromium: see the error of beforeAll');
    return true;
  };

  browserIt(
    'renders every documented operation, grouped by tag, after the page script ran',
    () => {
      if (!ready()) return;
      const root = /<main id="root">([\s\S]*?)<\/main>/.exec(dom)?.[1] ?? '';
      expect(root).not.toContain('Loading…');
      expect(root).not.toContain('Could not load the API description');
      expect(root).toContain('<section id="tag-');
      expect(dom).toContain('Sales CRM API reference');
      const expected = Object.entries(openapi.paths)
        .flatMap(([path, ops]) => Object.entries(ops).map(([method, op]) => `${(op.tags ?? ['Other'])[0].toLowerCase()} ${method} ${path}`))
        .sort();
      expect(renderedOps(dom).map((o) => `${o.section} ${o.method} ${o.path}`).sort()).toEqual(expected);
      // A known, long-standing endpoint as a sanity check of the parsing above.
      expect(renderedOps(dom)).toContainEqual({ method: 'get', path: '/api/v1/pipelines', section: 'pipelines' });
    },
    BROWSER_TIMEOUT_MS,
  );

  browserIt(
    'shows the deals endpoints /api/v1/deals and /api/v1/deals/{id} in the Deals section',
    () => {
      if (!ready()) return;
      const ops = renderedOps(dom);
      for (const path of ['/api/v1/deals', '/api/v1/deals/{id}']) {
        const documented = Object.keys(openapi.paths[path] ?? {}).sort();
        const rendered = ops.filter((o) => o.path === path);
        expect({ path, rendered: rendered.map((o) => o.method).sort() }).toEqual({ path, rendered: documented });
        expect({ path, rendered: rendered.length > 0 }).toEqual({ path, rendered: true });
        expect(rendered.every((o) => o.section === 'deals')).toBe(true);
      }
      // The two deal operations the specification describes.
      expect(ops).toContainEqual({ method: 'post', path: '/api/v1/deals', section: 'deals' });
      expect(ops).toContainEqual({ method: 'patch', path: '/api/v1/deals/{id}', section: 'deals' });
      expect(dom).toContain('<section id="tag-deals">');
    },
    BROWSER_TIMEOUT_MS,
  );
});
