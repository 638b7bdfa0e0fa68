/**
 * Workflow histories for replay tests: a workflow's history saved as the fixtures are (payloads
 * decoded, so the file needs no key), and Temporal's replayer run on files of them
 * (scripts/replay-histories.ts, in a child process, as before a deploy).
 */
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import { promisify } from 'node:util';
import type { Client } from '@temporalio/client';
import { temporal as proto } from '@temporalio/proto';
import { loadConfig } from '../domain/platform/config';
import { EncryptionCodec } from '../domain/platform/payload-codec';
import { nodeTs } from '../scripts/stack';
import { historyPayloads } from './helpers';

/** Replays each file on the current workflow code: exit code 0 when all replay; the output names each file. */
export async function replayHistories(files: string[]): Promise<{ code: number; out: string }> {
  const { command, args } = nodeTs('scripts/replay-histories.ts');
  try {
    const { stdout, stderr } = await promisify(execFile)(command, [...args, ...files], { timeout: 120_000 });
    return { code: 0, out: stdout + stderr };
  } catch (err: any) {
    return { code: err.code ?? 1, out: `${err.stdout ?? ''}${err.stderr ?? ''}` };
  }
}

/** Every payload of the history decoded in place (our codec encrypts them). */
async function decodePayloads(history: proto.api.history.v1.IHistory, codec: EncryptionCodec): Promise<void> {
  const encrypted = historyPayloads(history).filter((p) => Buffer.from(p.metadata?.encoding ?? []).toString() === 'binary/encrypted');
  const plain = await codec.decode(encrypted);
  encrypted.forEach((payload, i) => Object.assign(payload, { metadata: plain[i].metadata, data: plain[i].data }));
}

/** A workflow's history, written to `file` as the fixtures are. */
export async function saveHistory(client: Client, workflowId: string, file: string): Promise<proto.api.history.v1.IHistory> {
  const history = await client.workflow.getHandle(workflowId).fetchHistory();
  await decodePayloads(history, new EncryptionCodec(loadConfig().encryptionKeys!));
  const History = proto.api.history.v1.History;
  fs.writeFileSync(file, JSON.stringify(History.toObject(History.fromObject(history), { longs: String, enums: String, bytes: String })));
  return history;
}

/** How many events of a type the history holds. */
export const countEvents = (history: proto.api.history.v1.IHistory, type: keyof typeof proto.api.enums.v1.EventType): number =>
  (history.events ?? []).filter((e) => e.eventType === proto.api.enums.v1.EventType[type]).length;

/** The history's local activity markers. */
export const localActivityMarkers = (history: proto.api.history.v1.IHistory) =>
  (history.events ?? []).filter((e) => e.markerRecordedEventAttributes?.markerName === 'core_local_activity');
