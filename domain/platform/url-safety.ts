import { promises as dns } from 'node:dns';
import ipaddr from 'ipaddr.js';
import { ApiError } from '../kernel';

/**
 * The anti-SSRF check shared by media URLs (POST /api/v1/messages) and webhook subscriber URLs
 * (docs/api-conventions.md): a URL the service or its provider will fetch must be a public https URL whose
 * host is, and resolves only to, publicly routable addresses. Every failure is 400 `INVALID_URL`.
 *
 * Decisions:
 * - Ports: any port from 1 to 65535 is accepted (an explicit `:0` is not). The address is what
 *   keeps a request out of the internal network; a public host on 8443 is a legitimate CDN.
 * - `allowPrivate` (ALLOW_PRIVATE_URLS, local development and tests only) lifts the address and
 *   host-name rules and allows `http:` as well as `https:`. Everything else still applies:
 *   scheme http(s) only, no credentials, the length limit, no whitespace or control characters,
 *   and never a link-local or cloud metadata address (`neverAllowedReason`), as a literal or as
 *   what a name resolves to: a development machine on a cloud VM must not hand out its
 *   instance credentials either.
 * - Host names that only exist inside a private network are refused without DNS: `localhost`,
 *   single-label names, and the special-use / never-delegated suffixes in `PRIVATE_SUFFIXES`.
 *   A trailing dot (`example.com.`) is refused: no real media URL needs one and it defeats naive
 *   host comparisons further down the line.
 * - IP literals are refused by range only: a public literal (`https://93.184.216.34/x`) passes.
 *   The WHATWG parser already turns decimal, octal, hex and short IPv4 forms (`2130706433`,
 *   `0177.0.0.1`, `0x7f.1`, `127.1`), percent-encoded and full-width digits into a dotted quad,
 *   so the check runs on the address the socket would actually use.
 * - DNS (`assertPublicUrl`): every address the name resolves to must be public (a name answering
 *   one public and one private address is refused: that is the DNS-rebinding shape). A name that
 *   does not resolve is refused too (fail closed): NXDOMAIN and the like are INVALID_URL, while a
 *   temporary failure (SERVFAIL, EAI_AGAIN, no answer within `DNS_TIMEOUT_MS`) is 503
 *   `DNS_UNAVAILABLE`, which a caller may retry (a Temporal activity does). The
 *   addresses are returned so a caller can pin its connection to them; without pinning, a second
 *   resolution at fetch time can still answer differently (time-of-check/time-of-use).
 *   Under `allowPrivate` resolution is best effort: a name that does not resolve yields no
 *   addresses instead of an error, so offline development and test setups keep working.
 */
export interface UrlPolicy {
  /** ALLOW_PRIVATE_URLS: private addresses AND http allowed (local development and tests only). */
  allowPrivate: boolean;
}

export type LookupFn = (host: string) => Promise<{ address: string; family: number }[]>;

export const DEFAULT_MAX_URL_LENGTH = 2048;
const DNS_TIMEOUT_MS = 5000;

/** Suffixes (and names) that only resolve inside a private network, or are never delegated. */
const PRIVATE_SUFFIXES = ['localhost', 'local', 'internal', 'localdomain', 'home.arpa', 'arpa', 'lan', 'home', 'corp', 'intranet'];

/** Human wording for the ranges ipaddr.js names (anything not listed is "reserved (<range>)"). */
const RANGE_WORDS: Record<string, string> = {
  unspecified: 'an unspecified address',
  broadcast: 'a broadcast address',
  multicast: 'a multicast address',
  linkLocal: 'a link-local address',
  loopback: 'a loopback address',
  carrierGradeNat: 'a carrier-grade NAT address',
  private: 'a private address',
  reserved: 'a reserved address',
  uniqueLocal: 'a unique-local address',
  deprecatedSiteLocal: 'a site-local address',
  teredo: 'a Teredo address',
  '6to4': 'a 6to4 address',
  rfc6052: 'a NAT64 address',
  rfc6145: 'an IPv4-translated address',
  discard: 'a discard-only address',
};

const GLOBAL_UNICAST_V6: [ipaddr.IPv6, number] = [ipaddr.IPv6.parse('2000::'), 3];

function describeRange(range: string): string {
  return RANGE_WORDS[range] ?? `a reserved address (${range})`;
}

