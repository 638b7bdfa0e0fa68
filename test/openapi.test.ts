import { ROUTES } from '../api/app';
import { TAGS } from '../api/openapi';
import { NON_BLANK } from '../domain/kernel/input-rules';
import { startApi } from './helpers';

describe('OpenAPI document', () => {
  it('documents every mounted route with its scopes, error codes and the flat error body', async () => {
    const api = await startApi();
    try {
      const res = await api.request('GET', '/api/v1/openapi.json');
      expect(res.status).toBe(200);
      expect(res.body.openapi).toBe('3.1.0');
      for (const def of ROUTES) {
        const op = res.body.paths[def.path]?.[def.method];
        expect({ route: `${def.method} ${def.path}`, documented: Boolean(op) }).toEqual({
          route: `${def.method} ${def.path}`,
          documented: true,
        });
        if (def.scopes) expect(op['x-scopes']).toEqual(def.scopes);
      }
      // Every declared error code is documented under its status, and every success body has an example.
      for (const def of ROUTES) {
        const op = res.body.paths[def.path][def.method];
        const documented = JSON.stringify(op.responses);
        for (const code of def.errors ?? [])
          expect({ route: `${def.method} ${def.path}`, code, documented: documented.includes(`"${code}"`) }).toEqual({
            route: `${def.method} ${def.path}`,
            code,
            documented: true,
          });
        const success = op.responses[String(def.status ?? 200)];
        // A file (a binary answer) has no JSON example.
        if (def.response && !def.responseContentType)
          expect({ route: `${def.method} ${def.path}`, example: success.content['application/json'].example !== undefined }).toEqual({
            route: `${def.method} ${def.path}`,
            example: true,
          });
      }
      const createDeal = res.body.paths['/api/v1/deals'].post;
      expect(Object.keys(createDeal.responses)).toEqual(expect.arrayContaining(['201', '400', '402', '404', '422']));
      expect(createDeal.responses['201'].content['application/json'].example.data).toMatchObject({
        status: 'open',
        closedAt: expect.any(String),
      });
      expect(createDeal.responses['404'].content['application/json'].schema.properties.code.enum).toEqual(
        expect.arrayContaining(['CONTACT_NOT_FOUND', 'PIPELINE_NOT_FOUND', 'STAGE_NOT_FOUND']),
      );
      const tags = new Set(Object.values(res.body.paths).flatMap((ops: any) => Object.values(ops).flatMap((op: any) => op.tags)));
      for (const tag of ['Deals', 'Leads', 'Notes', 'Tags', 'Lists', 'Pipelines', 'Products', 'Tasks', 'Conversations', 'Instances'])
        expect(tags).toContain(tag);
      const pipelines = res.body.paths['/api/v1/pipelines'].get;
      expect(pipelines.description).toContain('`leads:write`');
      expect(Object.keys(pipelines.responses)).toEqual(expect.arrayContaining(['200', '401', '402', '403', '429', '500']));
      const limitParam = res.body.paths['/api/v1/instances'].get.parameters.find((p: any) => p.name === 'limit');
      expect(limitParam.schema).toMatchObject({ minimum: 1, maximum: 100, default: 25 });
      const docs = await api.request('GET', '/docs');
      expect(docs.status).toBe(200);
      expect(docs.headers.get('content-type')).toContain('text/html');
      expect(docs.text).toContain('/api/v1/openapi.json');
    } finally {
      await api.close();
    }
  });

  it('gives tools what they need: operation ids, tags, required bodies, every client error and the headers sent', async () => {
    const api = await startApi();
    try {
      const doc = (await api.request('GET', '/api/v1/openapi.json')).body;
      const ids = new Map<string, string>();
      for (const def of ROUTES) {
        const label = `${def.method} ${def.path}`;
        const op = doc.paths[def.path][def.method];
        // A stable, unique name per operation, the one the route declares.
        expect({ label, operationId: op.operationId }).toEqual({ label, operationId: def.operationId });
        expect({ label, duplicateOf: ids.get(op.operationId) }).toEqual({ label, duplicateOf: undefined });
        ids.set(op.operationId, label);

        const statuses = Object.keys(op.responses);
        const expected = new Set<string>();
        if (def.params) expected.add('404');
        if (def.query || def.body) expected.add('400');
        if (def.auth !== 'none') expected.add('401');
        if (def.auth === 'apiKey' || def.ipProfile) expected.add('429');
        if (['post', 'put', 'patch', 'delete'].includes(def.method)) {
          expected.add('400');
          expected.add('413');
          if (!def.path.startsWith('/api/automations/webhook-in/')) expected.add('415');
        }
        expect({ label, missing: [...expected].filter((status) => !statuses.includes(status)) }).toEqual({ label, missing: [] });

        for (const [status, response] of Object.entries<any>(op.responses)) {
          expect({ label, status, requestId: response.headers?.['X-Request-Id']?.required }).toEqual({ label, status, requestId: true });
          const counted = def.auth === 'apiKey' || def.ipProfile !== undefined;
          if (counted && (status.startsWith('2') || status === '429')) {
            for (const header of ['X-RateLimit-Limit', 'X-RateLimit-Remaining', 'X-RateLimit-Reset']) {
              expect({ label, status, header, required: response.headers?.[header]?.required }).toEqual({
                label,
                status,
                header,
                required: true,
              });
            }
          }
          if (status === '429')
            expect({ label, retryAfter: Boolean(response.headers?.['Retry-After']) }).toEqual({ label, retryAfter: true });
        }

        if (def.body) {
          const body = op.requestBody;
          expect({ label, required: typeof body.required }).toEqual({ label, required: 'boolean' });
          // The server reads a missing body as {}: where it refuses that, the body is required.
          if (!def.body.safeParse({}).success) expect({ label, required: body.required }).toEqual({ label, required: true });
          // A PATCH of optional fields that needs one of them says so.
          const schema = body.content['application/json'].schema;
          if (def.method === 'patch' && !def.body.safeParse({}).success && !schema.required?.length) {
            expect({ label, minProperties: schema.minProperties }).toEqual({ label, minProperties: 1 });
          }
        }
      }

      // Tags are declared at the top, each with a description.
      const declared = new Map<string, string | undefined>(
        doc.tags.map((t: { name: string; description?: string }) => [t.name, t.description]),
      );
      for (const def of ROUTES)
        expect({ tag: def.tag, description: Boolean(declared.get(def.tag)) }).toEqual({ tag: def.tag, description: true });
      expect(TAGS.map((t) => t.name)).toEqual(expect.arrayContaining([...new Set(ROUTES.map((r) => r.tag))]));

      // Rules the server checks in code are stated in the schema.
      const bodyOf = (path: string, method: string) => doc.paths[path][method].requestBody.content['application/json'].schema;
      expect(bodyOf('/api/v1/tags', 'post').properties.name.pattern).toBe(NON_BLANK);
      expect(bodyOf('/api/v1/deals', 'post').properties.pipeline.pattern).toBe(NON_BLANK);
      expect(bodyOf('/api/v1/leads', 'post').required).toEqual(['phone']);
      expect(bodyOf('/api/v1/tags/{id}', 'patch')).toMatchObject({
        minProperties: 1,
        anyOf: [{ required: ['name'] }, { required: ['color'] }],
      });
      expect(bodyOf('/api/v1/deals/{id}', 'patch')).toMatchObject({
        if: { properties: { status: { const: 'lost' } } },
        then: { required: ['lostReason'] },
      });
      expect(bodyOf('/api/v1/messages', 'post').oneOf).toEqual(
        expect.arrayContaining([
          { properties: { type: { enum: ['text'] } }, required: ['text'] },
          { properties: { type: { enum: ['template'] } }, required: ['type', 'templateName', 'templateLanguage'] },
        ]),
      );
      const send = doc.paths['/api/v1/messages'].post;
      expect(send.parameters).toEqual(expect.arrayContaining([expect.objectContaining({ in: 'header', name: 'Idempotency-Key' })]));
      expect(send.responses['200'].headers['Idempotent-Replayed'].required).toBe(true);
      expect(doc.info.description).toContain('405');
    } finally {
      await api.close();
    }
  });
});
