import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { Redis } from 'ioredis';
import type { Transport } from '../../core/ports.ts';
import { RedisTransport, parseStreamEntry, resolveRedisTransportOptions } from '../../transports/redis/index.ts';
import type { Arrival, DemoSink, Deliver, RelayTransportConfig } from './demo-sink.ts';

const DESTINATIONS = ['orders', 'payments'] as const;

/**
 * The demo's downstream side on a real Redis: the relay XADDs to two fresh
 * streams, and a reader in this process follows them with XREAD into
 * `arrivals`, so the demo can prove every committed event arrived, in key
 * order. The streams are deleted on close.
 */
export class RedisDemoSink implements DemoSink {
  readonly name: string;
  readonly arrivals: Arrival[] = [];
  readonly #url: string;
  readonly #display: string;
  readonly #prefix = `txbox-demo:${randomUUID().slice(0, 8)}:`;
  #reader: Redis | null = null;
  #reading: Promise<void> | null = null;
  #stopped = false;

  /** `url`: where Redis is, e.g. `redis://127.0.0.1:6379`. */
  constructor(url: string) {
    this.#url = url;
    // Throws ConfigError naming url when it is malformed; the name shows the address without credentials.
    this.#display = resolveRedisTransportOptions({ url }).connection.display;
    this.name = `Redis Streams (${this.#display})`;
  }

  #deliver: Deliver = async () => {};

  async start(deliver: Deliver): Promise<void> {
    this.#deliver = deliver;
    const reader = new Redis(this.#url, { lazyConnect: true, maxRetriesPerRequest: null });
    let lastError = '';
    reader.on('error', (err: Error) => {
      lastError = err.message; // it reconnects by itself; the loop below waits
    });
    try {
      await reader.connect();
    } catch (err) {
      reader.disconnect();
      throw new Error(`the demo cannot read from Redis at ${this.#display}: ${lastError || (err as Error).message}`);
    }
    this.#reader = reader;
    this.#reading = this.#follow(reader);
  }

  transport(): Transport {
    return new RedisTransport({ url: this.#url, streamPrefix: this.#prefix, commandTimeoutMs: 5000 });
  }

  relayTransport(): RelayTransportConfig {
    return { type: 'redis', url: this.#url, streamPrefix: this.#prefix, commandTimeoutMs: 5000 };
  }

  async close(): Promise<void> {
    this.#stopped = true;
    const reader = this.#reader;
    this.#reader = null;
    if (!reader) return;
    // The loop ends within one BLOCK period; if Redis is down, its read waits in ioredis's queue until disconnect().
    await Promise.race([this.#reading, sleep(1000, undefined, { ref: false })]);
    if (reader.status === 'ready') await reader.del(...DESTINATIONS.map((d) => this.#prefix + d)).catch(() => {});
    reader.disconnect();
    await this.#reading;
  }

  /** XREAD BLOCK in a loop from the start of both streams; a short block so that close() is prompt. */
  async #follow(reader: Redis): Promise<void> {
    const keys = DESTINATIONS.map((d) => this.#prefix + d);
    const after = keys.map(() => '0');
    while (!this.#stopped) {
      try {
        const batch = await reader.xread('COUNT', 1000, 'BLOCK', 200, 'STREAMS', ...keys, ...after);
        for (const [key, entries] of batch ?? []) {
          const i = keys.indexOf(key);
          for (const [streamId, fields] of entries) {
            const parsed = parseStreamEntry(fields, DESTINATIONS[i]);
            // An unreadable entry shows up in the report as a phantom delivery rather than vanishing.
            const arrival = parsed.ok ? { id: parsed.event.id, key: parsed.event.key } : { id: `unreadable entry ${streamId}: ${parsed.message}`, key: '' };
            this.arrivals.push({ ...arrival, at: performance.now() });
            // Hand it to the inventory service; on failure retry in place, so the key keeps its order.
            while (parsed.ok && !this.#stopped) {
              try {
                await this.#deliver(parsed.event);
                break;
              } catch {
                await sleep(100);
              }
            }
            after[i] = streamId;
          }
        }
      } catch {
        if (!this.#stopped) await sleep(100);
      }
    }
  }
}

