import { brokerOutage, startDespiteOutage } from '../../core/broker-outage.ts';
import type { Redis } from 'ioredis';
import type { OutboxEvent } from '../../core/envelope.ts';
import { TransportError } from '../../core/errors.ts';
import type { PublishOutcome, Transport } from '../../core/ports.ts';
import { connectAndVerify, createClient } from './redis-connection.ts';
import type { StartContext } from './redis-outcomes.ts';
import { publishCall, type PublishContext } from './redis-publish-call.ts';
import { resolveRedisTransportOptions, streamKeyOf, type RedisTransportOptions, type ResolvedRedisTransportOptions } from './redis-transport-options.ts';
import { thrownText } from '../../core/error-text.ts';

export {
  resolveRedisTransportOptions,
  type RedisTransportOptions,
  type ResolvedRedisConnection,
  type ResolvedRedisTransportOptions,
} from './redis-transport-options.ts';

/**
 * Publishes each event as one entry of a Redis stream (`XADD <stream> * ...`),
 * one stream per destination (`txbox:<destination>` unless mapped in
 * `streams`). The XADD reply is the ack. All events of a call go out in one
 * pipeline. Redis has no dedup of XADD: a re-published event is stored again,
 * so consumers dedup by the `id` field. Connection failures, timeouts,
 * LOADING, BUSY, OOM, READONLY and cluster errors are retriable; a key that
 * is not a stream (WRONGTYPE) and an entry over `maxMessageBytes` are permanent.
 *
 * @example
 * const transport = new RedisTransport({ url: 'redis://:secret@127.0.0.1:6379', maxLen: 1_000_000 });
 * const relay = createRelay({ store, transport }); // relay.start() calls transport.start()
 */
export class RedisTransport implements Transport {
  readonly name = 'redis';
  readonly #options: ResolvedRedisTransportOptions;
  readonly #inFlight = new Set<Promise<unknown>>();
  readonly #streamKeys = new Map<string, string>();
  readonly #startContext: StartContext & { readonly password: string | undefined };
  #client: Redis | null = null;
  #started = false;
  #starting: Promise<void> | null = null;
  #closing: Promise<void> | null = null;
  /** True after a connection loss was logged, until the client is ready again: one warning per outage. */
  #outage = false;

  /** Throws ConfigError naming the field when an option is invalid. Connects nothing until start(). */
  constructor(options: RedisTransportOptions) {
    this.#options = resolveRedisTransportOptions(options);
    const c = this.#options.connection;
    this.#startContext =
      c.kind === 'url'
        ? { address: c.display, addressField: 'url', userField: c.userField, passwordField: c.passwordField, username: c.username, password: c.password }
        : { address: c.display, addressField: 'client', userField: 'client', passwordField: 'client', username: undefined, password: undefined };
  }

  /**
   * Connects and checks the server with PING (and, for a password given to
   * the default user, that the server wants one). Throws ConfigError naming
   * `url`, `username`, `password`, `tls` or `client` when the address or
   * credentials are wrong; never with the password in the message. When
   * nothing answers (refused, unknown host, timeout) it logs a warning and
   * resolves: the events wait as destination-down and the next publish
   * connects. Reopens after `close()`.
   */
  async start(signal?: AbortSignal): Promise<void> {
    signal?.throwIfAborted();
    if (this.#closing) {
      await this.#closing;
      this.#closing = null;
    }
    const o = this.#options;
    // Unreachable: the first publish connects (the relay's probe); wrong credentials or TLS still throw.
    await startDespiteOutage({ transport: 'redis', address: this.#startContext.address, logger: o.logger }, () => this.#connectOnce(signal ?? new AbortController().signal), signal);
  }

  /** Connects and verifies unless started (concurrent calls share one attempt); rejects with the ConfigError of a failed attempt. */
  #connectOnce(signal: AbortSignal): Promise<void> {
    if (this.#started) return Promise.resolve();
    this.#starting ??= this.#start(signal).finally(() => {
      this.#starting = null;
    });
    return this.#starting;
  }

