import Koa from 'koa';
import compose from 'koa-compose';
import type { Context, Next } from 'koa';
import type { AppDeps } from './context';
import { KeyCache, type KeyRow, LocalCounts } from '../domain/access';
import { ApiError } from '../domain/kernel';
import { jsonBody, refuseDeclaredTooLarge } from './middleware/body';
import { loggablePath, requestContext } from './middleware/errors';
import { countIpInMemory, enforce, ipBucket, record } from './middleware/rate-limit';
import { buildOpenApi } from './openapi';
import { AnyRoute } from './route';
import { buildRouter } from './router';
import { assertDocsBundle, serveDocs } from './docs';
import { adminRoutes } from './routes/admin';
import { conversationRoutes } from './routes/conversations';
import { dealRoutes } from './routes/deals';
import { leadRoutes } from './routes/leads';
import { listRoutes } from './routes/lists';
import { messageRoutes } from './routes/messages';
import { mediaRoutes } from './routes/media';
import { noteRoutes } from './routes/notes';
import { productRoutes } from './routes/products';
import { tagRoutes } from './routes/tags';
import { taskRoutes } from './routes/tasks';
import { instanceRoutes } from './routes/instances';
import { pipelineRoutes } from './routes/pipelines';
import { systemRoutes } from './routes/system';
import { providerWebhookRoutes } from './routes/provider-webhooks';
import { webhookRoutes } from './routes/webhooks';
import { eventRoutes } from './routes/events';
import { automationRoutes } from './routes/automations';
import { broadcastRoutes } from './routes/broadcasts';
import { CODEC_SESSION_PAGE_PATH, CODEC_SESSION_PATH } from '../domain/platform';

/** Every endpoint of the service, in documentation order. */
export const ROUTES: AnyRoute[] = [
  ...dealRoutes,
  ...leadRoutes,
  ...noteRoutes,
  ...tagRoutes,
  ...listRoutes,
  ...pipelineRoutes,
  ...productRoutes,
  ...taskRoutes,
  ...conversationRoutes,
  ...mediaRoutes,
  ...messageRoutes,
  ...instanceRoutes,
  ...webhookRoutes,
  ...eventRoutes,
  ...automationRoutes,
  ...broadcastRoutes,
  ...systemRoutes,
  ...adminRoutes,
  ...providerWebhookRoutes,
];

/** The paths served before the router (the reference and its document): GET and HEAD only. */
const SERVED_PATHS = new Set(['/api/v1/openapi.json', '/docs', '/docs/']);
const READ_METHODS = new Set(['GET', 'HEAD']);

export function createApp(deps: AppDeps, options: { extraRoutes?: AnyRoute[] } = {}): Koa {
  const app = new Koa();
  // Only the hops our own proxies appended are read: X-Forwarded-For's left-most entries are the client's to choose.
  app.proxy = deps.config.trustProxy > 0;
  app.maxIpsCount = deps.config.trustProxy;
  app.context.deps = deps;
  app.context.limits = {
    keys: new KeyCache<KeyRow>(),
    counts: new LocalCounts(deps.db, (err) => deps.logger.warn({ err }, 'rate-limit counts could not be flushed')),
  };
  app.context.requestLog = deps.logger.child({}, { redact: [] });
  // Koa's own error printing is replaced by our request logger.
  app.silent = true;

  const routes = [...ROUTES, ...(options.extraRoutes ?? [])];
  let openapi: object | undefined;

  app.use(requestContext);
  const openapiDocument = async (ctx: Context, next: Next) => {
    if (!READ_METHODS.has(ctx.method)) return next();
    if (ctx.path === '/api/v1/openapi.json') {
      // An /api/v1 answer like the others: the IP's `read` bucket, counted in memory (a static
      // document needs no statement), its headers, and 429 when it is exhausted.
      record(ctx, countIpInMemory(ctx));
      openapi ??= buildOpenApi(routes, deps.config.publicBaseUrl);
      ctx.body = openapi;
      return;
    }
    await next();
  };
  // GET /docs and its assets: the renderer's bundle (4 MB) is read on the first page view, so a
  // process nobody browses does not hold it; a missing package still stops the start.
  assertDocsBundle();
  // The pages beside the endpoints (the document, the reference, the codec session), passed by every
  // other /api/v1 call in one test of its path instead of three middleware hops.
  const pages = compose([openapiDocument, serveDocs, codecCors]);
  app.use((ctx: Context, next: Next) =>
    ctx.path.startsWith('/api/v1/') && ctx.path !== '/api/v1/openapi.json' ? next() : pages(ctx, next),
  );
  app.use(refuseDeclaredTooLarge);
  // The body is read per route, after its limits and authentication: an unknown path, a refused
  // caller or a caller over its limit costs no parsing of up to 1 MiB.
  const router = buildRouter(routes, jsonBody());
  // What no route answered becomes our error body: 405 for a method a known path does not support
  // (with Allow, from @koa/router's allowedMethods), 404 for an unknown path. Each still counts
  // against the caller's IP and carries the rate-limit headers.
  app.use(async (ctx: Context, next: Next) => {
    await next();
    if (ctx.body !== undefined && ctx.body !== null) return;
    const method = ctx.method;
    const path = loggablePath(ctx.path);
    if (ctx.status === 405 || (ctx.status === 404 && SERVED_PATHS.has(ctx.path))) {
      const allow = String(ctx.response.get('Allow') || [...READ_METHODS].join(', '));
      await enforce(ctx, [ipBucket(ctx, 'read')]);
      throw new ApiError('METHOD_NOT_ALLOWED', `${method} is not supported on ${path}`, {
        hint: `Allowed: ${allow}.`,
        headers: { Allow: allow },
      });
    }
    if (ctx.status === 404) {
      await enforce(ctx, [ipBucket(ctx, 'read')]);
      throw new ApiError('NOT_FOUND', `No route for ${method} ${path}`);
    }
  });
  app.use(router.routes());
  app.use(router.allowedMethods());
  return app;
}

