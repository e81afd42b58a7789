import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { Authenticator, NatsConnection } from '@nats-io/transport-node';
import { ConfigError } from 'txbox';
import { NatsTransport, keyToken, redactServer, resolveNatsTransportOptions, type NatsTransportOptions } from 'txbox/nats';

function configError(options: unknown, field: string, text?: RegExp): void {
  assert.throws(
    () => resolveNatsTransportOptions(options as NatsTransportOptions),
    (e: unknown) => {
      assert.ok(e instanceof ConfigError, `expected ConfigError, got ${String(e)}`);
      assert.equal(e.field, field);
      if (text) assert.match(e.message, text);
      return true;
    },
  );
}

const fakeConnection = { request: () => Promise.reject(new Error('unused')), isClosed: () => false } as unknown as NatsConnection;
const fakeAuthenticator = (() => ({})) as unknown as Authenticator;

describe('resolveNatsTransportOptions', () => {
  it('fills defaults and freezes', () => {
    const o = resolveNatsTransportOptions();
    assert.deepEqual(o.connect?.servers, ['127.0.0.1:4222']);
    assert.equal(o.connect?.maxReconnectAttempts, -1, 'reconnects never give up');
    assert.equal(o.connect?.reconnectTimeWait, 1000);
    assert.equal(o.connect?.timeout, 5000);
    assert.equal(o.connect?.name, 'txbox');
    assert.equal(o.subjectPrefix, 'txbox');
    assert.equal(o.keyInSubject, false);
    assert.equal(o.publishTimeoutMs, 5000);
    assert.equal(o.subjects.size, 0);
    assert.equal(o.streams.size, 0);
    assert.equal(o.connection, null);
    assert.equal(o.credentials, null);
    assert.ok(Object.isFrozen(o));
    assert.ok(Object.isFrozen(o.connect));
  });

  it('passes credentials, TLS and timings through', () => {
    const o = resolveNatsTransportOptions({
      servers: ['nats://a:4222', 'nats://b:4222'],
      user: 'relay',
      pass: 's3cret',
      tls: { caFile: '/etc/ca.pem' },
      publishTimeoutMs: 2000,
      connectTimeoutMs: 3000,
      reconnectTimeWaitMs: 250,
      name: 'orders-relay',
    });
    assert.deepEqual(o.connect?.servers, ['nats://a:4222', 'nats://b:4222']);
    assert.equal(o.connect?.user, 'relay');
    assert.equal(o.connect?.pass, 's3cret');
    assert.deepEqual(o.connect?.tls, { caFile: '/etc/ca.pem' });
    assert.equal(o.connect?.timeout, 3000);
    assert.equal(o.connect?.reconnectTimeWait, 250);
    assert.equal(o.publishTimeoutMs, 2000);
    assert.equal(o.credentials, 'user/pass');
    assert.equal(resolveNatsTransportOptions({ token: 't' }).credentials, 'token');
    assert.equal(resolveNatsTransportOptions({ authenticator: fakeAuthenticator }).credentials, 'authenticator');
    assert.equal(resolveNatsTransportOptions({ servers: 'nats://u:p@host:4222' }).credentials, 'servers');
  });

  it('redacts userinfo in server addresses', () => {
    const o = resolveNatsTransportOptions({ servers: ['nats://relay:hunter2@10.0.0.5:4222', 'tls://tok@10.0.0.6:4222', '10.0.0.7:4222'] });
    assert.equal(o.serversDisplay, 'nats://10.0.0.5:4222, tls://10.0.0.6:4222, 10.0.0.7:4222');
    assert.equal(redactServer('user:pw@host:4222'), 'host:4222');
  });

  it('names the bad server without quoting it', () => {
    configError({ servers: [] }, 'servers', /non-empty array/);
    configError({ servers: 'nats://u:hunter2@host :4222' }, 'servers', /without spaces/);
    configError({ servers: ['ok:4222', 42] }, 'servers[1]');
    assert.throws(
      () => resolveNatsTransportOptions({ servers: ['nats://u:hunter2@ho st'] }),
      (e: unknown) => e instanceof ConfigError && !e.message.includes('hunter2'),
    );
  });

  it('checks credentials', () => {
    configError({ user: 'relay' }, 'pass', /required with user/);
    configError({ pass: 'x' }, 'user', /required with pass/);
    configError({ user: '', pass: 'x' }, 'user', /non-empty/);
    configError({ user: 'relay', pass: 'x', token: 't' }, 'token', /cannot be combined with user\/pass/);
    configError({ token: 't', authenticator: fakeAuthenticator }, 'authenticator', /cannot be combined with token/);
    configError({ authenticator: 'nope' }, 'authenticator', /Authenticator/);
    configError({ authenticator: [] }, 'authenticator');
    assert.throws(
      () => resolveNatsTransportOptions({ user: 'relay', pass: 'hunter2', token: 't' }),
      (e: unknown) => e instanceof ConfigError && !e.message.includes('hunter2'),
    );
  });

  it('checks subjects, the prefix and stream names', () => {
    configError({ subjectPrefix: 'a.*' }, 'subjectPrefix', /wildcards/);
    configError({ subjectPrefix: 'a..b' }, 'subjectPrefix', /empty token/);
    configError({ subjectPrefix: 42 }, 'subjectPrefix');
    configError({ subjects: { orders: 'shop.>' } }, 'subjects.orders', /wildcards/);
    configError({ subjects: { orders: 'shop orders' } }, 'subjects.orders', /spaces/);
    configError({ subjects: { orders: '.shop' } }, 'subjects.orders', /empty token/);
    configError({ subjects: { orders: '' } }, 'subjects.orders', /empty/);
    configError({ subjects: { orders: 7 } }, 'subjects.orders', /string/);
    configError({ subjects: { '': 'a' } }, 'subjects', /empty destination/);
    configError({ subjects: 'a' }, 'subjects');
    configError({ streams: { orders: 'ORD.ERS' } }, 'streams.orders', /dots/);
    configError({ streams: { orders: '' } }, 'streams.orders', /1 to 255/);
    const o = resolveNatsTransportOptions({ subjectPrefix: '', subjects: { orders: 'shop.orders' }, streams: { orders: 'ORDERS' } });
    assert.equal(o.subjectPrefix, '');
    assert.equal(o.subjects.get('orders'), 'shop.orders');
    assert.equal(o.streams.get('orders'), 'ORDERS');
  });

  it('checks numbers and flags', () => {
    configError({ publishTimeoutMs: 0 }, 'publishTimeoutMs', /integer from 1/);
    configError({ publishTimeoutMs: 1.5 }, 'publishTimeoutMs');
    configError({ connectTimeoutMs: -1 }, 'connectTimeoutMs');
    configError({ reconnectTimeWaitMs: Number.NaN }, 'reconnectTimeWaitMs');
    configError({ keyInSubject: 'yes' }, 'keyInSubject', /true or false/);
    configError({ tls: 'on' }, 'tls');
    configError(null, 'options');
  });

  it('takes an existing connection and refuses connection settings beside it', () => {
    const o = resolveNatsTransportOptions({ connection: fakeConnection, keyInSubject: true });
    assert.equal(o.connect, null);
    assert.equal(o.connection, fakeConnection);
    assert.equal(o.keyInSubject, true);
    configError({ connection: fakeConnection, servers: 'x:4222' }, 'servers', /cannot be combined with connection/);
    configError({ connection: fakeConnection, user: 'u', pass: 'p' }, 'user');
    configError({ connection: fakeConnection, reconnectTimeWaitMs: 10 }, 'reconnectTimeWaitMs');
    configError({ connection: {} }, 'connection', /NatsConnection/);
  });

  it('is what the constructor checks', () => {
    assert.throws(() => new NatsTransport({ subjects: { orders: 'a b' } }), ConfigError);
    assert.equal(new NatsTransport().name, 'nats');
  });
});

