import { TypedEmitter, keyHash } from '../core/emitter.ts';
import type { OutboxEvent } from '../core/envelope.ts';
import { ConfigError, TxboxError } from '../core/errors.ts';
import type { EventDefinition } from '../core/events.ts';
import type { InboxOutcome, InboxStore } from '../core/inbox-ports.ts';
import type { Logger } from '../core/logger.ts';
import { silentLogger } from '../core/logger.ts';
import type { SqlExecutor } from '../core/ports.ts';
import { resolveRetryOptions, retryDelay, type ResolvedRetryOptions, type RetryOptions } from '../core/retry.ts';

/**
 * Thrown by a handler (or by `applyVersioned` with `onGap: 'hold'`) to keep
 * the event in the inbox until an earlier version of its key is processed.
 */
export class HoldEvent extends TxboxError {
  constructor(reason: string) {
    super('TXBOX_INVALID_EVENT', reason);
  }
}

export type InboxHandler<TPayload = unknown, TType extends string = string> = (
  event: OutboxEvent<TPayload, TType>,
  tx: SqlExecutor,
) => Promise<void> | void;

export interface InboxOptions {
  /** The inbox table, e.g. `new PostgresInboxStore({ connection })`. Required. */
  readonly store: InboxStore;
  /** This consumer's name: dedup is per consumer, so two services can share a table. Required. */
  readonly consumer: string;
  /** Backoff for failed handlers and attempts before an event is dead. Default: 0.5 s doubling to 5 min, 12 attempts. */
  readonly retry?: RetryOptions;
  /** How often operator retries (`txbox inbox dead retry`) are picked up, in ms. Default: 5000. */
  readonly redriveIntervalMs?: number;
  readonly logger?: Logger;
}

export interface InboxEvents {
  processed: { readonly id: string; readonly type: string; readonly durationMs: number };
  duplicate: { readonly id: string; readonly type: string };
  held: { readonly id: string; readonly type: string; readonly keyHash: string; readonly reason: string };
  failed: { readonly id: string; readonly type: string; readonly attempts: number; readonly dead: boolean; readonly error: string };
}

/** The inbox's typed event emitter. */
export class InboxEmitter extends TypedEmitter<InboxEvents> {
  /** @internal */
  fire<K extends keyof InboxEvents>(name: K, payload: InboxEvents[K]): void {
    this.emit(name, payload);
  }
}

/**
 * The consumer side: runs each event's handler at most once in effect. The
 * inbox row (unique per consumer and event id), the handler's writes and the
 * processed mark commit in one transaction; the caller acks the broker only
 * after `process` resolved.
 *
 * @example
 * const inbox = createInbox({ store: new PostgresInboxStore({ connection }), consumer: 'inventory' });
 * inbox.on(OrderCreated, async (event, tx) => {
 *   await tx.query('INSERT INTO reservations ...', [event.payload.orderId]);
 * });
 * const outcome = await inbox.process(event); // then ack (or nak with outcome.delayMs)
 */
export class Inbox {
  readonly consumer: string;
  /** Lifecycle events for metrics and logs: `inbox.events.on('failed', ...)`. */
  readonly events = new InboxEmitter();
  readonly #store: InboxStore;
  readonly #retry: ResolvedRetryOptions;
  readonly #handlers = new Map<string, { handler: InboxHandler<any>; definition?: EventDefinition<string, any, any> }>();
  readonly #logger: Logger;
  readonly #redriveMs: number;
  #timer: NodeJS.Timeout | undefined;
  #redriving = false;

  constructor(options: InboxOptions) {
    if (!options?.store || typeof options.store.runOnce !== 'function') {
      throw new ConfigError('store', 'is required: pass an inbox store such as new PostgresInboxStore({ connection })');
    }
    if (typeof options.consumer !== 'string' || !/^[\w.:-]{1,100}$/.test(options.consumer)) {
      throw new ConfigError('consumer', 'is required: 1-100 letters, digits and . _ : -, e.g. "inventory"');
    }
    this.#store = options.store;
    this.consumer = options.consumer;
    this.#retry = resolveRetryOptions(options.retry);
    this.#logger = options.logger ?? silentLogger;
    const every = options.redriveIntervalMs ?? 5000;
    if (!Number.isSafeInteger(every) || every < 10) throw new ConfigError('redriveIntervalMs', 'must be an integer >= 10');
    this.#redriveMs = every;
  }

