import { createHash, randomBytes } from 'node:crypto';
import type Koa from 'koa';

/**
 * A language model at OpenAI's Chat Completions wire format (emulator/server.ts mounts it). It does
 * not understand anything: it reads the conversation the service sends and derives a deterministic
 * sales insight from keyword rules (insightOf), so tests can predict every answer.
 *
 * Provider route (`Authorization: Bearer <key>`, any non-empty key; missing → 401 `invalid_api_key`)
 * - `POST /v1/chat/completions` `{ model, messages: [{ role: system|user|assistant|developer, content:
 *   string }], response_format?: { type: json_schema, json_schema: { name, schema, strict? } } |
 *   { type: json_object } | { type: text }, temperature?, max_tokens?, max_completion_tokens?, user? }`,
 *   validated like OpenAI (400 `invalid_request_error` with `param`). Answers a `chat.completion`
 *   (`choices[0].message.content`, `finish_reason: 'stop'`, `usage` estimated as ceil(characters / 4)).
 *   The content is the JSON string `{ interest, products, objections, nextStep, qualification: { score,
 *   temperature: cold|warm|hot }, summary }`, derived from the customer's texts: the LAST user message
 *   is read as the data document `{ "conversation": [{ from: customer|business, at, text }] }`, or,
 *   when it is not one (a naive client), every user message's plain text counts as a customer text.
 *   Like a naive model it falls for a prompt injection: "ignore previous instructions" (or "ignore
 *   as instruções anteriores") in a user message outside the data document answers the content
 *   `Ok! Ignoring previous instructions.`; inside the document it is only data.
 *
 * Control routes (keyed by the bearer key; state lives in this process)
 * - `POST /__emulator/llm/script` `{ apiKey, behaviour: ok | invalid-json | schema-mismatch | refusal
 *   | rate-limited | error | slow, times?, retryAfterSeconds?, delayMs? }`: how the next calls with
 *   that key are answered, for `times` calls (absent: until reset or replaced). `invalid-json`: a cut
 *   off JSON content; `schema-mismatch`: valid JSON of the wrong shape; `refusal`: `content: null`
 *   and a `refusal`; `rate-limited`: 429 with `retry-after` (default 1 s) and OpenAI's
 *   `rate_limit_exceeded` body; `error`: 500 `server_error`; `slow`: the normal answer after `delayMs`
 *   (default 30,000; any behaviour accepts `delayMs`). A script applies to calls that passed the
 *   key and body checks. Answers `{ script }` (without the key).
 * - `GET /__emulator/llm/calls?apiKey=`: `{ calls: [{ seq, at, model, keyHash, body, status, outcome:
 *   ok | invalid | unauthorized | error | timeout }] }`, oldest first, that key's calls when given
 *   (`keyHash` = sha256 hex of the key, never the key; null without one). The last 1,000 are kept.
 *   A call is recorded once received, with the status it is answered (a delayed one: will be); a
 *   delayed call whose client stopped waiting before the answer becomes `timeout`.
 * - `POST /__emulator/llm/reset` `{ apiKey? }`: forgets that key's script and calls; without one, everything.
 */

export type LlmBehaviour = 'ok' | 'invalid-json' | 'schema-mismatch' | 'refusal' | 'rate-limited' | 'error' | 'slow';

export interface LlmScript {
  behaviour: LlmBehaviour;
  times?: number;
  retryAfterSeconds?: number;
  delayMs?: number;
}

export interface LlmCall {
  seq: number;
  at: string;
  model: string | null;
  /** sha256 hex of the bearer key (never the key); null when there was none. */
  keyHash: string | null;
  /** The request body as received. */
  body: unknown;
  status: number;
  outcome: 'ok' | 'invalid' | 'unauthorized' | 'error' | 'timeout';
}

/** What the emulated model derives from a conversation. */
export interface SalesInsight {
  interest: string | null;
  products: string[];
  objections: string[];
  nextStep: string | null;
  qualification: { score: number; temperature: 'cold' | 'warm' | 'hot' };
  summary: string;
}

