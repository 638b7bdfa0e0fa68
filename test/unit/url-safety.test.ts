import {
  assertPublicUrl,
  assertSafeUrlSyntax,
  DEFAULT_MAX_URL_LENGTH,
  isForbiddenAddress,
  isNeverAllowedAddress,
  type LookupFn,
  type UrlPolicy,
} from '../../domain/platform/url-safety';
import { ApiError } from '../../domain/kernel';

/**
 * The SSRF rules of domain/platform/url-safety.ts, pure: which addresses are refused (always, or
 * unless ALLOW_PRIVATE_URLS), which URLs pass the syntax check, and what DNS answers make of a
 * name (an injected LookupFn, no network). Every refusal is asserted by its code, not its wording.
 */

const STRICT: UrlPolicy = { allowPrivate: false };
const DEV: UrlPolicy = { allowPrivate: true };

/** The ApiError code a call throws, or 'ok'. */
function outcome(fn: () => unknown): string {
  try {
    fn();
    return 'ok';
  } catch (err) {
    if (err instanceof ApiError) return err.code;
    throw err;
  }
}
async function outcomeAsync(fn: () => Promise<unknown>): Promise<string> {
  try {
    await fn();
    return 'ok';
  } catch (err) {
    if (err instanceof ApiError) return err.code;
    throw err;
  }
}

describe('isForbiddenAddress: only publicly routable addresses pass', () => {
  it.each([
    // 0.0.0.0/8
    ['0.0.0.0', true],
    ['0.255.255.255', true],
    ['1.0.0.0', false],
    // 10.0.0.0/8
    ['9.255.255.255', false],
    ['10.0.0.0', true],
    ['10.255.255.255', true],
    ['11.0.0.0', false],
    // 100.64.0.0/10 (carrier-grade NAT)
    ['100.63.255.255', false],
    ['100.64.0.0', true],
    ['100.127.255.255', true],
    ['100.128.0.0', false],
    // 127.0.0.0/8
    ['126.255.255.255', false],
    ['127.0.0.0', true],
    ['127.0.0.1', true],
    ['127.255.255.255', true],
    ['128.0.0.0', false],
    // 169.254.0.0/16 (link-local)
    ['169.253.255.255', false],
    ['169.254.0.0', true],
    ['169.254.169.254', true],
    ['169.254.255.255', true],
    ['169.255.0.0', false],
    // 172.16.0.0/12
    ['172.15.255.255', false],
    ['172.16.0.0', true],
    ['172.31.255.255', true],
    ['172.32.0.0', false],
    // 192.168.0.0/16
    ['192.167.255.255', false],
    ['192.168.0.0', true],
    ['192.168.255.255', true],
    ['192.169.0.0', false],
    // 198.18.0.0/15 (benchmarking)
    ['198.17.255.255', false],
    ['198.18.0.0', true],
    ['198.19.255.255', true],
    ['198.20.0.0', false],
    // documentation, IETF protocol assignments
    ['192.0.0.1', true],
    ['192.0.2.1', true],
    ['198.51.100.1', true],
    ['203.0.113.1', true],
    // multicast 224/4, reserved 240/4, broadcast
    ['223.255.255.255', false],
    ['224.0.0.0', true],
    ['239.255.255.255', true],
    ['240.0.0.0', true],
    ['255.255.255.255', true],
    // public
    ['8.8.8.8', false],
    ['93.184.216.34', false],
    // the Alibaba metadata address is in 100.64/10
    ['100.100.100.200', true],
  ])('IPv4 %s: forbidden = %s', (address, expected) => {
    expect(isForbiddenAddress(address)).toBe(expected);
  });

  it.each([
    ['::1', true, 'loopback'],
    ['[::1]', true, 'loopback in brackets'],
    ['::', true, 'unspecified'],
    ['fc00::', true, 'unique-local fc00::/7, first'],
    ['fdff:ffff:ffff:ffff:ffff:ffff:ffff:ffff', true, 'unique-local fc00::/7, last'],
    ['fd00:ec2::254', true, 'AWS metadata (unique-local)'],
    ['fe80::1', true, 'link-local'],
    ['fec0::1', true, 'site-local (deprecated)'],
    ['ff02::1', true, 'multicast'],
    ['100::1', true, 'discard-only'],
    ['2001:db8::1', true, 'documentation'],
    ['2001:2::1', true, 'benchmarking'],
    ['1fff:ffff:ffff:ffff:ffff:ffff:ffff:ffff', true, 'just below 2000::/3'],
    ['2000::', false, 'first of global unicast 2000::/3'],
    ['2606:4700::1111', false, 'public'],
    ['[2606:4700::1111]', false, 'public in brackets'],
    ['3fff:ffff:ffff:ffff:ffff:ffff:ffff:ffff', false, 'last of global unicast 2000::/3'],
    ['4000::', true, 'just above 2000::/3'],
    ['::ffff:10.0.0.1', true, 'IPv4-mapped private'],
    ['::ffff:a00:1', true, 'IPv4-mapped private, hex form'],
    ['::ffff:127.0.0.1', true, 'IPv4-mapped loopback'],
    ['::ffff:169.254.169.254', true, 'IPv4-mapped link-local'],
    ['::ffff:8.8.8.8', false, 'IPv4-mapped public: judged by its IPv4 address'],
    ['::808:808', true, 'IPv4-compatible (deprecated), public inside'],
    ['::7f00:1', true, 'IPv4-compatible loopback'],
    ['64:ff9b::808:808', true, 'NAT64, public inside'],
    ['64:ff9b:1::808:808', true, 'local-use NAT64, public inside'],
    ['::ffff:0:808:808', true, 'IPv4-translated'],
    ['2002:808:808::1', true, '6to4, public inside'],
    ['2001:0:4136:e378:8000:63bf:f7f7:f7f7', true, 'Teredo'],
    ['2606:4700::1111%eth0', true, 'scoped (zone id)'],
  ])('IPv6 %s: forbidden = %s (%s)', (address, expected) => {
    expect(isForbiddenAddress(address)).toBe(expected);
  });

  it.each(['', 'example.com', 'localhost', '256.0.0.1', '::g', '[::1', 'not an address'])(
    'anything that is not an IP address is forbidden: %p',
    (address) => {
      expect(isForbiddenAddress(address)).toBe(true);
    },
  );
});

