/**
 * `npm run mutants`: which business-rule mutants survive the tests? Each mutant below breaks one
 * rule in one small edit (`find` -> `replace` in `file`); the tests it names must then fail.
 *
 * The working tree is never touched (others run tests from it at the same time): the repository's
 * files (`git ls-files -co --exclude-standard`: tracked, and untracked but not ignored, as they are
 * now) are copied into a temporary directory with node_modules and .tools linked, and each mutant
 * is applied there, its tests run there, and the file restored. The copy is removed at the end,
 * also on Ctrl-C. First a baseline: every distinct set of tests must pass on the unmutated copy.
 *
 *   npm run mutants                          every mutant
 *   npm run mutants -- --unit-only           only mutants whose tests are all unit tier (seconds each)
 *   npm run mutants -- --only id,id          these mutants
 *   npm run mutants -- --check               only whether every find still stands once (no tests)
 *
 * Unit-tier tests (test/unit/) run with jest.unit.config.js, no stack. Integration tests run with
 * the default configuration and TEST_STACK_DIR in the copy: each run boots its own PostgreSQL,
 * Temporal, worker and emulator from the copy, so the worker runs the mutated code too (minutes).
 *
 * Prints one line per mutant (`killed by <file>` / `SURVIVED`) and a summary, writes the same to
 * .data/mutants/report.txt (each run's jest output to .data/mutants/logs/), and exits 1 when a
 * mutant survived, 2 when the check could not run (a `find` that is not in its file exactly once,
 * a missing test file, a failing baseline).
 */
