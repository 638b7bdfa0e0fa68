/**
 * The web gateway's media answer (`{ mediaType, fileName, size, mimetype, base64 }`) read as it
 * arrives (activities/providers/inbound-media.ts Base64AnswerReader): the file decoded a few KB at a time,
 * whatever the chunk boundaries, the key order, JSON escapes or a data-URL prefix.
 */
import { createHash, randomBytes } from 'node:crypto';
import { Base64AnswerReader } from '../../activities/providers/inbound-media';

async function read(text: string, cut: number): Promise<{ bytes: Buffer; fields: Record<string, string>; sawBase64: boolean }> {
  const parts: Buffer[] = [];
  const reader = new Base64AnswerReader(async (b) => {
    parts.push(b);
  });
  for (let i = 0; i < text.length; i += cut) await reader.feed(text.slice(i, i + cut));
  return { bytes: Buffer.concat(parts), fields: reader.fields, sawBase64: reader.sawBase64 };
}

const sha = (b: Buffer): string => createHash('sha256').update(b).digest('hex');

describe('Base64AnswerReader', () => {
  const file = randomBytes(10_001);

  it('decodes the file for every chunk size, with the other fields kept and nested values skipped', async () => {
    const answer = JSON.stringify({
      mediaType: 'documentMessage',
      fileName: 'nota "fiscal".pdf',
      size: { fileLength: '10001', nested: ['a', { b: '}' }] },
      mimetype: 'application/pdf',
      base64: file.toString('base64'),
      after: 1,
    });
    for (const cut of [1, 2, 3, 5, 7, 64, 1000, answer.length]) {
      const got = await read(answer, cut);
      expect({ cut, sha: sha(got.bytes) }).toEqual({ cut, sha: sha(file) });
      expect(got.fields).toEqual({ mediaType: 'documentMessage', fileName: 'nota "fiscal".pdf', mimetype: 'application/pdf' });
    }
  });

  it('takes base64 first, escaped slashes, line breaks and a data URL prefix', async () => {
    const b64 = file.toString('base64');
    // As some encoders write it: lines of 76 characters, and every `/` escaped.
    const escaped = b64.replace(/(.{76})/g, '$1\\n').replace(/\//g, '\\/');
    const answer = `{"base64":"data:application/pdf;base64,${escaped}","mimetype":"application/pdf"}`;
    for (const cut of [1, 4, 13, 4096]) {
      const got = await read(answer, cut);
      expect({ cut, sha: sha(got.bytes) }).toEqual({ cut, sha: sha(file) });
      expect(got.fields.mimetype).toBe('application/pdf');
    }
  });

  it('says when there was no base64', async () => {
    expect((await read('{"error":"not found"}', 3)).sawBase64).toBe(false);
  });
});
