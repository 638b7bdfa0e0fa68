import { Readable } from 'node:stream';
import { z } from 'zod';
import { AnyRoute, apiKey, route } from '../route';
// Side effect: zod's .openapi() (registered by the shared schemas module).
import '../schemas';
import { contentDisposition, openStoredMedia } from '../../domain/messaging';

/**
 * The stored file of an inbound media message (docs/messaging.md, "Media"), streamed from
 * PostgreSQL one chunk (≤ 1 MiB) at a time: the API never holds the whole file.
 */
export const mediaRoutes: AnyRoute[] = [
  route({
    method: 'get',
    path: '/api/v1/messages/{id}/media',
    operationId: 'downloadMessageMedia',
    ...apiKey('Conversations', 'conversations:read', 'read'),
    summary: "Download an inbound message's media file",
    description:
      'The file of an inbound image, audio, video, document or sticker, as the provider delivered it, once stored ' +
      "(the message's `media.status` is `stored`). The answer is the bytes with `Content-Type` (the file's MIME type), " +
      '`Content-Length` (`media.size`) and `Content-Disposition: attachment` with the file name (ASCII `filename` and ' +
      'UTF-8 `filename*`); their SHA-256 is `media.sha256`. While the file is still being fetched the answer is 409 ' +
      '`MEDIA_NOT_STORED` (try again shortly); a file that could not be fetched (gone from the provider, over its ' +
      "type's size limit, or every try within an hour failed) is 409 `MEDIA_UNAVAILABLE`, with `media.reason`. An " +
      "unknown message, another workspace's, or one without a media file is 404 `NOT_FOUND`.",
    params: z.object({ id: z.string().max(64) }),
    responseContentType: 'application/octet-stream',
    response: z.string().openapi({ type: 'string', format: 'binary' }),
    errors: ['MEDIA_NOT_STORED', 'MEDIA_UNAVAILABLE'],
    handler: async (ctx, { params }) => {
      const file = await openStoredMedia(ctx.deps.db, ctx.state.auth!.workspaceId, params.id);
      ctx.set('Content-Disposition', contentDisposition(file.fileName));
      ctx.set('X-Content-Type-Options', 'nosniff');
      ctx.set('Cache-Control', 'private, no-store');
      ctx.type = file.mimeType;
      ctx.body = Readable.from(file.chunks, { objectMode: false });
      ctx.length = file.size;
      return undefined;
    },
  }),
];
