import { OpenAPIRegistry, OpenApiGeneratorV31, extendZodWithOpenApi } from '@asteasolutions/zod-to-openapi';
import { z } from 'zod';
import { ERROR_CODES, ErrorCode } from '../domain/errors';
import type { AnyRoute } from './route';
import { satisfying } from '../domain/scopes';
import { IP_PROFILES, KEY_PROFILES } from '../domain/rate-limit';

extendZodWithOpenApi(z);

const ERROR_TEXT: Partial<Record<ErrorCode, string>> = {
  UNAUTHORIZED: 'API key invalid, missing, expired or revoked.',
  INSUFFICIENT_SCOPE: 'Valid key without the required scope.',
  API_ACCESS_DISABLED: 'API access is not available on the plan.',
  SUBSCRIPTION_INACTIVE: 'The subscription is inactive.',
  RATE_LIMITED: "The key's per-minute limit is reached (see Retry-After).",
  IP_RATE_LIMITED: 'The per-IP limit of this operation profile is reached (see Retry-After).',
  VALIDATION: 'Body or parameters invalid; the hint names the field.',
  NOT_FOUND: 'Record not found in the workspace.',
  INTERNAL: 'Unexpected failure; the hint carries the request id.',
};

function errorsOf(def: AnyRoute): ErrorCode[] {
  const codes = new Set<ErrorCode>(def.errors ?? []);
  if (def.body || def.query) codes.add('VALIDATION');
  if (def.params) codes.add('NOT_FOUND');
  if (def.auth !== 'none') codes.add('UNAUTHORIZED');
  if (def.auth === 'apiKey') {
    for (const c of ['INSUFFICIENT_SCOPE', 'API_ACCESS_DISABLED', 'SUBSCRIPTION_INACTIVE', 'RATE_LIMITED'] as const) codes.add(c);
  }
  if (def.keyProfile === 'send') codes.add('SEND_RATE_LIMITED');
  if (def.keyProfile === 'coldSend') codes.add('COLD_SEND_RATE_LIMITED');
  if (def.ipProfile) codes.add('IP_RATE_LIMITED');
  codes.add('INTERNAL');
  return [...codes];
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
    const responses: Record<string, object> = {
      [String(def.status ?? 200)]: {
        description: 'Success',
        ...(def.noStore ? { headers: { 'Cache-Control': { description: 'The answer carries a secret: no cache may keep it.', schema: { type: 'string', enum: ['no-store'] } } } } : {}),
        ...(def.response ? { content: { 'application/json': { schema: def.response } } } : {}),
      },
    };
    for (const [status, codes] of [...byStatus].sort((a, b) => a[0] - b[0])) {
      responses[String(status)] = {
        description: codes.map((c) => `\`${c}\`${ERROR_TEXT[c] ? `: ${ERROR_TEXT[c]}` : ''}`).join(' '),
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
    const scopeText = scopes.length
      ? `Scope: ${[...new Set(scopes.flatMap(satisfying))].map((s) => `\`${s}\``).join(' or ')}.`
      : '';
    const limits = [
      def.ipProfile ? `Per-IP profile \`${def.ipProfile}\`: ${IP_PROFILES[def.ipProfile]}/min.` : '',
      def.keyProfile ? `Per-key profile \`${def.keyProfile}\`: ${KEY_PROFILES[def.keyProfile]}/min.` : '',
    ].join(' ');
    registry.registerPath({
      method: def.method,
      path: def.path,
      summary: def.summary,
      description: [def.description ?? '', scopeText, limits].filter((s) => s.trim()).join('\n\n'),
      tags: [def.tag],
      security: def.auth === 'apiKey' ? [{ apiKey: [] }] : def.auth === 'admin' ? [{ adminToken: [] }] : [],
      request: {
        ...(def.params ? { params: def.params } : {}),
        ...(def.query ? { query: def.query } : {}),
        ...(def.body ? { body: { content: { 'application/json': { schema: def.body } } } } : {}),
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
        'X-RateLimit-Remaining and X-RateLimit-Reset.',
    },
    servers: [{ url: serverUrl }],
  });
  addSuccessExamples(doc as unknown as OpenApiDoc);
  return doc;
}

type JsonSchema = Record<string, any>;
interface OpenApiDoc {
  paths: Record<string, Record<string, { responses: Record<string, { content?: Record<string, { schema?: JsonSchema; example?: unknown }> }> }>>;
  components?: { schemas?: Record<string, JsonSchema> };
}

const EXAMPLE_ID = '3f1c2a9e-8b7d-4c6e-9a10-5d2b7e4f8c01';
const EXAMPLE_TIME = '2026-03-14T15:09:26.535Z';

/** A plausible value for a field, from its name and JSON schema. */
function exampleOf(schema: JsonSchema | undefined, doc: OpenApiDoc, key = '', depth = 0): unknown {
  if (!schema || depth > 8) return null;
  if (schema.example !== undefined) return schema.example;
  if (schema.$ref) return exampleOf(doc.components?.schemas?.[schema.$ref.split('/').pop()], doc, key, depth + 1);
  const variants = schema.anyOf ?? schema.oneOf;
  if (variants) return exampleOf(variants.find((v: JsonSchema) => v.type !== 'null') ?? variants[0], doc, key, depth + 1);
  if (schema.enum) return schema.enum[0];
  if (schema.const !== undefined) return schema.const;
  const type = Array.isArray(schema.type) ? schema.type.find((t: string) => t !== 'null') : schema.type;
  switch (type) {
    case 'object':
      return Object.fromEntries(Object.entries(schema.properties ?? {}).map(([k, v]) => [k, exampleOf(v as JsonSchema, doc, k, depth + 1)]));
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
