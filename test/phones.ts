/**
 * The one phone allocator of the integration tests. Every test file runs against one shared
 * emulator, which remembers per number what a test scripted for it ("not on WhatsApp", a failing
 * send, an opt-out), so two files must never use the same number in one run.
 *
 * A file reserves a block of numbers the first time it asks, by creating `phone-blocks/<n>` in the
 * test stack's directory with O_EXCL: the file system makes that atomic across jest's worker
 * processes, so block n is one file's alone. The global setup recreates the directory every run.
 */
import fs from 'node:fs';
import path from 'node:path';

const BLOCK = 100_000;
/** Subscribers from 60000000 to 99999999 (a mobile's 8 digits start 6-9): 400 blocks, far more than there are test files. */
const FIRST = 60_000_000;
const BLOCKS = (100_000_000 - FIRST) / BLOCK;

const stackDir = process.env.TEST_STACK_DIR ? path.resolve(process.env.TEST_STACK_DIR) : path.resolve(__dirname, '..', '.data', 'test');

let block: number | undefined;
let next = 0;

function reserveBlock(): number {
  const dir = path.join(stackDir, 'phone-blocks');
  fs.mkdirSync(dir, { recursive: true });
  for (let n = 0; n < BLOCKS; n++) {
    try {
      fs.closeSync(fs.openSync(path.join(dir, String(n)), 'wx'));
      return n;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
    }
  }
  throw new Error(`all ${BLOCKS} phone blocks are taken: more test files than blocks, or phone-blocks/ was not cleared`);
}

/** The next unused 8-digit subscriber number of this file, starting 6-9 (so its old form without the ninth digit is a mobile too). */
export function uniqueSubscriber(): string {
  block ??= reserveBlock();
  if (next >= BLOCK) {
    block = reserveBlock();
    next = 0;
  }
  return String(FIRST + block * BLOCK + next++);
}

/**
 * A Brazilian mobile no other test uses: `55` + area code + `9` + 8 digits. A test that needs
 * another form (the old mobile without its ninth digit: `55${area}${subscriber}`) builds it from
 * `uniqueSubscriber()`.
 */
export function uniqueMobile(areaCode = '11'): string {
  return `55${areaCode}9${uniqueSubscriber()}`;
}
