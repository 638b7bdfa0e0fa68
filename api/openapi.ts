import { OpenAPIRegistry, OpenApiGeneratorV31, extendZodWithOpenApi } from '@asteasolutions/zod-to-openapi';
import { z } from 'zod';
import { ERROR_CODES, ErrorCode } from '../domain/kernel';
import type { AnyRoute } from './route';
import { IN_MEMORY_IP_PROFILES, IP_PROFILES, KEY_PROFILES, satisfying } from '../domain/access';
import { BODY_METHODS, readsAnyContentType } from './middleware/body';
import { isApiPath } from './middleware/rate-limit';
import { IdempotencyHeaders } from './send';

extendZodWithOpenApi(z);

const ERROR_TEXT: Partial<Record<ErrorCode, string>> = {
  UNAUTHORIZED: 'API key invalid, missing, expired or revoked.',
  INSUFFICIENT_SCOPE: 'Valid key without the required scope.',
  API_ACCESS_DISABLED: 'API access is not available on the plan.',
  SUBSCRIPTION_INACTIVE: 'The subscription is inactive.',
  RATE_LIMITED:
    "The key's per-minute limit is reached (a batch: its items do not fit in what is left); on the inbound automation receiver, the plan's automation runs per minute (see Retry-After).",
  IP_RATE_LIMITED: 'The per-IP limit of this operation profile is reached (see Retry-After).',
  VALIDATION: 'Body or parameters invalid; the hint names the field.',
  NOT_FOUND: 'Record not found in the workspace.',
  INTERNAL: 'Unexpected failure; the hint carries the request id.',
};

/** Tags in documentation order, each with the sentence a reader sees first. */
export const TAGS: { name: string; description: string }[] = [
  { name: 'Deals', description: 'Deals (cards) of contacts, in the stages of a pipeline, and their timeline.' },
  { name: 'Leads', description: 'Contacts as an integration sees them: upserted by phone, tagged, searched.' },
  { name: 'Notes', description: "Notes on a lead's record." },
  { name: 'Tags', description: 'Labels applied to contacts.' },
  { name: 'Lists', description: 'Named lists of contacts.' },
  { name: 'Pipelines', description: 'The pipelines and stages deals move through (read-only here; the panel manages them).' },
  { name: 'Products', description: 'The product catalogue deals refer to.' },
  { name: 'Tasks', description: 'To-dos with due dates, on contacts or deals.' },
  { name: 'Conversations', description: 'WhatsApp and Instagram conversations and their messages.' },
  { name: 'Messages', description: 'Sending WhatsApp messages: durable, idempotent sends.' },
  { name: 'Instances', description: 'The WhatsApp and Instagram connections of the workspace.' },
  { name: 'Webhooks', description: 'Subscriptions that receive signed business events, and their deliveries.' },
  { name: 'Events', description: 'The business events the webhooks carry, read back by cursor: catch up after an outage.' },
  { name: 'Automations', description: 'Automations started by events or by an inbound webhook, and their runs.' },
  { name: 'Broadcasts', description: 'An approved template sent to a segment of leads: paced, pausable, once per recipient.' },
  { name: 'System', description: 'Liveness and readiness probes.' },
  { name: 'Admin', description: 'Operator set-up with the ADMIN_TOKEN: workspaces, keys, members, pipelines, instances.' },
  { name: 'Provider webhooks', description: 'Callbacks of the messaging providers (signed by them).' },
];

/** The 429 codes of the counters in domain/access/rate-limit: they come with Retry-After (the daily caps do not). */
const BUCKET_CODES = new Set<ErrorCode>([
  'RATE_LIMITED',
  'IP_RATE_LIMITED',
  'SEND_RATE_LIMITED',
  'COLD_SEND_RATE_LIMITED',
  'TOKEN_RATE_LIMITED',
]);