describe('isNeverAllowedAddress: link-local and cloud metadata, refused even with private URLs allowed', () => {
  it.each([
    // 169.254.0.0/16 edges
    ['169.253.255.255', false],
    ['169.254.0.0', true],
    ['169.254.169.254', true],
    ['169.254.255.255', true],
    ['169.255.0.0', false],
    // metadata addresses outside link-local, exactly
    ['100.100.100.200', true],
    ['100.100.100.201', false],
    ['fd00:ec2::254', true],
    ['fd00:ec2::253', false],
    ['fd20:ce::254', true],
    ['fd20:ce::255', false],
    // fe80::/10 edges
    ['fe7f:ffff:ffff:ffff:ffff:ffff:ffff:ffff', false],
    ['fe80::', true],
    ['fe80::1', true],
    ['[fe80::1]', true],
    ['febf:ffff:ffff:ffff:ffff:ffff:ffff:ffff', true],
    ['fec0::', false],
    // IPv6 forms embedding a link-local or metadata IPv4 address
    ['::ffff:169.254.169.254', true],
    ['::a9fe:a9fe', true],
    ['64:ff9b::a9fe:a9fe', true],
    ['::ffff:0:a9fe:a9fe', true],
    ['2002:a9fe:a9fe::', true],
    ['2001:0:4136:e378:8000:63bf:5601:5601', true],
    ['::ffff:100.100.100.200', true],
    ['64:ff9b::6464:64c8', true],
    // private is not never-allowed: ALLOW_PRIVATE_URLS lets these through
    ['10.0.0.1', false],
    ['127.0.0.1', false],
    ['172.16.0.1', false],
    ['192.168.1.1', false],
    ['100.64.0.1', false],
    ['::1', false],
    ['fc00::1', false],
    ['::ffff:10.0.0.1', false],
    ['8.8.8.8', false],
    // not an address: nothing to say (the syntax check and isForbiddenAddress refuse it)
    ['not-an-ip', false],
  ])('%s: never allowed = %s', (address, expected) => {
    expect(isNeverAllowedAddress(address)).toBe(expected);
  });
});

