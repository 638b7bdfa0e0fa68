import fs from 'node:fs';
import inspector from 'node:inspector';
import path from 'node:path';

/** BENCH_HEAP_PROFILE_ALL=1: every allocation, what scavenges collect too (where the allocation rate comes from). */
const EVERY_ALLOCATION = process.env.BENCH_HEAP_PROFILE_ALL === '1';

/**
 * `npm run bench -- --heap-profile`: where a process's old-generation garbage comes from. V8's
 * sampling heap profiler, told to keep the objects a major GC collects (objects that lived long
 * enough to be promoted, then died: what makes V8 grow the old generation with the allocation
 * rate), samples this process from its start to its exit, and writes the profile to
 * BENCH_HEAP_PROFILE_FILE (a .heapprofile, which Chrome DevTools opens too). scripts/bench.ts
 * summarises it by package and function. This is how fetch was found to be 85% of a broadcast's
 * worker garbage (docs/performance.md, Broadcasts).
 */
export function sampleHeapUntilExit(file = process.env.BENCH_HEAP_PROFILE_FILE): void {
  if (!file) return;
  const session = new inspector.Session();
  session.connect();
  session.post('HeapProfiler.enable');
  session.post('HeapProfiler.startSampling', {
    samplingInterval: 32 * 1024,
    includeObjectsCollectedByMajorGC: true,
    includeObjectsCollectedByMinorGC: EVERY_ALLOCATION,
  });
  // The in-process inspector answers synchronously, so the profile is written before the exit.
  process.on('exit', () => {
    session.post('HeapProfiler.stopSampling', (err, result) => {
      if (err) return console.error('heap profile not written:', err);
      fs.mkdirSync(path.dirname(file), { recursive: true });
      fs.writeFileSync(file, JSON.stringify(result.profile));
    });
  });
}

interface HeapNode {
  callFrame: { functionName: string; url: string; lineNumber: number };
  selfSize: number;
  children?: HeapNode[];
}

/** Where a profile frame's code lives: a package, a node: module, or a file of the repository (CPU and heap profiles). */
export function placeOf(url: string, root: string): string {
  if (url.includes('node_modules/')) {
    const parts = url.split('node_modules/').pop()!.split('/');
    return parts.slice(0, parts[0].startsWith('@') ? 2 : 1).join('/');
  }
  if (url === '') return '(native)';
  if (url.startsWith('node:')) return url;
  return path.relative(root, url.replace('file://', ''));
}

/**
 * A profile written by sampleHeapUntilExit as lines to print: the sampled bytes by the package
 * that allocated them, by the nearest frame of our own code up the stack (what to change), and by
 * function.
 */
export function summariseHeapProfile(file: string, root: string): string[] {
  const head = (JSON.parse(fs.readFileSync(file, 'utf8')) as { head: HeapNode }).head;
  const byPlace = new Map<string, number>();
  const byOurs = new Map<string, number>();
  const byFunction = new Map<string, number>();
  const add = (m: Map<string, number>, key: string, n: number) => m.set(key, (m.get(key) ?? 0) + n);
  let total = 0;
  const walk = (node: HeapNode, ours: string | undefined): void => {
    const { functionName, url, lineNumber } = node.callFrame;
    const place = placeOf(url, root);
    const own = url && !url.includes('node_modules/') && !url.startsWith('node:') ? `${functionName || '(anonymous)'} ${place}` : ours;
    if (node.selfSize > 0) {
      total += node.selfSize;
      add(byPlace, place, node.selfSize);
      add(byOurs, own ?? '(no frame of ours)', node.selfSize);
      add(byFunction, `${functionName || '(anonymous)'} ${place}:${lineNumber + 1}`, node.selfSize);
    }
    for (const child of node.children ?? []) walk(child, own);
  };
  walk(head, undefined);
  const top = (m: Map<string, number>, n: number) =>
    [...m.entries()]
      .sort((a, b) => b[1] - a[1])
      .slice(0, n)
      .map(([k, v]) => `    ${((v / total) * 100).toFixed(1).padStart(5)}%  ${(v / 2 ** 20).toFixed(1).padStart(7)} MB  ${k}`);
  return [
    `${(total / 2 ** 20).toFixed(0)} MB sampled (${EVERY_ALLOCATION ? 'every allocation' : 'promoted, then collected by a major GC, or still live at exit'}); by package or file:`,
    ...top(byPlace, 12),
    '  by the nearest frame of our code:',
    ...top(byOurs, 12),
    '  by function:',
    ...top(byFunction, 12),
  ];
}
