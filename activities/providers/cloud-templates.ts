import { DEFAULT_API_VERSION, classifyCloudError } from './cloud';
import { ProviderError, clip, excerpt, jsonOf, readCapped, redactSecrets } from './types';

/**
 * Reading a WhatsApp Business account's templates from the Cloud API (Graph API):
 * `GET {baseUrl}/{apiVersion}/{wabaId}/message_templates?fields=...&limit=100[&after=<cursor>]`,
 * `Authorization: Bearer <accessToken>`; answer `{ data: [...], paging: { cursors: { before, after },
 * next? } }`. A page with `paging.next` has a next one; the next page is asked at the instance's own
 * base URL with the `after` cursor (never at the URL `next` names: the bearer token goes only where
 * the operator configured it). Bounded: at most MAX_TEMPLATE_PAGES pages of TEMPLATE_PAGE_SIZE
 * (6,000 templates, the most a verified business account may hold), each answer at most
 * MAX_TEMPLATE_PAGE_BYTES, each call TEMPLATE_PAGE_TIMEOUT_MS.
 */
export const TEMPLATE_PAGE_SIZE = 100;
export const MAX_TEMPLATE_PAGES = 60;
export const MAX_TEMPLATE_PAGE_BYTES = 2 * 1024 * 1024;
export const TEMPLATE_PAGE_TIMEOUT_MS = 15_000;
const SERVICE = 'WhatsApp Cloud API';
const FIELDS = 'id,name,language,status,category,components';

export interface TemplateSource {
  baseUrl?: string;
  accessToken?: string;
  apiVersion?: string;
  wabaId?: string;
}

export interface TemplateListing {
  templates: unknown[];
  /** Every page was read (false: stopped at MAX_TEMPLATE_PAGES). */
  complete: boolean;
  pages: number;
}

/** One page of the list: its templates and the cursor of the next page, if there is one. */
async function fetchPage(
  source: Required<Pick<TemplateSource, 'baseUrl' | 'accessToken' | 'wabaId'>> & { apiVersion: string },
  after?: string,
) {
  const secrets = [source.accessToken];
  const url = new URL(
    `${source.baseUrl.replace(/\/+$/, '')}/${encodeURIComponent(source.apiVersion)}/${encodeURIComponent(source.wabaId)}/message_templates`,
  );
  url.searchParams.set('fields', FIELDS);
  url.searchParams.set('limit', String(TEMPLATE_PAGE_SIZE));
  if (after) url.searchParams.set('after', after);
  let res: Response;
  let answer: { text: string; truncated: boolean };
  try {
    res = await fetch(url, {
      headers: { authorization: `Bearer ${source.accessToken}`, accept: 'application/json' },
      redirect: 'manual',
      signal: AbortSignal.timeout(TEMPLATE_PAGE_TIMEOUT_MS),
    });
    const { bytes, truncated } = await readCapped(res.body, MAX_TEMPLATE_PAGE_BYTES);
    answer = { text: bytes.toString('utf8'), truncated };
  } catch (err) {
    const why = err instanceof Error ? err.message : String(err);
    throw new ProviderError(
      'UNAVAILABLE',
      redactSecrets(`${SERVICE} at ${url.host} could not be reached for the template list: ${why}`, secrets),
    );
  }
  if (res.status >= 300 && res.status < 400) {
    throw new ProviderError(
      'REJECTED',
      `${SERVICE} at ${url.host} answered the template list with a redirect (HTTP ${res.status}); redirects are not followed`,
      {
        httpStatus: res.status,
      },
    );
  }
  const json = (answer.truncated ? undefined : jsonOf(answer.text)) as
    | { data?: unknown; paging?: { next?: unknown; cursors?: { after?: unknown } }; error?: { code?: unknown; message?: unknown } }
    | undefined;
  if (res.status < 200 || res.status >= 300) {
    const code = typeof json?.error?.code === 'number' ? json.error.code : undefined;
    const said =
      typeof json?.error?.message === 'string'
        ? clip(redactSecrets(json.error.message, secrets))
        : excerpt(redactSecrets(answer.text, secrets));
    throw new ProviderError(
      classifyCloudError(res.status, code),
      `The template list failed: ${SERVICE} answered HTTP ${res.status}${code !== undefined ? ` (code ${code})` : ''}: ${said}`,
      { httpStatus: res.status, providerCode: code },
    );
  }
  if (!json || !Array.isArray(json.data)) {
    throw new ProviderError(
      'REJECTED',
      answer.truncated
        ? `${SERVICE} answered a template page larger than ${MAX_TEMPLATE_PAGE_BYTES} bytes`
        : `${SERVICE} answered the template list without a data list: ${excerpt(redactSecrets(answer.text, secrets))}`,
      { httpStatus: res.status },
    );
  }
  let next: string | undefined;
  if (typeof json.paging?.next === 'string' && json.paging.next) {
    const cursor = json.paging.cursors?.after;
    if (typeof cursor === 'string' && cursor) next = cursor;
    else if (URL.canParse(json.paging.next)) next = new URL(json.paging.next).searchParams.get('after') ?? undefined;
  }
  return { data: json.data as unknown[], next };
}

/**
 * Every template of the business account, page after page while `paging.next` is present (up to
 * MAX_TEMPLATE_PAGES). `onPage` runs after each page (the activity heartbeats there).
 */
export async function listCloudTemplates(
  source: TemplateSource,
  onPage: (pages: number) => void = () => undefined,
): Promise<TemplateListing> {
  const { baseUrl, accessToken, wabaId } = source;
  const missing = [!baseUrl && 'base URL', !accessToken && 'access token', !wabaId && 'wabaId'].filter(Boolean);
  if (missing.length > 0) throw new ProviderError('REJECTED', `The instance has no ${missing.join(', ')} configured`);
  const full = { baseUrl: baseUrl!, accessToken: accessToken!, wabaId: wabaId!, apiVersion: source.apiVersion || DEFAULT_API_VERSION };
  const templates: unknown[] = [];
  let after: string | undefined;
  const seen = new Set<string>();
  for (let pages = 1; pages <= MAX_TEMPLATE_PAGES; pages += 1) {
    const page = await fetchPage(full, after);
    templates.push(...page.data);
    onPage(pages);
    // A cursor seen before would loop forever: the list ends there.
    if (!page.next || seen.has(page.next)) return { templates, complete: true, pages };
    seen.add(page.next);
    after = page.next;
  }
  return { templates, complete: false, pages: MAX_TEMPLATE_PAGES };
}