describe('assertSafeUrlSyntax', () => {
  it.each([
    // accepted
    ['https://example.com/a.jpg', 'ok'],
    ['HTTPS://Example.COM/a.jpg', 'ok'],
    ['https://cdn_1.example.com/x', 'ok'],
    ['https://example.com:1/x', 'ok'],
    ['https://example.com:8443/x', 'ok'],
    ['https://example.com:65535/x', 'ok'],
    ['https://93.184.216.34/x', 'ok'],
    ['https://172.15.255.255/x', 'ok'],
    ['https://172.32.0.0/x', 'ok'],
    ['https://[2606:4700::1111]/x', 'ok'],
    ['https://example.com/?q=a@b', 'ok'],
    // scheme
    ['http://example.com/x', 'INVALID_URL'],
    ['ftp://example.com/x', 'INVALID_URL'],
    ['file:///etc/passwd', 'INVALID_URL'],
    ['javascript:alert(1)', 'INVALID_URL'],
    ['//example.com/x', 'INVALID_URL'],
    ['example.com/x', 'INVALID_URL'],
    ['https:example.com/x', 'INVALID_URL'],
    ['https:/example.com/x', 'INVALID_URL'],
    // credentials
    ['https://user@example.com/x', 'INVALID_URL'],
    ['https://user:pw@example.com/x', 'INVALID_URL'],
    ['https://@example.com/x', 'INVALID_URL'],
    ['https://:@example.com/x', 'INVALID_URL'],
    // port
    ['https://example.com:0/x', 'INVALID_URL'],
    ['https://example.com:65536/x', 'INVALID_URL'],
    // host
    ['https:///x', 'INVALID_URL'],
    ['https://example.com./x', 'INVALID_URL'],
    ['https://-bad.example.com/x', 'INVALID_URL'],
    ['https://bad-.example.com/x', 'INVALID_URL'],
    ['https://exa$mple.com/x', 'INVALID_URL'],
    [`https://${'a'.repeat(63)}.example.com/x`, 'ok'],
    [`https://${'a'.repeat(64)}.example.com/x`, 'INVALID_URL'],
    [`https://${'a.'.repeat(125)}com/x`, 'ok'],
    [`https://${'a.'.repeat(126)}com/x`, 'INVALID_URL'],
    // private-only names
    ['https://localhost/x', 'INVALID_URL'],
    ['https://LOCALHOST/x', 'INVALID_URL'],
    ['https://app.localhost/x', 'INVALID_URL'],
    ['https://printer.local/x', 'INVALID_URL'],
    ['https://db.internal/x', 'INVALID_URL'],
    ['https://metadata.google.internal/x', 'INVALID_URL'],
    ['https://box.localdomain/x', 'INVALID_URL'],
    ['https://nas.home.arpa/x', 'INVALID_URL'],
    ['https://1.0.0.10.in-addr.arpa/x', 'INVALID_URL'],
    ['https://router.lan/x', 'INVALID_URL'],
    ['https://nas.home/x', 'INVALID_URL'],
    ['https://git.corp/x', 'INVALID_URL'],
    ['https://wiki.intranet/x', 'INVALID_URL'],
    ['https://intranet/x', 'INVALID_URL'],
    ['https://server/x', 'INVALID_URL'],
    ['https://localhost.example.com/x', 'ok'],
    ['https://internal.example.com/x', 'ok'],
    ['https://example.local.com/x', 'ok'],
    // IP literals, in every form the WHATWG parser turns into a dotted quad
    ['https://10.0.0.1/x', 'INVALID_URL'],
    ['https://172.16.0.0/x', 'INVALID_URL'],
    ['https://172.31.255.255/x', 'INVALID_URL'],
    ['https://192.168.0.1/x', 'INVALID_URL'],
    ['https://127.0.0.1/x', 'INVALID_URL'],
    ['https://127.1/x', 'INVALID_URL'],
    ['https://2130706433/x', 'INVALID_URL'],
    ['https://0x7f.1/x', 'INVALID_URL'],
    ['https://0177.0.0.1/x', 'INVALID_URL'],
    ['https://0.0.0.0/x', 'INVALID_URL'],
    ['https://100.64.0.1/x', 'INVALID_URL'],
    ['https://169.254.169.254/x', 'INVALID_URL'],
    ['https://0xa9.0xfe.0xa9.0xfe/x', 'INVALID_URL'],
    ['https://[::1]/x', 'INVALID_URL'],
    ['https://[::ffff:10.0.0.1]/x', 'INVALID_URL'],
    ['https://[::ffff:127.0.0.1]/x', 'INVALID_URL'],
    ['https://[::8.8.8.8]/x', 'INVALID_URL'],
    ['https://[fc00::1]/x', 'INVALID_URL'],
    ['https://[fe80::1]/x', 'INVALID_URL'],
    ['https://[64:ff9b::8.8.8.8]/x', 'INVALID_URL'],
    ['https://[2002:808:808::1]/x', 'INVALID_URL'],
    ['https://[fe80::1%25eth0]/x', 'INVALID_URL'],
  ])('without private URLs: %p is %s', (url, expected) => {
    expect(outcome(() => assertSafeUrlSyntax(url, STRICT))).toBe(expected);
  });

  it.each([
    ['an empty string', ''],
    ['a leading space', ' https://example.com/x'],
    ['a trailing space', 'https://example.com/x '],
    ['a space in the host', 'https://exa mple.com/x'],
    ['a tab', 'https://example.com/a\tb'],
    ['a newline', 'https://example.com/a\nb'],
    ['U+0000', 'https://example.com/a\u0000b'],
    ['DEL', 'https://example.com/a\u007fb'],
    ['a C1 control (U+0085)', 'https://example.com/a\u0085b'],
    ['a no-break space', 'https://example.com/a\u00a0b'],
    ['a zero-width space', 'https://example.com/a\u200bb'],
    ['a line separator', 'https://example.com/a\u2028b'],
    ['a byte-order mark', 'https://example.com/a\ufeffb'],
    ['a backslash before @', 'https://example.com\\@evil.com/x'],
    ['a backslash in the path', 'https://example.com/a\\b'],
  ])('refuses %s, under either policy', (_label, url) => {
    expect(outcome(() => assertSafeUrlSyntax(url, STRICT))).toBe('INVALID_URL');
    expect(outcome(() => assertSafeUrlSyntax(url.replace('example.com', 'localhost'), DEV))).toBe('INVALID_URL');
  });

  it.each([
    ['http://localhost:3000/x', 'ok'],
    ['https://localhost/x', 'ok'],
    ['http://intranet/x', 'ok'],
    ['http://db.internal/x', 'ok'],
    ['http://10.0.0.1/x', 'ok'],
    ['http://127.0.0.1:8080/x', 'ok'],
    ['http://[::1]/x', 'ok'],
    ['http://[fc00::1]/x', 'ok'],
    ['http://100.64.0.1/x', 'ok'],
    // never allowed
    ['http://169.254.169.254/latest/meta-data', 'INVALID_URL'],
    ['http://169.254.0.1/x', 'INVALID_URL'],
    ['http://2852039166/x', 'INVALID_URL'],
    ['http://0xa9fea9fe/x', 'INVALID_URL'],
    ['http://100.100.100.200/x', 'INVALID_URL'],
    ['http://[fe80::1]/x', 'INVALID_URL'],
    ['http://[fd00:ec2::254]/x', 'INVALID_URL'],
    ['http://[fd20:ce::254]/x', 'INVALID_URL'],
    ['http://[::ffff:169.254.169.254]/x', 'INVALID_URL'],
    ['http://[64:ff9b::169.254.169.254]/x', 'INVALID_URL'],
    ['http://[2002:a9fe:a9fe::]/x', 'INVALID_URL'],
    // the rest still applies
    ['ftp://localhost/x', 'INVALID_URL'],
    ['http://user:pw@localhost/x', 'INVALID_URL'],
    ['http://localhost:0/x', 'INVALID_URL'],
    ['http://localhost./x', 'INVALID_URL'],
    ['http://-bad/x', 'INVALID_URL'],
  ])('with private URLs allowed: %p is %s', (url, expected) => {
    expect(outcome(() => assertSafeUrlSyntax(url, DEV))).toBe(expected);
  });

  describe('length', () => {
    const ofLength = (n: number) => {
      const head = 'https://example.com/';
      return head + 'a'.repeat(n - head.length);
    };
    it.each([
      [DEFAULT_MAX_URL_LENGTH, undefined, 'ok'],
      [DEFAULT_MAX_URL_LENGTH + 1, undefined, 'INVALID_URL'],
      [100, 100, 'ok'],
      [101, 100, 'INVALID_URL'],
    ])('%i characters, maxLength %p: %s', (length, maxLength, expected) => {
      const url = ofLength(length);
      expect(url).toHaveLength(length);
      expect(outcome(() => assertSafeUrlSyntax(url, STRICT, { maxLength }))).toBe(expected);
    });

    it('the default is 2048', () => {
      expect(DEFAULT_MAX_URL_LENGTH).toBe(2048);
    });
  });

  it.each([
    ['https://0x5d.184.216.34/x', '93.184.216.34'],
    ['https://1572395042/x', '93.184.216.34'],
    ['HTTPS://Example.COM:8443/a', 'example.com'],
  ])('returns the URL as the socket would read it: %p has host %p', (raw, hostname) => {
    expect(assertSafeUrlSyntax(raw, STRICT).hostname).toBe(hostname);
  });
});