const MAX_CALLS = 1000;
const MAX_DELAY_MS = 120_000;
const SLOW_DELAY_MS = 30_000;
const BEHAVIOURS: LlmBehaviour[] = ['ok', 'invalid-json', 'schema-mismatch', 'refusal', 'rate-limited', 'error', 'slow'];
const ROLES = ['system', 'user', 'assistant', 'developer'];
const INJECTED_ANSWER = 'Ok! Ignoring previous instructions.';
const REFUSAL = "I'm sorry, I can't help with that.";

const isText = (v: unknown): v is string => typeof v === 'string' && v.length > 0;
const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);
const sha256 = (value: string): string => createHash('sha256').update(value, 'utf8').digest('hex');
const chars = (value: string): number => [...value].length;
const tokens = (characters: number): number => Math.ceil(characters / 4);

// ---------------------------------------------------------------------------------------------
// Keyword rules

/** Lower case without accents: `Tênis` and `tenis` read the same. */
const fold = (text: string): string => text.normalize('NFD').replace(/\p{M}/gu, '').toLowerCase();

/** A whole-word, case- and accent-insensitive pattern for a word or phrase (its words separated by any spaces). */
function wordPattern(phrase: string): RegExp {
  const words = fold(phrase)
    .split(/\s+/)
    .map((w) => w.replace(/[.*+?^${}()|[\]\\]/g, '\\$&'));
  return new RegExp(`(?<![\\p{L}\\p{N}])${words.join('\\s+')}(?![\\p{L}\\p{N}])`, 'u');
}

/** Where `phrase` first appears in `text` as a whole word (-1: nowhere). */
const positionOf = (text: string, phrase: string): number => fold(text).search(wordPattern(phrase));

/** Whether any of `texts` has any of `phrases` as a whole word. */
const mentions = (texts: string[], phrases: string[]): boolean => texts.some((t) => phrases.some((p) => positionOf(t, p) >= 0));

/** Products in their canonical spelling. */
const PRODUCTS = ['curso', 'mentoria', 'consultoria', 'plano premium', 'plano básico', 'ebook', 'camiseta', 'tênis'];
const HOT_WORDS = ['comprar', 'fechar', 'pix', 'pagar', 'quero', 'link de pagamento'];
const COLD_WORDS = ['não tenho interesse', 'caro', 'depois', 'sem dinheiro'];
const OBJECTIONS: { name: string; words: string[] }[] = [
  { name: 'preço', words: ['caro', 'preço'] },
  { name: 'prazo', words: ['prazo', 'demora'] },
];
const INJECTIONS = ['ignore previous instructions', 'ignore as instruções anteriores'];

const QUALIFICATION = {
  hot: { score: 85, max: 100, nextStep: 'Enviar link de pagamento' },
  warm: { score: 55, max: 69, nextStep: 'Enviar proposta' },
  cold: { score: 20, max: 39, nextStep: 'Retomar contato em 30 dias' },
} as const;

/** The products the texts name, in order of first appearance (by text, then by position in it). */
function productsOf(texts: string[]): string[] {
  const found: { product: string; text: number; at: number }[] = [];
  for (const product of PRODUCTS) {
    const text = texts.findIndex((t) => positionOf(t, product) >= 0);
    if (text >= 0) found.push({ product, text, at: positionOf(texts[text], product) });
  }
  return found.sort((a, b) => a.text - b.text || a.at - b.at).map((f) => f.product);
}

/** The one place the insight is derived: from the customer's texts, oldest first. */
export function insightOf(customerTexts: string[]): SalesInsight {
  const products = productsOf(customerTexts);
  const temperature = mentions(customerTexts, HOT_WORDS) ? 'hot' : mentions(customerTexts, COLD_WORDS) ? 'cold' : 'warm';
  const rule = QUALIFICATION[temperature];
  const score = Math.min(rule.max, rule.score + Math.max(0, customerTexts.length - 1));
  const last = customerTexts.at(-1) ?? '';
  return {
    interest: products.length > 0 ? `Interesse em ${products.join(', ')}` : null,
    products,
    objections: OBJECTIONS.filter((o) => mentions(customerTexts, o.words)).map((o) => o.name),
    nextStep: rule.nextStep,
    qualification: { score, temperature },
    summary:
      `${customerTexts.length} mensagens do cliente; produtos: ${products.length > 0 ? products.join(', ') : 'nenhum'}; ` +
      `última: "${[...last].slice(0, 80).join('')}"`,
  };
}