  /**
   * Sends every event in one pipeline and resolves with one outcome per event
   * in input order, each after its XADD reply. Never rejects for a failed
   * event. Aborting `signal` stops the wait (outcomes retriable; the entries
   * may still be added, which at-least-once allows). Starts the transport
   * first if start() was not called.
   */
  publish(events: readonly OutboxEvent[], signal: AbortSignal): Promise<PublishOutcome[]> {
    if (this.#closing) {
      const error = new TransportError('retriable', 'the Redis transport is closed; call start() to reopen it');
      return Promise.resolve(events.map(() => ({ ok: false, error })));
    }
    const done = this.#publish(events, signal);
    this.#inFlight.add(done);
    void done.finally(() => this.#inFlight.delete(done));
    return done;
  }

  /** Waits for in-flight publishes (each bounded by commandTimeoutMs), then closes the transport's own connection; a `client` passed in is left open. */
  close(): Promise<void> {
    this.#closing ??= this.#close();
    return this.#closing;
  }

  async #publish(events: readonly OutboxEvent[], signal: AbortSignal): Promise<PublishOutcome[]> {
    if (!this.#started) {
      try {
        await this.#connectOnce(signal);
      } catch (err) {
        // Nothing answers (started during an outage): destination-down, so the events wait instead of using up attempts.
        const kind = brokerOutage(err) === null ? 'retriable' : 'destination-down';
        const error = new TransportError(kind, `the Redis transport could not start: ${thrownText(err)}`);
        return events.map(() => ({ ok: false, error }));
      }
    }
    const ctx: PublishContext = {
      client: this.#client!,
      options: this.#options,
      address: this.#startContext.address,
      streamKey: (destination) => this.#streamKey(destination),
      // A connection that stopped answering (a host gone, a firewall that dropped its state) would stay
      // "ready" until TCP gives up, about 15 minutes: the transport's own client reconnects now.
      onTimeout: this.#options.connection.kind === 'url' ? () => this.#reconnect() : undefined,
    };
    return publishCall(ctx, events, signal);
  }

  #reconnect(): void {
    const client = this.#client;
    if (client === null || client.status !== 'ready') return; // already reconnecting
    this.#options.logger.warn({ transport: 'redis', address: this.#startContext.address, timeoutMs: this.#options.commandTimeoutMs }, 'redis did not answer within commandTimeoutMs; reconnecting');
    client.disconnect(true);
  }

  async #start(signal: AbortSignal): Promise<void> {
    const c = this.#options.connection;
    const owned = c.kind === 'url';
    const client = c.kind === 'url' ? createClient(c, this.#options) : c.client;
    if (owned) this.#watch(client);
    await connectAndVerify(client, owned, this.#startContext, this.#options.connectTimeoutMs, signal);
    this.#client = client;
    this.#started = true;
  }

  /** The transport's own client reports losses and recoveries to the logger (and needs an error listener, or ioredis prints to stderr). */
  #watch(client: Redis): void {
    const { logger } = this.#options;
    const address = this.#startContext.address;
    let lastCode: string | undefined;
    client.on('error', (err: Error & { code?: string }) => {
      lastCode = err.code ?? err.name;
    });
    client.on('close', () => {
      if (this.#client !== client || this.#outage) return;
      this.#outage = true;
      logger.warn({ transport: 'redis', address, code: lastCode ?? 'closed' }, 'redis connection lost; reconnecting, publishes fail as destination-down meanwhile');
    });
    client.on('ready', () => {
      lastCode = undefined;
      if (this.#client !== client || !this.#outage) return;
      this.#outage = false;
      logger.info({ transport: 'redis', address }, 'redis connection restored');
    });
  }

  async #close(): Promise<void> {
    await this.#starting?.catch(() => {});
    await Promise.allSettled([...this.#inFlight]);
    const client = this.#client;
    this.#client = null;
    this.#started = false;
    this.#outage = false;
    if (client === null || this.#options.connection.kind === 'client') return;
    // QUIT lets replies in flight arrive; it fails at once while disconnected, and disconnect() also stops reconnecting.
    await client.quit().catch(() => {});
    client.disconnect();
  }

  #streamKey(destination: string): string {
    let key = this.#streamKeys.get(destination);
    if (key === undefined) {
      key = streamKeyOf(this.#options, destination);
      this.#streamKeys.set(destination, key);
    }
    return key;
  }
}
