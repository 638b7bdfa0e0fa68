import { ROUTES } from '../api/app';
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
        expect({ route: `${def.method} ${def.path}`, documented: Boolean(op) }).toEqual({ route: `${def.method} ${def.path}`, documented: true });
        if (def.scopes) expect(op['x-scopes']).toEqual(def.scopes);
      }
      // Every declared error code is documented under its status, and every success body has an example.
      for (const def of ROUTES) {
        const op = res.body.paths[def.path][def.method];
        const documented = JSON.stringify(op.responses);
        for (const code of def.errors ?? []) expect({ route: `${def.method} ${def.path}`, code, documented: documented.includes(`"${code}"`) }).toEqual({ route: `${def.method} ${def.path}`, code, documented: true });
        const success = op.responses[String(def.status ?? 200)];
        if (def.response) expect({ route: `${def.method} ${def.path}`, example: success.content['application/json'].example !== undefined }).toEqual({ route: `${def.method} ${def.path}`, example: true });
      }
      const createDeal = res.body.paths['/api/v1/deals'].post;
      expect(Object.keys(createDeal.responses)).toEqual(expect.arrayContaining(['201', '400', '402', '404', '422']));
      expect(createDeal.responses['201'].content['application/json'].example.data).toMatchObject({ status: 'open', closedAt: expect.any(String) });
      expect(createDeal.responses['404'].content['application/json'].schema.properties.code.enum).toEqual(
        expect.arrayContaining(['CONTACT_NOT_FOUND', 'PIPELINE_NOT_FOUND', 'STAGE_NOT_FOUND']),
      );
      const tags = new Set(Object.values(res.body.paths).flatMap((ops: any) => Object.values(ops).flatMap((op: any) => op.tags)));
      for (const tag of ['Deals', 'Leads', 'Notes', 'Tags', 'Lists', 'Pipelines', 'Products', 'Tasks', 'Conversations', 'Instances']) expect(tags).toContain(tag);
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
});