/** The customer texts of a `{ conversation: [...] }` data document; undefined when `content` is not one. */
function conversationOf(content: string): string[] | undefined {
  let doc: unknown;
  try {
    doc = JSON.parse(content);
  } catch {
    return undefined;
  }
  if (!isObject(doc) || !Array.isArray(doc.conversation)) return undefined;
  const entries = doc.conversation as unknown[];
  const wellFormed = entries.every(
    (e) =>
      isObject(e) &&
      (e.from === 'customer' || e.from === 'business') &&
      typeof e.text === 'string' &&
      (e.at === undefined || typeof e.at === 'string'),
  );
  if (!wellFormed) return undefined;
  return (entries as { from: string; text: string }[]).filter((e) => e.from === 'customer').map((e) => e.text);
}

/** What the emulated model answers to these messages: the insight as JSON, or what an injected prompt made it say. */
function completionOf(messages: { role: string; content: string }[]): string {
  const userTexts = messages.filter((m) => m.role === 'user').map((m) => m.content);
  const data = conversationOf(userTexts.at(-1) ?? '');
  // The prompt proper: every user message but the data document (all of them for a naive client).
  const prompt = data ? userTexts.slice(0, -1) : userTexts;
  if (prompt.some((t) => INJECTIONS.some((phrase) => fold(t).includes(fold(phrase))))) return INJECTED_ANSWER;
  return JSON.stringify(insightOf(data ?? userTexts));
}

// ---------------------------------------------------------------------------------------------
// The wire format

interface ChatRequest {
  model: string;
  messages: { role: string; content: string }[];
  response_format?: { type: string };
}

const openAiError = (message: string, type: string, param: string | null, code: string | null) => ({
  error: { message, type, param, code },
});

const invalidRequest = (message: string, param: string | null) => openAiError(message, 'invalid_request_error', param, null);

/** How OpenAI names a JSON value's type in its messages. */
function typeName(v: unknown): string {
  if (v === null) return 'null';
  if (Array.isArray(v)) return 'an array';
  if (typeof v === 'number') return Number.isInteger(v) ? 'an integer' : 'a decimal number';
  if (typeof v === 'object') return 'an object';
  return `a ${typeof v === 'boolean' ? 'boolean' : typeof v}`;
}

const wrongType = (param: string, expected: string, v: unknown) => ({
  message: `Invalid type for '${param}': expected ${expected}, but got ${typeName(v)} instead.`,
  param,
});

const badValue = (param: string, v: unknown, supported: string[]) => ({
  message: `Invalid value: '${String(v)}'. Supported values are: ${supported
    .map((s) => `'${s}'`)
    .join(', ')
    .replace(/, ([^,]*)$/, ', and $1')}.`,
  param,
});

