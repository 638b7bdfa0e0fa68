import { createHash } from 'node:crypto';
import type { Knex } from 'knex';
import { lockUntilCommit, type Db, type KeyRing } from '../platform';
import { workspaceQuery } from '../access';
import { openInstanceConfig, type InstanceConfig, type Provider } from './instances';
import { ApiError, isUuid } from '../kernel';
import { checkMediaSize, MEDIA_LIMITS } from './sending';
import { sendRequestOf } from './send-requests';

/**
 * Inbound media (docs/messaging.md, "Media"): the file of an inbound image, audio, video, document
 * or sticker, fetched from the provider by `inboundMediaWorkflow` (workflows/inbound-media.ts) and
 * stored in PostgreSQL: `message_media` (one row per message: status, MIME type, size, file name,
 * sha256, reason) and `message_media_chunks` (the bytes, at most MEDIA_CHUNK_BYTES a row, so
 * neither the fetch nor the download holds a whole file in memory).
 *
 * The `pending` row is written in the webhook's transaction, with the message; it is also the
 * work queue of the worker's media dispatcher (workers/media-dispatcher.ts), which starts the
 * workflow once the transaction has committed. A row stays `pending` until the workflow stores
 * the file (`stored`) or gives up (`unavailable`, with a reason). Media follow their message's
 * lifetime: deleting the message (its conversation, contact or workspace) deletes them.
 */

export type InboundMediaType = 'image' | 'audio' | 'video' | 'document' | 'sticker';
export type MediaStatus = 'pending' | 'stored' | 'unavailable';

/** The bytes of one `message_media_chunks` row: 1 MiB. */
export const MEDIA_CHUNK_BYTES = 1024 * 1024;

/**
 * The most bytes an inbound file of a type may have: the Cloud API's limits (MEDIA_LIMITS, what
 * WhatsApp itself accepts), and 500 KB for a sticker (an animated one; a static one is 100 KB).
 */
export const INBOUND_MEDIA_LIMITS = { ...MEDIA_LIMITS, sticker: 500 * 1024 } as Record<InboundMediaType, number>;

/** The limit in words: "5 MB", "500 KB". */
export function limitText(type: InboundMediaType): string {
  const limit = INBOUND_MEDIA_LIMITS[type];
  return limit >= 1024 * 1024 ? `${limit / (1024 * 1024)} MB` : `${limit / 1024} KB`;
}

export interface MediaRow {
  message_id: string;
  workspace_id: string;
  instance_id: string;
  type: InboundMediaType;
  media_ref: string;
  status: MediaStatus;
  mime_type: string | null;
  size: string | number | null;
  file_name: string | null;
  sha256: string | null;
  reason: string | null;
}

const clip = (value: string | undefined | null, max: number): string | null => (value ? value.slice(0, max) : null);

/** A provider's reference to an inbound file: a media id, a message id, or (Instagram) the attachment's signed CDN URL. */
const MEDIA_REF_MAX = 2048;

/** The pending row of an inbound media message, in the webhook's transaction (nothing when it exists). */
export async function recordPendingMedia(
  trx: Knex.Transaction,
  media: {
    workspaceId: string;
    messageId: string;
    instanceId: string;
    type: InboundMediaType;
    mediaRef: string;
    mimeType?: string;
    fileName?: string;
  },
): Promise<void> {
  await trx.raw(
    `INSERT INTO message_media (message_id, workspace_id, instance_id, type, media_ref, mime_type, file_name)
     VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (message_id) DO NOTHING`,
    [
      media.messageId,
      media.workspaceId,
      media.instanceId,
      media.type,
      media.mediaRef.slice(0, MEDIA_REF_MAX),
      clip(media.mimeType, 255),
      clip(media.fileName, 255),
    ],
  );
}