import { spawn, execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

const ROOT = path.resolve(__dirname, '..');
const OUT_DIR = path.join(ROOT, '.data', 'mutants');

interface Mutant {
  /** Unique, short, kebab-case: what `--only` names. */
  id: string;
  /** The rule it breaks, as the report groups it. */
  rule: string;
  /** Repository-relative path of the file edited. */
  file: string;
  /** Text that occurs exactly once in `file`. */
  find: string;
  replace: string;
  /** Test files (repository-relative) that should kill it: test/unit/... and/or integration files. */
  tests: string[];
}

/* ------------------------------------------------------------------------------------------------
 * The mutants. To add one: pick a rule module, copy a `find` from it (enough context to be unique,
 * several lines if need be), write the smallest `replace` that breaks the rule the way a careless
 * edit would, and name the test files that guard the rule. Prefer unit-tier tests for pure rules
 * (mutants with any integration file are skipped by --unit-only). Leave out equivalent mutants
 * (an edit another line masks, so no test can kill it): say why in a comment instead.
 * ---------------------------------------------------------------------------------------------- */

const SENDING = 'domain/messaging/sending.ts';
const PHONE = 'domain/leads/phone.ts';
const SIGNATURE = 'domain/webhooks/webhook-signature.ts';
const URL_SAFETY = 'domain/platform/url-safety.ts';
const CONTACTS = 'domain/leads/contacts.ts';
const MERGE = 'domain/merge/merge.ts';
const AUTOMATION_RECEIVER = 'domain/automations/automation-receiver.ts';

const UNIT_SENDING = ['test/unit/sending.test.ts'];
const UNIT_PHONE = ['test/unit/phone.test.ts'];
const UNIT_SIGNATURES = ['test/unit/signatures.test.ts'];
const UNIT_URL_SAFETY = ['test/unit/url-safety.test.ts'];
const E2E_MESSAGES = ['test/messages.test.ts'];
const E2E_SAGA = ['test/send-saga.test.ts'];
const E2E_MERGE = ['test/leads.test.ts', 'test/events.test.ts'];

/** An IPv4 private range that loses its far end: `cidr` (inside it) is let through. */
const V4_UNICAST = `return range === 'unicast' ? null : describeRange(range);`;
const v4Allowed = (condition: string) => `return range === 'unicast' || ${condition} ? null : describeRange(range);`;
const rangeEdge = (cidr: string) => v4Allowed(`parsed.match(ipaddr.parseCIDR('${cidr}'))`);

const OPT_OUT = (word: string, find: string, replace: string, set: 'STOP' | 'START'): Mutant => ({
  id: `${set === 'STOP' ? 'opt-out' : 'opt-in'}-word-${word}-removed`,
  rule: 'Opt-out words',
  file: SENDING,
  find,
  replace,
  tests: UNIT_SENDING,
});

const MUTANTS: Mutant[] = [
  // 24-hour window (sending.ts windowOpen)
  {
    id: 'window-any-inbound',
    rule: '24-hour window',
    file: SENDING,
    find: 'return lastInboundAt !== null && now.getTime() - lastInboundAt.getTime() < windowMs;',
    replace: 'return lastInboundAt !== null;',
    tests: UNIT_SENDING,
  },
  {
    id: 'window-boundary-inclusive',
    rule: '24-hour window',
    file: SENDING,
    find: 'now.getTime() - lastInboundAt.getTime() < windowMs;',
    replace: 'now.getTime() - lastInboundAt.getTime() <= windowMs;',
    tests: UNIT_SENDING,
  },
  {
    id: 'window-25-hours',
    rule: '24-hour window',
    file: SENDING,
    find: 'export const WINDOW_MS = 24 * 60 * 60 * 1000;',
    replace: 'export const WINDOW_MS = 25 * 60 * 60 * 1000;',
    tests: UNIT_SENDING,
  },
  {
    id: 'window-23-hours',
    rule: '24-hour window',
    file: SENDING,
    find: 'export const WINDOW_MS = 24 * 60 * 60 * 1000;',
    replace: 'export const WINDOW_MS = 23 * 60 * 60 * 1000;',
    tests: UNIT_SENDING,
  },
  {
    id: 'window-not-enforced',
    rule: '24-hour window',
    file: SENDING,
    find: "instance.provider === 'cloud' && !windowOpen(lastInbound, send.now)",
    replace: "instance.provider === 'cloud' && false",
    tests: UNIT_SENDING,
  },
  // The AI insight (domain/insights/model.ts): what leaves the service, and what is stored
  {
    id: 'insight-phones-unmasked',
    rule: 'AI insight',
    file: 'domain/insights/model.ts',
    find: "return text.replace(EMAIL, '[e-mail]').replace(PHONE, '[telefone]');",
    replace: "return text.replace(EMAIL, '[e-mail]');",
    tests: ['test/unit/insight-model.test.ts'],
  },
  {
    id: 'insight-score-unbounded',
    rule: 'AI insight',
    file: 'domain/insights/model.ts',
    find: 'score: z.number().int().min(0).max(100)',
    replace: 'score: z.number().int().min(0)',
    tests: ['test/unit/insight-model.test.ts'],
  },
  // Instagram (sending.ts, domain/messaging/instagram.ts)
  {
    id: 'instagram-human-agent-24h',
    rule: 'Instagram window',
    file: SENDING,
    find: 'export const HUMAN_AGENT_WINDOW_MS = 7 * WINDOW_MS;',
    replace: 'export const HUMAN_AGENT_WINDOW_MS = WINDOW_MS;',
    tests: UNIT_SENDING,
  },
  {
    id: 'instagram-window-ignored',
    rule: 'Instagram window',
    file: SENDING,
    find: "if (instance.provider === 'instagram' && !windowOpen(",
    replace: "if (instance.provider === 'instagram' && false && !windowOpen(",
    tests: UNIT_SENDING,
  },
  {
    id: 'instagram-template-looked-up',
    rule: 'Instagram window',
    file: SENDING,
    find: "    if (message.type === 'template')\n      throw new ApiError('TEMPLATE_UNSUPPORTED', 'Instagram has no message templates'",
    replace:
      "    if (message.type === ('none' as string))\n      throw new ApiError('TEMPLATE_UNSUPPORTED', 'Instagram has no message templates'",
    tests: UNIT_SENDING,
  },
  {
    id: 'instagram-echo-as-customer',
    rule: 'Instagram inbound',
    file: 'domain/messaging/instagram.ts',
    find: 'if (message.is_echo === true || (sender !== undefined && sender === account)) {',
    replace: 'if (false) {',
    tests: ['test/unit/instagram-parser.test.ts'],
  },

  // Cold cap (sending.ts coldCap): max(200, ceil(0.1 x broadcastLimit))
  {
    id: 'cold-cap-share-0.2',
    rule: 'Cold cap',
    file: SENDING,
    find: 'Math.ceil(0.1 * (broadcastLimit ?? 0))',
    replace: 'Math.ceil(0.2 * (broadcastLimit ?? 0))',
    tests: UNIT_SENDING,
  },
  {
    id: 'cold-cap-floor',
    rule: 'Cold cap',
    file: SENDING,
    find: 'Math.ceil(0.1 * (broadcastLimit ?? 0))',
    replace: 'Math.floor(0.1 * (broadcastLimit ?? 0))',
    tests: UNIT_SENDING,
  },
  {
    id: 'cold-cap-min',
    rule: 'Cold cap',
    file: SENDING,
    find: 'return Math.max(200, Math.ceil(0.1',
    replace: 'return Math.min(200, Math.ceil(0.1',
    tests: UNIT_SENDING,
  },
  {
    id: 'cold-cap-floor-100',
    rule: 'Cold cap',
    file: SENDING,
    find: 'return Math.max(200, Math.ceil(0.1',
    replace: 'return Math.max(100, Math.ceil(0.1',
    tests: UNIT_SENDING,
  },
  {
    id: 'cold-cap-proportional-dropped',
    rule: 'Cold cap',
    file: SENDING,
    find: 'return Math.max(200, Math.ceil(0.1 * (broadcastLimit ?? 0)));',
    replace: 'return 200;',
    tests: UNIT_SENDING,
  },

  // Only approved templates (templates.ts approvedTemplate): needs the database.
  {
    id: 'template-any-status',
    rule: 'Only approved templates',
    file: 'domain/messaging/templates.ts',
    find: "name, language, status: 'approved' })",
    replace: 'name, language })',
    tests: E2E_MESSAGES,
  },

  // São Paulo day (sending.ts saoPauloDay, secondsUntilSaoPauloMidnight)
  {
    id: 'sao-paulo-day-utc',
    rule: 'São Paulo day',
    file: SENDING,
    find: "new Intl.DateTimeFormat('en-CA', {\n  timeZone: 'America/Sao_Paulo',",
    replace: "new Intl.DateTimeFormat('en-CA', {\n  timeZone: 'UTC',",
    tests: UNIT_SENDING,
  },
  {
    id: 'sao-paulo-midnight-utc',
    rule: 'São Paulo day',
    file: SENDING,
    find: "new Intl.DateTimeFormat('en-GB', {\n  timeZone: 'America/Sao_Paulo',",
    replace: "new Intl.DateTimeFormat('en-GB', {\n  timeZone: 'UTC',",
    tests: UNIT_SENDING,
  },

  // Opt-out words (sending.ts consentFromMessage): each word, then case, accents and punctuation.
  OPT_OUT('stop', "new Set(['stop', 'parar',", "new Set(['parar',", 'STOP'),
  OPT_OUT('parar', "'stop', 'parar', 'pare'", "'stop', 'pare'", 'STOP'),
  OPT_OUT('pare', "'parar', 'pare', 'sair'", "'parar', 'sair'", 'STOP'),
  OPT_OUT('sair', "'pare', 'sair', 'cancelar'", "'pare', 'cancelar'", 'STOP'),
  OPT_OUT('cancelar', "'sair', 'cancelar', 'descadastrar'", "'sair', 'descadastrar'", 'STOP'),
  OPT_OUT('descadastrar', "'cancelar', 'descadastrar']", "'cancelar']", 'STOP'),
  OPT_OUT('start', "new Set(['start', 'voltar',", "new Set(['voltar',", 'START'),
  OPT_OUT('voltar', "'start', 'voltar', 'receber'", "'start', 'receber'", 'START'),
  OPT_OUT('receber', "'voltar', 'receber']", "'voltar']", 'START'),
  {
    id: 'opt-out-case-sensitive',
    rule: 'Opt-out words',
    file: SENDING,
    find: "    .replace(/\\p{M}/gu, '')\n    .toLowerCase()\n",
    replace: "    .replace(/\\p{M}/gu, '')\n",
    tests: UNIT_SENDING,
  },
  {
    id: 'opt-out-accent-sensitive',
    rule: 'Opt-out words',
    file: SENDING,
    find: "    .normalize('NFD')\n    .replace(/\\p{M}/gu, '')\n",
    replace: '',
    tests: UNIT_SENDING,
  },
  {
    id: 'opt-out-punctuation-sensitive',
    rule: 'Opt-out words',
    file: SENDING,
    find: ".replace(/[\\s.!?]+/g, ' ')",
    replace: ".replace(/\\s+/g, ' ')",
    tests: UNIT_SENDING,
  },
  {
    id: 'opt-out-substring',
    rule: 'Opt-out words',
    file: SENDING,
    find: "if (STOP_WORDS.has(word)) return 'opt_out';",
    replace: "if ([...STOP_WORDS].some((stop) => word.includes(stop))) return 'opt_out';",
    tests: UNIT_SENDING,
  },

  // Phone (leads/phone.ts parsePhone)
  {
    id: 'phone-old-mobile-from-5',
    rule: 'Phone',
    file: PHONE,
    find: 'const mobile = /^[6-9]/.test(local);',
    replace: 'const mobile = /^[5-9]/.test(local);',
    tests: UNIT_PHONE,
  },
  {
    id: 'phone-old-mobile-from-7',
    rule: 'Phone',
    file: PHONE,
    find: 'const mobile = /^[6-9]/.test(local);',
    replace: 'const mobile = /^[7-9]/.test(local);',
    tests: UNIT_PHONE,
  },
  {
    id: 'phone-nine-digits-any-first',
    rule: 'Phone',
    file: PHONE,
    find: "if (local[0] !== '9') return { ok: false, reason: 'a 9-digit number must start with 9' };",
    replace: '',
    tests: UNIT_PHONE,
  },
  {
    id: 'phone-area-11-removed',
    rule: 'Phone',
    file: PHONE,
    find: '  11, 12, 13,',
    replace: '  12, 13,',
    tests: UNIT_PHONE,
  },
  {
    id: 'phone-area-69-removed',
    rule: 'Phone',
    file: PHONE,
    find: ' 68, 69, 71,',
    replace: ' 68, 71,',
    tests: UNIT_PHONE,
  },
  {
    id: 'phone-area-99-removed',
    rule: 'Phone',
    file: PHONE,
    find: ' 98, 99,\n]);',
    replace: ' 98,\n]);',
    tests: UNIT_PHONE,
  },
  {
    id: 'phone-area-20-added',
    rule: 'Phone',
    file: PHONE,
    find: ' 19, 21, 22,',
    replace: ' 19, 20, 21, 22,',
    tests: UNIT_PHONE,
  },

  // Signatures: our outbound webhook signature (its replay tolerance) and the Cloud API's.
  {
    id: 'signature-tolerance-inclusive',
    rule: 'Signatures',
    file: SIGNATURE,
    find: 'if (Math.abs(nowSeconds - timestamp) > toleranceSeconds) return false;',
    replace: 'if (Math.abs(nowSeconds - timestamp) >= toleranceSeconds) return false;',
    tests: UNIT_SIGNATURES,
  },
  {
    id: 'signature-tolerance-301',
    rule: 'Signatures',
    file: SIGNATURE,
    find: 'toleranceSeconds = 300,',
    replace: 'toleranceSeconds = 301,',
    tests: UNIT_SIGNATURES,
  },
  {
    id: 'signature-future-unbounded',
    rule: 'Signatures',
    file: SIGNATURE,
    find: 'if (Math.abs(nowSeconds - timestamp) > toleranceSeconds) return false;',
    replace: 'if (nowSeconds - timestamp > toleranceSeconds) return false;',
    tests: UNIT_SIGNATURES,
  },
  {
    id: 'cloud-signature-prefix-optional',
    rule: 'Signatures',
    file: 'domain/messaging/inbound.ts',
    find: 'const SIGNATURE = /^sha256=([0-9a-f]{64})$/i;',
    replace: 'const SIGNATURE = /^(?:sha256=)?([0-9a-f]{64})$/i;',
    tests: UNIT_SIGNATURES,
  },
  {
    id: 'cloud-signature-any-prefix',
    rule: 'Signatures',
    file: 'domain/messaging/inbound.ts',
    find: 'const SIGNATURE = /^sha256=([0-9a-f]{64})$/i;',
    replace: 'const SIGNATURE = /^\\w*=([0-9a-f]{64})$/i;',
    tests: UNIT_SIGNATURES,
  },
  // The inbound automation receiver (automation-receiver.ts signedDeliveryChain): a call claiming
  // one of our deliveries continues that delivery's chain only when signed with its subscription's
  // secret within the signature's tolerance (5 minutes either way, verifyWebhookSignature's default;
  // there is no 10-minute window), one step deeper.
  {
    id: 'automation-chain-signature-ignored',
    rule: 'Automation receiver',
    file: AUTOMATION_RECEIVER,
    find: '!verifyWebhookSignature(',
    replace: '!Boolean(',
    tests: UNIT_SIGNATURES,
  },
  {
    id: 'automation-replay-window-301',
    rule: 'Automation receiver',
    file: AUTOMATION_RECEIVER,
    find: 'verifyWebhookSignature(delivery.secret, signature, rawBody, undefined, nowSeconds)',
    replace: 'verifyWebhookSignature(delivery.secret, signature, rawBody, 301, nowSeconds)',
    tests: UNIT_SIGNATURES,
  },
  {
    id: 'automation-replay-window-299',
    rule: 'Automation receiver',
    file: AUTOMATION_RECEIVER,
    find: 'verifyWebhookSignature(delivery.secret, signature, rawBody, undefined, nowSeconds)',
    replace: 'verifyWebhookSignature(delivery.secret, signature, rawBody, 299, nowSeconds)',
    tests: UNIT_SIGNATURES,
  },
  {
    id: 'automation-chain-not-deeper',
    rule: 'Automation receiver',
    file: AUTOMATION_RECEIVER,
    find: 'depth: (delivery.depth ?? 0) + 1',
    replace: 'depth: delivery.depth ?? 0',
    tests: UNIT_SIGNATURES,
  },

  // Daily quota (sending.ts dailyUnits, the trigger of migrations/20261207000200_daily_units_at_commit.ts). Not a
  // mutant: the SQL's `count + n <= cap` -> `count + n < cap + 1` says the same; its check after the upsert is mutated instead.
  {
    id: 'quota-zero-unlimited',
    rule: 'Daily quota',
    file: SENDING,
    find: "units.push({ counter: 'messages', cap: plan.daily_message_quota });",
    replace: "units.push({ counter: 'messages', cap: plan.daily_message_quota || null });",
    tests: UNIT_SENDING,
  },
  {
    id: 'quota-zero-first-take',
    rule: 'Daily quota',
    file: 'migrations/20261207000200_daily_units_at_commit.ts',
    find: 'IF taken IS NULL OR (NEW.cap IS NOT NULL AND taken > NEW.cap) THEN',
    replace: 'IF taken IS NULL OR (NEW.cap IS NOT NULL AND NEW.cap > 0 AND taken > NEW.cap) THEN',
    tests: E2E_MESSAGES,
  },
  {
    id: 'quota-one-short',
    rule: 'Daily quota',
    file: 'migrations/20261207000200_daily_units_at_commit.ts',
    find: 'WHERE NEW.cap IS NULL OR c.count + EXCLUDED.count <= NEW.cap',
    replace: 'WHERE NEW.cap IS NULL OR c.count + EXCLUDED.count < NEW.cap',
    tests: E2E_MESSAGES,
  },

  // Media limits (sending.ts MEDIA_LIMITS, checkMediaSize)
  {
    id: 'media-limit-inclusive',
    rule: 'Media limits',
    file: SENDING,
    find: 'bytes !== null && bytes > limit)',
    replace: 'bytes !== null && bytes >= limit)',
    tests: UNIT_SENDING,
  },
  {
    id: 'media-limit-one-over',
    rule: 'Media limits',
    file: SENDING,
    find: 'bytes !== null && bytes > limit)',
    replace: 'bytes !== null && bytes > limit + 1)',
    tests: UNIT_SENDING,
  },
  {
    id: 'media-image-limit-plus-one',
    rule: 'Media limits',
    file: SENDING,
    find: '  image: 5 * 1024 * 1024,',
    replace: '  image: 5 * 1024 * 1024 + 1,',
    tests: UNIT_SENDING,
  },
  {
    id: 'media-video-limit-plus-one',
    rule: 'Media limits',
    file: SENDING,
    find: '  video: 16 * 1024 * 1024,',
    replace: '  video: 16 * 1024 * 1024 + 1,',
    tests: UNIT_SENDING,
  },
  {
    id: 'media-document-limit-minus-one',
    rule: 'Media limits',
    file: SENDING,
    find: '  document: 100 * 1024 * 1024,',
    replace: '  document: 100 * 1024 * 1024 - 1,',
    tests: UNIT_SENDING,
  },

  // Merge (merge/merge.ts mergeContacts, each area moving its rows): each thing the survivor takes over, left behind.
  {
    id: 'merge-tasks-left',
    rule: 'Merge',
    file: MERGE,
    find: 'await moveContactTasks(trx, workspaceId, duplicate.id, into.id);',
    replace: '',
    tests: E2E_MERGE,
  },
  {
    id: 'merge-list-memberships-left',
    rule: 'Merge',
    file: CONTACTS,
    find: 'SELECT workspace_id, list_id, ?, created_at FROM list_members WHERE workspace_id = ?',
    replace: 'SELECT workspace_id, list_id, ?, created_at FROM list_members WHERE false AND workspace_id = ?',
    tests: E2E_MERGE,
  },
  {
    id: 'merge-insight-left',
    rule: 'Merge',
    file: CONTACTS,
    find: 'UPDATE insights SET contact_id = ? WHERE workspace_id = ?',
    replace: 'UPDATE insights SET contact_id = ? WHERE false AND workspace_id = ?',
    tests: E2E_MERGE,
  },
  {
    id: 'merge-messages-left',
    rule: 'Merge',
    file: 'domain/messaging/conversations.ts',
    find: 'WHERE m.conversation_id = theirs.id AND theirs.workspace_id = ?',
    replace: 'WHERE false AND m.conversation_id = theirs.id AND theirs.workspace_id = ?',
    tests: E2E_MERGE,
  },
  {
    id: 'merge-conversations-left',
    rule: 'Merge',
    file: 'domain/messaging/conversations.ts',
    find: 'WHERE workspace_id = ? AND contact_id = ? AND instance_id NOT IN',
    replace: 'WHERE false AND workspace_id = ? AND contact_id = ? AND instance_id NOT IN',
    tests: E2E_MERGE,
  },
  {
    id: 'merge-deals-left',
    rule: 'Merge',
    file: MERGE,
    find: 'await moveContactDeals(trx, workspaceId, duplicate.id, into.id);',
    replace: '',
    tests: E2E_MERGE,
  },
  {
    id: 'merge-notes-left',
    rule: 'Merge',
    file: CONTACTS,
    find: "await trx('notes').where({ workspace_id: workspaceId, contact_id: duplicateId }).update({ contact_id: intoId });",
    replace: '',
    tests: E2E_MERGE,
  },

  // Compensation once (send/ledger.ts undoPreparedSend and claimUndo). Not a
  // mutant: the workflow running each compensation twice, which the once-guard masks (it is what
  // the guard is for); the guard itself is mutated instead.
  {
    id: 'undo-once-guard-ignored',
    rule: 'Compensation once',
    file: 'domain/messaging/send/ledger.ts',
    find: 'if (!(await claimUndo(trx, workspaceId, prepared.reference))) return;',
    replace: 'await claimUndo(trx, workspaceId, prepared.reference);',
    tests: E2E_SAGA,
  },
  {
    id: 'undo-claim-repeatable',
    rule: 'Compensation once',
    file: 'domain/messaging/send/ledger.ts',
    find: "    .whereNull('undone_at')\n",
    replace: '',
    tests: E2E_SAGA,
  },
  {
    id: 'undo-quota-given-back-twice',
    rule: 'Compensation once',
    file: 'domain/messaging/send/ledger.ts',
    find: "await giveBackDaily(trx, workspaceId, 'messages', prepared.day);",
    replace:
      "await giveBackDaily(trx, workspaceId, 'messages', prepared.day);\n  await giveBackDaily(trx, workspaceId, 'messages', prepared.day);",
    tests: E2E_SAGA,
  },

  // A provider call at most once per reference, also when claims are written together (send/ledger.ts AttemptWrites).
  {
    id: 'attempt-group-second-claim-wins',
    rule: 'Provider call at most once',
    file: 'domain/messaging/send/ledger.ts',
    find: 'for (const c of held) c.resolve(undefined);',
    replace: 'for (const c of held) c.resolve({ fresh: true });',
    tests: ['test/hot-path.test.ts'],
  },
  // A broadcast keeps its rate against a provider slow to answer (domain/broadcasts/batch.ts sendPage).
  {
    id: 'broadcast-calls-one-at-a-time',
    rule: 'Broadcast rate',
    file: 'domain/broadcasts/batch.ts',
    find: 'const connection = await connections.get(p.instanceId)!;',
    replace: 'await Promise.all(calls);\n        const connection = await connections.get(p.instanceId)!;',
    tests: ['test/broadcasts.test.ts'],
  },

  // Send replay (domain/messaging/send-keys.ts): a completed send's Idempotency-Key replays it for 10 minutes.
  {
    id: 'send-replay-11-minutes',
    rule: 'Send replay window',
    file: 'domain/messaging/send-keys.ts',
    find: 'export const IDEMPOTENCY_MEMO_MS = 10 * 60 * 1000;',
    replace: 'export const IDEMPOTENCY_MEMO_MS = 11 * 60 * 1000;',
    tests: E2E_MESSAGES,
  },
  {
    id: 'send-replay-comparison-flipped',
    rule: 'Send replay window',
    file: 'domain/messaging/send-keys.ts',
    find: "WHERE k.state = 'refused' OR (k.state = 'answered' AND k.updated_at < :memoFrom)",
    replace: "WHERE k.state = 'refused' OR (k.state = 'answered' AND k.updated_at > :memoFrom)",
    tests: E2E_MESSAGES,
  },
  {
    id: 'send-refusal-keeps-key',
    rule: 'Send replay window',
    file: 'domain/messaging/send-keys.ts',
    find: "WHERE k.state = 'refused' OR (k.state = 'answered'",
    replace: "WHERE (k.state = 'answered'",
    tests: E2E_MESSAGES,
  },

  // URL safety (platform/url-safety.ts): the ranges come from ipaddr.js, so an edge is moved by
  // letting the far part of a range through.
  {
    id: 'url-172.16-narrowed-to-13',
    rule: 'URL safety',
    file: URL_SAFETY,
    find: V4_UNICAST,
    replace: rangeEdge('172.24.0.0/13'),
    tests: UNIT_URL_SAFETY,
  },
  {
    id: 'url-10-narrowed-to-9',
    rule: 'URL safety',
    file: URL_SAFETY,
    find: V4_UNICAST,
    replace: rangeEdge('10.128.0.0/9'),
    tests: UNIT_URL_SAFETY,
  },
  {
    id: 'url-192.168-narrowed-to-17',
    rule: 'URL safety',
    file: URL_SAFETY,
    find: V4_UNICAST,
    replace: rangeEdge('192.168.128.0/17'),
    tests: UNIT_URL_SAFETY,
  },
  {
    id: 'url-cgnat-narrowed-to-11',
    rule: 'URL safety',
    file: URL_SAFETY,
    find: V4_UNICAST,
    replace: rangeEdge('100.96.0.0/11'),
    tests: UNIT_URL_SAFETY,
  },
  {
    id: 'url-loopback-narrowed-to-9',
    rule: 'URL safety',
    file: URL_SAFETY,
    find: V4_UNICAST,
    replace: rangeEdge('127.128.0.0/9'),
    tests: UNIT_URL_SAFETY,
  },
  {
    id: 'url-link-local-allowed',
    rule: 'URL safety',
    file: URL_SAFETY,
    find: V4_UNICAST,
    replace: v4Allowed(`range === 'linkLocal'`),
    tests: UNIT_URL_SAFETY,
  },
  {
    id: 'url-link-local-allowed-when-private-allowed',
    rule: 'URL safety',
    file: URL_SAFETY,
    find: "if (candidate.range() === 'linkLocal') return 'a link-local address (cloud metadata services live there)';",
    replace: '',
    tests: UNIT_URL_SAFETY,
  },

  // Rich template sends (issue 37): the header and buttons checked against the template's components.
  {
    id: 'template-media-header-optional',
    rule: 'Template components',
    file: SENDING,
    find: 'if (given?.mediaUrl === undefined) {',
    replace: 'if (given?.mediaUrl === undefined && given !== undefined) {',
    tests: ['test/unit/template-components.test.ts'],
  },
  {
    id: 'template-button-without-url-variable',
    rule: 'Template components',
    file: SENDING,
    find: 'if (!button.urlVariable) throw invalid(',
    replace: 'if (false) throw invalid(',
    tests: ['test/unit/template-components.test.ts'],
  },
  {
    id: 'template-button-twice',
    rule: 'Template components',
    file: SENDING,
    find: 'if (filled.has(index)) throw invalid(',
    replace: 'if (false) throw invalid(',
    tests: ['test/unit/template-components.test.ts'],
  },

  {
    id: 'template-not-rechecked-before-retry',
    rule: 'Template components',
    file: 'domain/messaging/send/attempt.ts',
    find: 'if (!template)\n        throw new ApiError(',
    replace: 'if (!template && false)\n        throw new ApiError(',
    tests: ['test/template-sends.test.ts'],
  },

  // The broadcast workflow's waits (workflows/broadcast.ts), on Temporal's time-skipping test server.
  {
    id: 'broadcast-no-quota-wait',
    rule: 'Broadcast waits',
    file: 'workflows/broadcast.ts',
    find: 'await rest(Date.parse(result.until) - Date.now());',
    replace: 'await rest(0);',
    tests: ['test/unit/broadcast-workflow.test.ts'],
  },
  {
    id: 'broadcast-wake-ignored',
    rule: 'Broadcast waits',
    file: 'workflows/broadcast.ts',
    find: 'if (ms > 0) await condition(() => woken, ms);',
    replace: 'if (ms > 0) await sleep(ms);',
    tests: ['test/unit/broadcast-workflow.test.ts'],
  },
  {
    id: 'broadcast-never-continues-as-new',
    rule: 'Broadcast waits',
    file: 'workflows/broadcast.ts',
    find: 'for (let i = 0; i < BATCHES_PER_RUN; i++) {',
    replace: 'for (let i = 0; ; i++) {',
    tests: ['test/unit/broadcast-workflow.test.ts'],
  },

  // A broadcast batch's pacing (domain/broadcasts/pacing.ts), on a virtual clock.
  {
    id: 'broadcast-pace-ignores-rate',
    rule: 'Broadcast pacing',
    file: 'domain/broadcasts/pacing.ts',
    find: 'nextCallAt = slotAt + intervalMs;',
    replace: 'nextCallAt = slotAt;',
    tests: ['test/unit/broadcast-pacing.test.ts'],
  },
  {
    id: 'broadcast-call-after-stop',
    rule: 'Broadcast pacing',
    file: 'domain/broadcasts/pacing.ts',
    find: '    return !halted();',
    replace: '    return true;',
    tests: ['test/unit/broadcast-pacing.test.ts'],
  },

  // Message list totals from the conversations' counts (migration 20261127090100).
  {
    id: 'message-count-not-moved-on-merge',
    rule: 'Message list totals',
    file: 'migrations/20261127090100_conversation_message_counts.ts',
    find: 'FOR EACH ROW WHEN (OLD.conversation_id IS DISTINCT FROM NEW.conversation_id OR',
    replace: 'FOR EACH ROW WHEN (false AND',
    tests: ['test/message-sync.test.ts'],
  },

  // Inbound media (issue 37): one workspace's fetches bounded, stored bytes within the plan.
  {
    id: 'media-fetches-unbounded',
    rule: 'Media fairness',
    file: 'domain/messaging/media.ts',
    find: 'export const MEDIA_FETCHES_PER_WORKSPACE = 16;',
    replace: 'export const MEDIA_FETCHES_PER_WORKSPACE = 1000;',
    tests: ['test/media.test.ts'],
  },
  {
    id: 'media-storage-unlimited',
    rule: 'Media storage limit',
    file: 'domain/messaging/media.ts',
    find: 'bytes: Math.max(0, row.limit_mb * 1_048_576 - Number(row.used))',
    replace: 'bytes: Number.MAX_SAFE_INTEGER',
    tests: ['test/media.test.ts'],
  },

  // Broadcasts (issue 36): a recipient follows its message's status into its row and the counts.
  {
    id: 'broadcast-recipient-ignores-status',
    rule: 'Broadcast statuses',
    file: 'migrations/20261127070100_broadcast_recipient_follows_message.ts',
    find: "FOR EACH ROW WHEN (OLD.status IS DISTINCT FROM NEW.status AND NEW.status IN ('delivered', 'read', 'failed'))",
    replace: "FOR EACH ROW WHEN (OLD.status IS DISTINCT FROM NEW.status AND NEW.status IN ('none'))",
    tests: ['test/broadcasts.test.ts'],
  },
];

/* ------------------------------------------------------------------------------------------------
 * Running them
 * ---------------------------------------------------------------------------------------------- */

const UNIT_RUN_LIMIT_MS = 5 * 60_000;
const INTEGRATION_RUN_LIMIT_MS = 45 * 60_000;

const isUnit = (test: string) => test.startsWith('test/unit/');
const integrationOf = (mutant: Mutant) => !mutant.tests.every(isUnit);
const log = (line: string) => console.log(`[mutants] ${line}`);
const seconds = (since: number) => `${((Date.now() - since) / 1000).toFixed(1)} s`;

class Stop extends Error {}

function parseArgs(argv: string[]): { unitOnly: boolean; only: string[] | undefined; check: boolean } {
  let unitOnly = false;
  let check = false;
  let only: string[] | undefined;
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i];
    if (arg === '--unit-only') unitOnly = true;
    else if (arg === '--check') check = true;
    else if (arg === '--only' || arg.startsWith('--only=')) {
      const value = arg === '--only' ? argv[++i] : arg.slice('--only='.length);
      if (!value) throw new Stop('--only needs a comma-separated list of mutant ids');
      only = value
        .split(',')
        .map((id) => id.trim())
        .filter(Boolean);
    } else throw new Stop(`unknown argument ${arg} (expected --unit-only, --only <id,...>, --check)`);
  }
  return { unitOnly, only, check };
}

