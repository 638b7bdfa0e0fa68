import type { Context } from 'koa';
import { z } from 'zod';
import type { ApiError, ErrorCode } from '../domain/kernel';
import type { IpProfile, KeyProfile, Scope } from '../domain/access';

/**
 * One declaration per endpoint drives the router, the zod validation and the OpenAPI document,
 * so the documentation cannot drift from the code.
 */
export type Method = 'get' | 'post' | 'put' | 'patch' | 'delete';

export type AnyObject = z.ZodObject<z.ZodRawShape>;

export interface RouteInput<P, Q, B> {
  params: P;
  query: Q;
  /** The validated body; a `batch` route gets `items` instead. */
  body: B;
  /** A `batch` route's items, each validated on its own, in request order (empty for other routes). */
  items: BatchItem[];
}

/** One item of a batch body: its validated input, or why it is invalid (its own 400 answer). */
export type BatchItem<T = unknown> = { index: number; input: T; error?: undefined } | { index: number; error: ApiError; raw: unknown };

export interface RouteDef<P extends AnyObject = AnyObject, Q extends AnyObject = AnyObject, B extends z.ZodType = z.ZodType> {
  method: Method;
  /** OpenAPI form: `/api/v1/deals/{id}`. */
  path: string;
  /** The operation's stable name in the OpenAPI document (generated clients name their methods after it). */
  operationId: string;
  summary: string;
  description?: string;
  tag: string;
  /** `apiKey`: Bearer vg_live_ key; `admin`: Bearer ADMIN_TOKEN; `none`: public. */
  auth: 'apiKey' | 'admin' | 'none';
  /** Any one of these scopes is enough (implied scopes count; see domain/access/scopes). */
  scopes?: Scope[];
  /** Per-IP profile applied before authentication. */
  ipProfile?: IpProfile;
  /**
   * The handler counts the per-IP profile (`ctx.state.ipToCount`) in its own first statement,
   * beside what that statement reads (the automation receiver: its token's automation,
   * findInboundAutomationAndCount). A request that fails before the handler counts it is counted
   * after it failed, so every request counts once.
   */
  ipCountedByHandler?: boolean;
  /** A per-key profile on top of the key's own limit. */
  keyProfile?: KeyProfile;
  params?: P;
  query?: Q;
  body?: B;
  /**
   * A body the handler reads and checks itself, documented but not validated by the router (the
   * automation receiver takes any JSON object and keeps third-party text as it can be stored).
   */
  documentedBody?: z.ZodType;
  /** Success status (default 200). */
  status?: number;
  /** Other statuses the handler answers with the same body (an upsert's 200, a replayed send's 200, /ready's 503). */
  alsoStatus?: number[];
  /** Response body schema, for the OpenAPI document. */
  response?: z.ZodType;
  /** The success answer's media type in the OpenAPI document when it is not JSON (a file: `application/octet-stream`). */
  responseContentType?: string;
  /** Error codes this endpoint can answer with (beyond the ones every endpoint has). */
  errors?: ErrorCode[];
  /**
   * The answer carries a secret (an API key, a signing secret, a token URL): it is sent with
   * `Cache-Control: no-store`, so no browser or proxy cache keeps it, and documented so.
   */
  noStore?: true;
  /**
   * Takes an `Idempotency-Key` header (validated by the router, 400 VALIDATION naming it), and a
   * repeat is answered 200 with `Idempotent-Replayed: true`. `send`: a send through Temporal, whose
   * answers always carry the key (one is generated when none is given; api/send.ts). `batch`: a
   * batch whose answer is kept in PostgreSQL for 24 hours, the key echoed when given (api/batch.ts).
   * Documented from this flag.
   */
  idempotent?: 'send' | 'batch';
  /**
   * A batch body `{ <field>: [item, ...] }` (`body` states it for the document, built by
   * api/batch.ts batchBody). The router checks the envelope, an object whose `field` holds 1 to
   * BATCH_MAX items (anything else is 400 VALIDATION for the whole request), then each item on its
   * own, so an invalid item is that item's answer (VALIDATION naming `body.<field>.<index>.<path>`)
   * and never fails the others. `schemaFor` picks an item's schema when the kind of item decides it
   * (default: the array's item schema).
   */
  batch?: { field: string; schemaFor?: (item: unknown) => z.ZodType };
  handler: (ctx: Context, input: RouteInput<z.infer<P>, z.infer<Q>, z.infer<B>>) => Promise<unknown>;
}

// eslint-disable-next-line @typescript-eslint/no-explicit-any
export type AnyRoute = RouteDef<any, any, any>;

/** Declares an endpoint with its input types inferred from the zod schemas. */
export function route<P extends AnyObject = z.ZodObject<{}>, Q extends AnyObject = z.ZodObject<{}>, B extends z.ZodType = z.ZodUndefined>(
  def: RouteDef<P, Q, B>,
): AnyRoute {
  return def as AnyRoute;
}

/** An API-key endpoint's access: documented under `tag`, opened by `scope`, limited per IP by `ipProfile`. */
export function apiKey(tag: string, scope: Scope, ipProfile: IpProfile): Pick<RouteDef, 'tag' | 'auth' | 'scopes' | 'ipProfile'> {
  return { tag, auth: 'apiKey', scopes: [scope], ipProfile };
}

/** `/api/v1/deals/{id}` → `/api/v1/deals/:id` for the Koa router. */
export function koaPath(path: string): string {
  return path.replace(/\{([A-Za-z0-9_]+)\}/g, ':$1');
}