/** What OpenAI would refuse, in its words (message and param); undefined when the body is fine. */
function invalidChatRequest(body: unknown): { message: string; param: string | null } | undefined {
  if (!isObject(body))
    return {
      message: 'We could not parse the JSON body of your request. The OpenAI API expects a JSON payload.',
      param: null,
    };
  if (body.model === undefined || body.model === '') return { message: 'you must provide a model parameter', param: null };
  if (typeof body.model !== 'string') return wrongType('model', 'a string', body.model);
  if (body.messages === undefined) return { message: "Missing required parameter: 'messages'.", param: 'messages' };
  if (!Array.isArray(body.messages)) return wrongType('messages', 'an array', body.messages);
  if (body.messages.length === 0)
    return {
      message: "Invalid 'messages': empty array. Expected an array with minimum length 1, but got an empty array instead.",
      param: 'messages',
    };
  for (const [i, m] of (body.messages as unknown[]).entries()) {
    const at = `messages[${i}]`;
    if (!isObject(m)) return wrongType(at, 'an object', m);
    if (m.role === undefined) return { message: `Missing required parameter: '${at}.role'.`, param: `${at}.role` };
    if (!ROLES.includes(String(m.role))) return badValue(`${at}.role`, m.role, ROLES);
    if (m.content === undefined) return { message: `Missing required parameter: '${at}.content'.`, param: `${at}.content` };
    if (typeof m.content !== 'string') return wrongType(`${at}.content`, 'a string', m.content);
  }
  const format = body.response_format;
  if (format !== undefined) {
    if (!isObject(format)) return wrongType('response_format', 'an object', format);
    if (!['json_schema', 'json_object', 'text'].includes(String(format.type)))
      return badValue('response_format.type', format.type, ['json_object', 'json_schema', 'text']);
    if (format.type === 'json_schema') {
      const spec = format.json_schema;
      if (spec === undefined)
        return { message: "Missing required parameter: 'response_format.json_schema'.", param: 'response_format.json_schema' };
      if (!isObject(spec)) return wrongType('response_format.json_schema', 'an object', spec);
      if (spec.name === undefined)
        return { message: "Missing required parameter: 'response_format.json_schema.name'.", param: 'response_format.json_schema.name' };
      if (typeof spec.name !== 'string' || !/^[a-zA-Z0-9_-]{1,64}$/.test(spec.name))
        return {
          message:
            "Invalid 'response_format.json_schema.name': string does not match pattern. Expected a string that matches the pattern '^[a-zA-Z0-9_-]+$'.",
          param: 'response_format.json_schema.name',
        };
      if (spec.schema === undefined)
        return {
          message: "Missing required parameter: 'response_format.json_schema.schema'.",
          param: 'response_format.json_schema.schema',
        };
      if (!isObject(spec.schema)) return wrongType('response_format.json_schema.schema', 'an object', spec.schema);
      if (spec.strict !== undefined && spec.strict !== null && typeof spec.strict !== 'boolean')
        return wrongType('response_format.json_schema.strict', 'a boolean', spec.strict);
    }
    if (format.type === 'json_object' && !(body.messages as { content: string }[]).some((m) => /json/i.test(m.content)))
      return {
        message: "'messages' must contain the word 'json' in some form, to use 'response_format' of type 'json_object'.",
        param: 'messages',
      };
  }
  if (body.temperature !== undefined && body.temperature !== null) {
    if (typeof body.temperature !== 'number') return wrongType('temperature', 'a number', body.temperature);
    if (body.temperature < 0 || body.temperature > 2)
      return {
        message: `Invalid 'temperature': decimal ${body.temperature < 0 ? 'below minimum' : 'above maximum'} value. Expected a value ${body.temperature < 0 ? '>= 0' : '<= 2'}, but got ${body.temperature} instead.`,
        param: 'temperature',
      };
  }
  for (const param of ['max_tokens', 'max_completion_tokens']) {
    const v = body[param];
    if (v === undefined || v === null) continue;
    if (typeof v !== 'number' || !Number.isInteger(v)) return wrongType(param, 'an integer', v);
    if (v < 1) return { message: `Invalid '${param}': integer below minimum value. Expected a value >= 1, but got ${v} instead.`, param };
  }
  if (body.user !== undefined && typeof body.user !== 'string') return wrongType('user', 'a string', body.user);
  return undefined;
}

/** A `chat.completion` with one choice carrying `content` (or, with `content: null`, a refusal). */
function completion(request: ChatRequest, content: string | null) {
  const answer = content ?? REFUSAL;
  const promptTokens = tokens(request.messages.reduce((n, m) => n + chars(m.content), 0));
  const completionTokens = tokens(chars(answer));
  return {
    id: `chatcmpl-${randomBytes(15).toString('base64url')}`,
    object: 'chat.completion',
    created: Math.floor(Date.now() / 1000),
    model: request.model,
    choices: [
      {
        index: 0,
        message: { role: 'assistant', content, refusal: content === null ? REFUSAL : null },
        logprobs: null,
        finish_reason: 'stop',
      },
    ],
    usage: { prompt_tokens: promptTokens, completion_tokens: completionTokens, total_tokens: promptTokens + completionTokens },
  };
}

