/**
 * The /docs page in a real headless Chromium, driven with playwright-core (never a browser of its
 * own: the executable is the Chromium that scripts/chromium.ts finds on PATH or installs with
 * apt-get). The page is Scalar's renderer of /api/v1/openapi.json, so only a browser proves it:
 * that it lists every operation under its tag, shows a response schema, finds an operation by
 * search, sends a try-it request to its own origin, and asks nothing of any other host.
 * When Chromium cannot be had (none on PATH or at CHROMIUM_PATH, and not root with apt-get to
 * install one), every browser case fails, saying why and how to provide one: never a silent skip.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { chromium as playwright, type BrowserContext, type Locator, type Page } from 'playwright-core';
import { DOCS_CSP, scalarBundlePath } from '../api/docs';
import { CHROMIUM_FLAGS, CHROMIUM_NAMES, ensureChromium, findChromium } from '../scripts/chromium';
import { which } from '../scripts/executables';
import { startApi, TestApi } from './helpers';

const INSTALL_TIMEOUT_MS = 15 * 60_000;
const BROWSER_TIMEOUT_MS = 120_000;
/** How long one element may take to appear: the bundle parses the whole document first. */
const UI_TIMEOUT_MS = 30_000;

/** Decided while collecting tests: why no browser can be had (none found, none installable as root with apt-get), or null. */
function preflight(): string | null {
  if (findChromium()) return null;
  const where = process.env.CHROMIUM_PATH
    ? `CHROMIUM_PATH=${process.env.CHROMIUM_PATH} is not an executable file and no ${CHROMIUM_NAMES.join('/')} is on PATH`
    : `CHROMIUM_PATH is not set and no ${CHROMIUM_NAMES.join('/')} is on PATH`;
  if (!which('apt-get')) return `${where}, and there is no apt-get to install one`;
  if (typeof process.getuid === 'function' && process.getuid() !== 0)
    return `${where}, and this is not root, so apt-get cannot install chromium`;
  return null;
}

const unavailable = preflight();
/** The failure of every browser case when there is no browser: what is missing and how to provide it. */
const NO_BROWSER = unavailable
  ? `The /docs browser test needs a headless Chromium: ${unavailable}. Provide one: set CHROMIUM_PATH to a Chromium or ` +
    `Chrome executable (CHROMIUM_PATH=/usr/bin/chromium npm test), put one on PATH (apt-get install -y chromium), or run the ` +
    `tests as root with apt-get available, and this test installs it.`
  : null;

type JsonSchema = { $ref?: string; properties?: Record<string, JsonSchema> };
interface OpenApi {
  paths: Record<
    string,
    Record<string, { tags?: string[]; summary?: string; responses: Record<string, { content?: Record<string, { schema?: JsonSchema }> }> }>
  >;
  components?: { schemas?: Record<string, JsonSchema> };
}
interface Operation {
  method: string;
  path: string;
  tag: string;
  summary: string;
}

/** The renderer's slug of a tag name, as in its anchors (`#tag/provider-webhooks/...`). */
const tagSlug = (tag: string): string =>
  tag
    .toLowerCase()
    .replace(/[^a-z0-9]+/g, '-')
    .replace(/^-|-$/g, '');
/** An operation's anchor in the sidebar and in the page's address. */
const anchorOf = (op: Pick<Operation, 'tag' | 'method' | 'path'>): string => `#tag/${tagSlug(op.tag)}/${op.method.toUpperCase()}${op.path}`;
/** The id of an operation's section in the content (the document's slug is `crm`, set by the page). */
const sectionId = (op: Pick<Operation, 'tag' | 'method' | 'path'>): string => `crm/${anchorOf(op).slice(1)}`;
/** A locator for an element by its exact id (ids here contain `/`, `{` and `}`). */
const byId = (id: string): string => `[id=${JSON.stringify(id)}]`;

/** Waits until `locator` matches at least `count` elements (the renderer builds lists in steps). */
async function waitForCount(locator: Locator, count: number, timeoutMs = UI_TIMEOUT_MS): Promise<number> {
  const deadline = Date.now() + timeoutMs;
  let seen = await locator.count();
  while (seen < count && Date.now() < deadline) {
    await new Promise((resolve) => setTimeout(resolve, 200));
    seen = await locator.count();
  }
  return seen;
}

