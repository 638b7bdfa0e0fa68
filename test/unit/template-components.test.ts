import { ApiError } from '../../domain/kernel/errors';
import { MESSAGE_CONTENT_FIELDS, messageContent, templateComponents, type SendableTemplate } from '../../domain/messaging/sending';
import type { TemplateComponents } from '../../domain/messaging/templates';
import type { MessageContent } from '../../types/messaging';

/**
 * A template send's parameters against the template's components (domain/messaging/sending.ts
 * templateComponents): the Cloud API's wire components, or 422 TEMPLATE_INVALID whose hint names
 * the component. Every rule at its boundary; the wire shapes written out in full.
 */

const template = (components: Partial<TemplateComponents> | null, variableCount = 0): SendableTemplate => ({
  variable_count: variableCount,
  components: components === null ? null : { header: null, body: { text: 'x', variableCount }, buttons: [], ...components },
});
const imageHeader = template({ header: { format: 'image', variableCount: 0 } }, 1);
const textHeader = (variableCount: number) => template({ header: { format: 'text', variableCount } });
const withButtons = template({
  buttons: [
    { type: 'quick_reply', text: 'No', urlVariable: false },
    { type: 'url', text: 'Shop', urlVariable: true },
    { type: 'url', text: 'Home', urlVariable: false },
    { type: 'url', text: 'Track', urlVariable: true },
  ],
});

/** The refusal of a call, as { code, status, message, hint }. */
function refusal(fn: () => unknown): { code: string; status: number; message: string; hint?: string } {
  try {
    fn();
  } catch (err) {
    if (!(err instanceof ApiError)) throw err;
    return { code: err.code, status: err.status, message: err.message, hint: err.hint };
  }
  throw new Error('expected a refusal');
}

describe('templateComponents: the wire components', () => {
  it('an image header, the body and a URL button, in that order, at the Cloud API wire format', () => {
    const t = template(
      {
        header: { format: 'image', variableCount: 0 },
        buttons: [{ type: 'url', text: 'Ver', urlVariable: true }],
      },
      2,
    );
    expect(
      templateComponents(t, {
        templateVariables: ['Ana', '10%'],
        templateHeader: { mediaUrl: 'https://cdn.example.com/promo.jpg' },
        templateButtons: [{ index: 0, urlVariable: 'p/42' }],
      }),
    ).toStrictEqual([
      { type: 'header', parameters: [{ type: 'image', image: { link: 'https://cdn.example.com/promo.jpg' } }] },
      {
        type: 'body',
        parameters: [
          { type: 'text', text: 'Ana' },
          { type: 'text', text: '10%' },
        ],
      },
      { type: 'button', sub_type: 'url', index: '0', parameters: [{ type: 'text', text: 'p/42' }] },
    ]);
  });

  it.each([
    ['video', 'https://x.example/v.mp4', { type: 'video', video: { link: 'https://x.example/v.mp4' } }],
    ['document', 'https://x.example/terms.pdf', { type: 'document', document: { link: 'https://x.example/terms.pdf' } }],
    ['image', 'https://x.example/render?id=7', { type: 'image', image: { link: 'https://x.example/render?id=7' } }],
  ] as const)('a %s header from %s', (format, mediaUrl, parameter) => {
    const t = template({ header: { format, variableCount: 0 } });
    expect(templateComponents(t, { templateHeader: { mediaUrl } })).toStrictEqual([{ type: 'header', parameters: [parameter] }]);
  });

  it('a text header with a variable', () => {
    expect(templateComponents(textHeader(1), { templateHeader: { text: 'Pedido 42' } })).toStrictEqual([
      { type: 'header', parameters: [{ type: 'text', text: 'Pedido 42' }] },
    ]);
  });

  it('nothing for a template without variables, header parameters or URL variables (a fixed text header, buttons without variables)', () => {
    expect(templateComponents(textHeader(0), {})).toStrictEqual([]);
    expect(templateComponents(template({ buttons: [{ type: 'url', text: 'Home', urlVariable: false }] }), {})).toStrictEqual([]);
  });

  it("an operator's row (components null) is a body only: its variables", () => {
    expect(templateComponents(template(null, 1), { templateVariables: ['Ana'] })).toStrictEqual([
      { type: 'body', parameters: [{ type: 'text', text: 'Ana' }] },
    ]);
    expect(
      refusal(() => templateComponents(template(null, 1), { templateVariables: ['Ana'], templateHeader: { text: 'x' } })),
    ).toMatchObject({
      code: 'TEMPLATE_INVALID',
      hint: expect.stringMatching(/^header: /),
    });
  });

  it('URL buttons in index order, whatever the order given; a button without a variable gets no component', () => {
    expect(
      templateComponents(withButtons, {
        templateButtons: [
          { index: 3, urlVariable: 'T-9' },
          { index: 1, urlVariable: 'sale' },
        ],
      }),
    ).toStrictEqual([
      { type: 'button', sub_type: 'url', index: '1', parameters: [{ type: 'text', text: 'sale' }] },
      { type: 'button', sub_type: 'url', index: '3', parameters: [{ type: 'text', text: 'T-9' }] },
    ]);
  });
});