describe('keyToken', () => {
  it('keeps safe keys and encodes everything else per UTF-8 byte', () => {
    assert.equal(keyToken('Order:17'), 'Order:17');
    assert.equal(keyToken('a-b_c=d'), 'a-b_c=d');
    assert.equal(keyToken('tenant a.b/7'), 'tenant%20a%2Eb%2F7');
    assert.equal(keyToken('*>'), '%2A%3E');
    assert.equal(keyToken('%'), '%25');
    assert.equal(keyToken('é'), '%C3%A9');
    assert.equal(keyToken(''), '%');
  });

  it('never yields a subject separator, wildcard or space, and keeps keys apart', () => {
    const keys = ['a.b', 'a_b', 'a%2Eb', 'a b', 'a\tb', 'a*b', 'a>b', 'a/b', 'ä', 'a', '', '%', '%25'];
    const tokens = keys.map(keyToken);
    for (const t of tokens) assert.doesNotMatch(t, /[.*>\s]/);
    assert.equal(new Set(tokens).size, keys.length, 'distinct keys give distinct tokens');
  });

  it('shortens long tokens with a hash', () => {
    const long = 'x'.repeat(500);
    const t = keyToken(long);
    assert.ok(t.length <= 128, `${t.length}`);
    assert.match(t, /^x{88}~[0-9a-f]{32}$/);
    assert.notEqual(keyToken(`${long}y`), t);
    assert.equal(keyToken('y'.repeat(128)), 'y'.repeat(128));
  });
});
