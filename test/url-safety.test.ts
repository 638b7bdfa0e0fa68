import { ApiError } from '../domain/kernel/errors';
import { assertPublicUrl, assertSafeUrlSyntax, isForbiddenAddress, LookupFn } from '../domain/platform/url-safety';

const STRICT = { allowPrivate: false };
const DEV = { allowPrivate: true };

/** A fake resolver: a fixed table, anything else is NXDOMAIN. */
const DNS: Record<string, string[]> = {
  'cdn.example.com': ['93.184.216.34'],
  'media.example.org': ['93.184.216.34', '2606:2800:220:1:248:1893:25c8:1946'],
  'xn--e1afmkfd.com': ['93.184.216.34'],
  'internal.example.com': ['10.0.0.5'],
  'rebind.example.com': ['93.184.216.34', '127.0.0.1'],
  'metadata.example.com': ['169.254.169.254'],
  'v6only-private.example.com': ['fd00::1'],
  'v6-loopback.example.com': ['::1'],
  'mapped.example.com': ['::ffff:192.168.1.1'],
  'cgnat.example.com': ['100.64.0.1'],
  'unspecified.example.com': ['0.0.0.0'],
  '127.0.0.1.nip.io': ['127.0.0.1'],
  'garbage.example.com': ['not-an-address'],
  'empty.example.com': [],
};
const lookup: LookupFn = async (host) => {
  const found = DNS[host];
  if (!found) throw Object.assign(new Error(`getaddrinfo ENOTFOUND ${host}`), { code: 'ENOTFOUND' });
  return found.map((address) => ({ address, family: address.includes(':') ? 6 : 4 }));
};

async function rejection(raw: string, policy = STRICT): Promise<ApiError> {
  try {
    await assertPublicUrl(raw, policy, { lookup, field: 'mediaUrl' });
  } catch (err) {
    if (err instanceof ApiError) return err;
    throw err;
  }
  throw new Error(`expected ${JSON.stringify(raw)} to be rejected`);
}

describe('WHATWG URL normalisation of IPv4 forms (what the checks rely on)', () => {
  it.each([
    ['http://2130706433/', '127.0.0.1'],
    ['https://0177.0.0.1/', '127.0.0.1'],
    ['https://0x7f.1/', '127.0.0.1'],
    ['https://127.1/', '127.0.0.1'],
    ['https://0x7f000001/', '127.0.0.1'],
    ['https://%31%32%37.0.0.1/', '127.0.0.1'],
    ['https://\uff11\uff12\uff17.\uff10.\uff10.\uff11/', '127.0.0.1'],
    ['https://0300.0250.0.1/', '192.168.0.1'],
    ['https://[::ffff:127.0.0.1]/', '[::ffff:7f00:1]'],
  ])('%s has hostname %s', (raw, hostname) => {
    expect(new URL(raw).hostname).toBe(hostname);
  });
});

