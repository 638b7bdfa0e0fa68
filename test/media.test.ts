/**
 * Inbound media (issue 37, part 2): an inbound image, audio, video, document or sticker is fetched
 * from the provider by a durable workflow, stored in PostgreSQL in chunks, shown on the message as
 * `media`, and downloadable at `GET /api/v1/messages/{id}/media`. Through the real stack: the API,
 * the worker (its media dispatcher and workflow), PostgreSQL, Temporal and the provider emulator
 * (emulator/media.ts) at both providers' wire formats.
 */
import { createHash } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { createWorkspace, eventually, expectError, startApi, TestApi, Workspace } from './helpers';
import { cloudInstance, emulator, LOG_DIR, webInstance } from './stack-fixtures';
import { uniqueMobile } from './phones';
import { Child, nodeTs, startChild, waitForHttp } from '../scripts/stack';

const MB = 1024 * 1024;
let api: TestApi;
beforeAll(async () => {
  api = await startApi();
});
afterAll(async () => {
  await api.close();
});

const SCOPES = ['conversations:read'] as const;
let seq = 0;
const uniqueId = (label: string): string => `${label}-${Date.now().toString(36)}-${++seq}-${Math.random().toString(36).slice(2, 8)}`;

/** A Cloud API contact writes (text or media) to the instance's number; the delivery must be accepted. */
async function cloudInbound(phoneNumberId: string, body: Record<string, unknown>): Promise<any> {
  const answer = await emulator('/__emulator/inbound', { phoneNumberId, from: uniqueMobile(), ...body });
  expect(answer.delivered).toBe(200);
  return answer;
}

/** The inbound message the provider message id became, as the conversation shows it. */
async function messageOf(ws: Workspace, providerMessageId: string): Promise<any> {
  const row = await api
    .db('messages')
    .where({ workspace_id: ws.id, provider_message_id: providerMessageId })
    .first('id', 'conversation_id');
  expect(row).toBeDefined();
  const res = await api.request('GET', `/api/v1/conversations/${row.conversation_id}`, { key: ws.key });
  expect(res.status).toBe(200);
  return (res.body as any).data.messages.find((m: any) => m.id === row.id);
}

async function settled(ws: Workspace, providerMessageId: string, timeoutMs = 60_000): Promise<any> {
  return eventually(
    `media of ${providerMessageId} settled`,
    async () => {
      const message = await messageOf(ws, providerMessageId);
      return message.media && message.media.status !== 'pending' ? message : undefined;
    },
    timeoutMs,
    200,
  );
}

/** The download: status, headers and the sha256 of the body (read as it arrives, never held). */
async function download(baseUrl: string, key: string, messageId: string, onChunk?: () => void) {
  const res = await fetch(`${baseUrl}/api/v1/messages/${messageId}/media`, { headers: { authorization: `Bearer ${key}` } });
  const hash = createHash('sha256');
  let bytes = 0;
  let text = '';
  if (res.ok && res.body) {
    for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) {
      hash.update(chunk);
      bytes += chunk.length;
      onChunk?.();
    }
  } else text = await res.text();
  return { status: res.status, headers: res.headers, bytes, sha256: hash.digest('hex'), json: text ? JSON.parse(text) : undefined };
}

