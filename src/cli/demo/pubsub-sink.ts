import { importOptional } from '../optional-import.ts';
import { randomBytes } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Message, PubSub, Subscription } from '@google-cloud/pubsub';
import type { Transport } from '../../core/ports.ts';
import { resolvePubSubConnection, type ResolvedPubSubConnection } from '../../transports/pubsub/pubsub-transport-options.ts';
import { ConfigError } from '../../core/errors.ts';
import { KeyedDispatcher } from '../../inbox/keyed-dispatcher.ts';
import { CliError } from '../cli-error.ts';
import type { Arrival, DemoSink, Deliver, RelayTransportConfig } from './demo-sink.ts';

/** The demo's destinations share one topic: one key's events (an order's creation and its payments) keep their order only within one ordering key of one topic. */
const DESTINATIONS = ['orders', 'payments'] as const;
/** Any project id does on the emulator. */
const PROJECT = 'txbox-demo';

export interface PubSubDemoSinkOptions {
  /** `host:port` of Google's Pub/Sub emulator. Default: `'127.0.0.1:8085'` (scripts/pubsub/up.sh). */
  readonly emulatorHost?: string;
  /** Where `emulatorHost` came from, named in errors: `'--transport-url'`, `'PUBSUB_EMULATOR_HOST'`. Default: `'--transport-url'`. */
  readonly addressSource?: string;
  /** The topic's and the observer subscription's name. Default: `txbox-demo-<random>`. */
  readonly name?: string;
}

/**
 * The emulator's address for the demo and torture: `--transport-url`, else
 * PUBSUB_EMULATOR_HOST (as Google's own client reads it), else
 * 127.0.0.1:8085; with the setting it came from, which errors name.
 */
export function pubsubEmulatorAddress(url: string | undefined, env: Readonly<Record<string, string | undefined>>): PubSubDemoSinkOptions {
  if (url !== undefined) return { emulatorHost: url, addressSource: '--transport-url' };
  const fromEnv = env.PUBSUB_EMULATOR_HOST;
  if (fromEnv) return { emulatorHost: fromEnv, addressSource: 'PUBSUB_EMULATOR_HOST' };
  return { addressSource: '--transport-url' };
}

type PubSubModule = typeof import('../../transports/pubsub/index.ts');
type OutcomesModule = typeof import('../../transports/pubsub/pubsub-outcomes.ts');

/**
 * The demo's downstream side on Google's Pub/Sub emulator: a fresh topic for
 * both destinations and a subscription with message ordering, both named
 * after the run and created by `start()` (before any relay publishes), read
 * back in the background (StreamingPull) into `arrivals`. One key's
 * messages are handed to `deliver` one after another in arrival order (the
 * ordering key's order), many keys at once; a message is acked after
 * `deliver` resolved, and when it rejects it is handed to it again after a
 * pause, holding back the key. The subscription and the topic are deleted on
 * close. The demo needs the emulator: it creates and deletes what it uses,
 * which a real project's least-privilege credentials should not allow.
 * @google-cloud/pubsub is loaded by `start()`, so the CLI runs without it
 * unless this sink is chosen.
 */
export class PubSubDemoSink implements DemoSink {
  readonly arrivals: Arrival[] = [];
  /** Messages that are not txbox events: counted (and acked) rather than hidden. */
  undecodable = 0;
  readonly #host: string;
  readonly #source: string;
  readonly #topic: string;
  readonly #subscription: string;
  readonly #dispatcher = new KeyedDispatcher(32);
  #module: PubSubModule | undefined;
  #client: PubSub | undefined;
  #reader: Subscription | undefined;
  #created = { topic: false, subscription: false };
  #stopped = false;
  readonly #connection: ResolvedPubSubConnection;

  constructor(options: PubSubDemoSinkOptions = {}) {
    this.#host = options.emulatorHost ?? '127.0.0.1:8085';
    this.#source = options.addressSource ?? '--transport-url';
    this.#topic = options.name ?? `txbox-demo-${randomBytes(4).toString('hex')}`;
    this.#subscription = this.#topic;
    // Checked here, before the demo opens its database: a malformed address fails at once.
    try {
      this.#connection = resolvePubSubConnection({ projectId: PROJECT, emulatorHost: this.#host, connectTimeoutMs: 10_000 });
    } catch (err) {
      if (err instanceof ConfigError && err.field === 'emulatorHost') {
        throw new CliError(`${this.#source}: ${JSON.stringify(this.#host)} is not host:port of the Pub/Sub emulator; use e.g. 127.0.0.1:8085`);
      }
      throw err;
    }
  }

