import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { bearerToken, crossSiteReason, FailureLimiter, isLoopback, matchToken, readCookie, sameSecret, SessionStore, sessionCookie } from '../../src/dashboard/dashboard-auth.ts';
import { resolveDashboardOptions } from '../../src/dashboard/dashboard-options.ts';
import { escapeHtml } from '../../src/dashboard/dashboard-page.ts';
import { ConfigError } from '../../src/core/errors.ts';
import type { DashboardOutboxSource } from '../../src/dashboard/dashboard-sampler.ts';

const admin = { status: async () => ({}) } as unknown as DashboardOutboxSource;

describe('dashboard auth', () => {
  it('knows loopback addresses and names, and nothing else', () => {
    for (const h of ['127.0.0.1', '127.1.2.3', '::1', '[::1]', '::ffff:127.0.0.1', 'localhost', 'LOCALHOST']) assert.ok(isLoopback(h), h);
    for (const h of ['0.0.0.0', '::', '10.0.0.5', '192.168.1.1', 'example.com', 'localhost.evil.com', '128.0.0.1', '', '::ffff:10.0.0.1']) assert.ok(!isLoopback(h), h);
  });

  it('compares tokens whatever their length, and names the token that matched', () => {
    assert.ok(sameSecret('abcdefghijklmnop', 'abcdefghijklmnop'));
    assert.ok(!sameSecret('abcdefghijklmnoq', 'abcdefghijklmnop'));
    assert.ok(!sameSecret('', 'abcdefghijklmnop'));
    assert.ok(!sameSecret('abcdefghijklmnopqrstuvwxyz', 'abcdefghijklmnop'));
    const tokens = new Map([
      ['alice', 'alice-token-0123456789'],
      ['bob', 'bob-token-0123456789ab'],
    ]);
    assert.equal(matchToken('bob-token-0123456789ab', tokens), 'bob');
    assert.equal(matchToken('alice-token-0123456789', tokens), 'alice');
    assert.equal(matchToken('carol-token-0123456789', tokens), null);
  });

  it('reads Bearer tokens and cookies', () => {
    assert.equal(bearerToken('Bearer abc.def'), 'abc.def');
    assert.equal(bearerToken('bearer   abc'), 'abc');
    assert.equal(bearerToken('Basic abc'), null);
    assert.equal(bearerToken('Bearer a b'), null);
    assert.equal(bearerToken(undefined), null);
    assert.equal(readCookie('a=1; txbox_dashboard=xyz; b=2', 'txbox_dashboard'), 'xyz');
    assert.equal(readCookie('xtxbox_dashboard=1', 'txbox_dashboard'), null);
    assert.equal(readCookie(undefined, 'txbox_dashboard'), null);
  });

  it('sets the session cookie HttpOnly and SameSite=Strict, on the base path, Secure over TLS', () => {
    assert.equal(sessionCookie('c', 'v', '/ops', false, 60), 'c=v; Path=/ops; HttpOnly; SameSite=Strict; Max-Age=60');
    assert.match(sessionCookie('c', 'v', '/', true, 60), /; Secure$/);
  });

  it('sessions carry their own CSRF token, expire when idle, and are bounded', () => {
    let now = 1_000;
    const store = new SessionStore(100, 2, () => now);
    const a = store.create('alice');
    assert.match(a.id, /^[A-Za-z0-9_-]{43}$/);
    assert.notEqual(a.csrf, a.id);
    assert.equal(store.get(a.id), a);
    assert.equal(store.get('x'.repeat(43)), null, 'an unknown id');
    assert.equal(store.get('not a session id'), null);
    now += 99;
    assert.equal(store.get(a.id), a, 'a request extends the session');
    now += 99;
    assert.equal(store.get(a.id), a);
    now += 101;
    assert.equal(store.get(a.id), null, 'idle past the TTL: gone');
    const b = store.create('b');
    store.create('c');
    store.create('d');
    assert.equal(store.size, 2);
    assert.equal(store.get(b.id), null, 'the oldest session makes room');
  });

  it('refuses POSTs from other sites: foreign or null Origin, cross-site Sec-Fetch-Site, neither header', () => {
    const host = '127.0.0.1:8090';
    assert.equal(crossSiteReason({ origin: 'http://127.0.0.1:8090', host }), null);
    assert.equal(crossSiteReason({ origin: 'http://127.0.0.1:8090', host, 'sec-fetch-site': 'same-origin' }), null);
    assert.equal(crossSiteReason({ host, 'sec-fetch-site': 'same-origin' }), null, 'Sec-Fetch-Site alone');
    assert.match(crossSiteReason({ origin: 'http://evil.example', host })!, /another site/);
    assert.match(crossSiteReason({ origin: 'http://127.0.0.1:9999', host })!, /another site/, 'another port is another origin');
    assert.match(crossSiteReason({ origin: 'null', host })!, /not a URL/);
    assert.match(crossSiteReason({ origin: 'http://127.0.0.1:8090', host, 'sec-fetch-site': 'cross-site' })!, /Sec-Fetch-Site is cross-site/);
    assert.match(crossSiteReason({ host, 'sec-fetch-site': 'same-site' })!, /same-site/);
    assert.match(crossSiteReason({ host })!, /no Origin or Sec-Fetch-Site/);
    assert.equal(crossSiteReason({ origin: 'https://ops.example.com', host: 'internal:8090' }, ['https://ops.example.com']), null, 'an allowed origin (a proxy)');
  });

  it('limits wrong tokens per address in a sliding window, with a bounded memory', () => {
    let now = 0;
    const limiter = new FailureLimiter(3, 1000, 2, () => now);
    for (let i = 0; i < 3; i++) {
      assert.ok(limiter.allowed('10.0.0.1'));
      limiter.fail('10.0.0.1');
    }
    assert.ok(!limiter.allowed('10.0.0.1'), 'the fourth try waits');
    assert.ok(limiter.allowed('10.0.0.2'), 'another address is not affected');
    now = 1001;
    assert.ok(limiter.allowed('10.0.0.1'), 'the window passed');
    limiter.fail('a');
    limiter.fail('b');
    limiter.fail('c');
    now = 1002;
    for (let i = 0; i < 3; i++) limiter.fail('c');
    assert.ok(!limiter.allowed('c'));
  });

  it('escapes HTML', () => {
    assert.equal(escapeHtml(`<a href="x">'&'</a>`), '&#60;a href=&#34;x&#34;&#62;&#39;&#38;&#39;&#60;/a&#62;');
  });
});