describe('Cloud API inbound media', () => {
  it('a 5 MB image is fetched once (a redelivered webhook does not fetch again), stored, and downloaded byte-identical', async () => {
    const ws = await createWorkspace(api, { scopes: [...SCOPES] });
    const { phoneNumberId } = await cloudInstance(api, ws.id, { label: 'md' });
    const id = uniqueId('wamid.img');
    const mediaId = uniqueId('9000');
    const from = uniqueMobile();
    const sent = await cloudInbound(phoneNumberId, {
      id,
      from,
      media: { type: 'image', bytes: 5 * MB, mimeType: 'image/jpeg', mediaId, caption: 'foto' },
    });
    // The provider delivers the same notification again: the message is a duplicate, nothing is fetched again.
    const again = await cloudInbound(phoneNumberId, {
      id,
      from,
      media: { type: 'image', bytes: 5 * MB, mimeType: 'image/jpeg', mediaId, caption: 'foto' },
    });
    expect(again.answer.data).toMatchObject({ received: 0, duplicates: 1 });

    const message = await settled(ws, id);
    expect(message).toMatchObject({ direction: 'in', type: 'image', body: 'foto' });
    expect(message.mediaUrl).toBeUndefined();
    expect(message.media).toEqual({
      status: 'stored',
      mimeType: 'image/jpeg',
      size: 5 * MB,
      fileName: null,
      sha256: sent.sha256,
      reason: null,
    });

    const got = await download(api.url, ws.key, message.id);
    expect(got.status).toBe(200);
    expect(got.sha256).toBe(sent.sha256);
    expect(got.bytes).toBe(5 * MB);
    expect(got.headers.get('content-type')).toBe('image/jpeg');
    expect(got.headers.get('content-length')).toBe(String(5 * MB));
    expect(got.headers.get('content-disposition')).toBe(
      `attachment; filename="image-${message.id}.jpg"; filename*=UTF-8''image-${message.id}.jpg`,
    );
    // Later redeliveries after it was stored change nothing either.
    await cloudInbound(phoneNumberId, { id, from, media: { type: 'image', bytes: 5 * MB, mimeType: 'image/jpeg', mediaId } });
    await new Promise((resolve) => setTimeout(resolve, 1000));
    const { fetches } = await emulator(`/__emulator/media?id=${encodeURIComponent(mediaId)}`);
    expect(fetches.map((f: any) => `${f.api} ${f.status}`)).toEqual(['meta 200', 'bytes 200']);
    expect(Number((await api.db('message_media_chunks').where({ message_id: message.id }).count('* as n').first())!.n)).toBe(5);
  });

  it('a text message has media null; a fetch that fails three times is retried with backoff to success', async () => {
    const ws = await createWorkspace(api, { scopes: [...SCOPES] });
    const { phoneNumberId } = await cloudInstance(api, ws.id, { label: 'mr' });
    const textId = uniqueId('wamid.txt');
    await cloudInbound(phoneNumberId, { id: textId, text: 'Oi' });
    expect((await messageOf(ws, textId)).media).toBeNull();

    const id = uniqueId('wamid.retry');
    const mediaId = uniqueId('9100');
    const sent = await cloudInbound(phoneNumberId, {
      id,
      media: { type: 'document', bytes: 300_000, mimeType: 'application/pdf', fileName: 'nota.pdf', mediaId, failTimes: 3 },
    });
    // While it is being fetched the message is there, its media pending, and the download says so.
    const pending = await messageOf(ws, id);
    expect(pending.media).toEqual({
      status: 'pending',
      mimeType: 'application/pdf',
      size: null,
      fileName: 'nota.pdf',
      sha256: null,
      reason: null,
    });
    const early = await download(api.url, ws.key, pending.id);
    expect(early.status).toBe(409);
    expect(early.json.code).toBe('MEDIA_NOT_STORED');

    const message = await settled(ws, id);
    expect(message.media).toMatchObject({ status: 'stored', size: 300_000, fileName: 'nota.pdf', sha256: sent.sha256 });
    const { fetches } = await emulator(`/__emulator/media?id=${encodeURIComponent(mediaId)}`);
    expect(fetches.map((f: any) => `${f.api} ${f.status}`)).toEqual(['meta 500', 'meta 500', 'meta 500', 'meta 200', 'bytes 200']);
    // Backoff: the tries are spread out (1 s, 2 s, 4 s apart), not back to back.
    const times = fetches.map((f: any) => Date.parse(f.at));
    expect(times[3] - times[0]).toBeGreaterThanOrEqual(5000);
    const got = await download(api.url, ws.key, message.id);
    expect(got.sha256).toBe(sent.sha256);
    expect(got.headers.get('content-disposition')).toBe(`attachment; filename="nota.pdf"; filename*=UTF-8''nota.pdf`);
  });

  it('over its type limit, or gone from the provider: unavailable with a reason, never retried, 409 MEDIA_UNAVAILABLE', async () => {
    const ws = await createWorkspace(api, { scopes: [...SCOPES] });
    const { phoneNumberId } = await cloudInstance(api, ws.id, { label: 'mu' });
    const big = uniqueId('wamid.big');
    const bigMedia = uniqueId('9200');
    await cloudInbound(phoneNumberId, { id: big, media: { type: 'sticker', bytes: 600 * 1024, mediaId: bigMedia } });
    const gone = uniqueId('wamid.gone');
    const goneMedia = uniqueId('9300');
    await cloudInbound(phoneNumberId, { id: gone, media: { type: 'audio', bytes: 1000, mediaId: goneMedia, gone: true } });

    const tooBig = await settled(ws, big);
    expect(tooBig.media).toMatchObject({ status: 'unavailable', size: null, sha256: null });
    expect(tooBig.media.reason).toMatch(/limit for its type is 500 KB/);
    const lost = await settled(ws, gone);
    expect(lost.media).toMatchObject({ status: 'unavailable', sha256: null });
    expect(lost.media.reason).toMatch(/no longer has the file.*HTTP 400/);
    for (const message of [tooBig, lost]) {
      const res = await download(api.url, ws.key, message.id);
      expect(res.status).toBe(409);
      expect(res.json.code).toBe('MEDIA_UNAVAILABLE');
    }
    // Final answers are not retried.
    expect((await emulator(`/__emulator/media?id=${bigMedia}`)).fetches).toHaveLength(1);
    expect((await emulator(`/__emulator/media?id=${goneMedia}`)).fetches).toHaveLength(1);
    expect(await api.db('message_media_chunks').whereIn('message_id', [tooBig.id, lost.id])).toEqual([]);
  });

  it("tenant isolation: another workspace's key gets 404 for the file; unknown ids and text messages are 404", async () => {
    const ws = await createWorkspace(api, { scopes: [...SCOPES] });
    const other = await createWorkspace(api, { scopes: [...SCOPES] });
    const { phoneNumberId } = await cloudInstance(api, ws.id, { label: 'mt' });
    const id = uniqueId('wamid.iso');
    await cloudInbound(phoneNumberId, { id, media: { type: 'image', bytes: 2000, mimeType: 'image/png' } });
    const message = await settled(ws, id);
    expect(message.media.status).toBe('stored');
    expect((await download(api.url, ws.key, message.id)).status).toBe(200);

    const foreign = await api.request('GET', `/api/v1/messages/${message.id}/media`, { key: other.key });
    expectError(foreign, 404, 'NOT_FOUND');
    expect(foreign.text).not.toContain(message.id);
    expectError(await api.request('GET', `/api/v1/messages/not-a-uuid/media`, { key: ws.key }), 404, 'NOT_FOUND');
    expectError(await api.request('GET', `/api/v1/messages/00000000-0000-4000-8000-000000000000/media`, { key: ws.key }), 404, 'NOT_FOUND');
    const textId = uniqueId('wamid.t');
    await cloudInbound(phoneNumberId, { id: textId, text: 'Oi' });
    expectError(await api.request('GET', `/api/v1/messages/${(await messageOf(ws, textId)).id}/media`, { key: ws.key }), 404, 'NOT_FOUND');
    // The scope: a key without conversations:read is refused.
    const noRead = await createWorkspace(api, { scopes: ['leads:read'] });
    expectError(await api.request('GET', `/api/v1/messages/${message.id}/media`, { key: noRead.key }), 403, 'INSUFFICIENT_SCOPE');
  });
});