/** The bearer key of a request, or undefined. */
const bearerKey = (authorization: string): string | undefined => /^Bearer\s+(\S+)\s*$/i.exec(authorization)?.[1];

/** Waits `ms`; true when the client went away meanwhile (its connection closed before any answer). */
function clientLeftWithin(ctx: Koa.Context, ms: number): Promise<boolean> {
  return new Promise((resolve) => {
    const onClose = (): void => {
      clearTimeout(timer);
      resolve(true);
    };
    const timer = setTimeout(() => {
      ctx.res.off('close', onClose);
      resolve(false);
    }, ms);
    ctx.res.once('close', onClose);
  });
}

/** The answer to a valid request under a script (none: the emulated model's own answer). */
function replyTo(
  request: ChatRequest,
  script: LlmScript | undefined,
): { status: number; outcome: LlmCall['outcome']; payload: unknown; headers?: Record<string, string> } {
  switch (script?.behaviour) {
    case 'rate-limited': {
      const seconds = script.retryAfterSeconds ?? 1;
      return {
        status: 429,
        outcome: 'error',
        headers: {
          'retry-after': String(seconds),
          'x-ratelimit-limit-requests': '3',
          'x-ratelimit-remaining-requests': '0',
          'x-ratelimit-reset-requests': `${seconds}s`,
        },
        payload: openAiError(
          `Rate limit reached for ${request.model} in organization org-emulated on requests per min (RPM): Limit 3, Used 3, ` +
            `Requested 1. Please try again in ${seconds}s. Visit https://platform.openai.com/account/rate-limits to learn more.`,
          'requests',
          null,
          'rate_limit_exceeded',
        ),
      };
    }
    case 'error':
      return {
        status: 500,
        outcome: 'error',
        payload: openAiError('The server had an error while processing your request.', 'server_error', null, null),
      };
    case 'invalid-json':
      return { status: 200, outcome: 'ok', payload: completion(request, '{"interest": "curso", ') };
    case 'schema-mismatch':
      return { status: 200, outcome: 'ok', payload: completion(request, '{"interest": 5, "temperature": "boiling"}') };
    case 'refusal':
      return { status: 200, outcome: 'ok', payload: completion(request, null) };
    default:
      return { status: 200, outcome: 'ok', payload: completion(request, completionOf(request.messages)) };
  }
}

/** A control route's script input, or what is wrong with it. */
function scriptOf(body: Record<string, unknown>): { apiKey: string; script: LlmScript } | string {
  if (!isText(body.apiKey)) return 'apiKey (the bearer key the script applies to) is required';
  if (!BEHAVIOURS.includes(body.behaviour as LlmBehaviour)) return `behaviour must be one of ${BEHAVIOURS.join(', ')}`;
  const script: LlmScript = { behaviour: body.behaviour as LlmBehaviour };
  if (body.times !== undefined) {
    if (typeof body.times !== 'number' || !Number.isInteger(body.times) || body.times < 1) return 'times must be a positive integer';
    script.times = body.times;
  }
  if (body.retryAfterSeconds !== undefined) {
    if (typeof body.retryAfterSeconds !== 'number' || !Number.isInteger(body.retryAfterSeconds) || body.retryAfterSeconds < 0)
      return 'retryAfterSeconds must be a non-negative integer';
    script.retryAfterSeconds = body.retryAfterSeconds;
  }
  if (body.delayMs !== undefined) {
    if (typeof body.delayMs !== 'number' || !Number.isInteger(body.delayMs) || body.delayMs < 0 || body.delayMs > MAX_DELAY_MS)
      return `delayMs must be an integer from 0 to ${MAX_DELAY_MS}`;
    script.delayMs = body.delayMs;
  }
  return { apiKey: body.apiKey, script };
}