  /** Registers the handler of one event type (typed by its definition, or by type name). One handler per type. */
  on<TType extends string, TIn, TOut>(definition: EventDefinition<TType, TIn, TOut>, handler: InboxHandler<TOut, TType>): this;
  on(type: string, handler: InboxHandler): this;
  on(what: string | EventDefinition<string, any, any>, handler: InboxHandler<any>): this {
    const type = typeof what === 'string' ? what : what.type;
    if (this.#handlers.has(type)) throw new ConfigError(`on(${type})`, 'a handler is already registered for this type');
    this.#handlers.set(type, typeof what === 'string' ? { handler } : { handler, definition: what });
    return this;
  }

  /** Types that have a handler. */
  get types(): string[] {
    return [...this.#handlers.keys()];
  }

  /**
   * Applies one received event once. Ack the broker when the outcome is
   * processed, duplicate, ignored, held or dead; redeliver after `delayMs`
   * when it is retry.
   */
  async process(event: OutboxEvent): Promise<InboxOutcome> {
    const outcome = await this.#processOne(event);
    if (outcome.status === 'processed') await this.#releaseHeld(event.key);
    return outcome;
  }

  async #processOne(event: OutboxEvent): Promise<InboxOutcome> {
    const entry = this.#handlers.get(event.type);
    if (!entry) return { status: 'ignored' };
    const started = performance.now();
    let typed = event;
    try {
      if (entry.definition?.schema) {
        let result = entry.definition.schema['~standard'].validate(event.payload);
        if (result instanceof Promise) result = await result;
        if (result.issues) throw new InvalidPayload(`payload failed ${event.type} schema validation: ${result.issues[0]?.message ?? 'invalid'}`);
        typed = { ...event, payload: result.value };
      }
      const ran = await this.#store.runOnce(this.consumer, event, (tx) => Promise.resolve(entry.handler(typed, tx)));
      if (!ran) {
        this.events.fire('duplicate', { id: event.id, type: event.type });
        return { status: 'duplicate' };
      }
      this.events.fire('processed', { id: event.id, type: event.type, durationMs: performance.now() - started });
      return { status: 'processed' };
    } catch (err) {
      if (err instanceof HoldEvent) {
        await this.#store.hold(this.consumer, event, err.message);
        this.events.fire('held', { id: event.id, type: event.type, keyHash: keyHash(event.key), reason: err.message });
        return { status: 'held' };
      }
      const message = (err instanceof Error ? err.message : String(err)).slice(0, 2000);
      const max = err instanceof InvalidPayload ? 1 : this.#retry.maxAttempts;
      const { attempts, dead } = await this.#store.recordFailure(this.consumer, event, message, max);
      this.events.fire('failed', { id: event.id, type: event.type, attempts, dead, error: message });
      this.#logger.warn({ consumer: this.consumer, id: event.id, type: event.type, attempts, dead, err: message }, 'txbox inbox: handler failed');
      return dead ? { status: 'dead', attempts, error: message } : { status: 'retry', attempts, error: message, delayMs: retryDelay(this.#retry, attempts) };
    }
  }

  /** After an event of `key` was processed, runs the held events of that key that may now apply. */
  async #releaseHeld(key: string): Promise<void> {
    for (let round = 0; round < 1000; round++) {
      const held = await this.#store.redrivable(this.consumer, 50, key);
      let progressed = false;
      for (const e of held) if ((await this.#processOne(e)).status === 'processed') progressed = true;
      if (!progressed) return;
    }
  }

  /** Runs the events operators asked to retry (`txbox inbox dead retry`) now. Returns how many ran. */
  async redrive(): Promise<number> {
    if (this.#redriving) return 0;
    this.#redriving = true;
    try {
      const events = await this.#store.redrivable(this.consumer, 100);
      for (const e of events) await this.process(e);
      return events.length;
    } finally {
      this.#redriving = false;
    }
  }

  /** Starts the redrive loop for operator retries. */
  start(): void {
    this.#timer ??= setInterval(() => {
      this.redrive().catch((err: Error) => this.#logger.error({ err: err.message }, 'txbox inbox: redrive failed'));
    }, this.#redriveMs);
  }

  stop(): void {
    clearInterval(this.#timer);
    this.#timer = undefined;
  }
}

class InvalidPayload extends Error {}

/** Creates an inbox. See `Inbox`. */
export function createInbox(options: InboxOptions): Inbox {
  return new Inbox(options);
}