describe("the plan's media storage limit", () => {
  it('keeps files while they fit in mediaStorageMb; one that would pass it is unavailable with the reason, and its bytes are not kept', async () => {
    const ws = await createWorkspace(api, { scopes: [...SCOPES], plan: { mediaStorageMb: 1 } });
    const { phoneNumberId } = await cloudInstance(api, ws.id, { label: 'ms' });
    const first = uniqueId('wamid.fits');
    await cloudInbound(phoneNumberId, { id: first, media: { type: 'image', bytes: 600_000 } });
    expect((await settled(ws, first)).media).toMatchObject({ status: 'stored', size: 600_000 });
    // 600,000 + 500,000 bytes > 1 MB (1,048,576): the Cloud API declares the size, so nothing is downloaded.
    const second = uniqueId('wamid.over');
    const secondMedia = uniqueId('9400');
    await cloudInbound(phoneNumberId, { id: second, media: { type: 'image', bytes: 500_000, mediaId: secondMedia } });
    const refused = await settled(ws, second);
    expect(refused.media).toMatchObject({ status: 'unavailable', size: null, sha256: null });
    expect(refused.media.reason).toBe(
      "the workspace's stored media would pass its plan's limit (mediaStorageMb: 1 MB); the file was not kept",
    );
    expect((await emulator(`/__emulator/media?id=${secondMedia}`)).fetches.map((f: any) => f.api)).toEqual(['meta']);
    expect(await api.db('message_media_chunks').where({ message_id: refused.id })).toEqual([]);
    expectError(await api.request('GET', `/api/v1/messages/${refused.id}/media`, { key: ws.key }), 409, 'MEDIA_UNAVAILABLE');
    // A smaller one still fits; the limit counts stored bytes, and a raised limit makes room at once.
    const small = uniqueId('wamid.small');
    await cloudInbound(phoneNumberId, { id: small, media: { type: 'image', bytes: 400_000 } });
    expect((await settled(ws, small)).media.status).toBe('stored');
    expect((await api.admin('PATCH', `/admin/v1/workspaces/${ws.id}`, { plan: { mediaStorageMb: 2 } })).status).toBe(200);
    const later = uniqueId('wamid.later');
    await cloudInbound(phoneNumberId, { id: later, media: { type: 'image', bytes: 500_000 } });
    expect((await settled(ws, later)).media.status).toBe('stored');
    // Never unlimited: null is refused, and a workspace gets the default.
    expectError(await api.admin('PATCH', `/admin/v1/workspaces/${ws.id}`, { plan: { mediaStorageMb: null } }), 400, 'VALIDATION');
    const fresh = await api.admin('POST', '/admin/v1/workspaces', { name: 'Default media limit' });
    expect(fresh.body.data.plan.mediaStorageMb).toBe(10_240);
  });
});