function parseAddress(address: string): ipaddr.IPv4 | ipaddr.IPv6 | undefined {
  let text = String(address).trim();
  if (text.startsWith('[') && text.endsWith(']')) text = text.slice(1, -1);
  if (!text || !ipaddr.isValid(text)) return undefined;
  try {
    return ipaddr.parse(text);
  } catch {
    return undefined;
  }
}

/** Cloud metadata services outside the link-local ranges (169.254.0.0/16 and fe80::/10 are refused whole). */
const METADATA_ADDRESSES = [
  '100.100.100.200', // Alibaba Cloud
  'fd00:ec2::254', // AWS, IPv6
  'fd20:ce::254', // Google Cloud, IPv6
].map((a) => ipaddr.parse(a));

/** The address itself and every IPv4 address an IPv6 form carries (mapped, compatible, NAT64, 6to4, Teredo). */
function withEmbeddedIPv4(parsed: ipaddr.IPv4 | ipaddr.IPv6): (ipaddr.IPv4 | ipaddr.IPv6)[] {
  if (parsed.kind() === 'ipv4') return [parsed];
  const v6 = parsed as ipaddr.IPv6;
  const p = v6.parts;
  const v4 = (high: number, low: number) => new ipaddr.IPv4([high >> 8, high & 255, low >> 8, low & 255]);
  const range = v6.range();
  const embedded: ipaddr.IPv4[] = [];
  if (['ipv4Mapped', 'rfc6145', 'rfc6052'].includes(range) || p.slice(0, 6).every((x) => x === 0)) embedded.push(v4(p[6], p[7]));
  if (range === '6to4') embedded.push(v4(p[1], p[2]));
  if (range === 'teredo') embedded.push(v4(p[6] ^ 0xffff, p[7] ^ 0xffff));
  return [v6, ...embedded];
}

/**
 * Why an address is refused even under `allowPrivate`, or null: link-local addresses (IPv4
 * 169.254.0.0/16, where AWS, GCP, Azure and others serve instance metadata and credentials; IPv6
 * fe80::/10), the metadata addresses of `METADATA_ADDRESSES`, and any IPv6 form embedding one of them.
 */
function neverAllowedReason(address: string): string | null {
  const parsed = parseAddress(address);
  if (!parsed) return null;
  for (const candidate of withEmbeddedIPv4(parsed)) {
    if (candidate.range() === 'linkLocal') return 'a link-local address (cloud metadata services live there)';
    if (METADATA_ADDRESSES.some((m) => m.kind() === candidate.kind() && m.toString() === candidate.toString()))
      return 'a cloud metadata address';
  }
  return null;
}

/** True when an address is refused whatever the policy (ALLOW_PRIVATE_URLS included): see neverAllowedReason. */
export function isNeverAllowedAddress(address: string): boolean {
  return neverAllowedReason(address) !== null;
}

/**
 * Why an address is not publicly routable, or null when it is. Fail closed: anything ipaddr.js
 * does not call 'unicast' is refused; an IPv4-mapped IPv6 address (::ffff:a.b.c.d, what a
 * dual-stack socket really connects to) is judged by its embedded IPv4 address; IPv6 outside the
 * global unicast block 2000::/3 (e.g. the deprecated IPv4-compatible ::a.b.c.d) is refused;
 * other IPv4-embedding forms (NAT64 64:ff9b::/96, 6to4 2002::/16, IPv4-translated, Teredo) are
 * refused whatever they embed; a scoped address (with a %zone) is refused; a string that is not an
 * IP address is refused.
 */
function forbiddenReason(address: string): string | null {
  const parsed = parseAddress(address);
  if (!parsed) return 'not an IP address';
  if (parsed.kind() === 'ipv4') {
    const range = parsed.range();
    return range === 'unicast' ? null : describeRange(range);
  }
  const v6 = parsed as ipaddr.IPv6;
  if (v6.zoneId) return 'a scoped IPv6 address';
  const range = v6.range();
  if (range === 'ipv4Mapped') {
    const inner = forbiddenReason(v6.toIPv4Address().toString());
    return inner === null ? null : `an IPv4-mapped form of ${inner}`;
  }
  if (range !== 'unicast') return describeRange(range);
  if (!v6.match(GLOBAL_UNICAST_V6)) return 'an IPv6 address outside global unicast (2000::/3)';
  return null;
}