function errorsOf(def: AnyRoute): ErrorCode[] {
  const codes = new Set<ErrorCode>(def.errors ?? []);
  if (def.body || def.documentedBody || def.query || def.idempotent) codes.add('VALIDATION');
  if (def.params) codes.add('NOT_FOUND');
  if (def.auth !== 'none') codes.add('UNAUTHORIZED');
  if (def.auth === 'apiKey') {
    for (const c of ['INSUFFICIENT_SCOPE', 'API_ACCESS_DISABLED', 'SUBSCRIPTION_INACTIVE', 'RATE_LIMITED'] as const) codes.add(c);
  }
  if (def.keyProfile === 'send') codes.add('SEND_RATE_LIMITED');
  if (def.keyProfile === 'coldSend') codes.add('COLD_SEND_RATE_LIMITED');
  if (def.ipProfile) codes.add('IP_RATE_LIMITED');
  // Every body method reads its body the same way (api/middleware/body.ts): a body over 1 MiB is
  // 413, one that is not JSON 415 (the automation receiver reads any type as JSON), malformed JSON 400.
  if (BODY_METHODS.has(def.method.toUpperCase())) {
    codes.add('VALIDATION');
    codes.add('PAYLOAD_TOO_LARGE');
    if (!readsAnyContentType(def.path)) codes.add('UNSUPPORTED_MEDIA_TYPE');
  }
  codes.add('INTERNAL');
  // Authentication and rate limits read PostgreSQL: when it is unreachable the answer is 503.
  if (def.auth !== 'none' || (def.ipProfile && !IN_MEMORY_IP_PROFILES.has(def.ipProfile))) codes.add('UNAVAILABLE');
  return [...codes];
}

type HeaderObject = { description: string; required?: boolean; schema: object };
const integer = { type: 'integer', minimum: 0 };
const RESPONSE_HEADERS = {
  'X-Request-Id': {
    description: 'The request id (yours from `X-Request-Id` when well formed, else generated); quote it when reporting a problem.',
    schema: { type: 'string' },
  },
  'X-RateLimit-Limit': {
    description: "Requests allowed in the current one-minute window (the key's, or the IP's before authentication).",
    schema: integer,
  },
  'X-RateLimit-Remaining': { description: 'Requests left in the current window.', schema: integer },
  'X-RateLimit-Reset': { description: 'Seconds until the window turns.', schema: integer },
  'Retry-After': { description: 'Seconds to wait before retrying.', schema: integer },
  'Idempotency-Key': {
    description:
      "The request's key: on a send yours, or one generated when you sent none (repeat with it to join the same send); on a batch yours, when you sent one.",
    schema: { type: 'string' },
  },
  'Idempotent-Replayed': {
    description: '`true`: the answer of an earlier request with the same key, replayed; nothing was done again.',
    schema: { type: 'string', enum: ['true'] },
  },
  'Cache-Control': { description: 'The answer carries a secret: no cache may keep it.', schema: { type: 'string', enum: ['no-store'] } },
} satisfies Record<string, HeaderObject>;
type HeaderName = keyof typeof RESPONSE_HEADERS;

/**
 * The headers a response of `def` with `status` carries (api/middleware): the request id always;
 * the rate-limit headers on every /api/v1 answer, and elsewhere on every answer given after the route's counters ran (required where they
 * always did: a success, a 429; optional where the answer may come before them: a 413 refused from
 * its Content-Length, a 500, a 503 of an unreachable database; a 401 when only the key is counted);
 * Retry-After on a 429 of a counter and on a 503; the idempotent routes' own.
 */
function responseHeaders(def: AnyRoute, status: number, codes: ErrorCode[]): Record<string, HeaderObject> {
  const headers: Partial<Record<HeaderName, boolean>> = { 'X-Request-Id': true };
  // Every /api/v1 answer carries them (the IP's bucket when no counter ran: api/middleware/errors.ts).
  const api = isApiPath(def.path);
  const counted = api || def.auth === 'apiKey' || def.ipProfile !== undefined;
  if (counted) {
    const always =
      api || status < 400 || status === 429 || ![401, 413, 500, 503].includes(status) || (status === 401 && def.ipProfile !== undefined);
    for (const name of ['X-RateLimit-Limit', 'X-RateLimit-Remaining', 'X-RateLimit-Reset'] as const) headers[name] = always;
  }
  if (status === 429) headers['Retry-After'] = codes.every((c) => BUCKET_CODES.has(c));
  if (status === 503 && codes.includes('UNAVAILABLE')) headers['Retry-After'] = false;
  if (def.idempotent) {
    // A send always answers with its key and its 200 is a replay; a batch echoes a key it was given, and its first answer is 200 too.
    const send = def.idempotent === 'send';
    if (status < 300) headers['Idempotency-Key'] = send;
    if (status === 409) headers['Idempotency-Key'] = false;
    if (status === 200) headers['Idempotent-Replayed'] = send;
  }
  if (def.noStore && status < 300) headers['Cache-Control'] = true;
  return Object.fromEntries(
    Object.entries(headers).map(([name, required]) => [name, { ...RESPONSE_HEADERS[name as HeaderName], required }]),
  );
}

/**
 * Whether a request may omit its body: the server reads a missing body as `{}` (api/router.ts), so
 * the body is required exactly when `{}` is refused, by the zod schema or by a requirement the
 * schema declares for the document (`required`, `minProperties` in its metadata).
 */