describe('/docs in a headless browser', () => {
  let api: TestApi;
  let origin = '';
  let openapi: OpenApi;
  let operations: Operation[] = [];
  let profile = '';
  let context: BrowserContext | undefined;
  /** Every request any page of the browser made, and what the pages reported. */
  const requests: string[] = [];
  const violations: string[] = [];
  const pageErrors: string[] = [];

  beforeAll(async () => {
    api = await startApi();
    origin = new URL(api.url).origin;
    openapi = (await api.request<OpenApi>('GET', '/api/v1/openapi.json')).body;
    operations = Object.entries(openapi.paths).flatMap(([p, ops]) =>
      Object.entries(ops).map(([method, op]) => ({ method, path: p, tag: (op.tags ?? ['Other'])[0], summary: op.summary ?? '' })),
    );
    // No browser to be had: each browser case fails with NO_BROWSER (the case above still runs).
    if (NO_BROWSER) return;
    const result = await ensureChromium((m) => console.log(`[chromium] ${m}`));
    if (result.path === null) {
      // Root with apt-get should have been able to install it: that is a failure, not a skip.
      throw new Error(`Chromium could not be installed although apt-get is available: ${result.reason}`);
    }

    profile = fs.mkdtempSync(path.join(os.tmpdir(), 'chromium-profile-'));
    context = await playwright.launchPersistentContext(profile, {
      executablePath: result.path,
      headless: true,
      // Playwright adds its own headless switch and profile directory.
      args: CHROMIUM_FLAGS.filter((flag) => flag !== '--headless'),
      viewport: { width: 1400, height: 1000 },
    });
    context.setDefaultTimeout(UI_TIMEOUT_MS);
    context.on('request', (request) => requests.push(request.url()));
    // Nothing may leave this machine even if the page asked for it: the assertion at the end reports
    // any such request (it is still seen above), and the test never waits on the network for it.
    await context.route(
      (url) => url.origin !== origin,
      (route) => route.abort('blockedbyclient'),
    );
    await context.exposeBinding('__cspViolation', (_source, text: string) => violations.push(text));
    // Page code as text: this project's TypeScript has no DOM types.
    await context.addInitScript({
      content:
        "document.addEventListener('securitypolicyviolation', (e) => window.__cspViolation(e.violatedDirective + ' ' + e.blockedURI + ' ' + e.sample));",
    });
  }, INSTALL_TIMEOUT_MS);

  afterAll(async () => {
    await context?.close();
    if (profile) fs.rmSync(profile, { recursive: true, force: true });
    await api?.close();
  });

  /** The browser beforeAll launched; without one, the case fails here with NO_BROWSER (or beforeAll's error). */
  const browser = (): BrowserContext => {
    if (NO_BROWSER) throw new Error(NO_BROWSER);
    if (!context) throw new Error('no Chromium: see the error of beforeAll');
    return context;
  };

  /** A new tab on /docs (at `hash`), once the renderer has built the sidebar from the document. */
  async function openDocs(hash = ''): Promise<Page> {
    const page = await browser().newPage();
    page.on('pageerror', (err) => pageErrors.push(err.message));
    await page.goto(`${api.url}/docs${hash}`);
    await page.locator('a[href^="#tag/"]').first().waitFor();
    return page;
  }

  /** An operation's section, once rendered: the renderer lays out sections lazily, as they come into view. */
  async function renderedSection(page: Page, op: Pick<Operation, 'tag' | 'method' | 'path'>) {
    await page
      .locator(byId(sectionId(op)))
      .last()
      .scrollIntoViewIfNeeded();
    const section = page.locator(`${byId(sectionId(op))}:not([data-placeholder])`).last();
    await section.getByRole('heading').first().waitFor();
    return section;
  }

  // Without a browser too: what the server sends.
  it('serves the page with a self-only CSP and the renderer from node_modules, under immutable hashed names', async () => {
    const docs = await api.request('GET', '/docs');
    expect(docs.status).toBe(200);
    expect(docs.headers.get('content-type')).toContain('text/html');
    expect(docs.headers.get('cache-control')).toBe('no-cache');
    const csp = docs.headers.get('content-security-policy') ?? '';
    expect(csp).toBe(DOCS_CSP);
    const directives = new Map(
      csp
        .split(';')
        .map((d) => d.trim().split(/\s+/))
        .map(([name, ...values]) => [name, values.join(' ')]),
    );
    expect(Object.fromEntries(directives)).toMatchObject({
      'default-src': "'none'",
      'script-src': "'self'",
      'connect-src': "'self'",
      'img-src': "'self'",
      'font-src': "'self'",
      'style-src': "'self' 'unsafe-inline'",
    });
    // No other host anywhere: not in the policy, not in the page; and no inline script.
    expect(csp).not.toMatch(/https?:|\*/);
    expect(docs.text).not.toMatch(/https?:\/\//);
    expect(docs.text).not.toMatch(/<script(?![^>]*\ssrc=)[^>]*>/);

    const assets = [...docs.text.matchAll(/(?:src|href)="(\/docs\/assets\/[^"]+)"/g)].map((m) => m[1]);
    expect(assets.length).toBeGreaterThanOrEqual(3);
    for (const asset of assets) {
      expect(asset).toMatch(/\.[0-9a-f]{16}\.(js|svg)$/);
      const res = await api.request('GET', asset);
      expect({ asset, status: res.status }).toEqual({ asset, status: 200 });
      expect(res.headers.get('cache-control')).toBe('public, max-age=31536000, immutable');
      expect(res.headers.get('x-content-type-options')).toBe('nosniff');
      expect(res.headers.get('content-type')).toMatch(asset.endsWith('.js') ? /^application\/javascript/ : /^image\/svg\+xml/);
    }
    // The renderer is the package's own bundle, byte for byte but its source-map comment, compressed on the way.
    const bundleUrl = assets.find((a) => a.includes('/scalar-api-reference.'))!;
    const bundle = await fetch(api.url + bundleUrl);
    expect(bundle.headers.get('content-encoding')).toBe('gzip');
    const packaged = fs.readFileSync(scalarBundlePath(), 'utf8');
    const served = await bundle.text();
    expect(served.length).toBeGreaterThan(1_000_000);
    expect(packaged.startsWith(served.trimEnd())).toBe(true);
    expect((await api.request('GET', '/docs/assets/nothing.0123456789abcdef.js')).status).toBe(404);
  });

  it(
    'lists every operation of the document under its tag, each with its section, and renders markdown',
    async () => {
      const page = await openDocs();
      try {
        expect(await page.title()).toBe('Sales CRM API reference');
        const tags = new Set(operations.map((o) => o.tag));
        // One link per tag and per operation, once the sidebar is complete.
        await waitForCount(page.locator('a[href^="#tag/"]'), tags.size + operations.length);
        await waitForCount(page.locator('[id^="crm/tag/"]'), operations.length);
        const links = new Map(
          (
            await page
              .locator('a[href^="#tag/"]')
              .evaluateAll((as) => as.map((a) => [a.getAttribute('href') ?? '', (a.textContent ?? '').replace(/\s+/g, ' ')]))
          ).map(([href, text]) => [href, text] as const),
        );
        // Each tag is a group of the sidebar, by its name.
        for (const tag of tags) {
          expect({ tag, link: links.get(`#tag/${tagSlug(tag)}`)?.trim() }).toEqual({ tag, link: tag });
        }
        // Each operation is a link under its tag, titled by its summary, with its method.
        expect(operations.length).toBeGreaterThan(50);
        const missing = operations
          .filter((op) => {
            const text = links.get(anchorOf(op)) ?? '';
            return !text.includes(op.summary) || !text.toUpperCase().includes(op.method === 'delete' ? 'DEL' : op.method.toUpperCase());
          })
          .map((op) => `${op.method} ${op.path} (${anchorOf(op)})`);
        expect(missing).toEqual([]);
        // And each has its section in the content, in the tag's order.
        const sections = await page.locator('[id^="crm/tag/"]').evaluateAll((els) => els.map((e) => e.id));
        expect(operations.map(sectionId).filter((id) => !sections.includes(id))).toEqual([]);
        // The deals endpoints, by name, as a sanity check of the parsing above.
        expect(links.get('#tag/deals/POST/api/v1/deals')).toContain(openapi.paths['/api/v1/deals'].post.summary!);
        expect(links.get('#tag/deals/PATCH/api/v1/deals/{id}')).toContain(openapi.paths['/api/v1/deals/{id}'].patch.summary!);

        // Markdown renders: the description's `leads:write` is code, with no backtick left.
        const pipelines = await renderedSection(page, { tag: 'Pipelines', method: 'get', path: '/api/v1/pipelines' });
        expect(openapi.paths['/api/v1/pipelines'].get.tags).toEqual(['Pipelines']);
        await pipelines.locator('code', { hasText: 'leads:write' }).first().waitFor();
        expect(await pipelines.locator('.markdown').first().innerText()).not.toContain('`');
      } finally {
        await page.close();
      }
    },
    BROWSER_TIMEOUT_MS,
  );

  it(
    "shows the response schema of GET /api/v1/leads/{id}: the 200 answer's lead fields",
    async () => {
      const op = { tag: 'Leads', method: 'get', path: '/api/v1/leads/{id}' };
      const ok = openapi.paths[op.path].get.responses['200'].content?.['application/json'].schema;
      const ref = ok?.properties?.data?.$ref ?? '';
      const fields = Object.keys(openapi.components?.schemas?.[ref.split('/').pop() ?? '']?.properties ?? {});
      expect(fields).toEqual(expect.arrayContaining(['id', 'name', 'phone', 'email', 'tags']));

      const page = await openDocs(anchorOf(op));
      try {
        const section = await renderedSection(page, op);
        const response = section.locator(byId(`${sectionId(op)}.responses.200`));
        await response.click();
        const item = response.locator('xpath=..');
        // Open the schema's nested objects (data, then the tags' items) until nothing is left closed.
        const closed = item.locator('button[data-schema-toggle][aria-expanded="false"]');
        for (let i = 0; i < 10 && (await closed.count()) > 0; i++) await closed.first().click();
        const text = await item.innerText();
        const lines = new Set(text.split('\n').map((l) => l.trim()));
        expect(lines).toContain('data');
        expect(fields.filter((f) => !lines.has(f))).toEqual([]);
      } finally {
        await page.close();
      }
    },
    BROWSER_TIMEOUT_MS,
  );

  it(
    "finds an operation with the renderer's search box and goes to it",
    async () => {
      const target = { tag: 'Leads', method: 'get', path: '/api/v1/leads/{id}/insight' };
      expect(openapi.paths[target.path]?.get?.tags).toEqual(['Leads']);
      const page = await openDocs();
      try {
        await page
          .getByRole('button', { name: /search/i })
          .first()
          .click();
        const box = page.getByRole('combobox', { name: /search/i });
        await box.pressSequentially('insight', { delay: 20 });
        const result = page.getByRole('option').filter({ hasText: target.path });
        await result.first().waitFor();
        expect(await result.first().innerText()).toMatch(/insight/i);
        await result.first().click();
        // (Not waitForFunction: it evaluates a string, which the page's CSP rightly refuses.)
        await page.waitForURL((url) => decodeURI(url.hash) === anchorOf(target));
        await renderedSection(page, target);
      } finally {
        await page.close();
      }
    },
    BROWSER_TIMEOUT_MS,
  );

  it(
    "sends a try-it request to the page's own origin",
    async () => {
      const op = { tag: 'Pipelines', method: 'get', path: '/api/v1/pipelines' };
      const page = await openDocs(anchorOf(op));
      try {
        const section = await renderedSection(page, op);
        await section
          .getByRole('button', { name: /test request/i })
          .first()
          .click();
        const answer = page.waitForResponse((r) => r.url() === `${api.url}${op.path}`);
        await page.getByRole('button', { name: /^send/i }).first().click();
        // No key was entered: the API itself answers, and the client shows it.
        expect((await answer).status()).toBe(401);
        await page
          .getByRole('dialog')
          .getByText(/401 Unauthorized/)
          .first()
          .waitFor();
      } finally {
        await page.close();
      }
    },
    BROWSER_TIMEOUT_MS,
  );

  it(
    'asked nothing of any other host, broke no rule of its Content-Security-Policy and threw no error',
    async () => {
      // A page of its own, so the case holds alone (-t) too; with the others, it checks what they loaded as well.
      const page = await openDocs();
      await page.close();
      // What the cases loaded: the page, our assets, the document (and the try-it call).
      expect(requests).toEqual(expect.arrayContaining([`${api.url}/docs`, `${api.url}/api/v1/openapi.json`]));
      expect(requests.some((u) => u.startsWith(`${api.url}/docs/assets/scalar-api-reference.`))).toBe(true);
      expect(requests.filter((u) => !u.startsWith('data:') && new URL(u).origin !== origin)).toEqual([]);
      expect(violations).toEqual([]);
      expect(pageErrors).toEqual([]);
    },
    BROWSER_TIMEOUT_MS,
  );
});
