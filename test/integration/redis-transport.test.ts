/**
 * RedisTransport against the real Redis on 127.0.0.1:6379: the entry's fields,
 * stream mapping, MAXLEN trimming, a caller's client, OOM, and what happens
 * while the connection is down or silent (through a TCP proxy the test can
 * cut), with no credential in any message.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { createServer, connect, type Server, type Socket } from 'node:net';
import type { AddressInfo } from 'node:net';
import { after, before, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { inspect } from 'node:util';
import { Redis } from 'ioredis';
import { TransportError, uuidv7, type Logger, type OutboxEvent, type PublishOutcome } from 'txbox';
import { RedisTransport, parseStreamEntry } from 'txbox/redis';
import { privateRedis } from '../helpers/private-redis.ts';

const REDIS_URL = 'redis://127.0.0.1:6379';
const prefix = `txbox-test:tr-${randomBytes(4).toString('hex')}:`;
let admin: Redis;

function event(destination: string, n = 1, extra: Partial<OutboxEvent> = {}): OutboxEvent {
  return {
    id: uuidv7(),
    type: 'ItemChanged',
    aggregateType: 'Item',
    aggregateId: String(n),
    key: `Item:${n}`,
    destination,
    payload: { n, text: 'grüße 👋' },
    headers: { traceparent: '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01' },
    occurredAt: new Date('2024-05-01T12:00:00.123Z'),
    version: n,
    ...extra,
  };
}

const signal = (): AbortSignal => new AbortController().signal;

function failure(outcome: PublishOutcome | undefined): TransportError {
  assert.ok(outcome && !outcome.ok, 'expected a failed outcome');
  return outcome.error;
}

/** A TCP proxy to Redis that the test can stop (refused connections) or mute (drops what clients send). */
class Proxy {
  #server: Server | null = null;
  readonly #sockets = new Set<Socket>();
  port = 0;
  muted = false;