describe('assertPublicUrl rejects SSRF forms with INVALID_URL', () => {
  const corpus: [string, string][] = [
    // loopback / private IPv4 literals in every notation the parser normalises
    ['https://127.0.0.1/a.png', 'loopback'],
    ['https://2130706433/a.png', 'loopback'],
    ['https://0177.0.0.1/a.png', 'loopback'],
    ['https://0x7f.1/a.png', 'loopback'],
    ['https://127.1/a.png', 'loopback'],
    ['https://0x7f000001/a.png', 'loopback'],
    ['https://%31%32%37.0.0.1/a.png', 'loopback'],
    ['https://\uff11\uff12\uff17.\uff10.\uff10.\uff11/a.png', 'loopback'],
    ['https://0/a.png', 'unspecified'],
    ['https://0.0.0.0/a.png', 'unspecified'],
    ['https://10.0.0.1/a.png', 'private'],
    ['https://172.16.5.4/a.png', 'private'],
    ['https://172.31.255.255/a.png', 'private'],
    ['https://192.168.1.1/a.png', 'private'],
    ['https://0300.0250.0.1/a.png', 'private'],
    ['https://169.254.169.254/latest/meta-data/', 'link-local'],
    ['https://100.64.0.1/a.png', 'carrier-grade NAT'],
    ['https://224.0.0.1/a.png', 'multicast'],
    ['https://255.255.255.255/a.png', 'broadcast'],
    ['https://240.0.0.1/a.png', 'reserved'],
    ['https://192.0.2.10/a.png', 'reserved'],
    ['https://198.18.0.1/a.png', 'reserved'],
    // IPv6 literals
    ['https://[::1]/a.png', 'loopback'],
    ['https://[::]/a.png', 'unspecified'],
    ['https://[::ffff:127.0.0.1]/a.png', 'IPv4-mapped'],
    ['https://[0:0:0:0:0:ffff:a00:1]/a.png', 'IPv4-mapped'],
    ['https://[::127.0.0.1]/a.png', 'outside global unicast'],
    ['https://[fe80::1]/a.png', 'link-local'],
    ['https://[fc00::1]/a.png', 'unique-local'],
    ['https://[fd12:3456::1]/a.png', 'unique-local'],
    ['https://[fec0::1]/a.png', 'site-local'],
    ['https://[ff02::1]/a.png', 'multicast'],
    ['https://[2001:db8::1]/a.png', 'reserved'],
    ['https://[64:ff9b::a00:1]/a.png', 'NAT64'],
    ['https://[2002:7f00:1::]/a.png', '6to4'],
    ['https://[2001:0:4136:e378:8000:63bf:3fff:fdd2]/a.png', 'Teredo'],
    // private-only names (no DNS needed)
    ['https://localhost/a.png', 'local or internal'],
    ['https://localhost./a.png', 'end with a dot'],
    ['https://LOCALHOST/a.png', 'local or internal'],
    ['https://api.localhost/a.png', 'local or internal'],
    ['https://printer.local/a.png', 'local or internal'],
    ['https://metadata.google.internal/computeMetadata/v1/', 'local or internal'],
    ['https://router.home.arpa/a.png', 'local or internal'],
    ['https://fileserver/a.png', 'single-label'],
    ['https://wiki.corp/a.png', 'local or internal'],
    ['https://cdn.example.com./a.png', 'end with a dot'],
    // names resolving to private ranges (fake DNS)
    ['https://internal.example.com/a.png', 'non-public address'],
    ['https://rebind.example.com/a.png', 'non-public address'],
    ['https://metadata.example.com/a.png', 'non-public address'],
    ['https://v6only-private.example.com/a.png', 'non-public address'],
    ['https://v6-loopback.example.com/a.png', 'non-public address'],
    ['https://mapped.example.com/a.png', 'non-public address'],
    ['https://cgnat.example.com/a.png', 'non-public address'],
    ['https://unspecified.example.com/a.png', 'non-public address'],
    ['https://127.0.0.1.nip.io/a.png', 'non-public address'],
    ['https://garbage.example.com/a.png', 'non-public address'],
    ['https://empty.example.com/a.png', 'did not resolve'],
    ['https://nxdomain.example.com/a.png', 'could not be resolved'],
    // credentials, parser differentials
    ['https://user:pass@cdn.example.com/a.png', 'credentials'],
    ['https://user@cdn.example.com/a.png', 'credentials'],
    ['https://@cdn.example.com/a.png', 'credentials'],
    ['https://cdn.example.com@127.0.0.1/a.png', 'credentials'],
    ['https://cdn.example.com\\@127.0.0.1/a.png', 'backslash'],
    ['https:cdn.example.com/a.png', 'must start with https://'],
    ['https:/cdn.example.com/a.png', 'must start with https://'],
    ['https:///cdn.example.com/a.png', 'no host'],
    // schemes
    ['http://cdn.example.com/a.png', 'scheme "http:"'],
    ['file:///etc/passwd', 'scheme "file:"'],
    ['ftp://cdn.example.com/a.png', 'scheme "ftp:"'],
    ['gopher://127.0.0.1:6379/_INFO', 'scheme "gopher:"'],
    ['data:image/png;base64,iVBORw0KGgo=', 'scheme "data:"'],
    ['javascript:alert(1)', 'scheme "javascript:"'],
    ['dict://127.0.0.1:11211/stat', 'scheme "dict:"'],
    ['//cdn.example.com/a.png', 'not absolute'],
    ['/relative/a.png', 'not absolute'],
    // empty host, whitespace / control characters, malformed
    ['https://', 'no host'],
    ['https://:443/a.png', 'not a valid absolute URL'],
    [' https://cdn.example.com/a.png', 'whitespace'],
    ['https://cdn.example.com/a.png\n', 'whitespace'],
    ['https://cdn.exa\tmple.com/a.png', 'whitespace'],
    ['https://cdn.example.com/a b.png', 'whitespace'],
    ['https://cdn.example.com/\u0000a.png', 'control'],
    ['https://cdn.example.com\u3000/a.png', 'whitespace'],
    ['https://cdn..example.com/a.png', 'not a valid DNS name'],
    ['https://cdn.example.com:0/a.png', 'port 0'],
    ['https://cdn.example.com:65536/a.png', 'not a valid absolute URL'],
    ['https://[fe80::1%25eth0]/a.png', 'not a valid absolute URL'],
    ['', 'required'],
  ];

  it('has a corpus of at least 30 forms', () => {
    expect(corpus.length).toBeGreaterThanOrEqual(30);
  });

  it.each(corpus)('rejects %p (%s)', async (raw, reason) => {
    const err = await rejection(raw);
    expect(err.code).toBe('INVALID_URL');
    expect(err.status).toBe(400);
    expect(err.message).toMatch(/^Invalid mediaUrl: /);
    expect(err.message).toContain(reason);
    expect(err.hint).toEqual(expect.any(String));
  });

  it('rejects a URL over 2048 characters and accepts exactly 2048', async () => {
    const base = 'https://cdn.example.com/';
    const exact = base + 'a'.repeat(2048 - base.length);
    await expect(assertPublicUrl(exact, STRICT, { lookup })).resolves.toEqual(expect.objectContaining({ addresses: ['93.184.216.34'] }));
    const err = await rejection(exact + 'a');
    expect(err.message).toContain('longer than 2048');
  });

  it('honours a custom maxLength', () => {
    expect(() => assertSafeUrlSyntax('https://cdn.example.com/long-path', STRICT, { maxLength: 20 })).toThrow(/longer than 20/);
  });

  it('does not echo a resolved internal address in the message', async () => {
    const err = await rejection('https://internal.example.com/a.png');
    expect(err.message).not.toContain('10.0.0.5');
  });

  it('does not call DNS for names refused by syntax, nor for IP literals', async () => {
    const spy = jest.fn(lookup);
    await expect(assertPublicUrl('https://localhost/a', STRICT, { lookup: spy })).rejects.toMatchObject({ code: 'INVALID_URL' });
    await expect(assertPublicUrl('https://93.184.216.34/a', STRICT, { lookup: spy })).resolves.toMatchObject({
      addresses: ['93.184.216.34'],
    });
    await expect(assertPublicUrl('https://[2606:4700::1111]/a', STRICT, { lookup: spy })).resolves.toMatchObject({
      addresses: ['2606:4700::1111'],
    });
    expect(spy).not.toHaveBeenCalled();
  });

  it('turns a lookup that throws synchronously into INVALID_URL', async () => {
    const throwing: LookupFn = () => {
      throw new Error('boom');
    };
    await expect(assertPublicUrl('https://cdn.example.com/a', STRICT, { lookup: throwing })).rejects.toMatchObject({ code: 'INVALID_URL' });
  });
});

