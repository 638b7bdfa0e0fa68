import { z } from 'zod';
import { ApiError, validationError } from '../../domain/kernel/errors';
import { cursorPage, cursorParam, encodeCursor, FIRST_MICROS, LAST_MICROS, MICROS, SERIAL, UUID } from '../../domain/platform/cursor';
import { BEGINNING, syncParams, syncRead } from '../../domain/platform/sync';

/**
 * Cursors (domain/platform/cursor.ts) and the pure half of incremental sync (domain/platform/sync.ts):
 * a cursor comes back as exactly the position it was made from (microseconds included), a
 * cursor of another list or altered by hand is 400 VALIDATION, and the query parameters choose
 * cursor paging and its start.
 */

const ID = '3f2a1b4c-5d6e-4f70-8a9b-0c1d2e3f4a5b';
const LAST_ID = 'ffffffff-ffff-ffff-ffff-ffffffffffff';

/** A text for a test's name: quoted, with every character outside printable ASCII escaped. */
function shown(text: string): string {
  return JSON.stringify(text).replace(/[^\x20-\x7e]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`);
}

/** The `cursor` query parameter of a list as the router parses it: the parts, or the 400 it answers. */
function readCursor(kind: string, parts: Parameters<typeof cursorParam>[1], text: string): string[] | ApiError {
  const result = z.object({ cursor: cursorParam(kind, parts) }).safeParse({ cursor: text });
  return result.success ? result.data.cursor : validationError(result.error, 'query');
}

describe('encodeCursor', () => {
  it.each([
    ['events', ['1763900000000000', 42], 'events_1763900000000000_42'],
    ['leads', ['1763900000123456', ID], `leads_1763900000123456_${ID}`],
    ['deals', [FIRST_MICROS, LAST_ID], `deals_-99999999999999999_${LAST_ID}`],
  ] as const)('%s %p -> %p', (kind, position, text) => {
    expect(encodeCursor(kind, position)).toBe(text);
  });
});

describe('cursorParam: a cursor comes back as the position it was made from', () => {
  it.each([
    ['a recent instant, to the microsecond', '1763900000123456'],
    ['microseconds that a millisecond clock would round', '1763900000000999'],
    ['one microsecond after the epoch', '1'],
    ['the epoch', '0'],
    ['before the epoch', '-1'],
    ['the first position (FIRST_MICROS)', FIRST_MICROS],
    ['the last position (LAST_MICROS)', LAST_MICROS],
  ])('%s: %p', (_label, micros) => {
    expect(readCursor('leads', [MICROS, UUID], encodeCursor('leads', [micros, ID]))).toEqual([micros, ID]);
  });

  it('round-trips a bigserial position (the events feed)', () => {
    expect(readCursor('events', [MICROS, SERIAL], encodeCursor('events', ['1763900000123456', '999999999999999999']))).toEqual([
      '1763900000123456',
      '999999999999999999',
    ]);
  });

  it.each([
    ['a cursor of another list', `deals_1763900000123456_${ID}`],
    ['a kind that only starts like this one', `leadsx_1763900000123456_${ID}`],
    ['no kind', `1763900000123456_${ID}`],
    ['a part missing', 'leads_1763900000123456'],
    ['a part too many', `leads_1763900000123456_${ID}_1`],
    ['18 digits of microseconds', `leads_176390000012345678_${ID}`],
    ['a sign other than minus', `leads_+1763900000123456_${ID}`],
    ['a fraction', `leads_1763900000123.456_${ID}`],
    ['an empty timestamp', `leads__${ID}`],
    ['an id in upper case (altered by hand)', `leads_1763900000123456_${ID.toUpperCase()}`],
    ['an id one character short', `leads_1763900000123456_${ID.slice(0, -1)}`],
    ['a space before', ` leads_1763900000123456_${ID}`],
    ['a newline after', `leads_1763900000123456_${ID}\n`],
    ['an ISO instant instead of microseconds', `leads_2025-11-23T12:00:00.000Z_${ID}`],
    ['nothing', ''],
  ])('%s is 400 VALIDATION naming the cursor', (_label, text) => {
    const answer = readCursor('leads', [MICROS, UUID], text);
    if (!(answer instanceof ApiError)) throw new Error(`accepted ${shown(text)} as ${JSON.stringify(answer)}`);
    expect({ code: answer.code, status: answer.status, message: answer.message }).toEqual({
      code: 'VALIDATION',
      status: 400,
      message: 'Invalid query.cursor: expected a cursor of this list: pass pagination.nextCursor back unchanged',
    });
  });

  it.each(
    [
      `leads_1763900000123456_${ID}`,
      `leads_${FIRST_MICROS}_${LAST_ID}`,
      `deals_1_${ID}`,
      `leads_1_${ID.toUpperCase()}`,
      `leads_1_${ID}\n`,
      ` leads_1_${ID}`,
      `xleads_1_${ID}`,
      `leads_1_${ID}_1`,
      `leads_-1_${ID}`,
      `leads_123456789012345678_${ID}`,
    ].map((text) => [shown(text), text]),
  )('the documented pattern agrees with the check on %s', (_shown, text) => {
    const schema = cursorParam('leads', [MICROS, UUID]);
    const { pattern } = z.globalRegistry.get(schema) as { pattern: string };
    expect(new RegExp(pattern, 'u').test(text)).toBe(schema.safeParse(text).success);
  });
});

describe('cursorPage', () => {
  const rows = [
    { id: 'a', at: '1000001' },
    { id: 'b', at: '1000002' },
    { id: 'c', at: '1000003' },
  ];
  const positionOf = (row: { id: string; at: string }) => [row.at, row.id];
  const from = ['999999', 'z'];

  it.each([
    ['limit + 1 rows read: a full page and more follow', rows, 2, ['a', 'b'], true, 'k_1000002_b'],
    ['exactly limit rows read: the last page', rows, 3, ['a', 'b', 'c'], false, 'k_1000003_c'],
    ['fewer rows than the limit', rows.slice(0, 1), 3, ['a'], false, 'k_1000001_a'],
    ['no row: the cursor stays at the position read from', [], 3, [], false, 'k_999999_z'],
  ])('%s', (_label, found, limit, ids, hasMore, nextCursor) => {
    const page = cursorPage(found, limit, 'k', positionOf, from);
    expect({ ids: page.rows.map((r) => r.id), pagination: page.pagination }).toEqual({ ids, pagination: { limit, hasMore, nextCursor } });
  });

  it("a page's nextCursor is accepted by its list and gives back the last row's position", () => {
    const found = [{ id: ID, at: '1763900000123456' }];
    const { pagination } = cursorPage(found, 1, 'leads', positionOf, BEGINNING);
    expect(readCursor('leads', [MICROS, UUID], pagination.nextCursor)).toEqual(['1763900000123456', ID]);
  });
});

describe('syncParams: the cursor of each syncing list is its own', () => {
  const kinds = ['leads', 'deals', 'tasks', 'products', 'conversations'] as const;

  it.each(kinds.flatMap((own) => kinds.map((other) => [other, own, other === own] as const)))(
    'a %s cursor on the %s list: accepted %p',
    (other, own, accepted) => {
      const result = z.object(syncParams(own)).safeParse({ cursor: encodeCursor(other, ['1763900000123456', ID]) });
      expect(result.success).toBe(accepted);
      if (result.success) expect(result.data.cursor).toEqual(['1763900000123456', ID]);
    },
  );

  it.each([
    ['cursor', true],
    ['CURSOR', false],
    ['offset', false],
    ['', false],
  ])('paging=%p accepted: %p', (paging, accepted) => {
    expect(z.object(syncParams('leads')).safeParse({ paging }).success).toBe(accepted);
  });
});

describe('syncRead: which read a list request asks for', () => {
  const known = ['paging', 'cursor', 'updatedAfter', 'limit', 'offset', 'sort', 'order', 'search', 'includeDeleted'];
  const cursorOnly = ['includeDeleted'];
  const at = (iso: string) => new Date(iso);

  it.each<[string, Record<string, unknown>, Parameters<typeof syncRead>[1], ReturnType<typeof syncRead>]>([
    ['an offset page (no paging, no cursor)', { offset: '25', sort: 'name' }, { limit: 25 }, undefined],
    ['the first page: from the beginning', { paging: 'cursor' }, { paging: 'cursor', limit: 25 }, { after: BEGINNING, limit: 25 }],
    [
      'the first page from an instant: just before its first microsecond (inclusive)',
      { paging: 'cursor', updatedAfter: '2024-01-01T00:00:00.123Z' },
      { paging: 'cursor', updatedAfter: at('2024-01-01T00:00:00.123Z'), limit: 10 },
      { after: ['1704067200122999', LAST_ID], limit: 10 },
    ],
    [
      'the first page from the epoch',
      { paging: 'cursor', updatedAfter: '1970-01-01T00:00:00.000Z' },
      { paging: 'cursor', updatedAfter: at('1970-01-01T00:00:00.000Z'), limit: 10 },
      { after: ['-1', LAST_ID], limit: 10 },
    ],
    [
      'a later page: from its cursor, to the microsecond',
      { cursor: `leads_1704067200123456_${ID}`, limit: '50' },
      { cursor: ['1704067200123456', ID], limit: 50 },
      { after: ['1704067200123456', ID], limit: 50 },
    ],
    [
      'a parameter only cursor paging takes, with it',
      { paging: 'cursor', includeDeleted: 'true' },
      { paging: 'cursor', limit: 25 },
      { after: BEGINNING, limit: 25 },
    ],
    [
      'an unknown parameter is ignored',
      { paging: 'cursor', whatever: 'x' },
      { paging: 'cursor', limit: 25 },
      { after: BEGINNING, limit: 25 },
    ],
  ])('%s', (_label, raw, query, read) => {
    expect(syncRead(raw, query, known, cursorOnly)).toEqual(read);
  });

  it.each<[string, Record<string, unknown>, Parameters<typeof syncRead>[1], string]>([
    [
      'offset with cursor paging',
      { paging: 'cursor', offset: '0' },
      { paging: 'cursor', limit: 25 },
      'Invalid query.offset: not with cursor paging',
    ],
    ['sort with a cursor', { cursor: 'x', sort: 'name' }, { cursor: ['1', ID], limit: 25 }, 'Invalid query.sort: not with cursor paging'],
    [
      'a filter with cursor paging',
      { paging: 'cursor', search: 'ana' },
      { paging: 'cursor', limit: 25 },
      'Invalid query.search: not with cursor paging',
    ],
    [
      'updatedAfter with a cursor',
      { cursor: 'x', updatedAfter: '2024-01-01T00:00:00.000Z' },
      { cursor: ['1', ID], updatedAfter: at('2024-01-01T00:00:00.000Z'), limit: 25 },
      'Invalid query.updatedAfter: not with a cursor',
    ],
    [
      'a cursor-only parameter on an offset page',
      { includeDeleted: 'true' },
      { limit: 25 },
      'Invalid query.includeDeleted: only with cursor paging',
    ],
  ])('refuses %s: 400 VALIDATION naming it', (_label, raw, query, message) => {
    let err: unknown;
    try {
      syncRead(raw, query, known, cursorOnly);
    } catch (e) {
      err = e;
    }
    if (!(err instanceof ApiError)) throw new Error(`expected an ApiError, got ${String(err)}`);
    expect({ code: err.code, status: err.status, message: err.message }).toEqual({ code: 'VALIDATION', status: 400, message });
  });
});