  get name(): string {
    return `Google Pub/Sub (topic ${this.#topic} on the emulator at ${this.#host})`;
  }

  /** The run's topic (torture's consumers subscribe to it with a subscription of their own). */
  get topic(): string {
    return this.#topic;
  }

  async start(deliver: Deliver): Promise<void> {
    const [mod, outcomes] = await importOptional('the pubsub demo', () => Promise.all([import('../../transports/pubsub/index.ts'), import('../../transports/pubsub/pubsub-outcomes.ts')]));
    this.#module = mod;
    const connection = this.#connection;
    const { client } = outcomes.clientOf(connection);
    this.#client = client;
    // The first call also checks the address: an emulator that does not answer is named with where its address came from.
    const [topic] = await this.#admin(outcomes, connection, `creating topic ${this.#topic}`, client.createTopic(this.#topic));
    this.#created.topic = true;
    await this.#admin(outcomes, connection, `creating subscription ${this.#subscription}`, topic.createSubscription(this.#subscription, { enableMessageOrdering: true, ackDeadlineSeconds: 10 }));
    this.#created.subscription = true;
    const reader = client.subscription(this.#subscription, { flowControl: { maxMessages: 1000, allowExcessMessages: false } });
    this.#reader = reader;
    // The client reopens its stream by itself after transient errors; what it had not acked comes again.
    reader.on('error', () => {});
    reader.on('message', (m: Message) => {
      if (this.#stopped) return void m.nack();
      const parsed = mod.parsePubSubMessage(m, '');
      if (!parsed.ok) {
        this.undecodable++;
        return void m.ack();
      }
      const event = parsed.event;
      this.arrivals.push({ id: event.id, key: event.key, at: performance.now() });
      const settle = (ack: boolean): void => {
        try {
          if (ack) m.ack();
          else m.nack();
        } catch {
          // The subscription closed meanwhile: Pub/Sub delivers what it did not see acked again.
        }
      };
      void this.#dispatcher.push(event.key, async () => {
        for (let attempt = 0; !this.#stopped; attempt++) {
          try {
            await deliver(event);
            return settle(true);
          } catch {
            await sleep(Math.min(2000, 100 * 2 ** attempt));
          }
        }
        settle(false); // stopping: not delivered
      });
    });
  }

  transport(): Transport {
    if (!this.#module) throw new Error('PubSubDemoSink: call start() first');
    return new this.#module.PubSubTransport({ projectId: PROJECT, emulatorHost: this.#host, topics: this.#topics() });
  }

  relayTransport(): RelayTransportConfig {
    return { type: 'pubsub', projectId: PROJECT, emulatorHost: this.#host, topics: this.#topics() };
  }

  /** The project and emulator of this sink, for torture's consumer processes. */
  get connection(): { readonly projectId: string; readonly emulatorHost: string } {
    return { projectId: PROJECT, emulatorHost: this.#host };
  }

  async close(): Promise<void> {
    this.#stopped = true;
    await this.#reader?.close().catch(() => {});
    this.#reader?.removeAllListeners();
    await this.#dispatcher.onIdle();
    const client = this.#client;
    if (client) {
      // The subscription first: deleting a topic leaves its subscriptions behind, detached.
      if (this.#created.subscription) await client.subscription(this.#subscription).delete().catch(() => {});
      if (this.#created.topic) await client.topic(this.#topic).delete().catch(() => {});
      await client.close().catch(() => {});
    }
  }

  #topics(): Record<string, string> {
    return Object.fromEntries(DESTINATIONS.map((d) => [d, this.#topic]));
  }

  /** An administrative call within the connect timeout; an unreachable emulator becomes an error naming where its address came from. */
  async #admin<T>(outcomes: OutcomesModule, connection: ResolvedPubSubConnection, what: string, call: Promise<T>): Promise<T> {
    try {
      return await outcomes.withinConnectTimeout(connection, what, call);
    } catch (err) {
      if (err instanceof ConfigError && err.field === 'emulatorHost') {
        throw new CliError(
          `${this.#source}: cannot reach the Pub/Sub emulator at ${this.#host} (${what}: ${err.cause === undefined ? `no answer within ${connection.connectTimeoutMs / 1000} s` : outcomes.errorText(err.cause)}); start it (scripts/pubsub/up.sh) or point ${this.#source} at it`,
        );
      }
      throw err;
    }
  }
}