describe('fair between workspaces', () => {
  it("one workspace's backlog of fetches never holds back another's: at most 16 of a workspace in flight, another's file claimed at once", async () => {
    const flood = await createWorkspace(api, { scopes: [...SCOPES] });
    const other = await createWorkspace(api, { scopes: [...SCOPES] });
    const [flooded, quiet] = await Promise.all([
      cloudInstance(api, flood.id, { label: 'mf' }),
      cloudInstance(api, other.id, { label: 'mq' }),
    ]);
    // 40 files whose first three fetches fail: each stays in flight for its retries (1 s, 2 s, 4 s).
    const ids = Array.from({ length: 40 }, () => uniqueId('wamid.flood'));
    await Promise.all(ids.map((id) => cloudInbound(flooded.phoneNumberId, { id, media: { type: 'image', bytes: 2_000, failTimes: 3 } })));
    const inFlight = async () => {
      const rows = await api.db('message_media').where({ workspace_id: flood.id, status: 'pending' }).select('started_at');
      return { started: rows.filter((r) => r.started_at !== null).length, waiting: rows.filter((r) => r.started_at === null).length };
    };
    let most = 0;
    const watch = setInterval(() => void inFlight().then((n) => (most = Math.max(most, n.started))), 50);
    try {
      await eventually('the flood to fill its share of fetches', async () => (await inFlight()).started >= 16, 30_000, 50);
      // The other workspace's file arrives behind 40 of the flood's: it is claimed at the next pass,
      // before the flood's files still waiting for their turn (checked below, once all are done).
      const id = uniqueId('wamid.quiet');
      await cloudInbound(quiet.phoneNumberId, { id, media: { type: 'image', bytes: 2_000 } });
      expect((await settled(other, id, 30_000)).media.status).toBe('stored');
      // The flood drains at its own pace, never more than its share at once.
      await eventually('the flood to drain', async () => (await inFlight()).started + (await inFlight()).waiting === 0, 120_000, 200);
    } finally {
      clearInterval(watch);
    }
    expect(most).toBe(16);
    const stored = await api.db('message_media').where({ workspace_id: flood.id, status: 'stored' }).count({ n: '*' }).first();
    expect(Number(stored!.n)).toBe(40);
    // Claimed in turn: some of the flood's files, there before the other's, started only after it.
    const { started_at: otherStarted } = await api.db('message_media').where({ workspace_id: other.id }).first('started_at');
    const after = await api
      .db('message_media')
      .where({ workspace_id: flood.id })
      .where('started_at', '>', otherStarted)
      .count({ n: '*' })
      .first();
    expect(Number(after!.n)).toBeGreaterThan(0);
  }, 180_000);
});

