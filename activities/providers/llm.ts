import type { ModelPort } from '../../domain/insights';
import { clip, excerpt, postJson, ProviderError, redactSecrets } from './types';

/**
 * The language model behind the AI insight (domain/insights), at OpenAI's Chat Completions wire
 * format, which OpenAI, Azure OpenAI, Ollama, vLLM and llama.cpp's server all speak: `POST
 * {baseUrl}/v1/chat/completions`, `Authorization: Bearer <apiKey>` when there is a key. The answer's
 * `choices[0].message` (`content` or `refusal`) and `usage.total_tokens` are what the derivation reads.
 */

/** How long one completion may take (a small model on a CPU is slow). */
export const MODEL_TIMEOUT_MS = 60_000;
/** The longest a `Retry-After` is honoured before the next try. */
export const RETRY_AFTER_CAP_MS = 60_000;

/** A call that did not answer a completion. `final`: trying again cannot help (a wrong key, a bad request). */
export class ModelCallFailed extends Error {
  constructor(
    message: string,
    readonly final: boolean,
    readonly retryAfterMs?: number,
  ) {
    super(message);
    this.name = 'ModelCallFailed';
  }
}

/** `Retry-After` in seconds or as an HTTP date, as milliseconds from now (capped); undefined when absent or unreadable. */
export function retryAfterMs(header: string | null, now = Date.now()): number | undefined {
  if (!header) return undefined;
  const seconds = Number(header);
  const ms = Number.isFinite(seconds) ? seconds * 1000 : Date.parse(header) - now;
  return Number.isFinite(ms) ? Math.min(Math.max(ms, 0), RETRY_AFTER_CAP_MS) : undefined;
}

export function modelPort(): ModelPort {
  return {
    async chat(endpoint, body) {
      const secrets = [endpoint.apiKey ?? undefined];
      const url = `${endpoint.baseUrl.replace(/\/+$/, '')}/v1/chat/completions`;
      let answer;
      try {
        answer = await postJson(url, {
          headers: endpoint.apiKey ? { authorization: `Bearer ${endpoint.apiKey}` } : {},
          body,
          timeoutMs: MODEL_TIMEOUT_MS,
          service: 'The language model',
          secrets,
        });
      } catch (err) {
        // No answer (timeout, refused connection) or a redirect: the first is worth another try.
        if (err instanceof ProviderError) throw new ModelCallFailed(err.message, !err.retryable);
        throw err;
      }
      const said = () => {
        const error = (answer.json as { error?: { message?: unknown } } | undefined)?.error;
        return redactSecrets(typeof error?.message === 'string' ? clip(error.message, 300) : excerpt(answer.text), secrets);
      };
      if (answer.status === 429)
        throw new ModelCallFailed(`The language model is rate limiting (HTTP 429): ${said()}`, false, retryAfterMs(answer.retryAfter));
      if (answer.status >= 500) throw new ModelCallFailed(`The language model is unavailable (HTTP ${answer.status}): ${said()}`, false);
      if (answer.status < 200 || answer.status >= 300)
        throw new ModelCallFailed(`The language model refused the request (HTTP ${answer.status}): ${said()}`, true);
      const completion = answer.json as
        { choices?: { message?: { content?: unknown; refusal?: unknown } }[]; usage?: { total_tokens?: unknown } } | undefined;
      const message = completion?.choices?.[0]?.message;
      if (!message) throw new ModelCallFailed(`The language model answered without a message: ${excerpt(answer.text)}`, false);
      return {
        content: typeof message.content === 'string' ? message.content : null,
        refusal: typeof message.refusal === 'string' ? message.refusal : null,
        totalTokens: typeof completion?.usage?.total_tokens === 'number' ? completion.usage.total_tokens : 0,
      };
    },
  };
}
