import { parseProviderTemplate, parseTemplateStatusUpdates, templateStatusOf, variableCount } from '../../domain/messaging/templates';

describe('parseProviderTemplate', () => {
  it('reads name, language, status, category and components in lower case', () => {
    expect(
      parseProviderTemplate({
        id: 123,
        name: 'order',
        language: 'en_US',
        status: 'APPROVED',
        category: 'UTILITY',
        components: [
          { type: 'HEADER', format: 'TEXT', text: 'Order {{1}}' },
          { type: 'BODY', text: 'Hi {{name}}, order {{order}} ships {{name}}' },
          { type: 'BUTTONS', buttons: [{ type: 'URL', text: 'Track', url: 'https://x.example/t' }] },
        ],
      }),
    ).toStrictEqual({
      template: {
        providerId: '123',
        name: 'order',
        language: 'en_US',
        status: 'approved',
        category: 'utility',
        components: {
          header: { format: 'text', variableCount: 1 },
          body: { text: 'Hi {{name}}, order {{order}} ships {{name}}', variableCount: 2 },
          buttons: [{ type: 'url', text: 'Track', urlVariable: false }],
        },
      },
    });
  });

  it('leaves out what a send could not use, and reads an unknown status as pending', () => {
    expect(parseProviderTemplate({ name: 'x', language: 'pt_BR', components: [{ type: 'HEADER', format: 'LOCATION' }] })).toStrictEqual({
      skipped: 'x (pt_BR): header format location',
    });
    const many = Array.from({ length: 21 }, (_, i) => `{{${i + 1}}}`).join(' ');
    expect(parseProviderTemplate({ name: 'x', language: 'pt_BR', components: [{ type: 'BODY', text: many }] })).toHaveProperty('skipped');
    expect(parseProviderTemplate({ language: 'pt_BR' })).toHaveProperty('skipped');
    const odd = parseProviderTemplate({ name: 'x', language: 'pt_BR', status: 'SOMETHING_NEW' });
    expect('template' in odd && odd.template.status).toBe('pending');
  });

  it('counts distinct placeholders', () => {
    expect(variableCount('{{1}} {{2}} {{1}} {{ 3 }}')).toBe(3);
    expect(variableCount(undefined)).toBe(0);
  });
});

describe('parseTemplateStatusUpdates', () => {
  const change = (value: Record<string, unknown>, field = 'message_template_status_update') => ({
    object: 'whatsapp_business_account',
    entry: [{ id: 'W', changes: [{ field, value }] }],
  });

  it('reads the event and the template it names; FLAGGED, other fields and nameless ones change nothing', () => {
    expect(
      parseTemplateStatusUpdates(
        change({
          event: 'PAUSED',
          message_template_id: 77,
          message_template_name: 'promo',
          message_template_language: 'pt_BR',
          reason: 'x',
        }),
      ),
    ).toStrictEqual([{ status: 'paused', providerId: '77', name: 'promo', language: 'pt_BR' }]);
    expect(parseTemplateStatusUpdates(change({ event: 'FLAGGED', message_template_id: 77 }))).toStrictEqual([]);
    expect(parseTemplateStatusUpdates(change({ event: 'PAUSED', message_template_id: 77 }, 'messages'))).toStrictEqual([]);
    expect(parseTemplateStatusUpdates(change({ event: 'PAUSED', message_template_name: 'promo' }))).toStrictEqual([]);
    expect(parseTemplateStatusUpdates({ object: 'page' })).toStrictEqual([]);
  });

  it('maps the provider events to our statuses', () => {
    expect(
      ['APPROVED', 'REINSTATED', 'IN_APPEAL', 'REJECTED', 'PAUSED', 'DISABLED', 'PENDING_DELETION', 'FLAGGED'].map(templateStatusOf),
    ).toEqual(['approved', 'approved', 'pending', 'rejected', 'paused', 'disabled', 'disabled', undefined]);
  });
});
