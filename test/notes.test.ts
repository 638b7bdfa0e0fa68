import { createKey, createWorkspace, expectError, seedContact, seedMember, startApi, TestApi, Workspace } from './helpers';
import { uniqueMobile } from './phones';

let api: TestApi;
beforeAll(async () => {
  api = await startApi();
});
afterAll(async () => api.close());

const newWorkspace = (): Promise<Workspace> => createWorkspace(api, { scopes: ['notes:read', 'notes:write'] });

const nextPhone = (): string => uniqueMobile('21');
const seed = (ws: Workspace, name = 'Lead') => seedContact(api, ws.id, { phone: nextPhone(), name });

const notesPath = (leadId: string, noteId?: string): string => `/api/v1/leads/${leadId}/notes${noteId ? `/${noteId}` : ''}`;

describe('notes', () => {
  it('adds, lists (newest first), edits and deletes notes of a lead', async () => {
    const ws = await newWorkspace();
    const lead = await seed(ws);
    const bia = await seedMember(api, ws.id, 'Bia Souza');

    const first = await api.request('POST', notesPath(lead.id), { key: ws.key, body: { body: 'Called, no answer' } });
    expect(first.status).toBe(201);
    expect(first.body.data).toEqual({
      id: expect.any(String),
      body: 'Called, no answer',
      authorName: 'API',
      createdAt: expect.stringMatching(/\.\d{3}Z$/),
      updatedAt: expect.stringMatching(/\.\d{3}Z$/),
    });
    const second = await api.request('POST', notesPath(lead.id), { key: ws.key, body: { body: 'Wants a demo', authorId: bia.id } });
    expect(second.status).toBe(201);
    expect(second.body.data.authorName).toBe('Bia Souza');
    // The member id is stored but never returned.
    expect(second.text).not.toContain(bia.id);
    expect((await api.db('notes').where({ id: second.body.data.id }).first()).author_member_id).toBe(bia.id);

    const list = await api.request('GET', notesPath(lead.id), { key: ws.key });
    expect(list.status).toBe(200);
    expect(list.body.data.map((n: any) => n.body)).toEqual(['Wants a demo', 'Called, no answer']);
    expect(list.body.pagination).toEqual({ total: 2, limit: 25, offset: 0, hasMore: false });
    expect(list.text).not.toContain(bia.id);
    const page = await api.request('GET', `${notesPath(lead.id)}?limit=1&offset=1`, { key: ws.key });
    expect(page.body.data.map((n: any) => n.body)).toEqual(['Called, no answer']);
    expect(page.body.pagination).toEqual({ total: 2, limit: 1, offset: 1, hasMore: false });

    const edited = await api.request('PATCH', notesPath(lead.id, second.body.data.id), { key: ws.key, body: { body: 'Demo on Friday' } });
    expect(edited.status).toBe(200);
    expect(edited.body.data).toMatchObject({
      id: second.body.data.id,
      body: 'Demo on Friday',
      authorName: 'Bia Souza',
      createdAt: second.body.data.createdAt,
    });

    const deleted = await api.request('DELETE', notesPath(lead.id, first.body.data.id), { key: ws.key });
    expect(deleted.body).toEqual({ data: { id: first.body.data.id, deleted: true } });
    expectError(await api.request('DELETE', notesPath(lead.id, first.body.data.id), { key: ws.key }), 404, 'NOT_FOUND');
    expectError(await api.request('PATCH', notesPath(lead.id, first.body.data.id), { key: ws.key, body: { body: 'x' } }), 404, 'NOT_FOUND');
    expect((await api.request('GET', notesPath(lead.id), { key: ws.key })).body.data.map((n: any) => n.body)).toEqual(['Demo on Friday']);
  });

  it('validates the body and the author, naming the field', async () => {
    const ws = await newWorkspace();
    const lead = await seed(ws);
    const note = (await api.request('POST', notesPath(lead.id), { key: ws.key, body: { body: 'x' } })).body.data;
    const cases: [string, string, unknown][] = [
      ['POST', notesPath(lead.id), {}],
      ['POST', notesPath(lead.id), { body: '' }],
      ['POST', notesPath(lead.id), { body: '   ' }],
      ['POST', notesPath(lead.id), { body: 'x'.repeat(5001) }],
      ['POST', notesPath(lead.id), { body: 42 }],
      ['PATCH', notesPath(lead.id, note.id), {}],
      ['PATCH', notesPath(lead.id, note.id), { body: 'x'.repeat(5001) }],
    ];
    for (const [method, path, body] of cases) {
      const res = await api.request(method, path, { key: ws.key, body });
      expectError(res, 400, 'VALIDATION');
      expect(res.body.error).toContain('body.body');
    }
    // 5000 characters (an emoji counts as one) are accepted.
    expect((await api.request('POST', notesPath(lead.id), { key: ws.key, body: { body: 'x'.repeat(5000) } })).status).toBe(201);
    expect((await api.request('POST', notesPath(lead.id), { key: ws.key, body: { body: '🙂'.repeat(5000) } })).status).toBe(201);
    const other = await newWorkspace();
    const stranger = await seedMember(api, other.id, 'Stranger');
    for (const authorId of [stranger.id, '00000000-0000-4000-8000-000000000000', 'Bia']) {
      expectError(await api.request('POST', notesPath(lead.id), { key: ws.key, body: { body: 'x', authorId } }), 400, 'ASSIGNEE_NOT_FOUND');
    }
    expectError(await api.request('GET', `${notesPath(lead.id)}?limit=0`, { key: ws.key }), 400, 'VALIDATION');
    expect(await api.db('notes').where({ contact_id: lead.id }).count({ n: '*' })).toEqual([{ n: 3 }]);
  });

  it('requires a canonical lead of the workspace (404 CONTACT_NOT_FOUND) and a note of that lead (404 NOT_FOUND)', async () => {
    const ws = await newWorkspace();
    const lead = await seed(ws, 'A');
    const otherLead = await seed(ws, 'B');
    const gone = await seed(ws, 'Gone');
    const merged = await seed(ws, 'Merged');
    const note = (await api.request('POST', notesPath(lead.id), { key: ws.key, body: { body: 'on A' } })).body.data;
    const goneNote = (await api.request('POST', notesPath(gone.id), { key: ws.key, body: { body: 'on gone' } })).body.data;
    await api.db('contacts').where({ id: gone.id }).update({ deleted_at: new Date() });
    await api.db('contacts').where({ id: merged.id }).update({ merged_into_id: lead.id });

    for (const leadId of [gone.id, merged.id, '00000000-0000-4000-8000-000000000000', 'not-a-uuid']) {
      expectError(await api.request('GET', notesPath(leadId), { key: ws.key }), 404, 'CONTACT_NOT_FOUND');
      expectError(await api.request('POST', notesPath(leadId), { key: ws.key, body: { body: 'x' } }), 404, 'CONTACT_NOT_FOUND');
      expectError(
        await api.request('PATCH', notesPath(leadId, goneNote.id), { key: ws.key, body: { body: 'x' } }),
        404,
        'CONTACT_NOT_FOUND',
      );
      expectError(await api.request('DELETE', notesPath(leadId, goneNote.id), { key: ws.key }), 404, 'CONTACT_NOT_FOUND');
    }
    // A note of another lead, or no note at all.
    for (const noteId of [note.id, '00000000-0000-4000-8000-000000000000', 'not-a-uuid']) {
      expectError(await api.request('PATCH', notesPath(otherLead.id, noteId), { key: ws.key, body: { body: 'x' } }), 404, 'NOT_FOUND');
      expectError(await api.request('DELETE', notesPath(otherLead.id, noteId), { key: ws.key }), 404, 'NOT_FOUND');
    }
    expect(await api.db('notes').whereIn('id', [note.id, goneNote.id]).orderBy('body').pluck('body')).toEqual(['on A', 'on gone']);
  });

  it('answers 403 INSUFFICIENT_SCOPE without the notes scopes', async () => {
    const ws = await newWorkspace();
    const lead = await seed(ws);
    const note = (await api.request('POST', notesPath(lead.id), { key: ws.key, body: { body: 'keep' } })).body.data;
    const readOnly = await createKey(api, ws.id, ['notes:read']);
    const none = await createKey(api, ws.id, ['leads:read', 'leads:write']);
    expectError(await api.request('GET', notesPath(lead.id), { key: none.key }), 403, 'INSUFFICIENT_SCOPE');
    expect((await api.request('GET', notesPath(lead.id), { key: readOnly.key })).status).toBe(200);
    expectError(await api.request('POST', notesPath(lead.id), { key: readOnly.key, body: { body: 'x' } }), 403, 'INSUFFICIENT_SCOPE');
    expectError(
      await api.request('PATCH', notesPath(lead.id, note.id), { key: readOnly.key, body: { body: 'x' } }),
      403,
      'INSUFFICIENT_SCOPE',
    );
    expectError(await api.request('DELETE', notesPath(lead.id, note.id), { key: readOnly.key }), 403, 'INSUFFICIENT_SCOPE');
    expect(await api.db('notes').where({ contact_id: lead.id }).pluck('body')).toEqual(['keep']);
  });

  it("never shows or changes another workspace's notes or leads", async () => {
    const ws = await newWorkspace();
    const other = await newWorkspace();
    const mine = await seed(ws, 'Mine');
    const myNote = (await api.request('POST', notesPath(mine.id), { key: ws.key, body: { body: 'my note' } })).body.data;
    const theirs = await seed(other, 'Theirs');
    const theirNote = (await api.request('POST', notesPath(theirs.id), { key: other.key, body: { body: 'their note' } })).body.data;
    const snapshot = () =>
      api.db('notes').whereIn('contact_id', [mine.id, theirs.id]).orderBy('id').select('id', 'contact_id', 'body', 'updated_at');
    const before = await snapshot();

    expectError(await api.request('GET', notesPath(theirs.id), { key: ws.key }), 404, 'CONTACT_NOT_FOUND');
    expectError(await api.request('POST', notesPath(theirs.id), { key: ws.key, body: { body: 'x' } }), 404, 'CONTACT_NOT_FOUND');
    expectError(
      await api.request('PATCH', notesPath(theirs.id, theirNote.id), { key: ws.key, body: { body: 'x' } }),
      404,
      'CONTACT_NOT_FOUND',
    );
    expectError(await api.request('DELETE', notesPath(theirs.id, theirNote.id), { key: ws.key }), 404, 'CONTACT_NOT_FOUND');
    // Their note under my lead.
    expectError(await api.request('PATCH', notesPath(mine.id, theirNote.id), { key: ws.key, body: { body: 'x' } }), 404, 'NOT_FOUND');
    expectError(await api.request('DELETE', notesPath(mine.id, theirNote.id), { key: ws.key }), 404, 'NOT_FOUND');
    // Their member as my author.
    const theirMember = await seedMember(api, other.id, 'Their member');
    expectError(
      await api.request('POST', notesPath(mine.id), { key: ws.key, body: { body: 'x', authorId: theirMember.id } }),
      400,
      'ASSIGNEE_NOT_FOUND',
    );

    expect(await snapshot()).toEqual(before);
    expect((await api.request('GET', notesPath(mine.id), { key: ws.key })).body.data.map((n: any) => n.id)).toEqual([myNote.id]);
  });
});
