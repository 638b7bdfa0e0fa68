import type { Context, Next } from 'koa';
import { koaBody } from 'koa-body';
import { ApiError } from '../../domain/kernel';

/** The largest JSON body any endpoint accepts. */
export const JSON_BODY_MAX_BYTES = 1024 * 1024;
export const JSON_BODY_LIMIT_HINT = 'The limit is 1 MiB.';

const tooLarge = () => new ApiError('PAYLOAD_TOO_LARGE', 'Request body too large', { hint: JSON_BODY_LIMIT_HINT });

/** The methods whose body is read (and checked for size and type). */
export const BODY_METHODS = new Set(['POST', 'PUT', 'PATCH', 'DELETE']);

/** The automation receiver reads any body as JSON whatever its label (senders label JSON text/plain or nothing). */
export const readsAnyContentType = (path: string): boolean => path.startsWith('/api/automations/webhook-in/');

/**
 * A body declared larger than any endpoint takes is refused from its header alone, before routing
 * and authentication (nothing is read); the body itself is read per route (jsonBody), after them.
 */
export async function refuseDeclaredTooLarge(ctx: Context, next: Next): Promise<void> {
  const declared = Number(ctx.get('content-length'));
  if (BODY_METHODS.has(ctx.method) && Number.isFinite(declared) && declared > JSON_BODY_MAX_BYTES) throw tooLarge();
  await next();
}

/**
 * JSON bodies only, at most 1 MiB (a larger declared size never gets here: refuseDeclaredTooLarge);
 * anything else is 415, malformed JSON 400 VALIDATION. On the paths readsAnyContentType names, the
 * body is read as JSON whatever its label, and what is not JSON is 400.
 */
export function jsonBody() {
  const parse = koaBody({
    json: true,
    multipart: false,
    urlencoded: false,
    text: false,
    jsonLimit: JSON_BODY_MAX_BYTES,
    jsonStrict: true,
    includeUnparsed: true,
    parsedMethods: ['POST', 'PUT', 'PATCH', 'DELETE'] as never,
    onError: (err: Error) => {
      throw err;
    },
  });
  return async (ctx: Context, next: Next): Promise<void> => {
    if (BODY_METHODS.has(ctx.method) && hasBody(ctx)) {
      const declaredJson = ctx.is('application/json', 'application/*+json');
      const anyType = !declaredJson && readsAnyContentType(ctx.path);
      if (!declaredJson && !anyType) {
        throw new ApiError('UNSUPPORTED_MEDIA_TYPE', `Unsupported content type "${ctx.get('content-type') || 'none'}"`, {
          hint: 'Send Content-Type: application/json.',
        });
      }
      if (anyType) {
        await readAsJson(ctx, JSON_BODY_MAX_BYTES);
      } else {
        await parse(ctx, async () => undefined);
      }
      assertShallow((ctx.request as { body?: unknown }).body);
    }
    await next();
  };
}

/** How deeply objects and arrays may nest in a JSON body (no endpoint needs more than a handful). */
export const MAX_JSON_DEPTH = 64;

/**
 * JSON.parse reads any depth, but what comes after does not: JSON.stringify (jsonb columns,
 * Temporal payloads, logs) overflows the stack around a few thousand levels, which surfaced as
 * 500 INTERNAL or 503 UNAVAILABLE. A body nested deeper than MAX_JSON_DEPTH is 400 VALIDATION,
 * checked iteratively (a recursive walk would overflow on the same input).
 */
function assertShallow(body: unknown): void {
  if (body === null || typeof body !== 'object') return;
  const stack: [object, number][] = [[body, 1]];
  while (stack.length > 0) {
    const [value, depth] = stack.pop()!;
    if (depth > MAX_JSON_DEPTH) {
      throw new ApiError('VALIDATION', 'The JSON body is nested too deeply', {
        hint: `At most ${MAX_JSON_DEPTH} levels of objects and arrays.`,
      });
    }
    for (const child of Array.isArray(value) ? value : Object.values(value)) {
      if (child !== null && typeof child === 'object') stack.push([child, depth + 1]);
    }
  }
}

async function readAsJson(ctx: Context, maxBytes: number): Promise<void> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of ctx.req as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size > maxBytes) throw tooLarge();
    chunks.push(chunk);
  }
  const raw = Buffer.concat(chunks).toString('utf8');
  try {
    (ctx.request as { body?: unknown }).body = JSON.parse(raw);
  } catch (err) {
    throw new ApiError('VALIDATION', 'The body is not JSON', { hint: (err as Error).message });
  }
  (ctx.request as { rawBody?: string }).rawBody = raw;
}

function hasBody(ctx: Context): boolean {
  return Number(ctx.get('content-length') || 0) > 0 || ctx.get('transfer-encoding') !== '';
}

/**
 * The exact text received, or '' when no body was: a signature covers these bytes, not a
 * re-serialisation of the JSON (koa-body keeps them with `includeUnparsed`, readAsJson too).
 */
export function rawBody(ctx: Context): string {
  return (ctx.request as { rawBody?: string }).rawBody ?? '';
}

/** The parsed JSON body, or undefined when none was sent. */
export function requestBody(ctx: Context): unknown {
  const body = (ctx.request as { body?: unknown }).body;
  if (body === undefined || body === null) return undefined;
  if (typeof body === 'object' && !Array.isArray(body) && Object.keys(body).length === 0 && !hasBody(ctx)) return undefined;
  return body;
}
