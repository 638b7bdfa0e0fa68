/**
 * GET /docs: the API reference for people, rendered in the browser by Scalar (the npm package
 * `@scalar/api-reference`, its standalone browser bundle) from `/api/v1/openapi.json`. Why Scalar
 * (search, schemas with examples and try-it, all three): docs/architecture.md, "The reference page".
 *
 * Everything the page loads comes from this process, so it works offline: the bundle, read from
 * node_modules once and served under a content-hashed name with a year of immutable caching, and
 * our small script that configures it (CONFIGURE_JS: try-it sends to this origin only, Scalar's
 * calls to its own services off), under a policy of 'self' only (DOCS_CSP).
 */
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { promisify } from 'node:util';
import zlib from 'node:zlib';
import type { Context, Next } from 'koa';

const gzip = promisify(zlib.gzip);

export const DOCS_PATH = '/docs';
export const DOCS_ASSETS_PREFIX = '/docs/assets/';
const OPENAPI_URL = '/api/v1/openapi.json';
const TITLE = 'Sales CRM API reference';

/**
 * The page's own script, loaded before the bundle (a file, not an inline script, so script-src
 * stays 'self'). Option names are Scalar's (its documentation's configuration page).
 */
const CONFIGURE_JS = `'use strict';
// The bundle's zod probes for eval with Function(''), which script-src 'self' refuses (and reports):
// its documented jitless mode skips the probe. Set before the bundle runs, which reads it once.
globalThis.__zod_globalConfig = Object.assign(globalThis.__zod_globalConfig || {}, { jitless: true });
document.addEventListener('DOMContentLoaded', function () {
  Scalar.createApiReference('#reference', {
    url: ${JSON.stringify(OPENAPI_URL)},
    title: 'Sales CRM API',
    slug: 'crm',
    // Try-it sends to this page's origin, whatever PUBLIC_BASE_URL the document names.
    servers: [{ url: window.location.origin, description: 'This server' }],
    // Requests go straight to the API, never through a proxy (Scalar's hosted one is a default of some layouts).
    proxyUrl: '',
    // No calls to Scalar's services: web fonts, telemetry, the AI agent, MCP, the developer toolbar.
    withDefaultFonts: false,
    telemetry: false,
    agent: { disabled: true },
    mcp: { disabled: true },
    showDeveloperTools: 'never',
    // Its "Open API Client" link leads to Scalar's hosted client; "Test Request" opens the one in this page.
    hideClientButton: true,
    // Every tag open in the sidebar, so every operation is one click (or one search) away.
    defaultOpenAllTags: true,
    documentDownloadType: 'json',
    metaData: { title: ${JSON.stringify(TITLE)} },
  });
});
`;

interface Asset {
  url: string;
  type: string;
  body: Buffer;
  gzip?: Promise<Buffer>;
}

/** The standalone bundle of @scalar/api-reference, found through Node's module resolution. */
export function scalarBundlePath(): string {
  // The package exports only its ESM entry (dist/index.js); the browser bundle sits beside it.
  return path.join(path.dirname(require.resolve('@scalar/api-reference')), 'browser', 'standalone.js');
}

function asset(name: string, ext: string, type: string, body: Buffer): Asset {
  const hash = crypto.createHash('sha256').update(body).digest('hex').slice(0, 16);
  return { url: `${DOCS_ASSETS_PREFIX}${name}.${hash}.${ext}`, type, body };
}

/** The tab's icon: a file of ours, so the browser neither asks for /favicon.ico nor needs img-src data:. */
const FAVICON_SVG =
  '<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 16 16"><rect width="16" height="16" rx="3" fill="#1f6feb"/><path d="M4 5h8M4 8h8M4 11h5" stroke="#fff" stroke-width="1.5" stroke-linecap="round"/></svg>';

interface DocsAssets {
  assets: Map<string, Asset>;
  scripts: string[];
  favicon: string;
}

let loaded: DocsAssets | undefined;