describe('dashboard options', () => {
  const fails = (options: Parameters<typeof resolveDashboardOptions>[0], field: string, message: RegExp): void => {
    assert.throws(() => resolveDashboardOptions(options), (err: unknown) => err instanceof ConfigError && err.field === field && message.test(err.message));
  };

  it('refuses to run without a token unless allowNoAuth, and short or odd tokens', () => {
    fails({ admin }, 'token', /refuses to run without an access token.*allowNoAuth/);
    fails({ admin, token: 'short' }, 'token', /shorter than 16 characters.*openssl rand -hex 32/);
    fails({ admin, token: { ok: 'long-enough-token-1', 'bad name': 'long-enough-token-2' } }, 'token', /token name "bad name"/);
    fails({ admin, token: 'has a space inside it' }, 'token', /printable ASCII without spaces/);
    fails({ admin, token: 'long-enough-token-1', allowNoAuth: true }, 'allowNoAuth', /not both/);
    fails({ admin: undefined as unknown as DashboardOutboxSource, token: 'long-enough-token-1' }, 'admin', /PostgresAdmin/);
    fails({ admin, token: 'long-enough-token-1', basePath: 'ops' }, 'basePath', /not a path/);
    fails({ admin, token: 'long-enough-token-1', sampleIntervalMs: 0 }, 'sampleIntervalMs', /positive whole number/);
    fails({ admin, token: 'long-enough-token-1', allowedOrigins: ['ops.example.com'] }, 'allowedOrigins', /scheme:\/\/host/);
  });

  it('fills defaults: no payloads, 5 s samples, an hour of history, the root path', () => {
    const o = resolveDashboardOptions({ admin, token: 'long-enough-token-1', basePath: '/ops/txbox/' });
    assert.deepEqual([...o.tokens], [['token', 'long-enough-token-1']]);
    assert.equal(o.showPayloads, false);
    assert.equal(o.sampleIntervalMs, 5000);
    assert.equal(o.historyMs, 3_600_000);
    assert.equal(o.basePath, '/ops/txbox');
    assert.equal(resolveDashboardOptions({ admin, allowNoAuth: true }).basePath, '');
  });
});
