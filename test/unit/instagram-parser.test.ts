import { parseInstagramWebhook, STORY_MENTION_TEXT } from '../../domain/messaging/instagram';

const ACCOUNT = '17841400000000001';
const PERSON = '6543210987654321';
const instance = { config: { igUserId: ACCOUNT } };
const now = new Date('2026-12-06T12:00:00Z');

function delivery(...messaging: Record<string, unknown>[]) {
  return { object: 'instagram', entry: [{ id: ACCOUNT, time: now.getTime(), messaging }] };
}
const from = (message: Record<string, unknown>, extra: Record<string, unknown> = {}) => ({
  sender: { id: PERSON },
  recipient: { id: ACCOUNT },
  timestamp: now.getTime() - 60_000,
  message,
  ...extra,
});

describe('parseInstagramWebhook', () => {
  it('takes a DM as a text message from the IGSID, at the provider time', () => {
    const parsed = parseInstagramWebhook(delivery(from({ mid: 'm1', text: 'Oi, quanto custa?' })), instance, now);
    expect(parsed.messages).toEqual([
      {
        providerMessageId: 'm1',
        igsid: PERSON,
        type: 'text',
        body: 'Oi, quanto custa?',
        mediaRef: null,
        timestamp: new Date(now.getTime() - 60_000),
      },
    ]);
    expect(parsed.items).toBe(1);
  });

  it('caps a timestamp in the future at now', () => {
    const parsed = parseInstagramWebhook(delivery(from({ mid: 'm1', text: 'x' }, { timestamp: now.getTime() + 3_600_000 })), instance, now);
    expect(parsed.messages[0].timestamp).toEqual(now);
  });

  it('keeps each attachment as its own message with its CDN URL as the internal reference, the text first', () => {
    const parsed = parseInstagramWebhook(
      delivery(
        from({
          mid: 'm2',
          text: 'olha',
          attachments: [
            { type: 'image', payload: { url: 'https://lookaside.fbsbx.com/ig_messaging_cdn/?asset_id=1' } },
            { type: 'file', payload: { url: 'https://lookaside.fbsbx.com/ig_messaging_cdn/?asset_id=2' } },
          ],
        }),
      ),
      instance,
      now,
    );
    expect(parsed.messages.map((m) => [m.providerMessageId, m.type, m.body, m.mediaRef])).toEqual([
      ['m2', 'text', 'olha', null],
      ['m2:1', 'image', '', 'https://lookaside.fbsbx.com/ig_messaging_cdn/?asset_id=1'],
      ['m2:2', 'document', '', 'https://lookaside.fbsbx.com/ig_messaging_cdn/?asset_id=2'],
    ]);
  });

  it('takes a story reply as a message and a story mention as one too', () => {
    const parsed = parseInstagramWebhook(
      delivery(
        from({ mid: 'm3', text: 'Amei!', reply_to: { story: { url: 'https://cdn/story', id: '179' } } }),
        from({ mid: 'm4', attachments: [{ type: 'story_mention', payload: { url: 'https://cdn/story' } }] }),
      ),
      instance,
      now,
    );
    expect(parsed.messages.map((m) => [m.providerMessageId, m.type, m.body])).toEqual([
      ['m3', 'text', 'Amei!'],
      ['m4', 'text', STORY_MENTION_TEXT],
    ]);
  });

  it('never takes an echo, a deleted or an unsupported message as a customer message', () => {
    const parsed = parseInstagramWebhook(
      delivery(
        from({ mid: 'e1', text: 'our reply', is_echo: true }, { sender: { id: ACCOUNT }, recipient: { id: PERSON } }),
        from({ mid: 'e2', text: 'sent from the app' }, { sender: { id: ACCOUNT }, recipient: { id: PERSON } }),
        from({ mid: 'd1', is_deleted: true }),
        from({ mid: 'u1', is_unsupported: true }),
      ),
      instance,
      now,
    );
    expect(parsed.messages).toEqual([]);
    expect(parsed.skipped.map((s) => s.reason)).toEqual([
      'echo of our own message',
      'echo of our own message',
      'deleted by the sender',
      'a message type Instagram does not pass on',
    ]);
  });

  it('reads a seen event as the read status of our message', () => {
    const parsed = parseInstagramWebhook(
      delivery({ sender: { id: PERSON }, recipient: { id: ACCOUNT }, timestamp: now.getTime() - 1000, read: { mid: 'out-1' } }),
      instance,
      now,
    );
    expect(parsed.statuses).toEqual([{ providerMessageId: 'out-1', status: 'read', timestamp: new Date(now.getTime() - 1000) }]);
  });

  it("skips another account's traffic, a non-numeric sender and other objects", () => {
    const other = { object: 'instagram', entry: [{ id: '999', messaging: [from({ mid: 'x', text: 'hi' })] }] };
    expect(parseInstagramWebhook(other, instance, now).messages).toEqual([]);
    expect(parseInstagramWebhook(delivery(from({ mid: 'x', text: 'hi' }, { sender: { id: 'abc' } })), instance, now).messages).toEqual([]);
    expect(parseInstagramWebhook({ object: 'page', entry: [] }, instance, now).skipped[0].reason).toBe('not an instagram notification');
  });

  it('skips an attachment it does not take in and a message with nothing in it', () => {
    const parsed = parseInstagramWebhook(
      delivery(
        from({ mid: 'r1', attachments: [{ type: 'share', payload: { url: 'https://instagram.com/p/1' } }] }),
        from({ mid: 'r2' }),
        from({ mid: 'r3', attachments: [{ type: 'image', payload: { url: 'javascript:alert(1)' } }] }),
      ),
      instance,
      now,
    );
    expect(parsed.messages).toEqual([]);
    expect(parsed.skipped.map((s) => s.reason)).toEqual([
      'attachment type share is not taken in',
      'message without text or attachments',
      'attachment type image is not taken in',
    ]);
  });
});