/**
 * True when an address (IPv4 or IPv6 text, brackets allowed) is not publicly routable: loopback,
 * private, link-local, carrier-grade NAT, multicast, broadcast, unspecified, reserved and
 * documentation ranges, unique-local, site-local, Teredo, 6to4, NAT64, IPv4-mapped forms of any of
 * those, IPv6 outside 2000::/3, and anything that does not parse as an address.
 */
export function isForbiddenAddress(address: string): boolean {
  return forbiddenReason(address) !== null;
}

function invalid(field: string, reason: string, hint?: string): ApiError {
  return new ApiError('INVALID_URL', `Invalid ${field}: ${reason}`, {
    hint: hint ?? 'Use a public https URL without credentials whose host resolves only to public addresses.',
  });
}

// Whitespace (incl. Unicode spaces), C0/C1 control characters and DEL. The WHATWG parser silently
// strips some of these (leading/trailing spaces, tabs and newlines anywhere); refusing them avoids
// a second parser reading the URL differently.
const UNSAFE_CHARS = /[\s\u0000-\u001f\u007f-\u009f\u200b-\u200f\u2028\u2029\ufeff]/;
const DNS_NAME = /^[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?$/;

/**
 * Syntax-only checks (no DNS): scheme https (http too under allowPrivate), written as
 * `scheme://authority`, no credentials (nor an empty `@`), length <= maxLength (default 2048),
 * a host that is a well-formed DNS name or an IP literal, a port other than 0, and unless
 * allowPrivate: a host that is neither a forbidden IP literal nor a private-only name.
 * Throws ApiError('INVALID_URL') naming the reason. Returns the parsed URL.
 */
export function assertSafeUrlSyntax(raw: string, policy: UrlPolicy, options: { maxLength?: number; field?: string } = {}): URL {
  const field = options.field ?? 'url';
  const maxLength = options.maxLength ?? DEFAULT_MAX_URL_LENGTH;
  if (typeof raw !== 'string' || raw.length === 0) throw invalid(field, 'a URL is required');
  if (raw.length > maxLength) throw invalid(field, `the URL is longer than ${maxLength} characters`);
  if (UNSAFE_CHARS.test(raw)) throw invalid(field, 'the URL contains whitespace or control characters');
  if (raw.includes('\\')) throw invalid(field, 'the URL contains a backslash');

  const schemeMatch = /^([a-zA-Z][a-zA-Z0-9+.-]*):/.exec(raw);
  const scheme = schemeMatch?.[1].toLowerCase();
  const allowedSchemes = policy.allowPrivate ? ['https', 'http'] : ['https'];
  if (!scheme || !allowedSchemes.includes(scheme)) {
    const what = scheme ? `the scheme "${scheme}:" is not allowed` : 'the URL is not absolute';
    throw invalid(field, `${what}; only ${policy.allowPrivate ? 'http and https' : 'https'} URLs are accepted`);
  }
  const rest = raw.slice(scheme.length + 1);
  if (!rest.startsWith('//')) throw invalid(field, `the URL must start with ${scheme}://`);
  const authority = rest.slice(2).split(/[/?#]/, 1)[0];
  if (authority.includes('@')) throw invalid(field, 'the URL must not carry credentials (user@ or user:password@)');
  if (!authority) throw invalid(field, 'the URL has no host');

  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    throw invalid(field, 'not a valid absolute URL');
  }
  // Belt and braces: the checks above already make these impossible.
  if (url.protocol !== `${scheme}:`) throw invalid(field, 'the URL scheme is ambiguous');
  if (url.username || url.password) throw invalid(field, 'the URL must not carry credentials (user@ or user:password@)');
  if (url.port === '0') throw invalid(field, 'port 0 is not a valid port');

  const host = url.hostname.toLowerCase();
  if (!host) throw invalid(field, 'the URL has no host');

  const literal = host.startsWith('[') || ipaddr.IPv4.isValidFourPartDecimal(host);
  if (literal) {
    const reason = forbiddenReason(host);
    if (reason === 'not an IP address') throw invalid(field, 'the host is not a valid IPv6 address');
    const refused = policy.allowPrivate ? neverAllowedReason(host) : reason;
    if (refused) throw invalid(field, `the host ${host} is ${refused}`);
    return url;
  }

  if (host.endsWith('.')) throw invalid(field, 'the host must not end with a dot');
  if (host.length > 253) throw invalid(field, 'the host name is too long');
  const labels = host.split('.');
  if (!labels.every((label) => DNS_NAME.test(label))) throw invalid(field, `the host ${host} is not a valid DNS name`);
  if (policy.allowPrivate) return url;

  const suffix = PRIVATE_SUFFIXES.find((s) => host === s || host.endsWith(`.${s}`));
  if (suffix) throw invalid(field, `the host ${host} is a local or internal name (${suffix})`);
  if (labels.length < 2) throw invalid(field, `the host ${host} is a single-label name that only resolves inside a private network`);
  return url;
}

/**
 * DNS answers that say "try again", not "no such name": a server failure, a timeout (ours or the
 * resolver's), a refused or unreachable resolver. NXDOMAIN (ENOTFOUND), no data (ENODATA) and
 * malformed names stay INVALID_URL: retrying cannot fix them.
 */
const TRANSIENT_DNS_CODES = new Set([
  'EAI_AGAIN',
  'ESERVFAIL',
  'ETIMEOUT',
  'ETIMEDOUT',
  'ECONNREFUSED',
  'ECANCELLED',
  'EREFUSED',
  'DNS_TIMEOUT',
]);

function dnsCode(err: unknown): string | undefined {
  const code = (err as { code?: unknown })?.code;
  return typeof code === 'string' ? code : undefined;
}

function defaultLookup(host: string): Promise<{ address: string; family: number }[]> {
  return dns.lookup(host, { all: true, verbatim: true });
}

async function withTimeout<T>(promise: Promise<T>, ms: number): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(Object.assign(new Error(`DNS lookup timed out after ${ms} ms`), { code: 'DNS_TIMEOUT' })), ms);
    timer.unref?.();
  });
  try {
    return await Promise.race([promise, timeout]);
  } finally {
    if (timer) clearTimeout(timer);
  }
}