  async start(): Promise<void> {
    this.#server = createServer((client) => {
      this.#sockets.add(client);
      client.on('close', () => this.#sockets.delete(client));
      client.on('error', () => {});
      const upstream = connect(6379, '127.0.0.1');
      this.#sockets.add(upstream);
      upstream.on('close', () => this.#sockets.delete(upstream));
      upstream.on('error', () => client.destroy());
      client.on('close', () => upstream.destroy());
      upstream.on('close', () => client.destroy());
      client.on('data', (chunk) => {
        if (!this.muted) upstream.write(chunk);
      });
      upstream.pipe(client);
    });
    await new Promise<void>((resolve) => this.#server!.listen(this.port, '127.0.0.1', resolve));
    this.port = (this.#server.address() as AddressInfo).port;
  }

  async stop(): Promise<void> {
    const server = this.#server;
    this.#server = null;
    for (const s of this.#sockets) s.destroy();
    if (server) await new Promise<void>((resolve) => server.close(() => resolve()));
  }
}

describe('RedisTransport on a real Redis', () => {
  before(async () => {
    admin = new Redis(REDIS_URL, { lazyConnect: true });
    await admin.connect();
  });
  after(async () => {
    const keys = await admin.keys(`${prefix}*`);
    if (keys.length > 0) await admin.del(...keys);
    await admin.quit();
  });

  it('writes every envelope field, and parseStreamEntry reads the event back', async () => {
    const transport = new RedisTransport({ url: REDIS_URL, streamPrefix: prefix });
    await transport.start(signal());
    try {
      const a = event('fields', 1);
      const b = event('fields', 2, { version: null, headers: {}, payload: null });
      const outcomes = await transport.publish([a, b], signal());
      assert.deepEqual(outcomes, [{ ok: true }, { ok: true }]);
      const entries = await admin.xrange(`${prefix}fields`, '-', '+');
      assert.equal(entries.length, 2);
      const fieldNames = entries[0]![1].filter((_, i) => i % 2 === 0);
      // The trace context also travels as a field of its own.
      assert.deepEqual(fieldNames, ['id', 'type', 'aggregateType', 'aggregateId', 'key', 'version', 'occurredAt', 'headers', 'payload', 'traceparent']);
      assert.ok(!entries[1]![1].includes('version'), 'a null version is left out');
      for (const [i, original] of [a, b].entries()) {
        const parsed = parseStreamEntry(entries[i]![1], 'fields');
        assert.ok(parsed.ok);
        assert.deepEqual(parsed.event, original);
      }
    } finally {
      await transport.close();
    }
  });

  it('maps destinations to streams and trims with MAXLEN ~', async () => {
    const mapped = `${prefix}custom-key`;
    const transport = new RedisTransport({ url: REDIS_URL, streamPrefix: prefix, streams: { orders: mapped }, maxLen: 100 });
    await transport.start(signal());
    try {
      for (let call = 0; call < 10; call++) {
        const outcomes = await transport.publish(
          Array.from({ length: 100 }, (_, i) => event('orders', call * 100 + i)),
          signal(),
        );
        assert.ok(outcomes.every((o) => o.ok));
      }
      const length = await admin.xlen(mapped);
      assert.ok(length >= 100 && length < 1000, `trimmed to about 100 entries, got ${length}`);
      assert.equal(await admin.exists(`${prefix}orders`), 0, 'the mapped key is used instead of the prefix');
    } finally {
      await transport.close();
    }
  });

  it("publishes with the caller's client and leaves it open on close()", async () => {
    const client = new Redis(REDIS_URL, { lazyConnect: true, enableOfflineQueue: false, maxRetriesPerRequest: 0 });
    const transport = new RedisTransport({ client, streamPrefix: prefix });
    await transport.start(signal());
    const [outcome] = await transport.publish([event('own-client')], signal());
    assert.equal(outcome!.ok, true);
    await transport.close();
    assert.equal(client.status, 'ready');
    assert.equal(await client.xlen(`${prefix}own-client`), 1);
    await client.quit();
  });

  it('OOM (maxmemory reached) is retriable with a delay', async () => {
    // On a Redis of its own: maxmemory 1 on the shared one failed other test files' commands running meanwhile.
    const server = await privateRedis('redis-oom');
    const transport = new RedisTransport({ url: server.url, streamPrefix: prefix });
    const own = new Redis(server.url);
    try {
      await transport.start(signal());
      await own.config('SET', 'maxmemory', '1');
      const error = failure((await transport.publish([event('oom')], signal()))[0]);
      assert.equal(error.kind, 'retriable');
      assert.match(error.message, /OOM.*maxmemory/);
      assert.equal(error.retryAfterMs, 5000);
    } finally {
      own.disconnect();
      await transport.close();
      await server.close();
    }
  });

  it('fails fast as destination-down while Redis is unreachable, recovers by itself, and never shows the password', async () => {
    const proxy = new Proxy();
    await proxy.start();
    const warnings: string[] = [];
    const logger: Logger = { debug() {}, info: (o, m) => warnings.push(`${m} ${JSON.stringify(o)}`), warn: (o, m) => warnings.push(`${m} ${JSON.stringify(o)}`), error() {} };
    const user = `txbox-test-${randomBytes(4).toString('hex')}`;
    await admin.call('ACL', 'SETUSER', user, 'on', '>hunter2', '~*', '+@all');
    const transport = new RedisTransport({ url: `redis://${user}:hunter2@127.0.0.1:${proxy.port}`, streamPrefix: prefix, commandTimeoutMs: 1000, logger });
    try {
      await transport.start(signal());
      assert.equal((await transport.publish([event('outage')], signal()))[0]!.ok, true);
      await proxy.stop();
      const started = performance.now();
      const outcomes = await transport.publish([event('outage', 1), event('outage', 2)], signal());
      const elapsed = performance.now() - started;
      assert.ok(elapsed < 500, `failed fast, took ${elapsed.toFixed(0)} ms`);
      const seen: TransportError[] = outcomes.map(failure);
      // Commands cut off as the connection dropped are retriable; once the client is offline
      // (reconnecting, refused), Redis as a whole is out of reach: destination-down, which the
      // relay answers by pausing the destination instead of counting attempts or parking.
      for (let i = 0; i < 100 && !seen.some((e) => e.kind === 'destination-down'); i++) {
        await sleep(20);
        seen.push(failure((await transport.publish([event('outage', 1)], signal()))[0]));
      }
      assert.ok(seen.some((e) => e.kind === 'destination-down'), seen.map((e) => `${e.kind}: ${e.message}`).join('\n'));
      for (const error of seen) {
        assert.ok(error.kind === 'retriable' || error.kind === 'destination-down', error.message);
        assert.match(error.message, /outage.*127\.0\.0\.1/);
        assert.doesNotMatch(inspect(error, { depth: 5 }), /hunter2/);
      }
      await proxy.start();
      let ok = false;
      for (let i = 0; i < 100 && !ok; i++) {
        ok = (await transport.publish([event('outage', 3)], signal()))[0]!.ok;
        if (!ok) await sleep(50);
      }
      assert.ok(ok, 'publishes again once Redis is reachable');
      assert.ok(warnings.some((w) => w.startsWith('redis connection lost')));
      assert.ok(warnings.some((w) => w.startsWith('redis connection restored')));
      assert.ok(warnings.every((w) => !w.includes('hunter2')));
    } finally {
      await transport.close();
      await proxy.stop();
      await admin.call('ACL', 'DELUSER', user);
    }
  });

  it('a silent server times out after commandTimeoutMs as destination-down (and reconnects), and an aborted signal stops the wait', async () => {
    const proxy = new Proxy();
    await proxy.start();
    const transport = new RedisTransport({ url: `redis://127.0.0.1:${proxy.port}`, streamPrefix: prefix, commandTimeoutMs: 300 });
    await transport.start(signal());
    try {
      proxy.muted = true; // the connection stays up, commands are never answered
      const controller = new AbortController();
      setTimeout(() => controller.abort(), 20);
      const aborted = failure((await transport.publish([event('silent')], controller.signal))[0]);
      assert.equal(aborted.kind, 'retriable');
      const started = performance.now();
      const timedOut = failure((await transport.publish([event('silent')], signal()))[0]);
      // Nothing about the event: Redis (or the path to it) is not answering. The relay pauses the destination.
      assert.equal(timedOut.kind, 'destination-down');
      assert.match(timedOut.message, /not answering/);
      assert.ok(performance.now() - started < 1500);
    } finally {
      await transport.close();
      await proxy.stop();
    }
  });

  it('start() against a server that accepts connections and answers nothing is an outage: it resolves, and publishes wait as destination-down', async () => {
    const sockets = new Set<Socket>();
    const silent = createServer((s) => void sockets.add(s)); // accepts, never answers
    await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve));
    const port = (silent.address() as AddressInfo).port;
    const warnings: string[] = [];
    const logger = { debug() {}, info() {}, warn: (_o: object, m: string) => void warnings.push(m), error() {} } as unknown as Logger;
    const transport = new RedisTransport({ url: `redis://127.0.0.1:${port}`, streamPrefix: prefix, connectTimeoutMs: 500, commandTimeoutMs: 500, logger });
    try {
      await transport.start(signal()); // a ConfigError here would stop `txbox relay` with exit 2
      assert.ok(warnings.length > 0, 'the outage is logged');
      const error = failure((await transport.publish([event('silent-start')], signal()))[0]);
      assert.equal(error.kind, 'destination-down', error.message);
    } finally {
      await transport.close();
      for (const s of sockets) s.destroy();
      await new Promise<void>((resolve) => silent.close(() => resolve()));
    }
  });

  it('publish() before start() starts the transport; after close() it answers retriable until start() again', async () => {
    const transport = new RedisTransport({ url: REDIS_URL, streamPrefix: prefix });
    assert.equal((await transport.publish([event('lazy')], signal()))[0]!.ok, true);
    await transport.close();
    const error = failure((await transport.publish([event('lazy')], signal()))[0]);
    assert.match(error.message, /closed/);
    await transport.start(signal());
    assert.equal((await transport.publish([event('lazy')], signal()))[0]!.ok, true);
    await transport.close();
  });
});
