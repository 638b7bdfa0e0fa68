/**
 * Temporal's history holds no tenant data in plain text: every payload is encrypted with
 * ENCRYPTION_KEYS (domain/payload-codec.ts), and operators read it through the admin codec endpoint.
 */
import { randomUUID } from 'node:crypto';
import { Client, Connection } from '@temporalio/client';
import { temporal } from '@temporalio/proto';
import { ALL_SCOPES } from '../../domain/scopes';
import { createWorkspace, eventually, expectError, startApi, TestApi } from '../helpers';

let api: TestApi;
beforeAll(async () => {
  api = await startApi();
});
afterAll(() => api.close());

it("stores an inbound webhook's body encrypted in the run's history, readable only through the admin codec endpoint", async () => {
  const ws = await createWorkspace(api, { scopes: [...ALL_SCOPES] });
  const automation = await api.request('POST', '/api/v1/automations', {
    key: ws.key,
    body: { name: 'private', trigger: { type: 'webhook_received' }, actions: [{ type: 'wait', seconds: 1 }] },
  });
  expect(automation.status).toBe(201);
  const marker = `cpf-${randomUUID()}`;
  expect((await api.request('POST', new URL(automation.body.data.webhookUrl).pathname, { body: { customer: { document: marker } } })).status).toBe(202);

  // A client without the codec sees what Temporal stores.
  const connection = await Connection.connect({ address: api.config.temporalAddress });
  try {
    const raw = new Client({ connection, namespace: api.config.temporalNamespace });
    const [run] = await eventually('the run workflow', async () => {
      const found = [];
      for await (const w of raw.workflow.list({ query: `WorkspaceId = "${ws.id}"` })) found.push(w);
      return found.length > 0 && found;
    });
    const history = await raw.workflow.getHandle(run.workflowId).fetchHistory();
    const stored = Buffer.from(temporal.api.history.v1.History.encode(history).finish());
    expect(stored.includes(Buffer.from(marker))).toBe(false);

    const input = history.events![0].workflowExecutionStartedEventAttributes!.input!.payloads!;
    const body = {
      payloads: input.map((p) => ({
        metadata: Object.fromEntries(Object.entries(p.metadata ?? {}).map(([k, v]) => [k, Buffer.from(v).toString('base64')])),
        data: Buffer.from(p.data!).toString('base64'),
      })),
    };
    expect(Buffer.from(body.payloads[0].metadata.encoding, 'base64').toString()).toBe('binary/encrypted');
    expectError(await api.request('POST', '/admin/v1/temporal-codec/decode', { body }), 401, 'UNAUTHORIZED');
    const decoded = await api.admin('POST', '/admin/v1/temporal-codec/decode', body);
    expect(decoded.status).toBe(200);
    expect(decoded.headers.get('cache-control')).toBe('no-store');
    const plain = Buffer.from(decoded.body.payloads[0].data, 'base64').toString('utf8');
    expect(JSON.parse(plain)).toMatchObject({ workspaceId: ws.id, webhookBody: { customer: { document: marker } } });
    // The UI calls it from its own origin: the preflight is answered.
    const preflight = await fetch(`${api.url}/admin/v1/temporal-codec/decode`, { method: 'OPTIONS', headers: { origin: 'http://localhost:8233', 'access-control-request-method': 'POST' } });
    expect(preflight.status).toBe(204);
    expect(preflight.headers.get('access-control-allow-origin')).toBe('http://localhost:8233');
  } finally {
    await connection.close();
  }
});
