import { parseCloudWebhook, parseWebGatewayWebhook, type ParsedWebhook, type WebhookInstance } from '../../domain/messaging/inbound';

/**
 * The provider webhook parsers of domain/messaging/inbound.ts, pure. Payloads follow the wire
 * formats the emulator (emulator/server.ts) posts: the Cloud API's `whatsapp_business_account`
 * notification and the web gateway's Evolution-API-style `messages.upsert`. Each case asserts the
 * whole parsed structure (toStrictEqual), so a field added, dropped or left undefined fails.
 */

const NOW = new Date('2024-03-10T12:00:00.000Z');
const NOW_S = NOW.getTime() / 1000;
const T = NOW_S - 3600; // an hour before now, in seconds
const AT_T = new Date(T * 1000);

const PHONE_ID = '109876543210';
const OWN_DISPLAY = '+55 11 3000-0000';
const instance = (config: Record<string, unknown> = { phoneNumberId: PHONE_ID }) => ({ config: config as WebhookInstance['config'] });

/** The sender's phone as parsePhone canonicalises it. */
const MOBILE = { digits: '5511987654321', key: '5511987654321', e164: '5511987654321', mobile: true };
/** An old-form mobile (8 digits after the area code): the key adds the ninth digit. */
const OLD_MOBILE = { digits: '551187654321', key: '5511987654321', e164: '5511987654321', mobile: true };
const LANDLINE = { digits: '551133334444', key: '551133334444', e164: '551133334444', mobile: false };

/** The expected parse: nothing unless given (the keys checked against ParsedWebhook, the values loose). */
const parsed = (p: Partial<Record<keyof ParsedWebhook, unknown>>) => ({ messages: [], statuses: [], skipped: [], items: 0, ...p });

// ---------------------------------------------------------------------------------------------
// Cloud API

/** One notification, one entry, one `messages` change with this value (metadata added). */
function cloud(value: Record<string, unknown>, metadata: Record<string, unknown> = {}): unknown {
  return {
    object: 'whatsapp_business_account',
    entry: [
      {
        id: 'WABA_ID',
        changes: [
          {
            value: {
              messaging_product: 'whatsapp',
              metadata: { display_phone_number: OWN_DISPLAY, phone_number_id: PHONE_ID, ...metadata },
              ...value,
            },
            field: 'messages',
          },
        ],
      },
    ],
  };
}
const contact = (waId: string, name: string) => ({ profile: { name }, wa_id: waId });
const msg = (extra: Record<string, unknown>) => ({ from: '5511987654321', id: 'wamid.A1', timestamp: String(T), ...extra });
const textMsg = (extra: Record<string, unknown> = {}) => msg({ type: 'text', text: { body: 'Olá, quero um orçamento' }, ...extra });

