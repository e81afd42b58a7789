/**
 * The transport's AMQP connection: opened by `start()`, reopened by itself
 * with exponential backoff and jitter whenever it drops (broker restart,
 * network loss, heartbeat timeout), and watched for `connection.blocked`
 * (a memory or disk alarm on the broker).
 */
import { connect, type ChannelModel } from 'amqplib';
import { AbortedError } from '../../core/errors.ts';
import { connectError, scrub } from './rabbitmq-outcomes.ts';
import type { ResolvedRabbitMqTransportOptions } from './rabbitmq-transport-options.ts';

/** What the connection tells its owner. Called synchronously; must not throw. */
export interface ConnectionHooks {
  connected(model: ChannelModel, reconnected: boolean): void;
  disconnected(reason: string): void;
  reconnecting(attempt: number, delayMs: number, reason: string): void;
  blocked(reason: string): void;
  unblocked(): void;
}

type State = 'idle' | 'open' | 'reconnecting' | 'closed';

export class RabbitMqConnection {
  readonly #o: ResolvedRabbitMqTransportOptions;
  readonly #hooks: ConnectionHooks;
  #state: State = 'idle';
  #model: ChannelModel | null = null;
  #attempt = 0;
  #timer: NodeJS.Timeout | undefined;
  #lastError = '';
  #blocked: string | null = null;

  constructor(options: ResolvedRabbitMqTransportOptions, hooks: ConnectionHooks) {
    this.#o = options;
    this.#hooks = hooks;
  }

  /** The open connection, or null while (re)connecting or closed. */
  get model(): ChannelModel | null {
    return this.#model;
  }

  get state(): State {
    return this.#state;
  }

  /** The broker's reason while it blocks publishing (resource alarm), else null. */
  get blocked(): string | null {
    return this.#blocked;
  }

  /** Why the connection is not usable, for fail-fast messages: `reconnecting (attempt 3): ECONNREFUSED ...`. */
  describe(): string {
    if (this.#state === 'closed') return 'the transport is closed';
    if (this.#state === 'idle') return 'the transport was not started';
    return `reconnecting (attempt ${this.#attempt})${this.#lastError ? `; last error: ${this.#lastError}` : ''}`;
  }

  /** The last connection error, scrubbed of credentials; '' when none. */
  get lastError(): string {
    return this.#lastError;
  }

  /** Connects once. Throws ConfigError naming `url` (refused login, unknown vhost, unreachable host), or AbortedError. */
  async open(signal: AbortSignal): Promise<void> {
    signal.throwIfAborted();
    const model = await untilAborted(
      this.#connect().catch((err: unknown) => {
        throw connectError(err, this.#o.display, userOf(this.#o.url));
      }),
      signal,
    );
    if (this.#state === 'closed') {
      await model.close().catch(() => {});
      throw new AbortedError('the transport was closed while connecting');
    }
    this.#bind(model, false);
  }

  /** Stops reconnecting and closes the connection (and with it every channel). */
  async close(): Promise<void> {
    this.#state = 'closed';
    clearTimeout(this.#timer);
    const model = this.#model;
    this.#model = null;
    if (model) await model.close().catch(() => {});
  }

  async #connect(): Promise<ChannelModel> {
    const o = this.#o;
    const socket = {
      ...o.socket,
      timeout: o.connectTimeoutMs,
      clientProperties: { connection_name: o.connectionName, ...o.socket.clientProperties },
    };
    return connect(o.url, socket);
  }

  #bind(model: ChannelModel, reconnected: boolean): void {
    this.#model = model;
    this.#state = 'open';
    this.#attempt = 0;
    this.#blocked = null;
    model.on('error', (err: Error) => {
      this.#lastError = scrub(err.message);
    });
    model.on('blocked', (reason: string) => {
      this.#blocked = reason || 'resource alarm';
      this.#hooks.blocked(this.#blocked);
    });
    model.on('unblocked', () => {
      this.#blocked = null;
      this.#hooks.unblocked();
    });
    model.on('close', (err?: Error) => {
      if (this.#model !== model) return;
      this.#model = null;
      this.#blocked = null;
      if (err) this.#lastError = scrub(err.message);
      if (this.#state === 'closed') return;
      this.#state = 'reconnecting';
      this.#hooks.disconnected(this.#lastError || 'connection closed');
      this.#schedule();
    });
    this.#hooks.connected(model, reconnected);
  }

  #schedule(): void {
    if (this.#state !== 'reconnecting') return;
    this.#attempt++;
    const { reconnectInitialDelayMs: initial, reconnectMaxDelayMs: max } = this.#o;
    const ceiling = Math.min(max, initial * 2 ** Math.min(this.#attempt - 1, 30));
    // Jitter over the upper half keeps many relays from reconnecting in step after a broker restart.
    const delay = Math.round(ceiling / 2 + (Math.random() * ceiling) / 2);
    this.#hooks.reconnecting(this.#attempt, delay, this.#lastError);
    this.#timer = setTimeout(() => void this.#reconnect(), delay);
    this.#timer.unref();
  }

  async #reconnect(): Promise<void> {
    if (this.#state !== 'reconnecting') return;
    let model: ChannelModel;
    try {
      model = await this.#connect();
    } catch (err) {
      this.#lastError = scrub(err instanceof Error ? `${(err as { code?: string }).code ?? err.name}: ${err.message}` : String(err));
      this.#schedule();
      return;
    }
    if (this.#state !== 'reconnecting') {
      await model.close().catch(() => {});
      return;
    }
    this.#bind(model, true);
  }
}

/** The user name in an AMQP URL (RabbitMQ's default `guest` when absent). */
function userOf(url: string): string {
  const name = new URL(url).username;
  if (name === '') return 'guest';
  try {
    return decodeURIComponent(name);
  } catch {
    return name;
  }
}

/** Settles with `promise`, or rejects with AbortedError when `signal` aborts first; a connection that arrives late is closed. */
function untilAborted(promise: Promise<ChannelModel>, signal: AbortSignal): Promise<ChannelModel> {
  return new Promise<ChannelModel>((resolve, reject) => {
    const onAbort = (): void => {
      reject(new AbortedError('start() was aborted while connecting to RabbitMQ'));
      promise.then((m) => m.close().catch(() => {}), () => {});
    };
    signal.addEventListener('abort', onAbort, { once: true });
    promise.then(
      (m) => {
        signal.removeEventListener('abort', onAbort);
        if (signal.aborted) return;
        resolve(m);
      },
      (e: unknown) => {
        signal.removeEventListener('abort', onAbort);
        reject(e);
      },
    );
  });
}
