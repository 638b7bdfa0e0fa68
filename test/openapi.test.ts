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