describe('parseCloudWebhook', () => {
  it('a text message: the sender canonicalised, the name from the contacts profile, seconds as a Date', () => {
    const payload = cloud({ contacts: [contact('5511987654321', 'Maria Souza')], messages: [textMsg()] });
    expect(parseCloudWebhook(payload, instance(), NOW)).toStrictEqual(
      parsed({
        messages: [
          {
            providerMessageId: 'wamid.A1',
            phone: MOBILE,
            waId: '5511987654321',
            profileName: 'Maria Souza',
            type: 'text',
            body: 'Olá, quero um orçamento',
            mediaRef: null,
            timestamp: AT_T,
          },
        ],
        items: 2,
      }),
    );
  });

  it.each([
    [
      'image',
      { image: { id: 'media-1', mime_type: 'image/jpeg', sha256: 'x', caption: 'a photo' } },
      'a photo',
      'media-1',
      { mediaMimeType: 'image/jpeg' },
    ],
    ['video', { video: { id: 'media-2', mime_type: 'video/mp4', caption: 'a clip' } }, 'a clip', 'media-2', { mediaMimeType: 'video/mp4' }],
    [
      'audio',
      { audio: { id: 'media-3', mime_type: 'audio/ogg; codecs=opus', voice: true } },
      '',
      'media-3',
      { mediaMimeType: 'audio/ogg; codecs=opus' },
    ],
    [
      'document',
      { document: { id: 'media-4', filename: 'a.pdf', caption: 'the contract' } },
      'the contract',
      'media-4',
      { mediaFileName: 'a.pdf' },
    ],
    ['sticker', { sticker: { id: 'media-5', mime_type: 'image/webp', animated: false } }, '', 'media-5', { mediaMimeType: 'image/webp' }],
    ['image', { image: {} }, '', null, {}],
    ['document', {}, '', null, {}],
  ])(
    'media: %s %j is body %p, mediaRef %p (the provider id, never a URL), with its MIME type and file name %j',
    (type, extra, body, mediaRef, file) => {
      const payload = cloud({ messages: [msg({ type, ...extra })] });
      expect(parseCloudWebhook(payload, instance(), NOW)).toStrictEqual(
        parsed({
          messages: [
            {
              providerMessageId: 'wamid.A1',
              phone: MOBILE,
              waId: '5511987654321',
              profileName: undefined,
              type,
              body,
              mediaRef,
              ...file,
              timestamp: AT_T,
            },
          ],
          items: 1,
        }),
      );
    },
  );

  it.each([
    ['a quick-reply button tap', { type: 'button', button: { payload: 'YES', text: 'Sim, quero' } }, 'Sim, quero'],
    [
      'an interactive button reply',
      { type: 'interactive', interactive: { type: 'button_reply', button_reply: { id: 'b1', title: 'Agendar' } } },
      'Agendar',
    ],
    [
      'an interactive list reply',
      { type: 'interactive', interactive: { type: 'list_reply', list_reply: { id: 'l1', title: 'Plano Pro', description: 'x' } } },
      'Plano Pro',
    ],
    ['a text without body', { type: 'text', text: {} }, ''],
  ])('%s is the contact’s text', (_label, extra, body) => {
    const payload = cloud({ messages: [msg(extra)] });
    expect(parseCloudWebhook(payload, instance(), NOW).messages).toStrictEqual([
      {
        providerMessageId: 'wamid.A1',
        phone: MOBILE,
        waId: '5511987654321',
        profileName: undefined,
        type: 'text',
        body,
        mediaRef: null,
        timestamp: AT_T,
      },
    ]);
  });

  it.each([
    ['reaction', { type: 'reaction', reaction: { message_id: 'wamid.OUT', emoji: '👍' } }, 'message type reaction is not taken in'],
    ['location', { type: 'location', location: { latitude: -23.5, longitude: -46.6 } }, 'message type location is not taken in'],
    ['contacts', { type: 'contacts', contacts: [] }, 'message type contacts is not taken in'],
    ['unsupported', { type: 'unsupported', errors: [{ code: 131051 }] }, 'message type unsupported is not taken in'],
    [
      'interactive without a reply',
      { type: 'interactive', interactive: { type: 'nfm_reply' } },
      'message type interactive is not taken in',
    ],
    ['no type', {}, 'message type missing is not taken in'],
  ])('a %s message is skipped with its id', (_label, extra, reason) => {
    expect(parseCloudWebhook(cloud({ messages: [msg(extra)] }), instance(), NOW)).toStrictEqual(
      parsed({ skipped: [{ reason, id: 'wamid.A1' }], items: 1 }),
    );
  });

  describe('statuses', () => {
    const status = (extra: Record<string, unknown>) => ({
      id: 'wamid.OUT1',
      timestamp: String(T),
      recipient_id: '5511987654321',
      ...extra,
    });

    /** The status's own time: an hour before now (T). */
    const AT = new Date(T * 1000);

    it.each(['sent', 'delivered', 'read'])('%s, with the recipient wa_id and the provider time', (state) => {
      expect(parseCloudWebhook(cloud({ statuses: [status({ status: state })] }), instance(), NOW)).toStrictEqual(
        parsed({ statuses: [{ providerMessageId: 'wamid.OUT1', status: state, recipientId: '5511987654321', timestamp: AT }], items: 1 }),
      );
    });

    it('failed, with the provider error code (the first of errors[])', () => {
      const payload = cloud({
        statuses: [
          status({
            status: 'failed',
            errors: [
              { code: 131026, title: 'Message undeliverable', error_data: { details: 'x' } },
              { code: 1, title: 'other' },
            ],
          }),
        ],
      });
      expect(parseCloudWebhook(payload, instance(), NOW)).toStrictEqual(
        parsed({
          statuses: [
            { providerMessageId: 'wamid.OUT1', status: 'failed', recipientId: '5511987654321', timestamp: AT, errorCode: '131026' },
          ],
          items: 1,
        }),
      );
    });

    it.each([
      ['no errors', {}, undefined],
      ['a string code', { errors: [{ code: 'E1' }] }, 'E1'],
      ['a code that is an object (dropped)', { errors: [{ code: { x: 1 } }] }, undefined],
      ['a code of 40 characters (cut to 32)', { errors: [{ code: 'c'.repeat(40) }] }, 'c'.repeat(32)],
      ['errors on a status that is not failed (ignored)', { status: 'read', errors: [{ code: 1 }] }, undefined],
    ])('error code: %s', (_label, extra, errorCode) => {
      const [parsedStatus] = parseCloudWebhook(cloud({ statuses: [status({ status: 'failed', ...extra })] }), instance(), NOW).statuses;
      expect(parsedStatus.errorCode).toBe(errorCode);
    });

    it.each([
      ['in the future (now instead: never later than it reached us)', String(NOW_S + 60), NOW],
      ['missing (now)', undefined, NOW],
      ['not a number (now)', 'soon', NOW],
    ])('a status time %s', (_label, timestamp, expected) => {
      const [parsedStatus] = parseCloudWebhook(cloud({ statuses: [status({ status: 'read', timestamp })] }), instance(), NOW).statuses;
      expect(parsedStatus.timestamp).toEqual(expected);
    });

    it.each([
      ['the reference our send put on it', { biz_opaque_callback_data: 'att_ref_123' }, { reference: 'att_ref_123' }],
      ['a reference of 1000 characters', { biz_opaque_callback_data: 'r'.repeat(1000) }, { reference: 'r'.repeat(1000) }],
      ['a reference of 1001 characters (dropped)', { biz_opaque_callback_data: 'r'.repeat(1001) }, {}],
      ['an empty reference (dropped)', { biz_opaque_callback_data: '' }, {}],
      ['a reference that is not a string (dropped)', { biz_opaque_callback_data: 123 }, {}],
    ])('%s', (_label, extra, expected) => {
      const payload = cloud({ statuses: [status({ status: 'sent', ...extra })] });
      expect(parseCloudWebhook(payload, instance(), NOW).statuses).toStrictEqual([
        { providerMessageId: 'wamid.OUT1', status: 'sent', ...expected, recipientId: '5511987654321', timestamp: AT },
      ]);
    });

    it.each([
      ['7 digits (dropped)', '1234567', {}],
      ['8 digits', '12345678', { recipientId: '12345678' }],
      ['20 digits', '1'.repeat(20), { recipientId: '1'.repeat(20) }],
      ['21 digits (dropped)', '1'.repeat(21), {}],
      ['not only digits (dropped)', '+5511987654321', {}],
      ['a number (kept as text)', 5511987654321, { recipientId: '5511987654321' }],
      ['absent', undefined, {}],
    ])('recipient_id of %s', (_label, recipientId, expected) => {
      const payload = cloud({ statuses: [{ id: 'wamid.OUT1', status: 'read', timestamp: String(T), recipient_id: recipientId }] });
      expect(parseCloudWebhook(payload, instance(), NOW).statuses).toStrictEqual([
        { providerMessageId: 'wamid.OUT1', status: 'read', ...expected, timestamp: AT },
      ]);
    });

    it.each([
      ['deleted', { id: 'wamid.OUT1', status: 'deleted' }, { reason: 'status deleted is not handled', id: 'wamid.OUT1' }],
      ['warning', { id: 'wamid.OUT1', status: 'warning' }, { reason: 'status warning is not handled', id: 'wamid.OUT1' }],
      ['SENT (case matters)', { id: 'wamid.OUT1', status: 'SENT' }, { reason: 'status SENT is not handled', id: 'wamid.OUT1' }],
      ['no status', { id: 'wamid.OUT1' }, { reason: 'status missing is not handled', id: 'wamid.OUT1' }],
      ['no id', { status: 'read' }, { reason: 'status read is not handled', id: undefined }],
      ['not an object', 'read', { reason: 'status missing is not handled', id: undefined }],
    ])('%s is skipped', (_label, raw, skipped) => {
      expect(parseCloudWebhook(cloud({ statuses: [raw] }), instance(), NOW)).toStrictEqual(parsed({ skipped: [skipped], items: 1 }));
    });
  });

  describe('what is not an inbound message', () => {
    it.each([
      ['a group_id', { group_id: '120363000000000000@g.us' }],
      ['a group marker', { group: { id: 'g1' } }],
      ['is_group', { is_group: true }],
      ['a group in the context', { context: { group_id: 'g1', id: 'wamid.X' } }],
      ['a @g.us sender', { from: '120363000000000000@g.us' }],
      ['a @g.us chat_id', { chat_id: '120363000000000000@g.us' }],
      ['a @g.us recipient', { to: '120363000000000000@g.us' }],
    ])('group traffic (%s) is skipped', (_label, extra) => {
      expect(parseCloudWebhook(cloud({ messages: [textMsg(extra)] }), instance(), NOW)).toStrictEqual(
        parsed({ skipped: [{ reason: 'group message', id: 'wamid.A1' }], items: 1 }),
      );
    });

    it.each([
      ['the display number exactly', '5511930000000', '5511930000000'],
      ['the display number, formatted', '+55 11 3000-0000', '551130000000'],
      ['the display number in its old form (same key)', '+55 11 8765-4321', '5511987654321'],
      ['the sender in its old form (same key)', '+55 11 98765-4321', '551187654321'],
    ])('a message from the business itself (%s) is an echo', (_label, display, from) => {
      const payload = cloud({ messages: [textMsg({ from })] }, { display_phone_number: display });
      expect(parseCloudWebhook(payload, instance(), NOW)).toStrictEqual(
        parsed({ skipped: [{ reason: 'echo of our own number', id: 'wamid.A1' }], items: 1 }),
      );
    });

    it.each([
      ['a US number', '14155550123', 'sender is not a Brazilian phone number (must start with the country code 55)'],
      ['an unknown area code', '5520987654321', 'sender is not a Brazilian phone number (missing or unknown area code)'],
      ['9 digits not starting with 9', '5511887654321', 'sender is not a Brazilian phone number (a 9-digit number must start with 9)'],
      ['too short', '55119876543', 'sender is not a Brazilian phone number (expected 8 or 9 digits after the area code)'],
    ])('a sender that is %s is skipped', (_label, from, reason) => {
      expect(parseCloudWebhook(cloud({ messages: [textMsg({ from })] }), instance(), NOW)).toStrictEqual(
        parsed({ skipped: [{ reason, id: 'wamid.A1' }], items: 1 }),
      );
    });

    it.each([
      ['no sender', { from: undefined }, { reason: 'message without sender', id: 'wamid.A1' }],
      ['an empty sender', { from: '' }, { reason: 'message without sender', id: 'wamid.A1' }],
      ['no id', { id: undefined }, { reason: 'message without id' }],
      ['an empty id', { id: '' }, { reason: 'message without id' }],
      ['an id of 257 characters', { id: 'w'.repeat(257) }, { reason: 'message id too long' }],
    ])('a message with %s is skipped', (_label, extra, skipped) => {
      expect(parseCloudWebhook(cloud({ messages: [textMsg(extra)] }), instance(), NOW)).toStrictEqual(
        parsed({ skipped: [skipped], items: 1 }),
      );
    });

    it('a message id of 256 characters is taken', () => {
      const id = 'w'.repeat(256);
      expect(parseCloudWebhook(cloud({ messages: [textMsg({ id })] }), instance(), NOW).messages.map((m) => m.providerMessageId)).toEqual([
        id,
      ]);
    });

    it('a message that is not an object is skipped', () => {
      expect(parseCloudWebhook(cloud({ messages: ['hello', null] }), instance(), NOW)).toStrictEqual(
        parsed({ skipped: [{ reason: 'message without id' }, { reason: 'message without id' }], items: 2 }),
      );
    });
  });

  describe('the notification', () => {
    it.each([
      ['null', null],
      ['a string', '{"object":"whatsapp_business_account"}'],
      ['a number', 42],
      ['an array', [{ object: 'whatsapp_business_account' }]],
      ['another object type', { object: 'page', entry: [] }],
      ['no object type', { entry: [] }],
    ])('%s is not a notification', (_label, payload) => {
      expect(parseCloudWebhook(payload, instance(), NOW)).toStrictEqual(
        parsed({ skipped: [{ reason: 'not a whatsapp_business_account notification' }] }),
      );
    });

    it.each([
      ['no entry', { object: 'whatsapp_business_account' }],
      ['an entry that is not a list', { object: 'whatsapp_business_account', entry: { changes: [] } }],
      ['an entry without changes', { object: 'whatsapp_business_account', entry: [{ id: 'W' }] }],
    ])('%s: nothing', (_label, payload) => {
      expect(parseCloudWebhook(payload, instance(), NOW)).toStrictEqual(parsed({}));
    });

    it('a change of another field is skipped, its items still counted', () => {
      const payload = {
        object: 'whatsapp_business_account',
        entry: [{ id: 'W', changes: [{ field: 'account_update', value: { messages: [textMsg()], statuses: [{}], contacts: [{}] } }] }],
      };
      expect(parseCloudWebhook(payload, instance(), NOW)).toStrictEqual(
        parsed({ skipped: [{ reason: 'change field account_update is not handled' }], items: 3 }),
      );
    });

    it.each([
      ['without a value', { field: 'messages' }, 'change field messages is not handled'],
      ['that is not an object', 'messages', 'change field missing is not handled'],
    ])('a change %s is skipped', (_label, change, reason) => {
      const payload = { object: 'whatsapp_business_account', entry: [{ id: 'W', changes: [change] }] };
      expect(parseCloudWebhook(payload, instance(), NOW)).toStrictEqual(parsed({ skipped: [{ reason }] }));
    });

    it('a change without a field name is read as messages', () => {
      const payload = { object: 'whatsapp_business_account', entry: [{ id: 'W', changes: [{ value: { messages: [textMsg()] } }] }] };
      expect(parseCloudWebhook(payload, instance(), NOW).messages.map((m) => m.providerMessageId)).toEqual(['wamid.A1']);
    });

    it.each([
      ['another phone number id', instance({ phoneNumberId: '999' }), { phone_number_id: PHONE_ID }, false],
      ['its own phone number id', instance({ phoneNumberId: PHONE_ID }), { phone_number_id: PHONE_ID }, true],
      ['no phone number id in the notification', instance({ phoneNumberId: '999' }), { phone_number_id: undefined }, true],
      ['an instance without one', instance({}), { phone_number_id: PHONE_ID }, true],
    ])('a notification for %s: taken = %s', (_label, inst, metadata, taken) => {
      const result = parseCloudWebhook(
        cloud({ messages: [textMsg()], statuses: [{ id: 'wamid.OUT1', status: 'read' }] }, metadata),
        inst,
        NOW,
      );
      expect(result.messages.length + result.statuses.length).toBe(taken ? 2 : 0);
      expect(result.skipped).toStrictEqual(taken ? [] : [{ reason: 'notification for another phone number id' }]);
      expect(result.items).toBe(2);
    });

    it('items count messages, statuses and contacts over every entry and change, skipped ones too', () => {
      const change = (value: Record<string, unknown>, field = 'messages') => ({
        field,
        value: { metadata: { phone_number_id: PHONE_ID }, ...value },
      });
      const payload = {
        object: 'whatsapp_business_account',
        entry: [
          {
            id: 'W1',
            changes: [
              change({ contacts: [contact('5511987654321', 'A')], messages: [textMsg(), textMsg({ id: 'wamid.G', group_id: 'g' })] }),
              change({
                statuses: [
                  { id: 'wamid.OUT1', status: 'read' },
                  { id: 'wamid.OUT2', status: 'deleted' },
                ],
              }),
            ],
          },
          { id: 'W2', changes: [change({ messages: [textMsg({ id: 'wamid.B' })] }, 'message_template_status_update')] },
        ],
      };
      const result = parseCloudWebhook(payload, instance(), NOW);
      expect(result.items).toBe(6);
      expect(result.messages.map((m) => m.providerMessageId)).toEqual(['wamid.A1']);
      expect(result.statuses.map((s) => s.providerMessageId)).toEqual(['wamid.OUT1']);
      expect(result.skipped).toStrictEqual([
        { reason: 'group message', id: 'wamid.G' },
        { reason: 'status deleted is not handled', id: 'wamid.OUT2' },
        { reason: 'change field message_template_status_update is not handled' },
      ]);
    });
  });

  describe('sender and name', () => {
    it.each([
      ['a mobile', '5511987654321', MOBILE],
      ['an old-form mobile (the key adds the ninth digit)', '551187654321', OLD_MOBILE],
      ['a landline', '551133334444', LANDLINE],
    ])('%s', (_label, from, phone) => {
      expect(parseCloudWebhook(cloud({ messages: [textMsg({ from })] }), instance(), NOW).messages).toStrictEqual([
        {
          providerMessageId: 'wamid.A1',
          phone,
          waId: from,
          profileName: undefined,
          type: 'text',
          body: 'Olá, quero um orçamento',
          mediaRef: null,
          timestamp: AT_T,
        },
      ]);
    });

    it.each([
      ['the contact of its wa_id', [contact('5511911112222', 'Other'), contact('5511987654321', 'Maria')], 'Maria'],
      ['the only contact, whatever its wa_id', [contact('551187654321', 'Maria')], 'Maria'],
      ['none of two contacts', [contact('5511911112222', 'A'), contact('5511933334444', 'B')], undefined],
      ['a contact without a name', [{ wa_id: '5511987654321', profile: {} }], undefined],
      ['an empty name', [contact('5511987654321', '')], undefined],
      ['no contacts', [], undefined],
    ])('the name is %s', (_label, contacts, profileName) => {
      const [message] = parseCloudWebhook(cloud({ contacts, messages: [textMsg()] }), instance(), NOW).messages;
      expect(message).toHaveProperty('profileName', profileName);
    });

    it('each message of a delivery gets its own sender’s name', () => {
      const payload = cloud({
        contacts: [contact('5511987654321', 'Maria'), contact('5521912345678', 'João')],
        messages: [textMsg(), textMsg({ id: 'wamid.A2', from: '5521912345678' })],
      });
      expect(parseCloudWebhook(payload, instance(), NOW).messages.map((m) => [m.waId, m.profileName])).toEqual([
        ['5511987654321', 'Maria'],
        ['5521912345678', 'João'],
      ]);
    });

    it('text the database cannot store is cleaned (U+0000 dropped, a lone surrogate replaced)', () => {
      const payload = cloud({
        contacts: [contact('5511987654321', 'Ma\u0000ria')],
        messages: [textMsg({ text: { body: 'a\u0000b\ud800c' } })],
      });
      const [message] = parseCloudWebhook(payload, instance(), NOW).messages;
      expect([message.body, message.profileName]).toEqual(['ab\ufffdc', 'Maria']);
    });
  });

  describe('timestamps (unix seconds) and now', () => {
    it.each([
      ['an hour ago, as text', String(T), AT_T],
      ['an hour ago, as a number', T, AT_T],
      ['exactly now', String(NOW_S), NOW],
      ['1 s before now', String(NOW_S - 1), new Date(NOW.getTime() - 1000)],
      ['1 s in the future (clamped to now)', String(NOW_S + 1), NOW],
      ['a day in the future (clamped to now)', String(NOW_S + 86_400), NOW],
      ['absent (now)', undefined, NOW],
      ['0 (now)', '0', NOW],
      ['negative (now)', '-5', NOW],
      ['not a number (now)', 'yesterday', NOW],
      ['1 s after the epoch', '1', new Date(1000)],
    ])('%s', (_label, timestamp, expected) => {
      const [message] = parseCloudWebhook(cloud({ messages: [textMsg({ timestamp })] }), instance(), NOW).messages;
      expect(message.timestamp).toStrictEqual(expected);
    });

    it('now defaults to the clock', () => {
      const before = Date.now();
      const [message] = parseCloudWebhook(cloud({ messages: [textMsg({ timestamp: undefined })] }), instance()).messages;
      expect(message.timestamp.getTime()).toBeGreaterThanOrEqual(before);
      expect(message.timestamp.getTime()).toBeLessThanOrEqual(Date.now());
    });
  });
});