/** The `media` of a message record: null without media, else every field, unknown ones null. */
export function serializeMedia(row: Pick<MediaRow, 'status' | 'mime_type' | 'size' | 'file_name' | 'sha256' | 'reason'>) {
  return {
    status: row.status,
    mimeType: row.mime_type,
    size: row.size === null ? null : Number(row.size),
    fileName: row.file_name,
    sha256: row.sha256,
    reason: row.reason,
  };
}
export type MediaRecord = ReturnType<typeof serializeMedia>;

/** The media of some of a workspace's messages, by message id (one query). */
export async function mediaOfMessages(db: Db, workspaceId: string, messageIds: string[]): Promise<Map<string, MediaRecord>> {
  if (messageIds.length === 0) return new Map();
  const rows: MediaRow[] = await db('message_media')
    .where({ workspace_id: workspaceId })
    .whereIn('message_id', messageIds)
    .select('message_id', 'status', 'mime_type', 'size', 'file_name', 'sha256', 'reason');
  return new Map(rows.map((r) => [r.message_id, serializeMedia(r)]));
}

// ---------------------------------------------------------------------------------------------
// The fetch's side (activities/inbound-media.ts, through the provider's adapter in
// activities/providers/inbound-media.ts)

export interface MediaFetchInput {
  workspaceId: string;
  messageId: string;
}

export interface MediaFetchResult {
  status: MediaStatus;
  reason?: string;
}

/** Final: the media is marked `unavailable` with this message as its reason (trying again cannot fix it). */
export class MediaUnavailable extends Error {}

/** Where a provider's adapter fetches a file from: the row's reference and type, its instance's provider and configuration. */
export interface MediaSource {
  row: MediaRow;
  provider: Provider;
  config: InstanceConfig;
}

/** What the provider said of a file besides its bytes. */
export interface FetchedMedia {
  mimeType?: string;
  fileName?: string;
}

/**
 * The bytes' sink of one fetch: counts them (its type's limit, the workspace's room), hashes them,
 * and writes a chunk each MEDIA_CHUNK_BYTES, so at most one chunk is held. Past a limit it throws
 * MediaUnavailable. `onChunk` runs after each chunk written (the activity's heartbeat).
 */
export class MediaChunkWriter {
  private seq = 0;
  private parts: Buffer[] = [];
  private held = 0;
  size = 0;
  private readonly hash = createHash('sha256');
  constructor(
    private readonly db: Db,
    private readonly row: MediaRow,
    /** The workspace's room for stored media when the fetch began: a file past it is not kept. */
    private readonly room: { limitMb: number; bytes: number },
    private readonly onChunk: () => void = () => {},
  ) {}

  /** A size the provider declared before the bytes: a file over its type's limit, or past the room, is refused at once. */
  declare(declared: number): void {
    if (!Number.isFinite(declared)) return;
    const type = this.row.type;
    if (declared > INBOUND_MEDIA_LIMITS[type])
      throw new MediaUnavailable(
        `the ${type} is ${(declared / 1048576).toFixed(1)} MB; the provider's limit for its type is ${limitText(type)}`,
      );
    if (declared > this.room.bytes) throw new MediaUnavailable(storageFullReason(this.room.limitMb));
  }

  async write(data: Buffer): Promise<void> {
    if (data.length === 0) return;
    this.size += data.length;
    const limit = INBOUND_MEDIA_LIMITS[this.row.type];
    if (this.size > limit)
      throw new MediaUnavailable(`the ${this.row.type} is more than ${limitText(this.row.type)}, the provider's limit for its type`);
    if (this.size > this.room.bytes) throw new MediaUnavailable(storageFullReason(this.room.limitMb));
    this.hash.update(data);
    this.parts.push(data);
    this.held += data.length;
    while (this.held >= MEDIA_CHUNK_BYTES) {
      const all = Buffer.concat(this.parts, this.held);
      await this.flush(all.subarray(0, MEDIA_CHUNK_BYTES));
      const rest = all.subarray(MEDIA_CHUNK_BYTES);
      this.parts = rest.length > 0 ? [Buffer.from(rest)] : [];
      this.held = rest.length;
    }
  }