function bodyRequired(schema: z.ZodType): boolean {
  if (!schema.safeParse({}).success) return true;
  const meta = (z.globalRegistry.get(schema) ?? {}) as { required?: string[]; minProperties?: number };
  return (meta.required?.length ?? 0) > 0 || (meta.minProperties ?? 0) > 0;
}

/** The OpenAPI 3.1 document, generated from the same route definitions the router mounts. */
export function buildOpenApi(routes: AnyRoute[], serverUrl: string): object {
  const registry = new OpenAPIRegistry();
  registry.registerComponent('securitySchemes', 'apiKey', {
    type: 'http',
    scheme: 'bearer',
    description: 'Workspace API key: `Authorization: Bearer vg_live_<secret>`.',
  });
  registry.registerComponent('securitySchemes', 'adminToken', {
    type: 'http',
    scheme: 'bearer',
    description: 'Operator token (ADMIN_TOKEN) for /admin/v1.',
  });
  for (const def of routes) {
    const byStatus = new Map<number, ErrorCode[]>();
    for (const code of errorsOf(def)) {
      const status = ERROR_CODES[code];
      byStatus.set(status, [...(byStatus.get(status) ?? []), code]);
    }
    const responses: Record<string, object> = {};
    const successStatuses = [...new Set([def.status ?? 200, ...(def.alsoStatus ?? []), ...(def.idempotent ? [200] : [])])];
    for (const status of successStatuses) {
      responses[String(status)] = {
        description:
          status === 503
            ? 'Not ready'
            : def.idempotent === 'send' && status === 200
              ? 'Replayed: the answer of an earlier send with the same Idempotency-Key'
              : def.batch
                ? "Every item's answer, in request order (also a replay of an earlier answer with the same Idempotency-Key: `Idempotent-Replayed: true`)"
                : 'Success',
        headers: responseHeaders(def, status, []),
        ...(def.response ? { content: { [def.responseContentType ?? 'application/json']: { schema: def.response } } } : {}),
      };
    }
    for (const [status, codes] of [...byStatus].sort((a, b) => a[0] - b[0])) {
      if (responses[String(status)]) throw new Error(`${def.method} ${def.path}: status ${status} is both a success and an error`);
      responses[String(status)] = {
        description: codes.map((c) => `\`${c}\`${ERROR_TEXT[c] ? `: ${ERROR_TEXT[c]}` : ''}`).join(' '),
        headers: responseHeaders(def, status, codes),
        content: {
          'application/json': {
            schema: z.object({
              error: z.string(),
              code: z.enum(codes as [ErrorCode, ...ErrorCode[]]),
              hint: z.string().optional(),
            }),
            example: { error: 'Human readable text', code: codes[0] },
          },
        },
      };
    }
    const scopes = def.scopes ?? [];
    const scopeText = scopes.length ? `Scope: ${[...new Set(scopes.flatMap(satisfying))].map((s) => `\`${s}\``).join(' or ')}.` : '';
    const limits = [
      def.ipProfile ? `Per-IP profile \`${def.ipProfile}\`: ${IP_PROFILES[def.ipProfile]}/min.` : '',
      def.keyProfile ? `Per-key profile \`${def.keyProfile}\`: ${KEY_PROFILES[def.keyProfile]}/min.` : '',
      def.batch
        ? "Each item counts as one request against the key's per-minute limit (a batch of N items counts N; the per-IP profile counts the request once), " +
          'and the `X-RateLimit-*` headers report the key after its items are counted. A batch larger than what the key has left this minute is ' +
          'refused whole before any item runs: 429 `RATE_LIMITED` with `Retry-After`, its items not counted.'
        : '',
    ].join(' ');
    registry.registerPath({
      method: def.method,
      path: def.path,
      operationId: def.operationId,
      summary: def.summary,
      description: [def.description ?? '', scopeText, limits].filter((s) => s.trim()).join('\n\n'),
      tags: [def.tag],
      security: def.auth === 'apiKey' ? [{ apiKey: [] }] : def.auth === 'admin' ? [{ adminToken: [] }] : [],
      request: {
        ...(def.params ? { params: def.params } : {}),
        ...(def.query ? { query: def.query } : {}),
        ...(def.idempotent ? { headers: IdempotencyHeaders } : {}),
        ...(def.body ? { body: { required: bodyRequired(def.body), content: { 'application/json': { schema: def.body } } } } : {}),
        ...(def.documentedBody ? { body: { required: true, content: { 'application/json': { schema: def.documentedBody } } } } : {}),
      },
      responses,
      ...(scopes.length ? { 'x-scopes': scopes } : {}),
    } as never);
  }

  const doc = new OpenApiGeneratorV31(registry.definitions).generateDocument({
    openapi: '3.1.0',
    info: {
      title: 'Sales CRM API',
      version: '1.0.0',
      description:
        'Workspace-scoped CRM: leads, deals in pipelines, tags, lists, notes, tasks, products and conversations. ' +
        'Errors are `{ error, code, hint? }`; check `code`. Every /api/v1 response carries X-RateLimit-Limit, ' +
        'X-RateLimit-Remaining and X-RateLimit-Reset. A method a path does not support is 405 `METHOD_NOT_ALLOWED` with an `Allow` header.',
    },
    servers: [{ url: serverUrl }],
    // Declared tags in their order; a tag missing from TAGS (a test's extra route) is still declared, without a description.
    tags: [
      ...TAGS,
      ...[...new Set(routes.map((r) => r.tag))].filter((name) => !TAGS.some((t) => t.name === name)).map((name) => ({ name })),
    ].filter((t) => routes.some((r) => r.tag === t.name)),
  });
  addSuccessExamples(doc as unknown as OpenApiDoc);
  return doc;
}

