import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { Redis } from 'ioredis';
import { ConfigError } from 'txbox';
import { RedisTransport, resolveRedisTransportOptions, type RedisTransportOptions } from 'txbox/redis';

function configError(options: unknown, field: string, text?: RegExp): void {
  assert.throws(
    () => resolveRedisTransportOptions(options as RedisTransportOptions),
    (e: unknown) => {
      assert.ok(e instanceof ConfigError, `expected ConfigError, got ${String(e)}`);
      assert.equal(e.field, field);
      if (text) assert.match(e.message, text);
      assert.doesNotMatch(e.message, /s3cret/, 'never quotes the password');
      return true;
    },
  );
}

const fakeClient = (extra: object = {}): Redis => ({ pipeline() {}, ping() {}, isCluster: false, options: { host: '10.0.0.5', port: 6380 }, ...extra }) as unknown as Redis;

describe('resolveRedisTransportOptions', () => {
  it('fills defaults and freezes', () => {
    const o = resolveRedisTransportOptions({ url: 'redis://127.0.0.1' });
    assert.equal(o.streamPrefix, 'txbox:');
    assert.equal(o.streams.size, 0);
    assert.equal(o.maxLen, null);
    assert.equal(o.maxMessageBytes, 1_048_576);
    assert.equal(o.commandTimeoutMs, 5000);
    assert.equal(o.connectTimeoutMs, 10_000);
    assert.ok(Object.isFrozen(o));
    assert.ok(o.connection.kind === 'url');
    assert.equal(o.connection.host, '127.0.0.1');
    assert.equal(o.connection.port, 6379);
    assert.equal(o.connection.db, 0);
    assert.equal(o.connection.tls, undefined);
    assert.equal(o.connection.display, 'redis://127.0.0.1:6379/0');
  });

  it('reads user, password, port and db from the url, and keeps the password out of the display address', () => {
    const o = resolveRedisTransportOptions({ url: 'redis://alice:s3cret%40x@redis.internal:6380/3' });
    assert.ok(o.connection.kind === 'url');
    assert.equal(o.connection.username, 'alice');
    assert.equal(o.connection.password, 's3cret@x');
    assert.equal(o.connection.port, 6380);
    assert.equal(o.connection.db, 3);
    assert.equal(o.connection.display, 'redis://redis.internal:6380/3');
    assert.equal(o.connection.userField, 'url');
    assert.equal(o.connection.passwordField, 'url');
  });

  it('username and password options win over the url, and are named in errors', () => {
    const o = resolveRedisTransportOptions({ url: 'redis://bob:old@h', username: 'alice', password: 's3cret' });
    assert.ok(o.connection.kind === 'url');
    assert.equal(o.connection.username, 'alice');
    assert.equal(o.connection.password, 's3cret');
    assert.equal(o.connection.userField, 'username');
    assert.equal(o.connection.passwordField, 'password');
  });

  it('rediss: and tls turn TLS on; IPv6 hosts are bracketed', () => {
    const a = resolveRedisTransportOptions({ url: 'rediss://[::1]:6390' });
    assert.ok(a.connection.kind === 'url');
    assert.deepEqual(a.connection.tls, {});
    assert.equal(a.connection.host, '::1');
    assert.equal(a.connection.display, 'rediss://[::1]:6390/0');
    const b = resolveRedisTransportOptions({ url: 'redis://h', tls: { servername: 'redis.example.com' } });
    assert.ok(b.connection.kind === 'url');
    assert.equal(b.connection.tls?.servername, 'redis.example.com');
    assert.ok(Object.isFrozen(b.connection.tls));
  });

  it('maps streams and checks numbers', () => {
    const o = resolveRedisTransportOptions({ url: 'redis://h', streams: { orders: 'shop:orders' }, streamPrefix: 'app:', maxLen: 1000, maxMessageBytes: 4096, commandTimeoutMs: 250 });
    assert.equal(o.streams.get('orders'), 'shop:orders');
    assert.equal(o.streamPrefix, 'app:');
    assert.equal(o.maxLen, 1000);
    assert.equal(o.maxMessageBytes, 4096);
    assert.equal(o.commandTimeoutMs, 250);
  });

  it('takes a caller client and shows its address', () => {
    const o = resolveRedisTransportOptions({ client: fakeClient() });
    assert.ok(o.connection.kind === 'client');
    assert.equal(o.connection.display, 'redis://10.0.0.5:6380');
  });

  it('refuses bad options, naming the field and never the password', () => {
    configError(null, 'options');
    configError({}, 'url', /required/);
    configError({ url: 'not a url s3cret' }, 'url', /not a valid URL/);
    configError({ url: 'http://u:s3cret@h' }, 'url', /only redis: and rediss:/);
    configError({ url: 'redis://:s3cret@h?db=1' }, 'url', /query/);
    configError({ url: 'redis://:s3cret@h/orders' }, 'url', /database number/);
    configError({ url: 'redis://h', username: 1 }, 'username', /string/);
    configError({ url: 'redis://h', tls: 'yes' }, 'tls');
    configError({ url: 'redis://h', client: fakeClient() }, 'url', /cannot be combined with client/);
    configError({ client: fakeClient(), password: 's3cret' }, 'password', /cannot be combined/);
    configError({ client: {} }, 'client', /ioredis Redis instance/);
    configError({ client: fakeClient({ isCluster: true }) }, 'client', /Cluster is not supported/);
    configError({ url: 'redis://h', streams: ['a'] }, 'streams');
    configError({ url: 'redis://h', streams: { orders: '' } }, 'streams.orders', /non-empty/);
    configError({ url: 'redis://h', streamPrefix: 3 }, 'streamPrefix');
    configError({ url: 'redis://h', maxLen: 0 }, 'maxLen', /from 1/);
    configError({ url: 'redis://h', maxLen: 1.5 }, 'maxLen');
    configError({ url: 'redis://h', maxMessageBytes: 600 * 1024 * 1024 }, 'maxMessageBytes', /536870912/);
    configError({ url: 'redis://h', commandTimeoutMs: 0 }, 'commandTimeoutMs');
    configError({ url: 'redis://h', connectTimeoutMs: -1 }, 'connectTimeoutMs');
    configError({ url: 'redis://h', logger: {} }, 'logger');
  });

  it('the constructor validates and connects nothing', async () => {
    assert.throws(() => new RedisTransport({ url: 'redis://h', maxLen: -1 }), ConfigError);
    const transport = new RedisTransport({ url: 'redis://127.0.0.1:1' });
    assert.equal(transport.name, 'redis');
    await transport.close();
  });
});