  private async flush(data: Buffer): Promise<void> {
    await this.db('message_media_chunks').insert({
      workspace_id: this.row.workspace_id,
      message_id: this.row.message_id,
      seq: this.seq,
      data,
    });
    this.seq += 1;
    this.onChunk();
  }

  async end(): Promise<{ size: number; sha256: string }> {
    if (this.held > 0) await this.flush(Buffer.concat(this.parts, this.held));
    this.parts = [];
    this.held = 0;
    return { size: this.size, sha256: this.hash.digest('hex') };
  }
}

/**
 * One try of an inbound media file's fetch (docs/messaging.md, "Media"): the pending row claimed
 * (a file is never fetched twice), its instance's configuration opened, the chunks of an earlier
 * try forgotten, the bytes fetched by `fetchFile` (the provider's adapter) into a MediaChunkWriter,
 * then `stored` (or, past the workspace's room, `unavailable`). A MediaUnavailable from the
 * adapter or the writer marks the media `unavailable` with its reason. `retry`: another try of the
 * same file overlapped this one (a worker presumed dead), so the caller fails retryably and the
 * file is written again.
 */
export async function fetchAndStoreMedia(
  db: Db,
  ring: KeyRing,
  input: MediaFetchInput,
  fetchFile: (source: MediaSource, sink: MediaChunkWriter) => Promise<FetchedMedia>,
  onChunk?: () => void,
): Promise<MediaFetchResult | { retry: string }> {
  const row: MediaRow | undefined = await db('message_media')
    .where({ workspace_id: input.workspaceId, message_id: input.messageId })
    .first();
  if (!row) return { status: 'unavailable', reason: 'the message was deleted' };
  if (row.status !== 'pending') return { status: row.status }; // fetched already: never twice
  const instance = await instanceOfMedia(db, ring, row);
  if (!instance) {
    await markUnavailable(db, row.workspace_id, row.message_id, 'the instance that received the message no longer exists');
    return { status: 'unavailable' };
  }
  // The chunks an interrupted earlier try wrote are forgotten: a try always writes the file from its start.
  await db('message_media_chunks').where({ workspace_id: row.workspace_id, message_id: row.message_id }).delete();
  const sink = new MediaChunkWriter(db, row, await mediaStorageRoom(db, row.workspace_id), onChunk);
  try {
    const said = await fetchFile({ row, ...instance }, sink);
    const file = await sink.end();
    const stored = await markStored(db, row.workspace_id, row.message_id, {
      ...file,
      mimeType: row.mime_type ?? said.mimeType ?? 'application/octet-stream',
      fileName: said.fileName ?? null,
    });
    if (stored === 'mismatch') return { retry: 'the stored chunks do not add up to the file; fetching it again' };
    // Other files of the workspace were stored meanwhile and this one no longer fits: not kept.
    if (stored === 'full') return { status: 'unavailable' };
    return { status: 'stored' };
  } catch (err) {
    if (!(err instanceof MediaUnavailable)) throw err;
    await markUnavailable(db, row.workspace_id, row.message_id, err.message);
    return { status: 'unavailable', reason: err.message };
  }
}

/** The instance that received the message: its provider and configuration, secrets opened; undefined once deleted. */
export async function instanceOfMedia(
  db: Db,
  ring: KeyRing,
  row: Pick<MediaRow, 'workspace_id' | 'instance_id'>,
): Promise<Pick<MediaSource, 'provider' | 'config'> | undefined> {
  const instance: Pick<MediaSource, 'provider' | 'config'> | undefined = await db('instances')
    .where({ workspace_id: row.workspace_id, id: row.instance_id })
    .first('provider', 'config');
  return instance && { provider: instance.provider, config: openInstanceConfig(ring, instance.config, row.workspace_id) };
}