// A JSON Schema node of any shape, walked by key; `unknown` would need a cast at every step.
// eslint-disable-next-line @typescript-eslint/no-explicit-any
type JsonSchema = Record<string, any>;
interface OpenApiDoc {
  paths: Record<
    string,
    Record<string, { responses: Record<string, { content?: Record<string, { schema?: JsonSchema; example?: unknown }> }> }>
  >;
  components?: { schemas?: Record<string, JsonSchema> };
}

const EXAMPLE_ID = '3f1c2a9e-8b7d-4c6e-9a10-5d2b7e4f8c01';
const EXAMPLE_TIME = '2026-03-14T15:09:26.535Z';

/** A plausible value for a field, from its name and JSON schema. */
function exampleOf(schema: JsonSchema | undefined, doc: OpenApiDoc, key = '', depth = 0): unknown {
  // A bound for recursive schemas, deep enough for a batch answer (item, variant, lead, its tags).
  if (!schema || depth > 12) return null;
  if (schema.example !== undefined) return schema.example;
  if (schema.$ref) return exampleOf(doc.components?.schemas?.[schema.$ref.split('/').pop()], doc, key, depth + 1);
  if (schema.allOf) return Object.assign({}, ...schema.allOf.map((part: JsonSchema) => exampleOf(part, doc, key, depth + 1)));
  const variants = schema.anyOf ?? schema.oneOf;
  if (variants) return exampleOf(variants.find((v: JsonSchema) => v.type !== 'null') ?? variants[0], doc, key, depth + 1);
  if (schema.enum) return schema.enum[0];
  if (schema.const !== undefined) return schema.const;
  const type = Array.isArray(schema.type) ? schema.type.find((t: string) => t !== 'null') : schema.type;
  switch (type) {
    case 'object':
      return Object.fromEntries(
        Object.entries(schema.properties ?? {}).map(([k, v]) => [k, exampleOf(v as JsonSchema, doc, k, depth + 1)]),
      );
    case 'array':
      return [exampleOf(schema.items, doc, key, depth + 1)];
    case 'boolean':
      return key === 'hasMore' ? false : true;
    case 'number':
    case 'integer':
      return { total: 1, limit: 25, offset: 0, value: 1500, order: 0 }[key] ?? 1;
    case 'string':
      if (key === 'id' || key.endsWith('Id')) return EXAMPLE_ID;
      if (key.endsWith('At') || key === 'timestamp' || key === 'dueDate') return EXAMPLE_TIME;
      if (key === 'phone') return '5511987654321';
      if (key === 'email') return 'maria@example.com';
      if (key === 'color') return '#6b7280';
      if (key === 'price') return '150.00';
      return { name: 'Maria Souza', body: 'Asked for a demo', title: 'Call back', type: 'text' }[key] ?? 'string';
    default:
      return null;
  }
}

/** Every success response gets an example derived from its schema, so examples never drift either. */
function addSuccessExamples(doc: OpenApiDoc): void {
  for (const methods of Object.values(doc.paths)) {
    for (const op of Object.values(methods)) {
      for (const [status, response] of Object.entries(op.responses ?? {})) {
        const media = response.content?.['application/json'];
        if (status.startsWith('2') && media?.schema && media.example === undefined) media.example = exampleOf(media.schema, doc);
      }
    }
  }
}
