/**
 * Rich template sends (issue 37, part 4): `templateHeader` and `templateButtons` on both send
 * endpoints, automations' send_message and broadcasts (`template.header`, `template.buttons`),
 * checked against the template's components as synchronised from the provider, and sent at the
 * Cloud API's wire format (asserted on what the provider emulator received).
 */
import { ALL_SCOPES } from '../domain/access/scopes';
import { temporalClientFactory } from '../domain/platform/temporal';
import { loadConfig } from '../domain/platform/config';
import { broadcastWorkflowId } from '../domain/broadcasts';
import { createKey, createWorkspace, eventually, expectError, seedContact, startApi, TestApi, uniqueIp, Workspace } from './helpers';
import { cloudInstance, emulator } from './stack-fixtures';
import { uniqueMobile } from './phones';

let api: TestApi;
const temporal = temporalClientFactory(loadConfig());
beforeAll(async () => {
  api = await startApi();
});
afterAll(async () => {
  await api.close();
  await temporal.close();
});

/** The account's templates as the Graph API lists them. */
const TEMPLATES = [
  {
    name: 'promo',
    language: 'pt_BR',
    status: 'APPROVED',
    category: 'MARKETING',
    components: [
      { type: 'HEADER', format: 'IMAGE', example: { header_handle: ['https://example.com/x.jpg'] } },
      { type: 'BODY', text: 'Oferta para {{1}}' },
      {
        type: 'BUTTONS',
        buttons: [
          { type: 'QUICK_REPLY', text: 'Não quero' },
          { type: 'URL', text: 'Ver', url: 'https://shop.example.com/p/{{1}}' },
        ],
      },
    ],
  },
  {
    name: 'order',
    language: 'pt_BR',
    status: 'APPROVED',
    category: 'UTILITY',
    components: [
      { type: 'HEADER', format: 'TEXT', text: 'Pedido {{1}}' },
      { type: 'BODY', text: 'Seu pedido saiu para entrega.' },
      { type: 'BUTTONS', buttons: [{ type: 'URL', text: 'Rastrear', url: 'https://track.example.com/{{1}}' }] },
    ],
  },
  {
    name: 'terms',
    language: 'pt_BR',
    status: 'APPROVED',
    category: 'UTILITY',
    components: [
      { type: 'HEADER', format: 'DOCUMENT' },
      { type: 'BODY', text: 'Nossos termos.' },
    ],
  },
];

interface Setup {
  ws: Workspace;
  instanceId: string;
  phoneNumberId: string;
}

/** A workspace with a Cloud API instance whose business account lists TEMPLATES, synchronised. */
async function setup(): Promise<Setup> {
  const ws = await createWorkspace(api, { scopes: [...ALL_SCOPES] });
  const { instanceId, phoneNumberId } = await cloudInstance(api, ws.id, { label: 'rich', templates: [] });
  const { webhook } = await emulator(`/__emulator/webhook?phoneNumberId=${phoneNumberId}`);
  expect(
    (await api.admin('PATCH', `/admin/v1/workspaces/${ws.id}/instances/${instanceId}`, { config: { wabaId: webhook.wabaId } })).status,
  ).toBe(200);
  await emulator('/__emulator/templates', { wabaId: webhook.wabaId, templates: TEMPLATES });
  const synced = await api.request('POST', `/api/v1/instances/${instanceId}/templates/sync`, { key: ws.key });
  expect(synced.body).toEqual({ data: { created: 3, updated: 0, unchanged: 0 } });
  return { ws, instanceId, phoneNumberId };
}

const request = (s: Setup, method: string, path: string, body?: unknown, headers: Record<string, string> = {}, key = s.ws.key) =>
  api.request(method, path, { key, body, headers: { 'x-forwarded-for': uniqueIp(), ...headers } });

/** A cold send with a key of its own (a key makes 5 cold sends a minute). */
const coldSend = async (s: Setup, body: unknown) =>
  request(s, 'POST', '/api/v1/messages', body, {}, (await createKey(api, s.ws.id, ['conversations:send'])).key);