/** Why a file is not kept when the workspace's stored media would pass its plan's `mediaStorageMb`. */
export function storageFullReason(limitMb: number): string {
  return `the workspace's stored media would pass its plan's limit (mediaStorageMb: ${limitMb} MB); the file was not kept`;
}

/**
 * Room left for stored media in the workspace (its plan's `mediaStorageMb` less the files stored):
 * a fetch stops as soon as its file would not fit (markStored decides, under a lock).
 */
export async function mediaStorageRoom(db: Db, workspaceId: string): Promise<{ limitMb: number; bytes: number }> {
  const row: { limit_mb: number; used: string } | undefined = await workspaceQuery(db, workspaceId).first({
    limit_mb: 'media_storage_mb',
    used: db.raw(`(SELECT coalesce(sum(size), 0) FROM message_media WHERE workspace_id = ? AND status = 'stored')`, [workspaceId]),
  });
  if (!row) return { limitMb: 0, bytes: 0 };
  return { limitMb: row.limit_mb, bytes: Math.max(0, row.limit_mb * 1_048_576 - Number(row.used)) };
}

/**
 * `stored`, once: only a pending row moves (a second fetch of the same file changes nothing), and
 * only when its chunks hold exactly `size` bytes (a try that overlapped another's cannot store a
 * file the other cut short). Answers whether it moved; `mismatch` when the chunks did not add up.
 * A file that would take the workspace's stored media past its plan's `mediaStorageMb` is not
 * kept: `unavailable` with the reason, chunks deleted, answer `full`. The check and the move hold
 * the workspace's media lock, so two fetches finishing at once cannot both pass the limit.
 */
export async function markStored(
  db: Db,
  workspaceId: string,
  messageId: string,
  file: { size: number; sha256: string; mimeType: string; fileName: string | null },
): Promise<boolean | 'mismatch' | 'full'> {
  return db.transaction(async (trx) => {
    await lockUntilCommit(trx, `media-storage:${workspaceId}`);
    const room = await mediaStorageRoom(trx, workspaceId);
    if (file.size > room.bytes) {
      const moved = await markUnavailableIn(trx, workspaceId, messageId, storageFullReason(room.limitMb), { mimeType: file.mimeType });
      return moved ? 'full' : false;
    }
    const n = await trx('message_media')
      .where({ workspace_id: workspaceId, message_id: messageId, status: 'pending' })
      .whereRaw('(SELECT coalesce(sum(octet_length(data)), 0) FROM message_media_chunks WHERE workspace_id = ? AND message_id = ?) = ?', [
        workspaceId,
        messageId,
        file.size,
      ])
      .update({
        status: 'stored',
        size: file.size,
        sha256: file.sha256,
        mime_type: file.mimeType.slice(0, 255),
        file_name: trx.raw('coalesce(file_name, ?)', [clip(file.fileName, 255)]),
        reason: null,
        updated_at: trx.fn.now(),
      });
    if (n > 0) return true;
    const row: { status: MediaStatus } | undefined = await trx('message_media')
      .where({ workspace_id: workspaceId, message_id: messageId })
      .first('status');
    return row?.status === 'pending' ? 'mismatch' : false;
  });
}

/** `unavailable` with a reason (its chunks, if a try left any, deleted); only a pending row moves. */
export async function markUnavailable(db: Db, workspaceId: string, messageId: string, reason: string): Promise<boolean> {
  return db.transaction((trx) => markUnavailableIn(trx, workspaceId, messageId, reason));
}

async function markUnavailableIn(
  trx: Knex.Transaction,
  workspaceId: string,
  messageId: string,
  reason: string,
  known: { mimeType?: string } = {},
): Promise<boolean> {
  const n = await trx('message_media')
    .where({ workspace_id: workspaceId, message_id: messageId, status: 'pending' })
    .update({
      status: 'unavailable',
      reason: reason.slice(0, 1000),
      ...(known.mimeType ? { mime_type: known.mimeType.slice(0, 255) } : {}),
      updated_at: trx.fn.now(),
    });
  if (n > 0) await trx('message_media_chunks').where({ workspace_id: workspaceId, message_id: messageId }).delete();
  return n > 0;
}