/** A read-only git command's output in the working tree, or undefined (not a checkout, no git). */
function git(args: string[]): string | undefined {
  try {
    return execFileSync('git', args, { cwd: ROOT, stdio: ['ignore', 'pipe', 'ignore'] })
      .toString('utf8')
      .trim();
  } catch {
    return undefined;
  }
}

/** Occurrences of `find` in `text` (non-overlapping). */
function occurrences(text: string, find: string): number {
  return find === '' ? 0 : text.split(find).length - 1;
}

/** Every problem with the mutant list against the files as they are (all mutants, so a refactor cannot silently disable one). */
function listProblems(dir: string, selected: Mutant[]): string[] {
  const problems: string[] = [];
  const ids = new Set<string>();
  for (const m of MUTANTS) {
    if (ids.has(m.id)) problems.push(`${m.id}: the id is used twice`);
    ids.add(m.id);
    const file = path.join(dir, m.file);
    if (!fs.existsSync(file)) {
      problems.push(`${m.id}: ${m.file} does not exist`);
      continue;
    }
    const count = occurrences(fs.readFileSync(file, 'utf8'), m.find);
    if (count !== 1) problems.push(`${m.id}: its find occurs ${count} times in ${m.file}, not once: ${JSON.stringify(m.find)}`);
    if (m.find === m.replace) problems.push(`${m.id}: find and replace are the same`);
    if (m.tests.length === 0) problems.push(`${m.id}: names no test file`);
  }
  for (const m of selected) {
    for (const test of m.tests) if (!fs.existsSync(path.join(dir, test))) problems.push(`${m.id}: its test file ${test} does not exist`);
  }
  return problems;
}

