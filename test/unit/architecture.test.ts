import fs from 'node:fs';
import path from 'node:path';

/**
 * The domain's areas and the directions their imports may take, as docs/architecture.md draws them.
 * The map is read from that page (its `area-map` block), so the picture a newcomer reads is the
 * rule this test enforces: a new import that breaks it fails here, and so does a map edited
 * without the code (an area missing from either side).
 */
const root = path.resolve(__dirname, '../..');
const domainDir = path.join(root, 'domain');

function areaMap(): Map<string, string[]> {
  const page = fs.readFileSync(path.join(root, 'docs/architecture.md'), 'utf8');
  const block = /```text area-map\n([\s\S]*?)```/.exec(page);
  if (!block) throw new Error('docs/architecture.md has no ```text area-map block');
  const map = new Map<string, string[]>();
  for (const line of block[1].split('\n')) {
    const m = /^\s*([a-z-]+)\s*→\s*(.*)$/.exec(line);
    if (!m) continue;
    const targets =
      m[2].trim() === '(nothing)'
        ? []
        : m[2]
            .split(',')
            .map((s) => s.trim())
            .filter(Boolean);
    map.set(m[1], targets);
  }
  return map;
}

function sourcesUnder(dir: string): string[] {
  return fs.readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const full = path.join(dir, entry.name);
    if (entry.isDirectory()) return sourcesUnder(full);
    return /\.ts$/.test(entry.name) ? [full] : [];
  });
}

