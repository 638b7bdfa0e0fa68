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
