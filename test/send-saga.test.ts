/**
 * The saga's steps when Temporal runs them more than once (a retry after the commit whose answer
 * was lost): the activities themselves, run in Temporal's own activity environment against the
 * real database. prepareSend takes the quota once; undoPrepare gives it back once.
 */
import { MockActivityEnvironment } from '@temporalio/testing';
import { createMessagingActivities } from '../activities/messaging';
import { saveSendRequest, sendInputFor } from '../domain/messaging/send-requests';
import type { PreparedSend, SendOutcome } from '../types/messaging';
import { createWorkspace, startApi, TestApi } from './helpers';
import { uniqueMobile } from './phones';

let api: TestApi;
beforeAll(async () => {
  api = await startApi();
});
afterAll(() => api.close());

it('prepares once and compensates once, however often each step is retried', async () => {
  const ws = await createWorkspace(api, { scopes: ['conversations:send'] });
  const instance = await api.admin('POST', `/admin/v1/workspaces/${ws.id}/instances`, {
    name: 'Main',
    channel: 'whatsapp',
    provider: 'cloud',
    connected: true,
    config: { baseUrl: process.env.EMULATOR_URL, phoneNumberId: 'PN', accessToken: 't' },
  });
  await api.admin('POST', `/admin/v1/workspaces/${ws.id}/templates`, {
    instanceId: instance.body.data.id,
    name: 'hello',
    language: 'pt_BR',
    variableCount: 0,
  });
  const activities = createMessagingActivities({ db: api.db, config: api.config });
  const env = new MockActivityEnvironment({ workflowExecution: { workflowId: `send/${ws.id}/key/saga-test`, runId: 'run-1' } } as never);
  // As the API starts a send: the request stored, the workflow given its id.
  const request = {
    phone: uniqueMobile('21'),
    message: { type: 'template' as const, templateName: 'hello', templateLanguage: 'pt_BR', templateVariables: [] },
  };
  await saveSendRequest(api.db, ws.id, 'saga-test', request);
  const input = sendInputFor(ws.id, 'saga-test', request);

  const first: PreparedSend = await env.run(activities.prepareSend, input);
  const again = await env.run(activities.prepareSend, input);
  expect(again).toEqual(first);
  expect(first).toMatchObject({ createdContact: true, createdConversation: true, tookCold: true });
  // The workflow's history holds ids and flags, never the message's content (kept in send_preparations).
  expect(first).not.toHaveProperty('components');
  expect(JSON.stringify(first)).not.toContain('hello');
  const counters = async () =>
    Object.fromEntries(
      (await api.db('daily_counters').where({ workspace_id: ws.id }).select('kind', 'count')).map((r) => [r.kind, r.count]),
    );
  expect(await counters()).toEqual({ messages: 1, cold_conversations: 1 });

  // Other sends of the same day on the rows prepare counted on (its `day`): a unit given back twice would show.
  await api.db('daily_counters').where({ workspace_id: ws.id, day: first.day, kind: 'messages' }).increment('count', 6);
  await api.db('daily_counters').where({ workspace_id: ws.id, day: first.day, kind: 'cold_conversations' }).increment('count', 4);
  expect(await counters()).toEqual({ messages: 7, cold_conversations: 5 });
  const undone = async () => (await api.db('send_preparations').where({ reference: first.reference }).first('undone_at')).undone_at;
  expect(await undone()).toBeNull();

  await env.run(activities.undoPrepare, first);
  const undoneAt = await undone();
  expect(undoneAt).not.toBeNull();
  await env.run(activities.undoPrepare, first);
  // Given back exactly once: one unit of each counter, and the undo recorded once (the retry changed nothing).
  expect(await counters()).toEqual({ messages: 6, cold_conversations: 4 });
  expect(await undone()).toEqual(undoneAt);
  expect(await api.db('contacts').where({ workspace_id: ws.id }).count('* as n').first()).toEqual({ n: 0 });
  expect(await api.db('conversations').where({ workspace_id: ws.id }).count('* as n').first()).toEqual({ n: 0 });
});

it('records a send whose contact and conversation a concurrent failed send compensated away, bringing them back', async () => {
  const ws = await createWorkspace(api, { scopes: ['conversations:send'] });
  const instance = await api.admin('POST', `/admin/v1/workspaces/${ws.id}/instances`, {
    name: 'Main',
    channel: 'whatsapp',
    provider: 'cloud',
    connected: true,
    config: { baseUrl: process.env.EMULATOR_URL, phoneNumberId: 'PN', accessToken: 't' },
  });
  await api.admin('POST', `/admin/v1/workspaces/${ws.id}/templates`, {
    instanceId: instance.body.data.id,
    name: 'hello',
    language: 'pt_BR',
    variableCount: 0,
  });
  const activities = createMessagingActivities({ db: api.db, config: api.config });
  const run = (id: string) =>
    new MockActivityEnvironment({ workflowExecution: { workflowId: `send/${ws.id}/key/${id}`, runId: 'r' } } as never);
  const phone = uniqueMobile('21');
  // The inline shape of a send started before send_requests (still replayed and run).
  const input = {
    workspaceId: ws.id,
    phone,
    message: { type: 'template' as const, templateName: 'hello', templateLanguage: 'pt_BR', templateVariables: [] },
  };

  const a: PreparedSend = await run('a').run(activities.prepareSend, input);
  const b: PreparedSend = await run('b').run(activities.prepareSend, input);
  expect(b).toMatchObject({ contactId: a.contactId, conversationId: a.conversationId, createdContact: false });
  await run('a').run(activities.undoPrepare, a); // A failed at the provider: its compensation removes what it created
  expect(await api.db('conversations').where({ id: a.conversationId }).first()).toBeUndefined();

  const outcome: SendOutcome = await run('b').run(activities.recordSent, {
    workspaceId: ws.id,
    prepared: b,
    sent: { providerMessageId: `wamid.saga.${process.pid}` },
    message: input.message,
    mode: 'cold' as const,
  });
  const message = await api.db('messages').where({ id: outcome.id }).first('conversation_id', 'status');
  expect(message.status).toBe('sent');
  const conversation = await api.db('conversations').where({ id: message.conversation_id }).first('contact_id');
  expect(outcome).toMatchObject({ conversationId: message.conversation_id, contactId: conversation.contact_id });
  expect((await api.db('contacts').where({ id: conversation.contact_id }).first('phone')).phone).toBe(phone);
});