/** Fills `dir` with the repository's files as they are now, node_modules and .tools linked. */
function fillCopy(dir: string): void {
  // As root, PostgreSQL runs as `postgres`, which must be able to enter the copy (scripts/stack.ts).
  fs.chmodSync(dir, 0o755);
  const listed = execFileSync('git', ['ls-files', '-z', '-co', '--exclude-standard'], { cwd: ROOT, maxBuffer: 64 << 20 })
    .toString('utf8')
    .split('\0')
    .filter(Boolean);
  let copied = 0;
  for (const file of listed) {
    const from = path.join(ROOT, file);
    const stat = fs.lstatSync(from, { throwIfNoEntry: false });
    // A tracked file deleted in the working tree is not copied; nor is a submodule or a directory.
    if (!stat || !(stat.isFile() || stat.isSymbolicLink())) continue;
    const to = path.join(dir, file);
    fs.mkdirSync(path.dirname(to), { recursive: true });
    if (stat.isSymbolicLink()) fs.symlinkSync(fs.readlinkSync(from), to);
    else fs.copyFileSync(from, to);
    copied++;
  }
  for (const linked of ['node_modules', '.tools']) {
    if (fs.existsSync(path.join(ROOT, linked))) fs.symlinkSync(path.join(ROOT, linked), path.join(dir, linked), 'dir');
  }
  log(`copied ${copied} files to ${dir}`);
}