describe('templateComponents: 422 TEMPLATE_INVALID naming the component', () => {
  const mediaHint = 'header: give templateHeader { mediaUrl } with the https URL of an image file.';
  it.each<[string, SendableTemplate, Pick<MessageContent, 'templateVariables' | 'templateHeader' | 'templateButtons'>, string, string]>([
    [
      'a header for a template without one',
      template({}),
      { templateHeader: { text: 'x' } },
      'The template has no header, but templateHeader was given',
      'header: leave templateHeader out for this template.',
    ],
    [
      'a header for a fixed text header',
      textHeader(0),
      { templateHeader: { text: 'x' } },
      "The template's header is fixed text: it takes no templateHeader",
      'header: leave templateHeader out for this template.',
    ],
    [
      'no header for a text header with a variable',
      textHeader(1),
      {},
      "The template's header takes a variable: templateHeader is required",
      'header: give templateHeader { text }.',
    ],
    [
      'a mediaUrl for a text header',
      textHeader(1),
      { templateHeader: { mediaUrl: 'https://x.example/a.jpg' } },
      "The template's header is text: templateHeader takes text, not mediaUrl",
      'header: give templateHeader { text }.',
    ],
    [
      'no header for an image header',
      imageHeader,
      { templateVariables: ['a'] },
      "The template's header is an image: templateHeader is required",
      mediaHint,
    ],
    [
      'text for an image header',
      imageHeader,
      { templateVariables: ['a'], templateHeader: { text: 'x' } },
      "The template's header is an image: templateHeader takes mediaUrl, not text",
      mediaHint,
    ],
    [
      'a .pdf for an image header',
      imageHeader,
      { templateVariables: ['a'], templateHeader: { mediaUrl: 'https://x.example/Menu.PDF' } },
      "The template's header is an image, but templateHeader.mediaUrl names a .pdf file",
      mediaHint,
    ],
    [
      'a .jpg for a document header',
      template({ header: { format: 'document', variableCount: 0 } }),
      { templateHeader: { mediaUrl: 'https://x.example/scan.jpg' } },
      "The template's header is a document, but templateHeader.mediaUrl names a .jpg file",
      'header: give templateHeader { mediaUrl } with the https URL of a document file.',
    ],
    [
      'a .png for a video header',
      template({ header: { format: 'video', variableCount: 0 } }),
      { templateHeader: { mediaUrl: 'https://x.example/a.png' } },
      "The template's header is a video, but templateHeader.mediaUrl names a .png file",
      'header: give templateHeader { mediaUrl } with the https URL of a video file.',
    ],
    [
      'one body variable too few',
      imageHeader,
      { templateHeader: { mediaUrl: 'https://x.example/a.jpg' } },
      'The template takes 1 variables, 0 given',
      'body: give exactly 1 templateVariables, in order.',
    ],
    [
      'one body variable too many',
      template({}, 0),
      { templateVariables: ['a'] },
      'The template takes 0 variables, 1 given',
      'body: give exactly 0 templateVariables, in order.',
    ],
    [
      'a button index past the last button',
      withButtons,
      {
        templateButtons: [
          { index: 1, urlVariable: 'a' },
          { index: 3, urlVariable: 'b' },
          { index: 4, urlVariable: 'c' },
        ],
      },
      'templateButtons[2]: the template has no button 4',
      'buttons[4]: templateButtons takes one entry for each URL button with a variable, by its index.',
    ],
    [
      'a quick reply button',
      withButtons,
      { templateButtons: [{ index: 0, urlVariable: 'a' }] },
      "templateButtons[0]: the template's button 0 has no URL variable",
      'buttons[0]: templateButtons takes one entry for each URL button with a variable, by its index.',
    ],
    [
      'a URL button without a variable',
      withButtons,
      { templateButtons: [{ index: 2, urlVariable: 'a' }] },
      "templateButtons[0]: the template's button 2 has no URL variable",
      'buttons[2]: templateButtons takes one entry for each URL button with a variable, by its index.',
    ],
    [
      'a button given twice',
      withButtons,
      {
        templateButtons: [
          { index: 1, urlVariable: 'a' },
          { index: 3, urlVariable: 'b' },
          { index: 1, urlVariable: 'c' },
        ],
      },
      'templateButtons[2]: button 1 is given twice',
      'buttons[1]: templateButtons takes one entry for each URL button with a variable, by its index.',
    ],
    [
      'a URL button with a variable left out',
      withButtons,
      { templateButtons: [{ index: 1, urlVariable: 'a' }] },
      "The template's button 3 takes a URL variable: templateButtons has no entry for it",
      'buttons[3]: give templateButtons { index: 3, urlVariable }.',
    ],
    [
      'no buttons at all',
      withButtons,
      {},
      "The template's button 1 takes a URL variable: templateButtons has no entry for it",
      'buttons[1]: give templateButtons { index: 1, urlVariable }.',
    ],
  ])('%s', (_name, t, message, text, hint) => {
    expect(refusal(() => templateComponents(t, message))).toStrictEqual({ code: 'TEMPLATE_INVALID', status: 422, message: text, hint });
  });

  it("a URL without a known media extension is left to the provider; only the path's extension counts, whatever its case", () => {
    const send = (mediaUrl: string) => () => templateComponents(imageHeader, { templateVariables: ['a'], templateHeader: { mediaUrl } });
    for (const mediaUrl of ['https://x.example/a', 'https://x.example/a.JPEG', 'https://x.example/a.gif', 'https://x.example/a.jpg?f=.pdf'])
      expect(send(mediaUrl)).not.toThrow();
    expect(send('https://x.example/a.pdf?f=.jpg')).toThrow('names a .pdf file');
  });
});

