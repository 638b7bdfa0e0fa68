import type { Db, KeyRing } from '../platform';
import { workspaceAi } from '../access';
import { contactTranscript, saoPauloDay, secondsUntilSaoPauloMidnight } from '../messaging';
import { storeDerivedInsight } from '../leads';
import { chatMessages, RESPONSE_FORMAT, readAnswer } from './model';
import { budgetLeft, recordUsage } from './usage';

/** What a derivation reads of a contact's conversations: the last 50 messages or 12,000 characters, whichever is smaller. */
export const TRANSCRIPT_BOUNDS = { limit: 50, chars: 12_000 };

/** The deployment's model, filling in what an enabled workspace leaves out (AI_BASE_URL, AI_API_KEY, AI_MODEL). */
export interface ModelDefaults {
  baseUrl?: string;
  apiKey?: string;
  model?: string;
}

/** One OpenAI-compatible chat completion (activities/providers/llm.ts implements it over HTTP). */
export interface ModelPort {
  chat(
    endpoint: { baseUrl: string; apiKey: string | null },
    body: { model: string; messages: { role: string; content: string }[]; response_format: unknown; temperature: number },
  ): Promise<{ content: string | null; refusal: string | null; totalTokens: number }>;
}

/**
 * Why a derivation did not store an insight, for a try again (the workflow's retry policy):
 * what the model answered was not an insight. `final`: trying again cannot help (no model configured).
 */
export class InsightNotDerived extends Error {
  constructor(
    message: string,
    readonly final = false,
  ) {
    super(message);
    this.name = 'InsightNotDerived';
  }
}

export type DerivationOutcome =
  | { status: 'stored'; model: string; messageCount: number; temperature: string; score: number }
  /** Nothing to do: AI off for the workspace, no message, or the contact gone. */
  | { status: 'skipped'; reason: string }
  /** The workspace's daily token budget is spent: derive again after São Paulo midnight. */
  | { status: 'waiting'; seconds: number };

/**
 * One derivation of a contact's insight: the workspace's model (AI on), its budget, the contact's
 * latest messages (personal data masked), one chat completion, the answer validated, and the
 * insight stored with its source, `contact.insight_updated` and the `insight_updated` trigger. An
 * answer that is not an insight throws InsightNotDerived (retried); the insight it had stays.
 */
export async function deriveInsight(
  db: Db,
  deps: { keys: KeyRing; port: ModelPort; defaults: ModelDefaults; now?: () => Date },
  workspaceId: string,
  contactId: string,
): Promise<DerivationOutcome> {
  const now = deps.now ?? (() => new Date());
  const ai = await workspaceAi(db, deps.keys, workspaceId);
  if (!ai?.enabled) return { status: 'skipped', reason: 'AI is off for the workspace' };
  const baseUrl = ai.baseUrl ?? deps.defaults.baseUrl;
  const model = ai.model ?? deps.defaults.model;
  if (!baseUrl || !model)
    throw new InsightNotDerived('No model is configured: set ai.baseUrl and ai.model on the workspace, or AI_BASE_URL and AI_MODEL', true);
  if ((await budgetLeft(db, workspaceId, saoPauloDay(now()), ai.dailyTokenBudget)) <= 0)
    return { status: 'waiting', seconds: secondsUntilSaoPauloMidnight(now()) };

  const lines = await contactTranscript(db, workspaceId, contactId, TRANSCRIPT_BOUNDS);
  if (lines.length === 0) return { status: 'skipped', reason: 'the contact has no message' };
  const answer = await deps.port.chat(
    { baseUrl, apiKey: ai.apiKey ?? deps.defaults.apiKey ?? null },
    {
      model,
      messages: chatMessages(
        lines.map((l) => ({ from: l.direction === 'in' ? 'customer' : 'business', at: l.timestamp.toISOString(), text: l.text })),
      ),
      response_format: RESPONSE_FORMAT,
      temperature: 0,
    },
  );
  // The tokens count whatever the answer was: the model spent them.
  await recordUsage(db, workspaceId, saoPauloDay(now()), answer.totalTokens);
  const read = readAnswer(answer.content, answer.refusal);
  if ('problem' in read) throw new InsightNotDerived(read.problem);
  const { insight } = read;
  const stored = await db.transaction((trx) =>
    storeDerivedInsight(trx, workspaceId, contactId, {
      ...insight,
      source: { model, messageCount: lines.length, lastMessageAt: lines[lines.length - 1].timestamp.toISOString() },
    }),
  );
  if (!stored) return { status: 'skipped', reason: 'the contact was deleted or merged' };
  return { status: 'stored', model, messageCount: lines.length, ...insight.qualification };
}