/** Provider calls through this setup's phone-number id, oldest first. */
const calls = async (s: Setup): Promise<{ to: string; body: any; outcome: string; messageId?: string }[]> =>
  (await emulator(`/__emulator/calls?phoneNumberId=${s.phoneNumberId}`)).calls;

const promo = (phone: string, extra: Record<string, unknown> = {}) => ({
  phone,
  type: 'template',
  templateName: 'promo',
  templateLanguage: 'pt_BR',
  templateVariables: ['Ana'],
  templateHeader: { mediaUrl: 'https://cdn.example.com/promo.jpg' },
  templateButtons: [{ index: 1, urlVariable: 'tenis-42' }],
  ...extra,
});

/** The components the Cloud API must receive for promo(...) as written above. */
const PROMO_COMPONENTS = [
  { type: 'header', parameters: [{ type: 'image', image: { link: 'https://cdn.example.com/promo.jpg' } }] },
  { type: 'body', parameters: [{ type: 'text', text: 'Ana' }] },
  { type: 'button', sub_type: 'url', index: '1', parameters: [{ type: 'text', text: 'tenis-42' }] },
];

describe('sending a template with a header and buttons', () => {
  it('a header-image template reaches the provider with its header, body and URL button components', async () => {
    const s = await setup();
    const res = await request(s, 'POST', '/api/v1/messages', promo(uniqueMobile()));
    expect(res.status).toBe(201);
    const [call] = await calls(s);
    expect(call.outcome).toBe('ok');
    expect(call.body.template).toStrictEqual({ name: 'promo', language: { code: 'pt_BR' }, components: PROMO_COMPONENTS });

    // The conversation endpoint: a text header and the button's variable, no body variables.
    const conversation = await request(s, 'POST', `/api/v1/conversations/${res.body.data.conversationId}/messages`, {
      type: 'template',
      templateName: 'order',
      templateLanguage: 'pt_BR',
      templateHeader: { text: '#1234' },
      templateButtons: [{ index: 0, urlVariable: 'BR1234' }],
    });
    expect(conversation.status).toBe(201);
    const second = (await calls(s))[1];
    expect(second.body.template).toStrictEqual({
      name: 'order',
      language: { code: 'pt_BR' },
      components: [
        { type: 'header', parameters: [{ type: 'text', text: '#1234' }] },
        { type: 'button', sub_type: 'url', index: '0', parameters: [{ type: 'text', text: 'BR1234' }] },
      ],
    });
  });

  it('refuses a header or buttons that do not fit the template with 422 TEMPLATE_INVALID naming the component, before any provider call', async () => {
    const s = await setup();
    const refused = async (body: Record<string, unknown>, hint: RegExp) => {
      const res = await coldSend(s, body);
      expectError(res, 422, 'TEMPLATE_INVALID');
      expect(res.body.hint).toMatch(hint);
    };
    const phone = uniqueMobile();
    await refused(promo(phone, { templateHeader: undefined }), /^header: /);
    await refused(promo(phone, { templateHeader: { text: 'oi' } }), /^header: /);
    await refused(promo(phone, { templateHeader: { mediaUrl: 'https://cdn.example.com/menu.pdf' } }), /^header: /);
    await refused(
      {
        phone,
        type: 'template',
        templateName: 'terms',
        templateLanguage: 'pt_BR',
        templateHeader: { mediaUrl: 'https://x.example/t.jpg' },
      },
      /^header: /,
    );
    await refused(
      { phone, type: 'template', templateName: 'terms', templateLanguage: 'pt_BR', templateHeader: { text: 'Termos' } },
      /^header: /,
    );
    await refused(promo(phone, { templateButtons: undefined }), /^buttons\[1\]: /);
    await refused(promo(phone, { templateButtons: [{ index: 0, urlVariable: 'x' }] }), /^buttons\[0\]: /);
    await refused(
      promo(phone, {
        templateButtons: [
          { index: 1, urlVariable: 'x' },
          { index: 1, urlVariable: 'y' },
        ],
      }),
      /^buttons\[1\]: /,
    );
    await refused(promo(phone, { templateVariables: [] }), /^body: /);
    // The shape itself is the body's: 400 VALIDATION, and a header URL is checked like mediaUrl (400 INVALID_URL).
    expectError(await coldSend(s, promo(phone, { templateHeader: { text: 'a', mediaUrl: 'https://x.example/a.jpg' } })), 400, 'VALIDATION');
    expectError(await coldSend(s, promo(phone, { templateButtons: [{ index: 10, urlVariable: 'x' }] })), 400, 'VALIDATION');
    const credentials = await coldSend(s, promo(phone, { templateHeader: { mediaUrl: 'https://user:pw@cdn.example.com/a.jpg' } }));
    expectError(credentials, 400, 'INVALID_URL');
    expect(credentials.body.error).toMatch(/templateHeader\.mediaUrl/);
    expect(await calls(s)).toEqual([]);
    // Nothing was kept of the refused sends: the contact they would have created is gone.
    expect(await api.db('contacts').where({ workspace_id: s.ws.id }).count('* as n').first()).toEqual({ n: 0 });
  });

  it('a template paused between the first provider call and its retry is refused before the retry calls: one call, 422 TEMPLATE_INVALID', async () => {
    const s = await setup();
    const phone = uniqueMobile();
    // The first call is throttled, slowly: while it waits, Meta pauses the template and we synchronise.
    await emulator('/__emulator/script', { to: phone, behaviour: 'error', code: 130429, httpStatus: 429, delayMs: 2000, times: 1 });
    const sending = request(s, 'POST', '/api/v1/messages', promo(phone));
    await eventually('the first, throttled call', async () => (await calls(s)).length === 1);
    const { webhook } = await emulator(`/__emulator/webhook?phoneNumberId=${s.phoneNumberId}`);
    await emulator('/__emulator/templates', {
      wabaId: webhook.wabaId,
      templates: TEMPLATES.map((t) => (t.name === 'promo' ? { ...t, status: 'PAUSED' } : t)),
    });
    const synced = await api.request('POST', `/api/v1/instances/${s.instanceId}/templates/sync`, { key: s.ws.key });
    expect(synced.status).toBe(200);
    // The retry (throttling is retried) re-reads the template: no longer approved, no second call.
    const res = await sending;
    expectError(res, 422, 'TEMPLATE_INVALID');
    expect(res.body.error).toMatch(/no longer approved/);
    expect((await calls(s)).map((c) => c.outcome)).toEqual(['error']);
  });

  it('binds an Idempotency-Key to the header and buttons: another header is 422 IDEMPOTENCY_KEY_REUSED, the same body replays', async () => {
    const s = await setup();
    const phone = uniqueMobile();
    const key = { 'Idempotency-Key': `rich-${phone}` };
    expect((await request(s, 'POST', '/api/v1/messages', promo(phone), key)).status).toBe(201);
    const other = promo(phone, { templateHeader: { mediaUrl: 'https://cdn.example.com/other.jpg' } });
    expectError(await request(s, 'POST', '/api/v1/messages', other, key), 422, 'IDEMPOTENCY_KEY_REUSED');
    const button = promo(phone, { templateButtons: [{ index: 1, urlVariable: 'other' }] });
    expectError(await request(s, 'POST', '/api/v1/messages', button, key), 422, 'IDEMPOTENCY_KEY_REUSED');
    const replay = await request(s, 'POST', '/api/v1/messages', promo(phone), key);
    expect(replay.status).toBe(200);
    expect(await calls(s)).toHaveLength(1);
  });
});