// ---------------------------------------------------------------------------------------------
// A send's media URL, checked before the send (activities/media.ts checkMedia)

/**
 * The size check of a send's media: the URL and type of its stored send request (or, for a send
 * started before send_requests, those given), the size `sizeAt` learns (a HEAD through the media
 * adapter, activities/providers/media-download.ts; null when it cannot tell), checked against the
 * type's limit (422 MEDIA_TOO_LARGE). A size nobody can learn is left to the provider, or to the
 * download for a web gateway.
 */
export async function checkSendMedia(
  db: Db,
  input: { workspaceId: string; requestId: string } | { url: string; type: string },
  sizeAt: (url: string) => Promise<number | null>,
): Promise<{ bytes: number | null }> {
  const { url, type } = 'url' in input ? input : await mediaOfSend(db, input);
  const bytes = await sizeAt(url);
  checkMediaSize(type, bytes);
  return { bytes };
}

async function mediaOfSend(db: Db, input: { workspaceId: string; requestId: string }): Promise<{ url: string; type: string }> {
  const { message } = await sendRequestOf(db, input);
  if (!message.mediaUrl) throw new ApiError('VALIDATION', 'This send carries no mediaUrl');
  return { url: message.mediaUrl, type: message.type };
}

// ---------------------------------------------------------------------------------------------
// The media dispatcher's side (workers/media-dispatcher.ts)

/** How long after a start a still-pending row is started again (a start that was lost, a workflow terminated). */
export const RESTART_AFTER_MINUTES = 15;

/**
 * How many fetches of one workspace may be in flight at once (started, still pending, started
 * less than RESTART_AFTER_MINUTES ago). A workspace flooded with inbound media (or whose provider
 * keeps failing its fetches) waits behind its own fetches only: every other workspace's media are
 * claimed at the next pass.
 */
export const MEDIA_FETCHES_PER_WORKSPACE = 16;

/**
 * Pending rows whose workflow is to be started (never started, or started over
 * RESTART_AFTER_MINUTES ago and still pending), marked started now. Fair between workspaces:
 * each gets at most MEDIA_FETCHES_PER_WORKSPACE in flight, and a pass takes the workspaces with
 * fewest in flight first (each one's oldest rows), so one workspace's backlog never delays
 * another's first file. The update re-checks each row, so two workers never start the same row
 * twice (the second one's update finds it started and skips it); with two workers at once, a
 * workspace can briefly have a few more in flight than the bound.
 */
export async function claimMediaToStart(db: Db, limit: number): Promise<{ workspace_id: string; message_id: string }[]> {
  const result = await db.raw<{ rows: { workspace_id: string; message_id: string }[] }>(
    `WITH pending AS (
       SELECT message_id, workspace_id, created_at,
              coalesce(started_at >= now() - make_interval(mins => :restart), false) AS in_flight
         FROM message_media
        WHERE status = 'pending'
     ), ranked AS (
       SELECT message_id, created_at,
              count(*) FILTER (WHERE in_flight) OVER w
                + row_number() OVER (PARTITION BY workspace_id, in_flight ORDER BY created_at, message_id) AS slot,
              in_flight
         FROM pending
       WINDOW w AS (PARTITION BY workspace_id)
     )
     UPDATE message_media m SET started_at = now()
       FROM (SELECT message_id FROM ranked WHERE NOT in_flight AND slot <= :perWorkspace ORDER BY slot, created_at LIMIT :limit) pick
      WHERE m.message_id = pick.message_id
        AND m.status = 'pending'
        AND (m.started_at IS NULL OR m.started_at < now() - make_interval(mins => :restart))
     RETURNING m.workspace_id, m.message_id`,
    { restart: RESTART_AFTER_MINUTES, perWorkspace: MEDIA_FETCHES_PER_WORKSPACE, limit },
  );
  return result.rows;
}