// ---------------------------------------------------------------------------------------------
// Web gateway

/** A `messages.upsert` event as the gateway (and the emulator) posts it. */
function upsert(data: unknown, event: unknown = 'messages.upsert'): unknown {
  return {
    event,
    instance: 'acme-sales',
    data,
    destination: 'https://crm.example.com/webhooks/web/x',
    date_time: NOW.toISOString(),
    sender: '5511930000000@s.whatsapp.net',
    apikey: 'gateway-api-key',
  };
}
const webMsg = (extra: Record<string, unknown> = {}, key: Record<string, unknown> = {}) => ({
  key: { remoteJid: '5511987654321@s.whatsapp.net', fromMe: false, id: '3EB0C0FFEE', ...key },
  pushName: 'Maria Souza',
  message: { conversation: 'Oi, tudo bem?' },
  messageType: 'conversation',
  messageTimestamp: T,
  instanceId: 'acme-sales',
  source: 'android',
  ...extra,
});

describe('parseWebGatewayWebhook', () => {
  it('a text message (conversation): the sender from the JID, the name from pushName, seconds as a Date', () => {
    expect(parseWebGatewayWebhook(upsert(webMsg()), NOW)).toStrictEqual(
      parsed({
        messages: [
          {
            providerMessageId: '3EB0C0FFEE',
            phone: MOBILE,
            waId: '5511987654321',
            profileName: 'Maria Souza',
            type: 'text',
            body: 'Oi, tudo bem?',
            mediaRef: null,
            timestamp: AT_T,
          },
        ],
        items: 1,
      }),
    );
  });

  it.each([
    ['extendedTextMessage', { extendedTextMessage: { text: 'veja https://example.com' } }, 'text', 'veja https://example.com', null, {}],
    [
      'imageMessage',
      { imageMessage: { url: 'https://mmg.whatsapp.net/x', caption: 'a photo', mimetype: 'image/jpeg' } },
      'image',
      'a photo',
      '3EB0C0FFEE',
      { mediaMimeType: 'image/jpeg' },
    ],
    ['videoMessage', { videoMessage: { caption: 'a clip' } }, 'video', 'a clip', '3EB0C0FFEE', {}],
    ['audioMessage', { audioMessage: { url: 'https://mmg.whatsapp.net/a', ptt: true } }, 'audio', '', '3EB0C0FFEE', {}],
    [
      'documentMessage',
      { documentMessage: { fileName: 'a.pdf', caption: 'the contract' } },
      'document',
      'the contract',
      '3EB0C0FFEE',
      { mediaFileName: 'a.pdf' },
    ],
    ['stickerMessage', { stickerMessage: { url: 'https://mmg.whatsapp.net/s' } }, 'sticker', '', '3EB0C0FFEE', {}],
    ['imageMessage', {}, 'image', '', '3EB0C0FFEE', {}],
    ['conversation', {}, 'text', '', null, {}],
  ])('%s %j: type %s, body %p, mediaRef %p (the message id, never the gateway URL)', (messageType, message, type, body, mediaRef, file) => {
    expect(parseWebGatewayWebhook(upsert(webMsg({ messageType, message })), NOW)).toStrictEqual(
      parsed({
        messages: [
          {
            providerMessageId: '3EB0C0FFEE',
            phone: MOBILE,
            waId: '5511987654321',
            profileName: 'Maria Souza',
            type,
            body,
            mediaRef,
            ...file,
            timestamp: AT_T,
          },
        ],
        items: 1,
      }),
    );
  });

  it.each([
    ['reactionMessage', 'message type reactionMessage is not taken in'],
    ['locationMessage', 'message type locationMessage is not taken in'],
    ['protocolMessage', 'message type protocolMessage is not taken in'],
    [undefined, 'message type missing is not taken in'],
  ])('messageType %p is skipped', (messageType, reason) => {
    expect(parseWebGatewayWebhook(upsert(webMsg({ messageType })), NOW)).toStrictEqual(
      parsed({ skipped: [{ reason, id: '3EB0C0FFEE' }], items: 1 }),
    );
  });

  it.each([
    ['our own send (fromMe)', {}, { fromMe: true }, 'echo of our own number'],
    ['a group', {}, { remoteJid: '120363000000000000@g.us' }, 'group message'],
    ['a participant (group traffic)', {}, { participant: '5511911112222@s.whatsapp.net' }, 'group message'],
    ['a US number', {}, { remoteJid: '14155550123@s.whatsapp.net' }, 'sender is not a Brazilian phone number'],
    ['a @lid identity', {}, { remoteJid: '123456789012345@lid' }, 'sender is not a Brazilian phone number'],
    ['a broadcast list', {}, { remoteJid: 'status@broadcast' }, 'sender is not a Brazilian phone number'],
    ['no remoteJid', {}, { remoteJid: undefined }, 'sender is not a Brazilian phone number'],
  ])('%s is skipped', (_label, extra, key, reason) => {
    expect(parseWebGatewayWebhook(upsert(webMsg(extra, key)), NOW)).toStrictEqual(
      parsed({ skipped: [{ reason, id: '3EB0C0FFEE' }], items: 1 }),
    );
  });

  it.each([
    ['a device suffix', '5511987654321:12@s.whatsapp.net', '5511987654321', MOBILE],
    ['the @c.us form', '5511987654321@c.us', '5511987654321', MOBILE],
    ['an old-form mobile', '551187654321@s.whatsapp.net', '551187654321', OLD_MOBILE],
    ['a landline', '551133334444@s.whatsapp.net', '551133334444', LANDLINE],
  ])('a sender JID with %s', (_label, remoteJid, waId, phone) => {
    const [message] = parseWebGatewayWebhook(upsert(webMsg({}, { remoteJid })), NOW).messages;
    expect([message.waId, message.phone]).toStrictEqual([waId, phone]);
  });

  it.each([
    ['no key', { key: undefined }],
    ['no id', { key: { remoteJid: '5511987654321@s.whatsapp.net' } }],
    ['an empty id', { key: { remoteJid: '5511987654321@s.whatsapp.net', id: '' } }],
    ['an id of 257 characters', { key: { remoteJid: '5511987654321@s.whatsapp.net', id: 'k'.repeat(257) } }],
  ])('a message with %s is skipped', (_label, extra) => {
    expect(parseWebGatewayWebhook(upsert(webMsg(extra)), NOW)).toStrictEqual(
      parsed({ skipped: [{ reason: 'message without a usable key' }], items: 1 }),
    );
  });

  it('a key id of 256 characters is taken', () => {
    const id = 'k'.repeat(256);
    expect(parseWebGatewayWebhook(upsert(webMsg({}, { id })), NOW).messages.map((m) => m.providerMessageId)).toEqual([id]);
  });

  it.each([
    ['an empty pushName', ''],
    ['no pushName', undefined],
  ])('%s: no name', (_label, pushName) => {
    const [message] = parseWebGatewayWebhook(upsert(webMsg({ pushName })), NOW).messages;
    expect(message).toHaveProperty('profileName', undefined);
  });

  it('data as a list: every message, items counted', () => {
    const result = parseWebGatewayWebhook(
      upsert([
        webMsg(),
        webMsg({}, { id: 'B2', remoteJid: '5521912345678@s.whatsapp.net' }),
        webMsg({}, { id: 'B3', fromMe: true }),
        'junk',
      ]),
      NOW,
    );
    expect(result.items).toBe(4);
    expect(result.messages.map((m) => [m.providerMessageId, m.waId])).toEqual([
      ['3EB0C0FFEE', '5511987654321'],
      ['B2', '5521912345678'],
    ]);
    expect(result.skipped).toStrictEqual([{ reason: 'echo of our own number', id: 'B3' }, { reason: 'message without a usable key' }]);
  });

  it.each([
    ['messages.upsert', 'messages.upsert', true],
    ['MESSAGES_UPSERT', 'MESSAGES_UPSERT', true],
    ['messages_upsert', 'messages_upsert', true],
    ['connection.update', 'connection.update', false],
    ['send.message', 'send.message', false],
  ])('event %s: taken = %s', (_label, event, taken) => {
    const result = parseWebGatewayWebhook(upsert(webMsg(), event), NOW);
    expect(result).toStrictEqual(
      taken ? parsed({ messages: result.messages, items: 1 }) : parsed({ skipped: [{ reason: `event ${event} is not handled` }] }),
    );
    expect(result.messages).toHaveLength(taken ? 1 : 0);
  });

  describe('messages.update: the acks of our own messages', () => {
    const ack = (data: unknown, event = 'messages.update') => ({ event, instance: 'main', data, apikey: 'k' });
    const status = (providerMessageId: string, state: string) => ({ providerMessageId, status: state, timestamp: NOW });

    it.each([
      ['DELIVERY_ACK (v2)', { keyId: 'W1', remoteJid: '5511987654321@s.whatsapp.net', fromMe: true, status: 'DELIVERY_ACK' }, 'delivered'],
      ['READ (v2)', { keyId: 'W1', fromMe: true, status: 'READ' }, 'read'],
      ['PLAYED (a voice note heard)', { keyId: 'W1', fromMe: true, status: 'PLAYED' }, 'read'],
      ['SERVER_ACK', { keyId: 'W1', fromMe: true, status: 'SERVER_ACK' }, 'sent'],
      ['ERROR', { keyId: 'W1', fromMe: true, status: 'ERROR' }, 'failed'],
      ['3, by number (v1)', { key: { id: 'W1', fromMe: true }, update: { status: 3 } }, 'delivered'],
      ['4, by number (v1)', { key: { id: 'W1', fromMe: true }, update: { status: 4 } }, 'read'],
      ['messageId instead of keyId', { messageId: 'W1', fromMe: true, status: 'READ' }, 'read'],
    ])('%s', (_label, data, state) => {
      expect(parseWebGatewayWebhook(ack(data), NOW)).toStrictEqual(parsed({ statuses: [status('W1', state)], items: 1 }));
    });

    it('a list of acks, MESSAGES_UPDATE spelled as the gateway may', () => {
      const data = [
        { keyId: 'W1', fromMe: true, status: 'DELIVERY_ACK' },
        { keyId: 'W2', fromMe: true, status: 'READ' },
      ];
      expect(parseWebGatewayWebhook(ack(data, 'MESSAGES_UPDATE'), NOW)).toStrictEqual(
        parsed({ statuses: [status('W1', 'delivered'), status('W2', 'read')], items: 2 }),
      );
    });

    it.each([
      [
        'an ack of a message we did not send (fromMe false)',
        { keyId: 'W1', fromMe: false, status: 'READ' },
        { reason: 'ack READ is not handled', id: 'W1' },
      ],
      ['PENDING (1): nothing moved', { keyId: 'W1', fromMe: true, status: 1 }, { reason: 'ack 1 is not handled', id: 'W1' }],
      ['no status', { keyId: 'W1', fromMe: true }, { reason: 'ack missing is not handled', id: 'W1' }],
      ['no id', { fromMe: true, status: 'READ' }, { reason: 'ack READ is not handled' }],
      ['an id of 257 characters', { keyId: 'x'.repeat(257), fromMe: true, status: 'READ' }, { reason: 'ack READ is not handled' }],
    ])('%s is skipped', (_label, data, skipped) => {
      expect(parseWebGatewayWebhook(ack(data), NOW)).toStrictEqual(parsed({ skipped: [skipped], items: 1 }));
    });
  });

  it.each([
    ['null', null],
    ['a string', 'messages.upsert'],
    ['an array', [upsert(webMsg())]],
    ['an object without event', { data: webMsg() }],
  ])('%s is not an event', (_label, payload) => {
    expect(parseWebGatewayWebhook(payload, NOW)).toStrictEqual(parsed({ skipped: [{ reason: 'event missing is not handled' }] }));
  });

  it('an upsert without data counts one item, skipped', () => {
    expect(parseWebGatewayWebhook(upsert(undefined), NOW)).toStrictEqual(
      parsed({ skipped: [{ reason: 'message without a usable key' }], items: 1 }),
    );
  });

  it.each([
    ['an hour ago, as a number', T, AT_T],
    ['an hour ago, as text', String(T), AT_T],
    ['1 s in the future (clamped to now)', NOW_S + 1, NOW],
    ['absent (now)', undefined, NOW],
    ['0 (now)', 0, NOW],
    ['not a number (now)', 'soon', NOW],
  ])('messageTimestamp %s', (_label, messageTimestamp, expected) => {
    const [message] = parseWebGatewayWebhook(upsert(webMsg({ messageTimestamp })), NOW).messages;
    expect(message.timestamp).toStrictEqual(expected);
  });
});
