import type { Db } from '../platform';
import { ApiError } from '../kernel';
import type { SendInput, SendRequest } from '../../types/messaging';

/**
 * A send's recipient and content live in send_requests; the send workflow is started with the
 * row's id (sendInputFor) and each activity loads what it needs (sendRequestOf). So Temporal's
 * history of a send holds ids and flags, never a message text, a media URL or a phone number.
 */

/** A request as its send_requests row (saveSendRequest; the API's key claim, send-keys.ts). */
export function sendRequestRow(workspaceId: string, id: string, request: SendRequest) {
  return {
    workspace_id: workspaceId,
    id,
    phone: request.phone ?? null,
    instance_id: request.instanceId ?? null,
    conversation_id: request.conversationId ?? null,
    message: JSON.stringify(request.message),
  };
}

/** Stores the request (a repeat with the same id keeps the first: an automation's retried action). */
export async function saveSendRequest(db: Db, workspaceId: string, id: string, request: SendRequest): Promise<void> {
  await db('send_requests')
    .insert(sendRequestRow(workspaceId, id, request))
    .onConflict(['workspace_id', 'id'])
    .ignore();
}

/**
 * The stored request retries, under the same key, the refused run `replaces`: a second request
 * replacing the same run fails with a unique violation (isReplacedAlready).
 */
export async function claimReplaced(db: Db, workspaceId: string, id: string, replaces: string): Promise<void> {
  await db('send_requests').where({ workspace_id: workspaceId, id }).update({ replaces });
}

export function isReplacedAlready(err: unknown): boolean {
  return (err as { constraint?: string })?.constraint === 'send_requests_replaces_uq';
}

/** Gives up a request's claim on the refused run it meant to retry (its start did not happen). */
export async function releaseReplaced(db: Db, workspaceId: string, id: string): Promise<void> {
  await db('send_requests').where({ workspace_id: workspaceId, id }).update({ replaces: null });
}

/** The workflow input of a stored request: ids and what orders the steps, nothing private. */
export function sendInputFor(workspaceId: string, requestId: string, request: SendRequest): SendInput {
  return {
    workspaceId,
    requestId,
    kind: request.conversationId ? 'conversation' : 'cold',
    hasMedia: Boolean(request.message.mediaUrl),
  };
}

/** The request a send input names (or carries inline, for a send started before send_requests). */
export async function sendRequestOf(
  db: Db,
  input: Pick<SendInput, 'workspaceId' | 'requestId' | 'phone' | 'instanceId' | 'conversationId' | 'message'>,
): Promise<SendRequest> {
  if (!input.requestId) {
    if (!input.message) throw new Error('A send input carries neither a requestId nor a message');
    return { phone: input.phone, instanceId: input.instanceId, conversationId: input.conversationId, message: input.message };
  }
  const row = await db('send_requests')
    .where({ workspace_id: input.workspaceId, id: input.requestId })
    .first(...SEND_REQUEST_COLUMNS);
  if (!row) throw new ApiError('SEND_FAILED', 'The content of this send is no longer stored (it is kept for RETENTION_DAYS)');
  return requestOfRow(row);
}

/** The columns of send_requests a request is made of (requestOfRow). */
export const SEND_REQUEST_COLUMNS = ['phone', 'instance_id', 'conversation_id', 'message'] as const;

/** A send_requests row as the request it stores. */
export function requestOfRow(row: {
  phone: string | null;
  instance_id: string | null;
  conversation_id: string | null;
  message: SendRequest['message'];
}): SendRequest {
  return {
    ...(row.phone ? { phone: row.phone } : {}),
    ...(row.instance_id ? { instanceId: row.instance_id } : {}),
    ...(row.conversation_id ? { conversationId: row.conversation_id } : {}),
    message: row.message,
  };
}