/**
 * assertSafeUrlSyntax, then resolves the host (dns.promises.lookup with all: true unless a lookup
 * is injected) and refuses the URL when ANY resolved address is forbidden (unless allowPrivate).
 * An IP-literal host is not resolved: its address is the literal. Returns the URL and the
 * distinct resolved addresses, so the caller can pin its connection to them.
 */
export async function assertPublicUrl(
  raw: string,
  policy: UrlPolicy,
  options: { maxLength?: number; field?: string; lookup?: LookupFn } = {},
): Promise<{ url: URL; addresses: string[] }> {
  const field = options.field ?? 'url';
  const url = assertSafeUrlSyntax(raw, policy, options);
  const host = url.hostname;
  if (host.startsWith('[')) return { url, addresses: [host.slice(1, -1)] };
  if (ipaddr.IPv4.isValidFourPartDecimal(host)) return { url, addresses: [host] };

  const lookup = options.lookup ?? defaultLookup;
  let records: { address: string; family: number }[];
  try {
    records = await withTimeout(
      Promise.resolve().then(() => lookup(host)),
      DNS_TIMEOUT_MS,
    );
  } catch (err) {
    if (policy.allowPrivate) return { url, addresses: [] };
    if (TRANSIENT_DNS_CODES.has(dnsCode(err) ?? '')) {
      throw new ApiError(
        'DNS_UNAVAILABLE',
        `The host of ${field} (${host}) could not be resolved right now (${dnsCode(err) ?? 'timeout'})`,
        {
          hint: 'A temporary DNS failure: trying again later can help.',
        },
      );
    }
    throw invalid(field, `the host ${host} could not be resolved`);
  }
  const addresses = [...new Set((Array.isArray(records) ? records : []).map((r) => String(r?.address ?? '')))];
  if (policy.allowPrivate) {
    if (addresses.some((a) => isNeverAllowedAddress(a)))
      throw invalid(field, `the host ${host} resolves to a link-local or cloud metadata address`);
    return { url, addresses: addresses.filter((a) => ipaddr.isValid(a)) };
  }
  if (addresses.length === 0) throw invalid(field, `the host ${host} did not resolve to any address`);
  // The resolved address itself is not echoed: it would turn this endpoint into an oracle for
  // the internal DNS view.
  if (addresses.some((a) => isForbiddenAddress(a))) {
    throw invalid(field, `the host ${host} resolves to a non-public address`);
  }
  return { url, addresses };
}