describe("automations' send_message", () => {
  it('sends a header-image template with a rendered button variable; a literal header URL is checked when saved', async () => {
    const s = await setup();
    const action = {
      type: 'send_message',
      messageType: 'template',
      templateName: 'promo',
      templateLanguage: 'pt_BR',
      templateVariables: ['{{contact.name}}'],
      templateHeader: { mediaUrl: 'https://cdn.example.com/promo.jpg' },
      templateButtons: [{ index: 1, urlVariable: 'ref-{{webhook.ref}}' }],
    };
    const trigger = { type: 'webhook_received', mapping: { phone: 'phone', name: 'name' } };
    const unsafe = await request(s, 'POST', '/api/v1/automations', {
      name: 'promo',
      trigger,
      actions: [{ ...action, templateHeader: { mediaUrl: 'https://user:pw@cdn.example.com/a.jpg' } }],
    });
    expectError(unsafe, 400, 'INVALID_URL');
    expect(unsafe.body.error).toMatch(/actions\.0\.templateHeader\.mediaUrl/);

    const created = await request(s, 'POST', '/api/v1/automations', { name: 'promo', trigger, actions: [action] });
    expect(created.status).toBe(201);
    const phone = uniqueMobile();
    const hook = await api.request('POST', new URL(created.body.data.webhookUrl).pathname, {
      rawBody: JSON.stringify({ phone, name: 'Bruna', ref: 'x9' }),
      headers: { 'content-type': 'application/json' },
    });
    expect(hook.status).toBe(202);
    const run = await eventually('the run', async () => {
      const runs = (await request(s, 'GET', `/api/v1/automations/${created.body.data.id}/runs`)).body.data;
      return runs[0]?.status !== 'running' && runs[0];
    });
    expect(run).toMatchObject({ status: 'completed', error: null });
    const [call] = await calls(s);
    expect(call.body.template.components).toStrictEqual([
      { type: 'header', parameters: [{ type: 'image', image: { link: 'https://cdn.example.com/promo.jpg' } }] },
      { type: 'body', parameters: [{ type: 'text', text: 'Bruna' }] },
      { type: 'button', sub_type: 'url', index: '1', parameters: [{ type: 'text', text: 'ref-x9' }] },
    ]);
  });
});

