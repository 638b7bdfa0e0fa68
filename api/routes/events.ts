import { z } from 'zod';
import { ApiError } from '../../domain/kernel';
import { eventListQuery, listEvents, WEBHOOK_EVENTS } from '../../domain/webhooks';
import { apiKey, route } from '../route';
import { cursorListOf } from '../schemas';

const EventDelivery = z
  .object({
    subscriptionId: z.string(),
    deliveryId: z.string(),
    status: z.enum(['pending', 'succeeded', 'failed']),
    attempts: z.number(),
    lastStatusCode: z.number().nullable(),
    lastError: z.string().nullable(),
    deliveredAt: z.string().nullable(),
  })
  .openapi('EventDelivery');

const Event = z
  .object({
    id: z.string().openapi({ description: 'The event id, also sent with every delivery of it as `X-Service-Event-Id`.' }),
    type: z.enum(WEBHOOK_EVENTS),
    createdAt: z.string(),
    payload: z
      .record(z.string(), z.unknown())
      .openapi({ description: 'The webhook body subscribers receive for this event, field for field.' }),
    dispatchedAt: z.string().nullable().openapi({
      description: 'When the event was handed to the subscriptions that take it (a delivery each); null for a moment after it happens.',
    }),
    deliveries: z.array(EventDelivery).openapi({ description: 'One per subscription that took the event, with its state.' }),
  })
  .openapi('Event');

export const eventRoutes = [
  route({
    method: 'get',
    path: '/api/v1/events',
    operationId: 'listEvents',
    ...apiKey('Events', 'events:read', 'read'),
    summary: 'The business events the webhooks carry, to catch up after an outage',
    description:
      'Every event of the workspace the outbound webhooks carry (same names, same bodies in `payload`), with the delivery state ' +
      'per subscription; kept for RETENTION_DAYS (30 by default) after it happened. Newest first, or `order=asc` to replay in order. ' +
      'Paged by cursor: pass `pagination.nextCursor` back as `cursor` with the same filters; `nextCursor` is given on every ' +
      "page (opaque, valid only in the workspace it was issued to: another workspace's or a malformed cursor is 400 `VALIDATION`), " +
      'so a catch-up job stores it and resumes there next time. The newest events appear once every transaction that ' +
      'started before them has ended, so a cursor never skips an event that commits late.',
    query: eventListQuery,
    response: cursorListOf(Event),
    handler: async (ctx, { query }) => {
      // Unknown parameters are ignored elsewhere; here `offset` would page nowhere, forever.
      if (ctx.query.offset !== undefined) {
        throw new ApiError('VALIDATION', 'Invalid query.offset: the events feed pages by cursor', {
          hint: 'query.offset: pass pagination.nextCursor as cursor.',
        });
      }
      return listEvents(ctx.deps.db, ctx.deps.config.encryptionKeys!, ctx.state.auth!.workspaceId, query);
    },
  }),
];