describe('assertPublicUrl accepts public URLs', () => {
  it.each([
    ['https://cdn.example.com/a.png', ['93.184.216.34']],
    ['https://CDN.Example.com/a.png?x=1#frag', ['93.184.216.34']],
    ['https://cdn.example.com:443/a.png', ['93.184.216.34']],
    ['https://cdn.example.com:8443/a.png', ['93.184.216.34']],
    ['https://media.example.org/path/to/file.pdf', ['93.184.216.34', '2606:2800:220:1:248:1893:25c8:1946']],
    ['https://пример.com/картинка.jpg', ['93.184.216.34']],
    ['https://93.184.216.34/a.png', ['93.184.216.34']],
    ['https://8.8.8.8/a.png', ['8.8.8.8']],
    ['https://[2606:4700:4700::1111]/a.png', ['2606:4700:4700::1111']],
    ['https://[::ffff:8.8.8.8]/a.png', ['::ffff:808:808']],
  ])('accepts %s', async (raw, addresses) => {
    const result = await assertPublicUrl(raw, STRICT, { lookup });
    expect(result.url).toBeInstanceOf(URL);
    expect(result.url.protocol).toBe('https:');
    expect(result.addresses).toEqual(addresses);
  });

  it('returns the parsed URL from the syntax check', () => {
    const url = assertSafeUrlSyntax('HTTPS://cdn.example.com/a.png', STRICT);
    expect(url.href).toBe('https://cdn.example.com/a.png');
  });

  it('uses "url" as the default field name', () => {
    expect(() => assertSafeUrlSyntax('ftp://x.example.com/', STRICT)).toThrow(/^Invalid url: /);
  });
});