describe('broadcasts', () => {
  it('checks template.header and template.buttons at creation, and sends each recipient its personalised header and button', async () => {
    const s = await setup();
    const t = await request(s, 'POST', '/api/v1/tags', { name: 'vip' });
    const people = [
      await seedContact(api, s.ws.id, { phone: uniqueMobile(), name: 'Ana', email: 'ana@example.com', tags: ['vip'] }),
      await seedContact(api, s.ws.id, { phone: uniqueMobile(), name: 'Caio', email: 'caio@example.com', tags: ['vip'] }),
      // No email: the button variable has nothing to fill in, so this one is skipped.
      await seedContact(api, s.ws.id, { phone: uniqueMobile(), name: 'Duda', tags: ['vip'] }),
    ];
    const template = {
      name: 'order',
      language: 'pt_BR',
      header: { text: 'para {{contact.name}}' },
      buttons: [{ index: 0, urlVariable: '{{contact.email}}' }],
    };
    const create = (tpl: Record<string, unknown>) =>
      request(s, 'POST', '/api/v1/broadcasts', { name: 'Rich', audience: { tagIds: [t.body.data.id] }, template: tpl, ratePerSecond: 80 });

    const noHeader = await create({ ...template, header: undefined });
    expectError(noHeader, 422, 'TEMPLATE_INVALID');
    expect(noHeader.body.hint).toMatch(/^header: /);
    const noButton = await create({ ...template, buttons: [] });
    expectError(noButton, 422, 'TEMPLATE_INVALID');
    expect(noButton.body.hint).toMatch(/^buttons\[0\]: /);
    expectError(await create({ ...template, header: { text: '{{contact.shoeSize}}' } }), 422, 'TEMPLATE_INVALID');
    expectError(
      await create({ ...template, name: 'terms', header: { mediaUrl: 'https://user:pw@cdn.example.com/t.pdf' }, buttons: undefined }),
      400,
      'INVALID_URL',
    );

    const res = await create(template);
    expect(res.status).toBe(201);
    expect(res.body.data.template).toEqual({ ...template, variables: [] });
    await (await temporal.get()).workflow.getHandle(broadcastWorkflowId(s.ws.id, res.body.data.id)).result();
    const done = (await request(s, 'GET', `/api/v1/broadcasts/${res.body.data.id}`)).body.data;
    expect(done.counts).toMatchObject({ total: 3, sent: 2, skipped: 1, failed: 0 });
    const recipients = (await request(s, 'GET', `/api/v1/broadcasts/${res.body.data.id}/recipients`)).body.data;
    expect(recipients.find((r: any) => r.contactId === people[2].id)).toMatchObject({ status: 'skipped', code: 'VARIABLE_EMPTY' });

    const sent = await calls(s);
    expect(sent).toHaveLength(2);
    for (const person of people.slice(0, 2)) {
      const call = sent.find((c) => person.phone.endsWith(c.to.slice(-8)))!;
      expect(call.body.template).toStrictEqual({
        name: 'order',
        language: { code: 'pt_BR' },
        components: [
          { type: 'header', parameters: [{ type: 'text', text: `para ${person.name}` }] },
          { type: 'button', sub_type: 'url', index: '0', parameters: [{ type: 'text', text: person.email }] },
        ],
      });
    }
  });
});