describe('the send fields', () => {
  it('templateHeader takes exactly one of text and mediaUrl; text at most 60 UTF-16 units', () => {
    const header = MESSAGE_CONTENT_FIELDS.templateHeader;
    expect(header.safeParse({ text: 'a' }).success).toBe(true);
    expect(header.safeParse({ mediaUrl: 'https://x.example/a.jpg' }).success).toBe(true);
    expect(header.safeParse({}).success).toBe(false);
    expect(header.safeParse({ text: 'a', mediaUrl: 'https://x.example/a.jpg' }).success).toBe(false);
    expect(header.safeParse({ text: 'x'.repeat(60) }).success).toBe(true);
    expect(header.safeParse({ text: 'x'.repeat(61) }).success).toBe(false);
    expect(header.safeParse({ text: '😀'.repeat(30) }).success).toBe(true);
    expect(header.safeParse({ text: `${'😀'.repeat(30)}x` }).success).toBe(false);
    expect(header.safeParse({ mediaUrl: `https://x.example/${'a'.repeat(2048 - 18)}` }).success).toBe(true);
    expect(header.safeParse({ mediaUrl: `https://x.example/${'a'.repeat(2049 - 18)}` }).success).toBe(false);
  });

  it('templateButtons: index 0..9, urlVariable 1..2000, at most 10 entries', () => {
    const buttons = MESSAGE_CONTENT_FIELDS.templateButtons;
    const ok = (b: unknown) => buttons.safeParse(b).success;
    expect(ok([{ index: 0, urlVariable: 'a' }])).toBe(true);
    expect(ok([{ index: 9, urlVariable: 'x'.repeat(2000) }])).toBe(true);
    expect(ok([{ index: 10, urlVariable: 'a' }])).toBe(false);
    expect(ok([{ index: -1, urlVariable: 'a' }])).toBe(false);
    expect(ok([{ index: 1.5, urlVariable: 'a' }])).toBe(false);
    expect(ok([{ index: '0', urlVariable: 'a' }])).toBe(false);
    expect(ok([{ index: 0, urlVariable: '' }])).toBe(false);
    expect(ok([{ index: 0, urlVariable: 'x'.repeat(2001) }])).toBe(false);
    expect(ok(Array.from({ length: 10 }, (_, index) => ({ index, urlVariable: 'a' })))).toBe(true);
    expect(ok(Array.from({ length: 11 }, (_, i) => ({ index: i % 10, urlVariable: 'a' })))).toBe(false);
  });

  it('messageContent keeps the header and buttons of a template only, and only their fields', () => {
    const extra = { templateHeader: { text: 'h', other: 1 } as never, templateButtons: [{ index: 0, urlVariable: 'u', x: 2 } as never] };
    expect(messageContent({ type: 'template', templateName: 'n', templateLanguage: 'pt_BR', ...extra })).toStrictEqual({
      type: 'template',
      templateName: 'n',
      templateLanguage: 'pt_BR',
      templateVariables: [],
      templateHeader: { text: 'h' },
      templateButtons: [{ index: 0, urlVariable: 'u' }],
    });
    expect(messageContent({ type: 'text', text: 'hi', ...extra })).toStrictEqual({ type: 'text', text: 'hi' });
    expect(messageContent({ type: 'template', templateName: 'n', templateLanguage: 'pt_BR', templateButtons: [] })).toStrictEqual({
      type: 'template',
      templateName: 'n',
      templateLanguage: 'pt_BR',
      templateVariables: [],
    });
  });
});