/** Every relative module specifier of a file (static imports, re-exports and `import()`). */
function relativeImports(file: string): string[] {
  const source = fs.readFileSync(file, 'utf8');
  const found: string[] = [];
  for (const m of source.matchAll(/(?:from\s+|import\s*\(\s*|require\(\s*)['"](\.{1,2}\/[^'"]+)['"]/g)) found.push(m[1]);
  return found;
}

const areas = fs
  .readdirSync(domainDir, { withFileTypes: true })
  .filter((e) => e.isDirectory())
  .map((e) => e.name)
  .sort();

describe('the domain is grouped by business area', () => {
  it('keeps no module at its root except an optional index.ts', () => {
    const loose = fs.readdirSync(domainDir).filter((name) => name.endsWith('.ts') && name !== 'index.ts');
    expect(loose).toEqual([]);
  });

  it('gives every area an index.ts and a README', () => {
    const missing = areas.flatMap((area) =>
      ['index.ts', 'README.md'].filter((name) => !fs.existsSync(path.join(domainDir, area, name))).map((name) => `${area}/${name}`),
    );
    expect(missing).toEqual([]);
  });

  it('draws every area in the map of docs/architecture.md, and only those, without a cycle', () => {
    const map = areaMap();
    expect([...map.keys()].sort()).toEqual(areas);
    for (const [area, targets] of map) {
      for (const target of targets) expect({ area, target, known: map.has(target) }).toEqual({ area, target, known: true });
    }
    // Depth-first search for a cycle: an area reached again while still on the path.
    const state = new Map<string, 'open' | 'done'>();
    const visit = (area: string, trail: string[]): void => {
      if (state.get(area) === 'done') return;
      if (state.get(area) === 'open') throw new Error(`cycle in the area map: ${[...trail, area].join(' → ')}`);
      state.set(area, 'open');
      for (const next of map.get(area) ?? []) visit(next, [...trail, area]);
      state.set(area, 'done');
    };
    for (const area of map.keys()) visit(area, []);
  });

  it('imports across areas only through the index and only in the directions the map draws', () => {
    const map = areaMap();
    const broken: string[] = [];
    for (const file of sourcesUnder(domainDir)) {
      const from = path.relative(domainDir, file).split(path.sep)[0];
      for (const spec of relativeImports(file)) {
        const target = path.resolve(path.dirname(file), spec);
        const rel = path.relative(root, file);
        if (!target.startsWith(domainDir + path.sep)) {
          // Below the domain there is only types/ (shapes every layer shares).
          if (!target.startsWith(path.join(root, 'types') + path.sep)) broken.push(`${rel}: imports ${spec}, a layer above the domain`);
          continue;
        }
        const [to, ...rest] = path.relative(domainDir, target).split(path.sep);
        if (to === from) {
          // Inside an area, modules import each other directly: the index is for the other areas.
          if (rest.length === 0 || rest.join('/') === 'index') broken.push(`${rel}: imports its own area's index (${spec})`);
          continue;
        }
        if (rest.length > 0 && rest.join('/') !== 'index') broken.push(`${rel}: imports ${spec}, inside ${to}/ (use '../${to}')`);
        if (!(map.get(from) ?? []).includes(to)) broken.push(`${rel}: ${from} → ${to} is not in the map`);
      }
    }
    expect(broken).toEqual([]);
  });

  it('links every area README from the repository README', () => {
    const readme = fs.readFileSync(path.join(root, 'README.md'), 'utf8');
    const unlinked = areas.filter((area) => !readme.includes(`](domain/${area}/README.md)`));
    expect(unlinked).toEqual([]);
  });
});

/**
 * The tables each area owns, as its README says ("**Owns** the table(s) `a`, `b`, ..."). An area
 * whose README names none (kernel, platform's Knex handle aside, maintenance, merge) owns none.
 */
function ownedTables(): Map<string, string> {
  const owner = new Map<string, string>();
  for (const area of areas) {
    const readme = fs.readFileSync(path.join(domainDir, area, 'README.md'), 'utf8');
    const owns = /\*\*Owns\*\*[^`]*?\bthe tables?\s+((?:`[a-z_]+`(?:,\s*(?:and\s+)?|\s+and\s+)?)+)/.exec(readme);
    if (!owns) continue;
    for (const [, table] of owns[1].matchAll(/`([a-z_]+)`/g)) owner.set(table, area);
  }
  return owner;
}

/**
 * A source split in two, line breaks kept (and every character at its place) so lines and columns
 * still count: `code`, without comments (a comment may name any table) and with string literals
 * blanked but for their quotes, and `strings`, the literals' text alone (a template literal's
 * `${...}` is code).
 */
function codeAndStrings(source: string): { code: string; strings: string } {
  let code = '';
  let strings = '';
  const put = (c: string, inString: boolean) => {
    const blank = c === '\n' ? '\n' : ' ';
    code += inString ? blank : c;
    strings += inString ? c : blank;
  };
  const open: number[] = []; // the brace depth at each `${` of a template literal still open
  let depth = 0;
  let i = 0;
  /** A literal's text from i up to its closing quote (or a template's `${`), its quotes left in code. */
  const literal = (quote: string) => {
    for (; i < source.length && source[i] !== quote; i++) {
      if (source[i] === '\\') {
        put(source[i++], true);
        put(source[i] ?? '', true);
      } else if (quote === '`' && source[i] === '$' && source[i + 1] === '{') {
        open.push(depth++);
        put('$', false);
        put('{', false);
        i += 2;
        return;
      } else put(source[i], true);
    }
    if (i < source.length) put(source[i++], false);
  };
  while (i < source.length) {
    const c = source[i];
    if (c === '/' && source[i + 1] === '/') {
      for (; i < source.length && source[i] !== '\n'; i++) put(' ', false);
    } else if (c === '/' && source[i + 1] === '*') {
      const end = source.indexOf('*/', i + 2);
      for (const stop = end === -1 ? source.length : end + 2; i < stop; i++) put(source[i] === '\n' ? '\n' : ' ', false);
    } else if (c === "'" || c === '"' || c === '`') {
      put(source[i++], false);
      literal(c);
    } else if (c === '}' && open.length && open[open.length - 1] === depth - 1) {
      open.pop();
      depth--;
      put(source[i++], false);
      literal('`');
    } else {
      if (c === '{') depth++;
      if (c === '}') depth--;
      put(source[i++], false);
    }
  }
  return { code, strings };
}

/**
 * The tables a line names in SQL (its `code` and `strings`, as codeAndStrings splits them): a
 * string that is a call's first argument and names a table, aliased or not (Knex `db('t')`,
 * `trx('t as x')`, `.from('t')`, `.join('t', ...)`, and helpers handed a table name); in any
 * string, a qualified column (`t.col`) and raw SQL's `FROM t`, `JOIN t`, `INTO t`, `UPDATE t`
 * (`DELETE FROM t` is a FROM).
 */
function tablesNamed(code: string, strings: string, tables: string[]): string[] {
  const t = tables.join('|');
  const found: string[] = [];
  for (const m of strings.matchAll(new RegExp(`(?<=\\S?)\\b(${t})(?:\\s+as\\s+\\w+)?(?=\\s*$|\\s)`, 'g'))) {
    const start = m.index!;
    const end = start + m[0].length;
    // The whole literal, first argument of a call: `(` then the opening quote right before, the closing quote right after.
    if (/\(\s*['"`]$/.test(code.slice(0, start)) && /^['"`]/.test(code.slice(end))) found.push(m[1]);
  }
  for (const m of strings.matchAll(new RegExp(`(?<![\\w.])(${t})\\.(?:[a-z_]+|\\*)`, 'g'))) found.push(m[1]);
  for (const m of strings.matchAll(new RegExp(`\\b(?:from|join|into|update)\\s+(?:only\\s+)?(${t})\\b`, 'gi'))) found.push(m[1]);
  return [...new Set(found)];
}

describe('each table is written in the SQL of the area that owns it', () => {
  const owner = ownedTables();

  it('reads which tables each area owns from its README', () => {
    // A README that stopped saying what it owns would let every crossing through.
    for (const area of ['access', 'webhooks', 'leads', 'sales', 'messaging', 'automations', 'broadcasts', 'platform'])
      expect({ area, owns: [...owner.values()].includes(area) }).toEqual({ area, owns: true });
  });

  it("names no other area's table", () => {
    const tables = [...owner.keys()];
    const crossings = new Map<string, string>();
    for (const file of sourcesUnder(domainDir)) {
      const area = path.relative(domainDir, file).split(path.sep)[0];
      const rel = path.relative(root, file);
      const { code, strings } = codeAndStrings(fs.readFileSync(file, 'utf8'));
      const codeLines = code.split('\n');
      strings.split('\n').forEach((line, i) => {
        for (const table of tablesNamed(codeLines[i], line, tables)) {
          const key = `${rel} → ${table} (${owner.get(table)})`;
          if (owner.get(table) !== area && !crossings.has(key)) crossings.set(key, `${rel}:${i + 1}`);
        }
      });
    }
    expect([...crossings].map(([key, at]) => `${key} at ${at}`)).toEqual([]);
  });
});

describe('an area is reached through its door', () => {
  it('names what its index exports (no export *)', () => {
    const starred = areas
      .map((area) => `domain/${area}/index.ts`)
      .filter((index) => /^\s*export\s+\*/m.test(fs.readFileSync(path.join(root, index), 'utf8')));
    expect(starred).toEqual([]);
  });

  it('is imported from outside the domain through its index only (test/ may import a module to test it alone)', () => {
    const inner: string[] = [];
    for (const layer of ['api', 'activities', 'workers', 'scripts', 'workflows', 'types']) {
      for (const file of sourcesUnder(path.join(root, layer))) {
        const rel = path.relative(root, file);
        for (const spec of relativeImports(file)) {
          const target = path.relative(domainDir, path.resolve(path.dirname(file), spec));
          if (target.startsWith('..') || path.isAbsolute(target)) continue;
          const [, ...rest] = target.split(path.sep);
          if (rest.length === 0 || rest.join('/') === 'index') continue;
          inner.push(`${rel}: imports ${spec} (use the area's index)`);
        }
      }
    }
    expect(inner).toEqual([]);
  });
});

describe('activities are adapters', () => {
  it('opens no transaction and writes no SQL outside the domain (the domain owns both)', () => {
    const found: string[] = [];
    for (const layer of ['activities', 'workers', 'api/routes']) {
      for (const file of sourcesUnder(path.join(root, layer))) {
        const source = fs.readFileSync(file, 'utf8');
        source.split('\n').forEach((line, i) => {
          if (/\.transaction\s*\(|\b(db|trx)\(['"`]|\.raw\s*[<(]/.test(line))
            found.push(`${path.relative(root, file)}:${i + 1}: ${line.trim()}`);
        });
      }
    }
    expect(found).toEqual([]);
  });
});