/** Removes the copy (links are removed, never followed) and a PostgreSQL data directory a stack relocated out of it. */
function removeCopy(dir: string): void {
  const marker = path.join(dir, '.mutants', 'stack', 'postgres', 'RELOCATED');
  if (fs.existsSync(marker)) {
    const relocated = fs.readFileSync(marker, 'utf8').trim();
    if (relocated) fs.rmSync(relocated, { recursive: true, force: true });
  }
  fs.rmSync(dir, { recursive: true, force: true });
}

interface RunResult {
  /** Test files that failed, repository-relative. */
  failed: string[];
  /** jest's exit code, or null when it was stopped. */
  code: number | null;
  /** jest wrote no report (global setup failed, a crash) or was stopped at its time limit. */
  noReport: boolean;
  timedOut: boolean;
  logFile: string;
}

let current: { pid: number; done: Promise<void> } | undefined;
let stopping = false;

function groupAlive(pid: number): boolean {
  try {
    process.kill(-pid, 0);
    return true;
  } catch {
    return false;
  }
}

/** Waits until the process group `pid` has no process left: up to `graceMs`, then SIGTERM, then SIGKILL. */
async function endGroup(pid: number, graceMs: number): Promise<void> {
  const waitEmpty = async (ms: number) => {
    for (const until = Date.now() + ms; groupAlive(pid) && Date.now() < until;) await new Promise((r) => setTimeout(r, 200));
  };
  await waitEmpty(graceMs);
  for (const signal of ['SIGTERM', 'SIGKILL'] as const) {
    if (!groupAlive(pid)) return;
    try {
      process.kill(-pid, signal);
    } catch {
      return;
    }
    await waitEmpty(15_000);
  }
}

