/**
 * The Redis Streams transport through the transport conformance suite,
 * against a redis-server of its own on a free port (no persistence, its files
 * in a temp directory), so that `restart` never touches the machine's Redis on
 * 127.0.0.1:6379, which other test files use at the same time.
 *
 * Reading back: entries are read with XRANGE into memory as they arrive.
 * Redis keeps nothing on disk here, so a restart empties every stream; before
 * the shutdown, writes are paused (CLIENT PAUSE WRITE) and the last entries
 * are read, so that the log holds exactly what the broker acknowledged. The
 * XADDs held by the pause fail when the server goes down and are retried by
 * the relay after the restart.
 */
import { randomBytes } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { Redis } from 'ioredis';
import { RedisTransport, parseStreamEntry } from 'txbox/redis';
import type { Delivered } from 'txbox/testing';
import { runTransportConformance } from 'txbox/testing/conformance';
import { DATABASE_URL } from '../helpers/databases.ts';
import { privateRedis } from '../helpers/private-redis.ts';

const server = await privateRedis('redis-conformance');
const PORT = server.port;
const REDIS_URL = server.url;
const prefix = `txbox-test:conf-${randomBytes(4).toString('hex')}:`;
const reader = new Redis({ host: '127.0.0.1', port: PORT, lazyConnect: true, enableOfflineQueue: false, maxRetriesPerRequest: 0, retryStrategy: () => 100 });
reader.on('error', () => {}); // it reconnects by itself after restart()
await reader.connect();

/** Per destination: entries read so far, and the stream id to read after (`-` = from the start). */
const logs = new Map<string, { after: string; delivered: Delivered[] }>();
let counter = 0;

async function catchUp(destination: string): Promise<void> {
  const log = logs.get(destination)!;
  for (;;) {
    const entries = await reader.xrange(prefix + destination, log.after === '-' ? '-' : `(${log.after}`, '+', 'COUNT', 5000);
    if (entries.length === 0) return;
    for (const [streamId, fields] of entries) {
      const parsed = parseStreamEntry(fields, destination);
      if (!parsed.ok) throw new Error(`entry ${streamId} of ${destination}: ${parsed.message}`);
      log.delivered.push({ id: parsed.event.id, key: parsed.event.key });
      log.after = streamId;
    }
  }
}



runTransportConformance({
  name: 'redis',
  databaseUrl: DATABASE_URL,
  events: 10_000,
  broker: {
    dedup: 'none',
    oversizeBytes: 2 * 1024 * 1024,
    async createDestination() {
      const destination = `d${++counter}`;
      logs.set(destination, { after: '-', delivered: [] });
      return destination;
    },
    createTransport() {
      return new RedisTransport({ url: REDIS_URL, streamPrefix: prefix, commandTimeoutMs: 5000 });
    },
    async readBack(destination, expected, timeoutMs) {
      const log = logs.get(destination)!;
      const deadline = Date.now() + timeoutMs;
      for (;;) {
        await catchUp(destination).catch(() => {}); // Redis may be restarting
        if (new Set(log.delivered.map((d) => d.id)).size >= expected || Date.now() > deadline) return [...log.delivered];
        await sleep(25);
      }
    },
    async restart() {
      await reader.call('CLIENT', 'PAUSE', '30000', 'WRITE');
      for (const destination of logs.keys()) await catchUp(destination);
      for (const log of logs.values()) log.after = '-'; // the restarted server starts with empty streams
      await server.stop();
      await sleep(1000); // the relay meets refused connections meanwhile
      await server.start();
    },
    async unroutableDestination() {
      const destination = `plain${++counter}`;
      await reader.set(prefix + destination, 'a string, not a stream');
      return destination;
    },
    misconfigured() {
      return [
        { transport: new RedisTransport({ url: 'redis://127.0.0.1:1', streamPrefix: prefix, connectTimeoutMs: 2000 }), setting: /url: .*127\.0\.0\.1:1\b/ },
        { transport: new RedisTransport({ url: `redis://:hunter2@127.0.0.1:${PORT}`, streamPrefix: prefix }), setting: /^url: a password is configured/ },
        { transport: new RedisTransport({ url: `redis://nobody-here:hunter2@127.0.0.1:${PORT}`, streamPrefix: prefix }), setting: /^url: .*"nobody-here" \(WRONGPASS\)/ },
        { transport: new RedisTransport({ url: REDIS_URL, username: 'nobody-here', password: 'hunter2', streamPrefix: prefix }), setting: /^username: .*WRONGPASS/ },
      ];
    },
    async close() {
      const keys = await reader.keys(`${prefix}*`);
      if (keys.length > 0) await reader.del(...keys);
      await reader.quit();
      await server.close();
    },
  },
});