/**
 * The codec endpoint is called from the Temporal UI's page, another origin. With the admin token
 * in a header, a browser never adds it by itself; with the codec session cookie, SameSite=Strict
 * keeps it to same-site pages (the UI beside the API), and it opens only decode and encode, which
 * change nothing (domain/platform/codec-session.ts).
 */
const CODEC_SESSION_PAGE = `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Temporal codec session</title>
<style>body{font:15px/1.5 system-ui,sans-serif;max-width:40rem;margin:3rem auto;padding:0 1rem}input{width:100%;font:inherit;padding:.4rem}</style></head>
<body><h1>Temporal codec session</h1>
<p>Paste the admin token to let the Temporal UI in this browser decode payloads for 8 hours. Then, in the UI's
codec settings, set the endpoint to <code id="endpoint"></code> and turn on <b>Include cross-origin credentials</b>.</p>
<form id="f"><input id="t" type="password" autocomplete="off" placeholder="ADMIN_TOKEN" required> <button>Open session</button></form>
<p id="out" role="status"></p>
<script>
document.getElementById('endpoint').textContent = location.origin + '${CODEC_SESSION_PATH}';
document.getElementById('f').addEventListener('submit', async (e) => {
  e.preventDefault();
  const res = await fetch('${CODEC_SESSION_PATH}/session', { method: 'POST', headers: { authorization: 'Bearer ' + document.getElementById('t').value } });
  const body = await res.json().catch(() => ({}));
  document.getElementById('out').textContent = res.ok ? 'Session open until ' + body.data.expiresAt + '.' : 'Refused: ' + (body.error || res.status);
});
</script></body></html>`;
async function codecCors(ctx: Context, next: Next): Promise<void> {
  // The page that opens a session: outside the API's documented paths, like /docs.
  if (ctx.method === 'GET' && ctx.path === CODEC_SESSION_PAGE_PATH) {
    ctx.type = 'html';
    ctx.set('Cache-Control', 'no-store');
    ctx.set(
      'Content-Security-Policy',
      "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; form-action 'none'; frame-ancestors 'none'",
    );
    ctx.body = CODEC_SESSION_PAGE;
    return;
  }
  if (!ctx.path.startsWith(`${CODEC_SESSION_PATH}/`)) return next();
  // Only the Temporal UI's page (TEMPORAL_UI_ORIGIN) may call with the session cookie: an answer
  // naming any other origin with credentials would let every site the operator visits decode.
  const origin = ctx.get('origin');
  ctx.set('Vary', 'Origin');
  if (origin && origin === ctx.deps.config.temporalUiOrigin) {
    ctx.set('Access-Control-Allow-Origin', origin);
    ctx.set('Access-Control-Allow-Credentials', 'true');
  }
  if (ctx.method === 'OPTIONS') {
    if (ctx.response.get('Access-Control-Allow-Origin')) {
      ctx.set('Access-Control-Allow-Methods', 'POST');
      ctx.set('Access-Control-Allow-Headers', 'authorization, content-type, x-namespace');
    }
    ctx.status = 204;
    return;
  }
  await next();
}