/** Throws now, at the start, if the renderer's bundle cannot be read (docsAssets reads it on the first page view). */
export function assertDocsBundle(): void {
  fs.accessSync(scalarBundlePath(), fs.constants.R_OK);
}

/** Reads the assets once per process (about 4 MB); later calls return the same. */
export function docsAssets(): DocsAssets {
  if (loaded) return loaded;
  // The trailing source-map comment would only send devtools after a 17 MB map we do not serve.
  const bundle = fs.readFileSync(scalarBundlePath(), 'utf8').replace(/\n\/\/# sourceMappingURL=\S+\s*$/, '\n');
  // Ours first: it configures what the bundle reads as it loads, and mounts the page once the bundle ran.
  const scripts = [
    asset('configure', 'js', 'application/javascript; charset=utf-8', Buffer.from(CONFIGURE_JS)),
    asset('scalar-api-reference', 'js', 'application/javascript; charset=utf-8', Buffer.from(bundle)),
  ];
  const favicon = asset('favicon', 'svg', 'image/svg+xml', Buffer.from(FAVICON_SVG));
  loaded = { assets: new Map([...scripts, favicon].map((a) => [a.url, a])), scripts: scripts.map((a) => a.url), favicon: favicon.url };
  return loaded;
}

/**
 * The page's policy: 'self' only, and nothing at all for what the page does not use. One
 * relaxation, which the renderer truly needs: style-src 'unsafe-inline'. Scalar injects its
 * stylesheet and its theme as <style> elements at run time and its components write style
 * attributes; there is no stylesheet file to serve instead (its nonce support covers only the
 * first <style>). Styles run no code, and fonts and images may still come from 'self' only, so
 * no style can make the page fetch from elsewhere.
 */
export const DOCS_CSP = [
  "default-src 'none'",
  "script-src 'self'",
  "style-src 'self' 'unsafe-inline'",
  "img-src 'self'",
  "font-src 'self'",
  "connect-src 'self'",
  "base-uri 'none'",
  "form-action 'none'",
  "frame-ancestors 'none'",
].join('; ');

function page({ scripts, favicon }: DocsAssets): string {
  return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>${TITLE}</title>
<link rel="icon" href="${favicon}" type="image/svg+xml">
</head>
<body>
<noscript>This reference needs JavaScript. The API description itself is at <a href="${OPENAPI_URL}">${OPENAPI_URL}</a>.</noscript>
<div id="reference"></div>
${scripts.map((src) => `<script src="${src}"></script>`).join('\n')}
</body>
</html>
`;
}

/** Serves GET/HEAD /docs and its assets; everything else goes on. */
export async function serveDocs(ctx: Context, next: Next): Promise<void> {
  if (ctx.method !== 'GET' && ctx.method !== 'HEAD') return next();
  if (ctx.path === DOCS_PATH || ctx.path === `${DOCS_PATH}/`) {
    ctx.set('Content-Security-Policy', DOCS_CSP);
    ctx.set('X-Content-Type-Options', 'nosniff');
    ctx.set('Referrer-Policy', 'no-referrer');
    // The page names the assets by their hash: revalidating it is enough to pick up new ones.
    ctx.set('Cache-Control', 'no-cache');
    ctx.type = 'html';
    ctx.body = page(docsAssets());
    return;
  }
  if (!ctx.path.startsWith(DOCS_ASSETS_PREFIX)) return next();
  const found = docsAssets().assets.get(ctx.path);
  if (!found) return next();
  ctx.set('X-Content-Type-Options', 'nosniff');
  ctx.set('Cache-Control', 'public, max-age=31536000, immutable');
  ctx.set('Vary', 'Accept-Encoding');
  ctx.type = found.type;
  if (ctx.acceptsEncodings('gzip', 'identity') === 'gzip') {
    // Compressed once, on first demand (the bundle goes from about 4.3 MB to about 1.2 MB).
    found.gzip ??= gzip(found.body, { level: 9 });
    ctx.set('Content-Encoding', 'gzip');
    ctx.body = await found.gzip;
  } else {
    ctx.body = found.body;
  }
}