describe('lifetime', () => {
  it('media live as long as their message: deleting the contact, or the workspace, deletes the file and its chunks', async () => {
    const ws = await createWorkspace(api, { scopes: [...SCOPES] });
    const { phoneNumberId } = await cloudInstance(api, ws.id, { label: 'ml' });
    const ids = [uniqueId('wamid.a'), uniqueId('wamid.b')];
    for (const id of ids) await cloudInbound(phoneNumberId, { id, media: { type: 'image', bytes: 1_500_000 } });
    const [first, second] = [await settled(ws, ids[0]), await settled(ws, ids[1])];
    const chunks = (messageId: string) => api.db('message_media_chunks').where({ message_id: messageId }).count('* as n').first();
    expect(Number((await chunks(first.id))!.n)).toBe(2);

    // A contact erased for good (the admin's erasure, or SQL): its conversations, messages and media go.
    const { conversation_id } = await api.db('messages').where({ id: first.id }).first('conversation_id');
    const { contact_id } = await api.db('conversations').where({ id: conversation_id }).first('contact_id');
    await api.db('contacts').where({ workspace_id: ws.id, id: contact_id }).delete();
    expect(await api.db('message_media').where({ message_id: first.id })).toEqual([]);
    expect(Number((await chunks(first.id))!.n)).toBe(0);
    expect(Number((await chunks(second.id))!.n)).toBe(2);
    // A workspace removed: everything of it.
    await api.db('workspaces').where({ id: ws.id }).delete();
    expect(await api.db('message_media').where({ workspace_id: ws.id })).toEqual([]);
    expect(await api.db('message_media_chunks').where({ workspace_id: ws.id })).toEqual([]);
  });
});