describe('assertPublicUrl with an injected lookup', () => {
  /** A lookup answering these addresses, and recording what it was asked. */
  function answering(...addresses: string[]): LookupFn & { asked: string[] } {
    const asked: string[] = [];
    const fn = async (host: string) => {
      asked.push(host);
      return addresses.map((address) => ({ address, family: address.includes(':') ? 6 : 4 }));
    };
    return Object.assign(fn, { asked });
  }
  function failing(code: string | undefined): LookupFn {
    return async () => {
      throw Object.assign(new Error('lookup failed'), code ? { code } : {});
    };
  }

  it.each([
    ['one public address', ['93.184.216.34'], 'ok'],
    ['a public IPv4 and a public IPv6 address', ['93.184.216.34', '2606:2800:220:1::1'], 'ok'],
    ['one private address', ['10.0.0.5'], 'INVALID_URL'],
    ['loopback', ['127.0.0.1'], 'INVALID_URL'],
    ['one public and one private address (rebinding shape)', ['93.184.216.34', '192.168.1.10'], 'INVALID_URL'],
    ['one private among several public', ['93.184.216.34', '8.8.8.8', '172.16.0.1', '1.1.1.1'], 'INVALID_URL'],
    ['an IPv4-mapped private address', ['::ffff:127.0.0.1'], 'INVALID_URL'],
    ['IPv6 loopback', ['::1'], 'INVALID_URL'],
    ['the metadata address', ['169.254.169.254'], 'INVALID_URL'],
    ['a carrier-grade NAT address', ['100.64.0.1'], 'INVALID_URL'],
    ['no address', [], 'INVALID_URL'],
    ['something that is not an address', ['garbage'], 'INVALID_URL'],
  ])('a name resolving to %s: %s', async (_label, addresses, expected) => {
    const lookup = answering(...addresses);
    expect(await outcomeAsync(() => assertPublicUrl('https://media.example.com/a.jpg', STRICT, { lookup }))).toBe(expected);
    expect(lookup.asked).toEqual(['media.example.com']);
  });

  it('answers the URL and the distinct resolved addresses, for the caller to pin its connection to', async () => {
    const result = await assertPublicUrl('https://media.example.com/a.jpg', STRICT, {
      lookup: answering('93.184.216.34', '2606:2800:220:1::1', '93.184.216.34'),
    });
    expect(result.url.href).toBe('https://media.example.com/a.jpg');
    expect(result.addresses).toEqual(['93.184.216.34', '2606:2800:220:1::1']);
  });

  it.each([
    ['https://93.184.216.34/x', ['93.184.216.34']],
    ['https://[2606:4700::1111]/x', ['2606:4700::1111']],
  ])('an IP literal is not resolved: %p answers %p', async (raw, addresses) => {
    const lookup = answering('10.0.0.1');
    const result = await assertPublicUrl(raw, STRICT, { lookup });
    expect(result.addresses).toEqual(addresses);
    expect(lookup.asked).toEqual([]);
  });

  it.each([['http://media.example.com/x'], ['https://localhost/x'], ['https://10.0.0.1/x'], ['https://user@media.example.com/x']])(
    'a URL refused by the syntax check is never resolved: %p',
    async (raw) => {
      const lookup = answering('93.184.216.34');
      expect(await outcomeAsync(() => assertPublicUrl(raw, STRICT, { lookup }))).toBe('INVALID_URL');
      expect(lookup.asked).toEqual([]);
    },
  );

  it.each([
    ['ENOTFOUND (no such name)', 'ENOTFOUND', 'INVALID_URL'],
    ['ENODATA (no address)', 'ENODATA', 'INVALID_URL'],
    ['an error without a code', undefined, 'INVALID_URL'],
    ['EAI_AGAIN', 'EAI_AGAIN', 'DNS_UNAVAILABLE'],
    ['ESERVFAIL', 'ESERVFAIL', 'DNS_UNAVAILABLE'],
    ['ETIMEOUT', 'ETIMEOUT', 'DNS_UNAVAILABLE'],
    ['ETIMEDOUT', 'ETIMEDOUT', 'DNS_UNAVAILABLE'],
    ['ECONNREFUSED', 'ECONNREFUSED', 'DNS_UNAVAILABLE'],
    ['EREFUSED', 'EREFUSED', 'DNS_UNAVAILABLE'],
    ['ECANCELLED', 'ECANCELLED', 'DNS_UNAVAILABLE'],
  ])('a lookup failing with %s: %s (fail closed; only a temporary failure may be retried)', async (_label, code, expected) => {
    expect(await outcomeAsync(() => assertPublicUrl('https://media.example.com/x', STRICT, { lookup: failing(code) }))).toBe(expected);
  });

  describe('a lookup that never answers', () => {
    afterEach(() => {
      jest.useRealTimers();
    });

    it('is given up after 5 s exactly: DNS_UNAVAILABLE', async () => {
      jest.useFakeTimers();
      let settled: string | undefined;
      void outcomeAsync(() => assertPublicUrl('https://media.example.com/x', STRICT, { lookup: () => new Promise(() => {}) })).then(
        (code) => {
          settled = code;
        },
      );
      await jest.advanceTimersByTimeAsync(4999);
      expect(settled).toBeUndefined();
      await jest.advanceTimersByTimeAsync(1);
      expect(settled).toBe('DNS_UNAVAILABLE');
    });
  });

  describe('with private URLs allowed', () => {
    it.each([
      ['a private address', ['10.0.0.5'], 'ok'],
      ['loopback', ['127.0.0.1', '::1'], 'ok'],
      ['the metadata address', ['169.254.169.254'], 'INVALID_URL'],
      ['a public and a link-local address', ['93.184.216.34', '169.254.10.10'], 'INVALID_URL'],
      ['an IPv6 link-local address', ['fe80::1'], 'INVALID_URL'],
      ['an IPv4-mapped metadata address', ['::ffff:169.254.169.254'], 'INVALID_URL'],
      ['the Alibaba metadata address', ['100.100.100.200'], 'INVALID_URL'],
      ['the AWS IPv6 metadata address', ['fd00:ec2::254'], 'INVALID_URL'],
    ])('a name resolving to %s: %s', async (_label, addresses, expected) => {
      expect(await outcomeAsync(() => assertPublicUrl('http://service.internal/x', DEV, { lookup: answering(...addresses) }))).toBe(
        expected,
      );
    });

    it('keeps only the valid addresses', async () => {
      const result = await assertPublicUrl('http://service.internal/x', DEV, { lookup: answering('10.0.0.5', 'garbage', '::1') });
      expect(result.addresses).toEqual(['10.0.0.5', '::1']);
    });

    it.each([['ENOTFOUND'], ['EAI_AGAIN']])('a name that does not resolve (%s) passes with no address (best effort)', async (code) => {
      const result = await assertPublicUrl('http://devbox/x', DEV, { lookup: failing(code) });
      expect(result.url.hostname).toBe('devbox');
      expect(result.addresses).toEqual([]);
    });

    it('a link-local literal is refused without a lookup', async () => {
      const lookup = answering('10.0.0.5');
      expect(await outcomeAsync(() => assertPublicUrl('http://169.254.169.254/x', DEV, { lookup }))).toBe('INVALID_URL');
      expect(lookup.asked).toEqual([]);
    });
  });
});