describe('the emulator checks template components at the Graph API wire format', () => {
  const EMULATOR = process.env.EMULATOR_URL!;
  const post = async (phoneNumberId: string, components: unknown[]) => {
    const res = await fetch(`${EMULATOR}/v21.0/${phoneNumberId}/messages`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: 'Bearer t' },
      body: JSON.stringify({
        messaging_product: 'whatsapp',
        to: uniqueMobile(),
        type: 'template',
        template: { name: 'promo', language: { code: 'pt_BR' }, components },
      }),
    });
    return { status: res.status, body: (await res.json()) as any };
  };

  it('accepts the components a send builds, and refuses header and button parameters off the format (code 100)', async () => {
    const id = `PN-emu-${Date.now()}`;
    expect((await post(id, PROMO_COMPONENTS)).status).toBe(200);
    const refusals: [unknown, RegExp][] = [
      [[{ type: 'HEADER', parameters: [] }], /\['type'\] must be one of/],
      [[{ type: 'header', parameters: [{ type: 'image', link: 'https://x.example/a.jpg' }] }], /\['image'\] must have a link or an id/],
      [[{ type: 'header', parameters: [{ type: 'image', image: { link: 'ftp://x' } }] }], /\['link'\] must be a valid URL/],
      [
        [{ type: 'header', parameters: [{ type: 'audio', audio: { link: 'https://x.example/a.mp3' } }] }],
        /must be one of \{text, image, video, document, location\}/,
      ],
      [[{ type: 'button', sub_type: 'url', index: 0, parameters: [{ type: 'text', text: 'x' }] }], /\['index'\] must be a string/],
      [[{ type: 'button', index: '0', parameters: [{ type: 'text', text: 'x' }] }], /\['sub_type'\] must be one of/],
      [[{ type: 'button', sub_type: 'url', index: '0', parameters: [] }], /exactly one parameter/],
      [[{ type: 'button', sub_type: 'url', index: '0', parameters: [{ type: 'payload', payload: 'x' }] }], /must be text for a url button/],
      [
        [{ type: 'body', parameters: [{ type: 'image', image: { link: 'https://x.example/a.jpg' } }] }],
        /must be one of \{text, currency, date_time\}/,
      ],
    ];
    for (const [components, message] of refusals) {
      const res = await post(id, components as unknown[]);
      expect({ status: res.status, code: res.body.error?.code }).toEqual({ status: 400, code: 100 });
      expect(res.body.error.error_data.details).toMatch(message);
    }
  });
});