describe('web gateway inbound media', () => {
  it('is fetched through the base64 endpoint, stored and downloaded byte-identical with its file name', async () => {
    const ws = await createWorkspace(api, { scopes: [...SCOPES] });
    const { instanceName } = await webInstance(api, ws.id, 'gw');
    const fileName = 'contrato ação "final".pdf';
    const sent = await emulator('/__emulator/web/inbound', {
      instanceName,
      from: uniqueMobile(),
      media: { type: 'document', bytes: 3 * MB + 1, mimeType: 'application/pdf', fileName, caption: 'segue', failTimes: 1 },
    });
    expect(sent).toMatchObject({ delivered: 200, answer: { data: { received: 1 } } });

    const message = await settled(ws, sent.id);
    expect(message).toMatchObject({ type: 'document', body: 'segue' });
    expect(message.media).toEqual({
      status: 'stored',
      mimeType: 'application/pdf',
      size: 3 * MB + 1,
      fileName,
      sha256: sent.sha256,
      reason: null,
    });
    const got = await download(api.url, ws.key, message.id);
    expect(got).toMatchObject({ status: 200, bytes: 3 * MB + 1, sha256: sent.sha256 });
    expect(got.headers.get('content-disposition')).toBe(
      `attachment; filename="contrato a__o _final_.pdf"; filename*=UTF-8''contrato%20a%C3%A7%C3%A3o%20%22final%22.pdf`,
    );
    const { fetches } = await emulator(`/__emulator/media?id=${sent.id}`);
    expect(fetches.map((f: any) => `${f.api} ${f.status}`)).toEqual(['base64 500', 'base64 200']);
  });
});

describe('memory of the API process while downloading', () => {
  let child: Child | undefined;
  afterAll(async () => {
    await child?.stop();
  });

  /** VmRSS of a process (Linux /proc). */
  function rss(pid: number): number {
    const kb = /^VmRSS:\s+(\d+) kB/m.exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'));
    return Number(kb![1]) * 1024;
  }

  it('an 80 MB document streams out without the API holding it (RSS grows by far less than the file)', async () => {
    const ws = await createWorkspace(api, { scopes: [...SCOPES] });
    const { phoneNumberId } = await cloudInstance(api, ws.id, { label: 'mm' });
    const size = 80 * MB;
    const id = uniqueId('wamid.doc');
    const sent = await cloudInbound(phoneNumberId, { id, media: { type: 'document', bytes: size, mimeType: 'application/pdf' } });
    const message = await settled(ws, id, 120_000);
    expect(message.media).toMatchObject({ status: 'stored', size });

    // The API as npm start runs it: its own process, so its memory is its own. One download after a
    // warm-up, its peak against the baseline just before it. An API that held the file grows by more
    // than half its size in every fresh process; the garbage of the chunks (about 17 MB measured)
    // can pass that once when the machine is loaded and the GC lags, so a second fresh process may
    // measure again (a later download in the same process would reuse the memory the first freed).
    const grew: number[] = [];
    for (let attempt = 0; attempt < 2 && !(grew.length && grew[grew.length - 1] < size / 2); attempt++) {
      await child?.stop();
      const port = 20_000 + Math.floor(Math.random() * 20_000);
      const url = `http://127.0.0.1:${port}`;
      child = startChild({
        name: 'media-api',
        ...nodeTs('api/server.ts'),
        // No hosted send worker: its start (the bundle, the Temporal runtime) would grow the memory this measures.
        env: { PORT: String(port), PUBLIC_BASE_URL: url, API_SEND_WORKER: 'false' },
        logFile: path.join(LOG_DIR, `media-api-${port}.log`),
      });
      await waitForHttp(`${url}/health`, child);
      const pid = child.process.pid!;
      // Warm up (the route's modules and the connection pool), then the baseline.
      expect((await download(url, ws.key, message.id)).sha256).toBe(sent.sha256);
      await new Promise((resolve) => setTimeout(resolve, 500));
      const before = rss(pid);
      let peak = before;
      const timer = setInterval(() => (peak = Math.max(peak, rss(pid))), 10);
      const got = await download(url, ws.key, message.id, () => (peak = Math.max(peak, rss(pid))));
      clearInterval(timer);
      expect(got).toMatchObject({ status: 200, bytes: size, sha256: sent.sha256 });
      grew.push(peak - before);
    }
    expect({ grewMB: grew.map((g) => Math.round(g / MB)), underHalfOfFile: grew[grew.length - 1] < size / 2 }).toMatchObject({
      underHalfOfFile: true,
    });
  }, 240_000);
});