/** Runs jest on `tests` in the copy; integration files get a stack of their own under the copy. */
function runJest(dir: string, tests: string[], label: string): Promise<RunResult> {
  const integration = !tests.every(isUnit);
  const work = path.join(dir, '.mutants');
  fs.mkdirSync(path.join(OUT_DIR, 'logs'), { recursive: true });
  fs.mkdirSync(work, { recursive: true });
  const reportFile = path.join(work, 'jest-report.json');
  fs.rmSync(reportFile, { force: true });
  const logFile = path.join(OUT_DIR, 'logs', `${label}.log`);
  const out = fs.openSync(logFile, 'w');
  const args = [
    path.join('node_modules', 'jest', 'bin', 'jest.js'),
    '--ci',
    ...(integration ? ['--maxWorkers=1'] : ['--config', 'jest.unit.config.js']),
    '--json',
    `--outputFile=${reportFile}`,
    '--runTestsByPath',
    ...tests,
  ];
  // Its own process group, so that the stack it starts can be stopped with it, whatever happens.
  const child = spawn(process.execPath, args, {
    cwd: dir,
    env: { ...process.env, TEST_STACK_DIR: path.join(work, 'stack') },
    stdio: ['ignore', out, out],
    detached: true,
  });
  fs.closeSync(out);
  let timedOut = false;
  const exited = new Promise<number | null>((resolve) => {
    child.on('exit', (code) => resolve(code));
    child.on('error', () => resolve(null));
  });
  if (child.pid === undefined) throw new Stop(`jest could not be started in ${dir}`);
  const pid = child.pid;
  const limit = setTimeout(
    () => {
      timedOut = true;
      // Asked first (the stack stops with it), then ended.
      process.kill(-pid, 'SIGINT');
      setTimeout(() => endGroup(pid, 0).catch(() => undefined), 90_000).unref();
    },
    integration ? INTEGRATION_RUN_LIMIT_MS : UNIT_RUN_LIMIT_MS,
  );
  const result = (async (): Promise<RunResult> => {
    const code = await exited;
    clearTimeout(limit);
    // What the run started and did not stop (a stack part outliving a crash) goes now.
    await endGroup(pid, 5_000);
    let failed: string[] = [];
    let noReport = true;
    if (fs.existsSync(reportFile)) {
      const report = JSON.parse(fs.readFileSync(reportFile, 'utf8')) as { testResults?: { name: string; status: string }[] };
      noReport = false;
      failed = (report.testResults ?? []).filter((r) => r.status !== 'passed').map((r) => path.relative(dir, r.name));
    }
    return { failed, code, noReport, timedOut, logFile: path.relative(ROOT, logFile) };
  })();
  current = { pid, done: result.then(() => undefined) };
  return result.finally(() => {
    current = undefined;
  });
}