/** A start that failed: the row is taken again at the next pass. */
export async function unclaimMedia(db: Db, messageIds: string[]): Promise<void> {
  if (messageIds.length > 0)
    await db('message_media').whereIn('message_id', messageIds).where({ status: 'pending' }).update({ started_at: null });
}

/** The workflow id of a message's media fetch. */
export function mediaWorkflowId(workspaceId: string, messageId: string): string {
  return `media/${workspaceId}/${messageId}`;
}

// ---------------------------------------------------------------------------------------------
// The download (GET /api/v1/messages/{id}/media)

const EXTENSIONS: Record<string, string> = {
  'image/jpeg': 'jpg',
  'image/png': 'png',
  'image/webp': 'webp',
  'audio/ogg': 'ogg',
  'audio/mpeg': 'mp3',
  'audio/mp4': 'm4a',
  'video/mp4': 'mp4',
  'application/pdf': 'pdf',
};

/**
 * The stored file of one of the workspace's messages. 404 NOT_FOUND for an unknown message, one
 * of another workspace, or one without media; 409 MEDIA_NOT_STORED while pending; 409
 * MEDIA_UNAVAILABLE once given up (the reason in the message).
 */
export async function openStoredMedia(db: Db, workspaceId: string, messageId: string) {
  if (!isUuid(messageId)) throw new ApiError('NOT_FOUND', 'Message not found');
  const message = await db('messages').where({ workspace_id: workspaceId, id: messageId }).first('id');
  if (!message) throw new ApiError('NOT_FOUND', 'Message not found');
  const row: MediaRow | undefined = await db('message_media').where({ workspace_id: workspaceId, message_id: messageId }).first();
  if (!row) throw new ApiError('NOT_FOUND', 'This message has no media file', { hint: 'Only inbound media messages have a file here.' });
  if (row.status === 'pending') {
    throw new ApiError('MEDIA_NOT_STORED', 'The media file is still being fetched from the provider', {
      hint: "Try again in a few seconds; the message's media.status says when it is stored.",
    });
  }
  if (row.status === 'unavailable') {
    throw new ApiError('MEDIA_UNAVAILABLE', `The media file could not be fetched from the provider: ${row.reason ?? 'unknown reason'}`, {
      hint: 'The file is not stored and will not be fetched again.',
    });
  }
  const mimeType = row.mime_type ?? 'application/octet-stream';
  const fileName = row.file_name ?? `${row.type}-${messageId}.${EXTENSIONS[mimeType.split(';')[0]] ?? 'bin'}`;
  /** The bytes, one chunk (≤ 1 MiB) read from the database at a time, as the client takes them. */
  async function* chunks(): AsyncGenerator<Buffer> {
    for (let seq = 0; ; seq += 1) {
      const chunk: { data: Buffer } | undefined = await db('message_media_chunks')
        .where({ workspace_id: workspaceId, message_id: messageId, seq })
        .first('data');
      if (!chunk) return;
      yield chunk.data;
    }
  }
  return { messageId, mimeType, size: Number(row.size), fileName, sha256: row.sha256!, chunks: chunks() };
}

/** `Content-Disposition: attachment` with an ASCII fallback and the RFC 5987 UTF-8 name. */
export function contentDisposition(fileName: string): string {
  const ascii = fileName
    .replace(/[^\x20-\x7e]/g, '_')
    .replace(/["\\]/g, '_')
    .replace(/[\r\n]/g, '');
  const encoded = encodeURIComponent(fileName).replace(/['()*]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`);
  return `attachment; filename="${ascii}"; filename*=UTF-8''${encoded}`;
}