describe('http and private addresses under allowPrivate (ALLOW_PRIVATE_URLS)', () => {
  it('rejects http without allowPrivate, even for a public host', () => {
    expect(() => assertSafeUrlSyntax('http://cdn.example.com/a.png', STRICT)).toThrow(expect.objectContaining({ code: 'INVALID_URL' }));
    expect(() => assertSafeUrlSyntax('http://93.184.216.34/a.png', STRICT)).toThrow(/only https/);
  });

  it.each([
    'http://127.0.0.1:3100/x',
    'https://127.0.0.1:3100/x',
    'http://localhost:3100/hook',
    'http://[::1]:3100/hook',
    'http://10.0.0.5/x',
    'http://emulator:8080/x',
    'http://crm_emulator.internal/x',
  ])('accepts %s', async (raw) => {
    expect(assertSafeUrlSyntax(raw, DEV)).toBeInstanceOf(URL);
    await expect(assertPublicUrl(raw, DEV, { lookup })).resolves.toMatchObject({ url: expect.any(URL) });
  });

  it('returns the literal as the address and resolves names best effort', async () => {
    await expect(assertPublicUrl('http://127.0.0.1:3100/x', DEV, { lookup })).resolves.toMatchObject({ addresses: ['127.0.0.1'] });
    await expect(assertPublicUrl('http://internal.example.com/x', DEV, { lookup })).resolves.toMatchObject({ addresses: ['10.0.0.5'] });
    await expect(assertPublicUrl('http://rebind.example.com/x', DEV, { lookup })).resolves.toMatchObject({
      addresses: ['93.184.216.34', '127.0.0.1'],
    });
    await expect(assertPublicUrl('http://nxdomain.example.com/x', DEV, { lookup })).resolves.toMatchObject({ addresses: [] });
  });

  it.each([
    ['https://user:pass@127.0.0.1/x', 'credentials'],
    ['file:///etc/passwd', 'scheme "file:"'],
    ['gopher://127.0.0.1/x', 'scheme "gopher:"'],
    ['ftp://127.0.0.1/x', 'only http and https'],
    ['http://127.0.0.1/ x', 'whitespace'],
    ['http://localhost./x', 'end with a dot'],
  ])('still rejects %p (%s)', (raw, reason) => {
    expect(() => assertSafeUrlSyntax(raw, DEV)).toThrow(
      expect.objectContaining({ code: 'INVALID_URL', message: expect.stringContaining(reason) }),
    );
  });

  it('still applies the length limit', () => {
    expect(() => assertSafeUrlSyntax(`http://127.0.0.1/${'a'.repeat(2048)}`, DEV)).toThrow(/longer than 2048/);
  });
});

describe('isForbiddenAddress', () => {
  it.each([
    '127.0.0.1',
    '127.255.255.254',
    '10.0.0.1',
    '10.255.255.255',
    '172.16.0.1',
    '172.31.255.255',
    '192.168.0.1',
    '169.254.169.254',
    '100.64.0.1',
    '100.127.255.255',
    '224.0.0.1',
    '239.255.255.250',
    '255.255.255.255',
    '0.0.0.0',
    '0.1.2.3',
    '240.0.0.1',
    '192.0.0.8',
    '192.0.2.1',
    '198.18.0.1',
    '198.19.255.255',
    '198.51.100.7',
    '203.0.113.9',
    '::',
    '::1',
    '::ffff:127.0.0.1',
    '::ffff:10.1.2.3',
    '::ffff:169.254.169.254',
    '::ffff:0:a00:1',
    '::127.0.0.1',
    '64:ff9b::10.0.0.1',
    '64:ff9b::8.8.8.8',
    '64:ff9b:1::1',
    '2002:c0a8:0101::1',
    '2002:0808:0808::1',
    '2001:db8::1',
    '2001::1',
    '2001:0:4136:e378::1',
    'fe80::1',
    'fe80::1%eth0',
    'febf::1',
    'fec0::1',
    'fc00::1',
    'fdff:ffff::1',
    'ff02::1',
    '100::1',
    '[::1]',
    '127.1',
    '0x7f.0.0.1',
    'not-an-ip',
    '',
    '1.2.3.4.5',
  ])('forbids %p', (address) => {
    expect(isForbiddenAddress(address)).toBe(true);
  });

  it.each([
    '8.8.8.8',
    '93.184.216.34',
    '1.1.1.1',
    '172.15.255.255',
    '172.32.0.1',
    '100.63.255.255',
    '100.128.0.1',
    '192.169.0.1',
    '11.0.0.1',
    '2606:4700:4700::1111',
    '2a00:1450:4001:82b::200e',
    '::ffff:8.8.8.8',
    '[2606:4700::1111]',
  ])('allows %p', (address) => {
    expect(isForbiddenAddress(address)).toBe(false);
  });
});