function tail(file: string, lines: number): string {
  return fs.readFileSync(path.join(ROOT, file), 'utf8').split('\n').slice(-lines).join('\n');
}

type Outcome = { status: 'killed' | 'survived' | 'error' | 'skipped'; detail: string };

function outcomeOf(run: RunResult): Outcome {
  if (run.failed.length > 0) return { status: 'killed', detail: `killed by ${run.failed.join(', ')}` };
  if (run.timedOut) return { status: 'killed', detail: `killed: its tests did not finish in time (${run.logFile})` };
  // No report: jest stopped before writing it (before any test file ran, or crashed after a failing one): the log says which.
  if (run.noReport && run.code !== 0)
    return { status: 'killed', detail: `killed: jest exited ${run.code} without a report (${run.logFile})` };
  if (run.code === 0) return { status: 'survived', detail: 'SURVIVED' };
  return { status: 'error', detail: `ERROR: jest exited with ${run.code} though every test file passed (${run.logFile})` };
}

async function main(): Promise<number> {
  const { unitOnly, only, check } = parseArgs(process.argv.slice(2));
  if (check) {
    // After a refactor: does every mutant's find still stand once in the working tree? (No tests run.)
    const problems = listProblems(ROOT, MUTANTS);
    if (problems.length) throw new Stop(`the mutant list does not match the code:\n  ${problems.join('\n  ')}`);
    log(`${MUTANTS.length} mutants: every find stands once in its file`);
    return 0;
  }
  const known = new Set(MUTANTS.map((m) => m.id));
  const unknown = (only ?? []).filter((id) => !known.has(id));
  if (unknown.length) throw new Stop(`unknown mutant id(s): ${unknown.join(', ')}`);
  const chosen = MUTANTS.filter((m) => !only || only.includes(m.id));
  const skipped = unitOnly ? chosen.filter(integrationOf) : [];
  const selected = chosen.filter((m) => !skipped.includes(m));

  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'crm-mutants-'));
  let removed = false;
  const cleanUp = () => {
    if (!removed) removeCopy(dir);
    removed = true;
  };
  process.on('exit', cleanUp);
  const onSignal = (signal: NodeJS.Signals) => {
    if (stopping) {
      // A second Ctrl-C: no more waiting for the stack to stop.
      if (current) endGroup(current.pid, 0).catch(() => undefined);
      return;
    }
    stopping = true;
    log(`${signal}: stopping the running tests, then removing ${dir}`);
    const running = current;
    if (running) process.kill(-running.pid, 'SIGINT');
    void (running?.done ?? Promise.resolve()).finally(() => {
      cleanUp();
      process.exit(130);
    });
  };
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);
  process.on('SIGHUP', onSignal);

  try {
    // Someone may be editing a rule module right now (even trying a mutation of their own by hand):
    // the copy has the files as they were, and the report says which differ from the commit.
    const changed = (git(['diff', '--name-only', 'HEAD', '--', ...new Set(MUTANTS.map((m) => m.file))]) ?? '').split('\n').filter(Boolean);
    fillCopy(dir);
    if (changed.length) log(`note: these rule files have uncommitted changes, copied as they are: ${changed.join(', ')}`);
    const problems = listProblems(dir, selected);
    if (problems.length) throw new Stop(`the mutant list does not match the code:\n  ${problems.join('\n  ')}`);
    if (selected.length === 0) throw new Stop('no mutant selected');

    // Baseline: a failing test set would make "killed" meaningless.
    const sets = [...new Map(selected.map((m) => [m.tests.join(' '), m.tests])).values()];
    for (const [i, tests] of sets.entries()) {
      const started = Date.now();
      const run = await runJest(dir, tests, `baseline-${i + 1}`);
      if (stopping) return 130;
      if (run.code !== 0 || run.failed.length > 0) {
        throw new Stop(
          `baseline failed for ${tests.join(' ')} without any mutant (exit ${run.code}${run.failed.length ? `, failed: ${run.failed.join(', ')}` : ''}); ` +
            `fix it first. Last lines of ${run.logFile}:\n${tail(run.logFile, 40)}`,
        );
      }
      log(`baseline ${tests.join(' ')}: passes (${seconds(started)})`);
    }

    const outcomes = new Map<string, Outcome>();
    for (const m of skipped) outcomes.set(m.id, { status: 'skipped', detail: 'skipped (integration tests; --unit-only)' });
    const width = Math.max(...chosen.map((m) => m.id.length));
    for (const m of selected) {
      const started = Date.now();
      const file = path.join(dir, m.file);
      const original = fs.readFileSync(file, 'utf8');
      fs.writeFileSync(
        file,
        original.replace(m.find, () => m.replace),
      );
      let run: RunResult;
      try {
        run = await runJest(dir, m.tests, m.id);
      } finally {
        fs.writeFileSync(file, original);
      }
      if (fs.readFileSync(file, 'utf8') !== original) throw new Stop(`${m.file} could not be restored after ${m.id}`);
      if (stopping) return 130;
      const outcome = outcomeOf(run);
      outcomes.set(m.id, outcome);
      log(`${m.id.padEnd(width)}  ${outcome.detail} (${seconds(started)})`);
    }

    const lines = chosen.map((m) => `${m.id.padEnd(width)}  ${m.rule.padEnd(24)}  ${outcomes.get(m.id)!.detail}`);
    const count = (status: Outcome['status']) => chosen.filter((m) => outcomes.get(m.id)!.status === status);
    const survived = count('survived');
    const errors = count('error');
    const summary = [
      `${chosen.length} mutants: ${count('killed').length} killed, ${survived.length} survived` +
        (errors.length ? `, ${errors.length} errors` : '') +
        (skipped.length ? `, ${skipped.length} skipped (--unit-only)` : ''),
      ...(survived.length ? [`Survivors (the rule they break has no test that notices): ${survived.map((m) => m.id).join(', ')}`] : []),
    ];
    const commit = git(['rev-parse', '--short', 'HEAD']) ?? 'unknown';
    const header = [
      `Mutation check, ${new Date().toISOString()}, working tree of ${commit}${unitOnly ? ', --unit-only' : ''}${only ? `, --only ${only.join(',')}` : ''}`,
      ...(changed.length ? [`Rule files with uncommitted changes: ${changed.join(', ')}`] : []),
    ];
    const report = [...header, '', ...lines, '', ...summary, ''].join('\n');
    fs.mkdirSync(OUT_DIR, { recursive: true });
    fs.writeFileSync(path.join(OUT_DIR, 'report.txt'), report);
    console.log(`\n${report}`);
    log(`report written to ${path.relative(ROOT, path.join(OUT_DIR, 'report.txt'))}`);
    return survived.length || errors.length ? 1 : 0;
  } finally {
    if (!stopping) cleanUp();
  }
}

main().then(
  (code) => {
    if (!stopping) process.exit(code);
  },
  (err: unknown) => {
    console.error(`[mutants] ${err instanceof Stop ? err.message : err instanceof Error ? (err.stack ?? err.message) : String(err)}`);
    if (!stopping) process.exit(2);
  },
);
