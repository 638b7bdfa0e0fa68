/**
 * Replays workflow histories on the current workflow code: a history a running workflow could
 * have and the code cannot replay would fail that workflow (a nondeterminism error) on the next
 * worker. test/send-replay.test.ts runs it on recorded sends.
 *
 *   npx tsx scripts/replay-histories.ts test/fixtures/send-history-*.json
 *
 * Each file is one history as `temporal.api.history.v1.History.toObject` writes it (bytes in
 * base64, enums by name), its payloads decoded (plain JSON): the test fixtures' format. Exits 1
 * naming each history that does not replay.
 */
import fs from 'node:fs';
import path from 'node:path';
import { temporal } from '@temporalio/proto';
import { Runtime, Worker } from '@temporalio/worker';

async function main(files: string[]): Promise<number> {
  if (files.length === 0) {
    console.error('usage: replay-histories.ts <history.json>...');
    return 2;
  }
  Runtime.install({
    logger: {
      log: () => undefined,
      trace: () => undefined,
      debug: () => undefined,
      info: () => undefined,
      warn: () => undefined,
      error: (m) => console.error(m),
    },
  });
  const histories = files.map((file) => ({
    workflowId: path.basename(file),
    history: temporal.api.history.v1.History.fromObject(JSON.parse(fs.readFileSync(file, 'utf8'))),
  }));
  let failed = 0;
  for await (const result of Worker.runReplayHistories({ workflowsPath: require.resolve('../workflows') }, histories)) {
    if (result.error) {
      failed += 1;
      console.error(`${result.workflowId}: does not replay: ${result.error.message}`);
    } else console.log(`${result.workflowId}: replays`);
  }
  return failed > 0 ? 1 : 0;
}

main(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (err) => {
    console.error(err);
    process.exit(1);
  },
);