/** Property: any IPv4 address in a private range, used as the URL host in any notation, is refused. */
describe('property: private IPv4 hosts are always refused', () => {
  // A small seeded PRNG (mulberry32) keeps the run deterministic and reproducible.
  function mulberry32(seed: number): () => number {
    let a = seed >>> 0;
    return () => {
      a = (a + 0x6d2b79f5) >>> 0;
      let t = a;
      t = Math.imul(t ^ (t >>> 15), t | 1);
      t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
      return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
    };
  }
  const ranges: [string, number, number][] = [
    ['10/8', 0x0a000000, 8],
    ['127/8', 0x7f000000, 8],
    ['192.168/16', 0xc0a80000, 16],
    ['172.16/12', 0xac100000, 12],
    ['169.254/16', 0xa9fe0000, 16],
    ['100.64/10', 0x64400000, 10],
  ];
  const octets = (n: number): number[] => [n >>> 24, (n >>> 16) & 255, (n >>> 8) & 255, n & 255];
  const notations: [string, (n: number) => string][] = [
    ['dotted', (n) => octets(n).join('.')],
    ['decimal', (n) => String(n >>> 0)],
    ['hex', (n) => `0x${(n >>> 0).toString(16)}`],
    [
      'octal dotted',
      (n) =>
        octets(n)
          .map((o) => `0${o.toString(8)}`)
          .join('.'),
    ],
    [
      'short a.b.c',
      (n) => {
        const o = octets(n);
        return `${o[0]}.${o[1]}.${(o[2] << 8) | o[3]}`;
      },
    ],
    ['ipv4-mapped', (n) => `[::ffff:${octets(n).join('.')}]`],
  ];

  it.each(ranges)('%s', (_name, base, prefix) => {
    const random = mulberry32(base ^ prefix);
    const hostBits = 32 - prefix;
    const samples = [0, 2 ** hostBits - 1]; // both edges of the range
    for (let i = 0; i < 300; i++) samples.push(Math.floor(random() * 2 ** hostBits));
    for (const offset of samples) {
      const n = (base + offset) >>> 0;
      expect(isForbiddenAddress(octets(n).join('.'))).toBe(true);
      for (const [notation, render] of notations) {
        const raw = `https://${render(n)}/media.png`;
        let code: string | undefined;
        try {
          assertSafeUrlSyntax(raw, STRICT);
        } catch (err) {
          code = (err as ApiError).code;
        }
        if (code !== 'INVALID_URL') throw new Error(`${notation} ${raw} was not refused`);
      }
    }
  });
});

describe('assertPublicUrl tells a temporary DNS failure from a name that does not exist', () => {
  const failing =
    (code: string): LookupFn =>
    async () => {
      throw Object.assign(new Error(`getaddrinfo ${code} cdn.example.com`), { code });
    };

  it.each(['EAI_AGAIN', 'ESERVFAIL', 'ETIMEOUT', 'ECONNREFUSED'])('%s is 503 DNS_UNAVAILABLE (worth retrying)', async (code) => {
    await expect(assertPublicUrl('https://cdn.example.com/a', STRICT, { lookup: failing(code), field: 'mediaUrl' })).rejects.toMatchObject({
      code: 'DNS_UNAVAILABLE',
      status: 503,
    });
  });

  it.each(['ENOTFOUND', 'ENODATA'])('%s stays 400 INVALID_URL (retrying cannot help)', async (code) => {
    await expect(assertPublicUrl('https://cdn.example.com/a', STRICT, { lookup: failing(code) })).rejects.toMatchObject({
      code: 'INVALID_URL',
      status: 400,
    });
  });
});