export function createLlmEmulator() {
  /** Scripts by key hash, with how many calls each still applies to. */
  const scripts = new Map<string, LlmScript & { left?: number }>();
  const calls: LlmCall[] = [];
  let seq = 0;

  const record = (call: Omit<LlmCall, 'seq' | 'at'>): LlmCall => {
    const entry = { seq: ++seq, at: new Date().toISOString(), ...call };
    calls.push(entry);
    if (calls.length > MAX_CALLS) calls.shift();
    return entry;
  };

  /** The script for this key's next call, consumed. */
  const consume = (keyHash: string): LlmScript | undefined => {
    const script = scripts.get(keyHash);
    if (script?.left !== undefined && --script.left <= 0) scripts.delete(keyHash);
    return script;
  };

  const middleware: Koa.Middleware = async (ctx, next) => {
    const body = (ctx.request as { body?: unknown }).body;
    const input = (isObject(body) ? body : {}) as Record<string, unknown>;

    if (ctx.method === 'POST' && ctx.path === '/__emulator/llm/script') {
      const parsed = scriptOf(input);
      if (typeof parsed === 'string') {
        ctx.status = 400;
        ctx.body = { error: parsed };
        return;
      }
      scripts.set(sha256(parsed.apiKey), { ...parsed.script, left: parsed.script.times });
      ctx.body = { script: parsed.script };
      return;
    }

    if (ctx.method === 'GET' && ctx.path === '/__emulator/llm/calls') {
      const key = ctx.query.apiKey;
      const keyHash = isText(key) ? sha256(key) : undefined;
      ctx.body = { calls: keyHash ? calls.filter((c) => c.keyHash === keyHash) : calls };
      return;
    }

    if (ctx.method === 'POST' && ctx.path === '/__emulator/llm/reset') {
      if (input.apiKey !== undefined && !isText(input.apiKey)) {
        ctx.status = 400;
        ctx.body = { error: 'apiKey must be a non-empty string (or absent: everything)' };
        return;
      }
      if (input.apiKey === undefined) reset();
      else {
        const keyHash = sha256(input.apiKey);
        scripts.delete(keyHash);
        const kept = calls.filter((c) => c.keyHash !== keyHash);
        calls.length = 0;
        calls.push(...kept);
      }
      ctx.body = { reset: true };
      return;
    }

    if (ctx.path !== '/v1/chat/completions') return next();
    ctx.set('x-request-id', `req_${randomBytes(16).toString('hex')}`);
    const answer = (status: number, payload: unknown): void => {
      ctx.status = status;
      ctx.body = payload;
    };
    if (ctx.method !== 'POST') return answer(405, invalidRequest(`Invalid method for URL (${ctx.method} /v1/chat/completions)`, null));

    const key = bearerKey(ctx.get('authorization'));
    const base = { model: typeof input.model === 'string' ? input.model : null, keyHash: key ? sha256(key) : null, body };
    if (!key) {
      record({ ...base, status: 401, outcome: 'unauthorized' });
      return answer(401, openAiError('Incorrect API key provided', 'invalid_request_error', null, 'invalid_api_key'));
    }
    const invalid = invalidChatRequest(body);
    if (invalid) {
      record({ ...base, status: 400, outcome: 'invalid' });
      return answer(400, invalidRequest(invalid.message, invalid.param));
    }
    const request = body as unknown as ChatRequest;
    const script = consume(sha256(key));
    const reply = replyTo(request, script);
    // Recorded once received; a delayed answer turns into a timeout if the client stops waiting first.
    const call = record({ ...base, status: reply.status, outcome: reply.outcome });
    const delayMs = script?.delayMs ?? (script?.behaviour === 'slow' ? SLOW_DELAY_MS : 0);
    if (delayMs > 0 && (await clientLeftWithin(ctx, delayMs))) {
      call.outcome = 'timeout';
      return;
    }
    for (const [name, value] of Object.entries(reply.headers ?? {})) ctx.set(name, value);
    answer(reply.status, reply.payload);
  };

  function reset(): void {
    scripts.clear();
    calls.length = 0;
  }

  return { middleware, reset };
}
