import { TypedEmitter, keyHash } from '../core/emitter.ts';
import { withoutPayloadText, type OutboxEvent } from '../core/envelope.ts';
import { ConfigError, HandlerTimeoutError, InvalidEventError, TxboxError } from '../core/errors.ts';
import type { EventDefinition } from '../core/events.ts';
import { canonicalEventId, inboundEventProblem, storableText } from '../core/inbound-event.ts';
import { InboxBatchError, type InboxOutcome, type InboxStore, type RunBatchOptions } from '../core/inbox-ports.ts';
import type { Logger } from '../core/logger.ts';
import { silentLogger } from '../core/logger.ts';
import type { SqlExecutor } from '../core/ports.ts';
import { resolveRetryOptions, retryDelay, type ResolvedRetryOptions, type RetryOptions } from '../core/retry.ts';
import { classifyStoreError, mysqlErrno, storeErrorText } from '../core/store-errors.ts';
import { runTraced, settleInboxTrace, startInboxTrace, type ConsumerTrace } from './inbox-tracing.ts';
import { isMetrics, type Metrics } from '../core/metrics.ts';
import { defaultMetrics } from '../metrics/otel/otel-metrics.ts';
import { recordInboxMetrics } from './inbox-metrics.ts';
import { thrownText } from '../core/error-text.ts';

/** Tries of an event whose inbox row PostgreSQL refuses (a deterministic store error) before it is dead. */
export const STORE_REFUSAL_ATTEMPTS = 3;
/** Held rows whose keys one re-check looks at, at most (`recheckHeld`). */
export const HELD_RECHECK_ROWS = 100;
/** Held rows of a key read at a time when they are released (a page of rows that cannot run yet is read again 10x larger, up to 100x). */
const HELD_RELEASE_PAGE = 50;
/** Keys run at once when a batch is redone one event at a time (each key's events still one after another). */
const ALONE_KEYS = 4;
/** Events whose refusals are counted in memory at most (the oldest is forgotten first). */
const REFUSALS_TRACKED = 10_000;

/**
 * Thrown by a handler (or by `applyVersioned` with `onGap: 'hold'`) to keep
 * the event in the inbox until an earlier version of its key is processed.
 */
export class HoldEvent extends TxboxError {
  constructor(reason: string) {
    super('TXBOX_INVALID_EVENT', reason);
  }
}

/** A store's `holdReason`: a HoldEvent's reason (kept in `reasons`, in handler order), null for any other error. */
function holdReasonsInto(reasons: string[]): (err: unknown) => string | null {
  return (err) => {
    if (!(err instanceof HoldEvent)) return null;
    const reason = storableText(err.message);
    reasons.push(reason);
    return reason;
  };
}

export type InboxHandler<TPayload = unknown, TType extends string = string, Tx = SqlExecutor> = (
  event: OutboxEvent<TPayload, TType>,
  tx: Tx,
) => Promise<void> | void;

export interface InboxOptions<Tx = SqlExecutor> {
  /** The inbox table, e.g. `new PostgresInboxStore({ connection })`. Required. Its transaction type is the handlers' `tx`. */
  readonly store: InboxStore<Tx>;
  /** This consumer's name: dedup is per consumer, so two services can share a table. Required. */
  readonly consumer: string;
  /** Backoff for failed handlers and attempts before an event is dead. Default: 0.5 s doubling to 5 min, 12 attempts. */
  readonly retry?: RetryOptions;
  /** How often operator retries (`txbox inbox dead retry`) are picked up, in ms. Default: 5000. */
  readonly redriveIntervalMs?: number;
  /**
   * How long a held event waits before it is looked at again, in ms, and how
   * often `start()` looks (`recheckHeld`): a held event whose missing version
   * was applied without releasing it then applies. Default: 30000.
   */
  readonly heldRecheckIntervalMs?: number;
  /**
   * Start the redrive loop and the held re-check (`start()`) on the first
   * `process` call, so that a consumer process runs them without having to
   * remember to. Their timers do not keep the process alive; `stop()` ends
   * them. `false`: only an explicit `start()` runs them. Default: `true`.
   */
  readonly autoStart?: boolean;
  readonly logger?: Logger;
  /**
   * Where the inbox's metrics go (src/core/metric-catalogue.ts), labelled with
   * `consumer`: `prometheusMetrics({ registry })` from `txbox/prometheus`,
   * `otelMetrics({ meter })`, or `false` for none. Default: OpenTelemetry
   * through the global MeterProvider when `@opentelemetry/api` is installed
   * (taken at the first event; a no-op without an SDK), else none.
   */
  readonly metrics?: Metrics | false;
  /**
   * Group commit: `process` calls made at the same time (consumers handle many
   * keys at once) share one transaction of up to `maxSize` events, with up to
   * `concurrency` such transactions at once. An event held for a version gap
   * (HoldEvent) is kept in the batch's transaction (the batch runs again with
   * each handler in a savepoint). If a handler fails, that batch is redone one
   * event at a time (a few keys at once, each key's events in order), so one
   * failure never affects another event. `maxSize: 1` turns it off. Default: `{ maxSize: 64, concurrency: 2 }`.
   */
  readonly batch?: { readonly maxSize?: number; readonly concurrency?: number };
  /**
   * How long a handler may run, in ms. One that has not finished by then
   * fails its attempt with `HandlerTimeoutError` (`retry`, then `dead` at
   * `maxAttempts`); its transaction is rolled back and its connection
   * discarded, so the handler, if it ever goes on, cannot write through it.
   * The other events of its group-commit batch run again without it. A
   * handler that never returns would otherwise keep its transaction open and
   * every event in that batch waiting. `0` turns it off. Default: 60000.
   */
  readonly handlerTimeoutMs?: number;
}

interface Pending {
  readonly event: OutboxEvent;
  /** The event's span, in which its handler runs (undefined when nothing is traced). */
  readonly trace: ConsumerTrace | undefined;
  resolve(outcome: InboxOutcome): void;
  reject(err: unknown): void;
}

export interface InboxEvents {
  processed: { readonly id: string; readonly type: string; readonly durationMs: number; readonly occurredAt: Date };
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
export class Inbox<Tx = SqlExecutor> {
  readonly consumer: string;
  /** Lifecycle events for metrics and logs: `inbox.events.on('failed', ...)`. */
  readonly events = new InboxEmitter();
  readonly #store: InboxStore<Tx>;
  readonly #retry: ResolvedRetryOptions;
  readonly #handlers = new Map<string, { handler: InboxHandler<any, string, Tx>; definition?: EventDefinition<string, any, any> }>();
  readonly #logger: Logger;
  readonly #redriveMs: number;
  #timer: NodeJS.Timeout | undefined;
  #redriving = false;
  readonly #heldRecheckMs: number;
  #recheckTimer: NodeJS.Timeout | undefined;
  #rechecking = false;
  /** Auto-start pending: true until the first process() starts the loops or stop() is called. */
  #autoStart: boolean;
  readonly #batchMax: number;
  readonly #batchConcurrency: number;
  readonly #handlerTimeoutMs: number;
  /** Waiting for a batch: each entry one process() call, or one key's events from processInOrder (never split). */
  readonly #queue: Pending[][] = [];
  #queued = 0;
  #scheduled = false;
  #flushing = 0;
  /** process() calls in progress by event id (a second delivery of one waits for it). */
  readonly #running = new Map<string, Promise<InboxOutcome>>();
  /** Deterministic store refusals per event id (see #refused). */
  readonly #refusals = new Map<string, number>();

  constructor(options: InboxOptions<Tx>) {
    if (!options?.store || typeof options.store.runBatch !== 'function') {
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
    const recheck = options.heldRecheckIntervalMs ?? 30_000;
    if (!Number.isSafeInteger(recheck) || recheck < 10) throw new ConfigError('heldRecheckIntervalMs', 'must be an integer >= 10 (milliseconds), e.g. 30000');
    this.#heldRecheckMs = recheck;
    if (options.autoStart !== undefined && typeof options.autoStart !== 'boolean') throw new ConfigError('autoStart', 'must be true or false');
    this.#autoStart = options.autoStart ?? true;
    const batch = options.batch ?? {};
    this.#batchMax = batch.maxSize ?? 64;
    this.#batchConcurrency = batch.concurrency ?? 2;
    if (!Number.isSafeInteger(this.#batchMax) || this.#batchMax < 1) throw new ConfigError('batch.maxSize', 'must be a positive integer');
    if (!Number.isSafeInteger(this.#batchConcurrency) || this.#batchConcurrency < 1) throw new ConfigError('batch.concurrency', 'must be a positive integer');
    const timeout = options.handlerTimeoutMs ?? 60_000;
    if (!Number.isSafeInteger(timeout) || timeout < 0) throw new ConfigError('handlerTimeoutMs', 'must be an integer >= 0 (milliseconds; 0 turns the timeout off), e.g. 60000');
    this.#handlerTimeoutMs = timeout;
    const metrics = options.metrics;
    if (metrics !== undefined && metrics !== false && !isMetrics(metrics)) {
      throw new ConfigError('metrics', 'must be metrics such as prometheusMetrics({ registry }) from txbox/prometheus or otelMetrics(), or false to turn metrics off');
    }
    if (metrics !== false) recordInboxMetrics(this.events, this.consumer, () => metrics || defaultMetrics());
  }

  /** Registers the handler of one event type (typed by its definition, or by type name). One handler per type. */
  on<TType extends string, TIn, TOut>(definition: EventDefinition<TType, TIn, TOut>, handler: InboxHandler<TOut, TType, Tx>): this;
  on(type: string, handler: InboxHandler<unknown, string, Tx>): this;
  on(what: string | EventDefinition<string, any, any>, handler: InboxHandler<any, string, Tx>): this {
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
   * when it is retry. Calls made at the same time (different keys) are
   * grouped into one transaction (`batch`); do not call it concurrently for
   * events of the same key: wait for the earlier one, as consumers do.
   */
  process(received: OutboxEvent): Promise<InboxOutcome> {
    if (this.#autoStart) this.start();
    const admitted = this.#admit(received);
    if ('outcome' in admitted) return Promise.resolve(admitted.outcome);
    const event = admitted.event;
    // A second delivery of an event still running here (a sender's retry after its timeout, a
    // broker's redelivery) waits for the first instead of taking a batch's place to wait on its row.
    const running = this.#running.get(event.id);
    if (running) return running.then(asLaterDelivery);
    const trace = startInboxTrace(event, this.consumer);
    const outcome = settleInboxTrace(trace, this.#batchMax <= 1 ? this.#processAlone(event, trace) : this.#enqueue(event, trace));
    this.#running.set(event.id, outcome);
    const done = (): void => {
      if (this.#running.get(event.id) === outcome) this.#running.delete(event.id);
    };
    outcome.then(done, done);
    return outcome;
  }

  /**
   * Applies consecutive events of one key, in order, as `process` would one
   * after another: they go into the same group-commit transaction (never
   * split across two), so a key's run of events costs one commit instead of
   * one each. Resolves one outcome per event, in order. When an event's
   * outcome is `retry` (or its store call fails), the key's later events are
   * not run: they resolve with the same `retry` (or reject with the same
   * error), and the caller goes on from the first of them, as it would have.
   * Do not call it (or `process`) for the same key until the previous call's
   * outcomes resolved.
   */
  processInOrder(received: readonly OutboxEvent[]): Promise<InboxOutcome>[] {
    if (this.#autoStart) this.start();
    const out: Promise<InboxOutcome>[] = [];
    const group: Pending[] = [];
    for (const e of received) {
      const admitted = this.#admit(e);
      if ('outcome' in admitted) {
        out.push(Promise.resolve(admitted.outcome));
        continue;
      }
      const event = admitted.event;
      const trace = startInboxTrace(event, this.consumer);
      out.push(
        settleInboxTrace(
          trace,
          new Promise<InboxOutcome>((resolve, reject) => group.push({ event, trace, resolve, reject })),
        ),
      );
    }
    if (group.length === 0) return out;
    if (this.#batchMax <= 1) {
      // No group commit: one after another, each waiting for the one before.
      void this.#processEachInOrder(group);
      return out;
    }
    this.#push(group);
    return out;
  }

  /**
   * Records an event `dead` without running its handler, for a consumer that
   * gives up on its message unhandled (NATS, Redis: delivered `maxDeliveries`
   * times without an ack, its processes crashed or stalled while holding it).
   * The row (`dead`, `reason` in `last_error`, the envelope) shows in `txbox
   * inbox dead list`, and `txbox inbox dead retry` runs it, which releases
   * the versions its key holds behind it; without the row they would wait on
   * a broker dead-letter copy nobody replays. An event already processed here
   * is left as it is; one without a handler, or one the inbox can never
   * store, records nothing. Resolves true when the inbox keeps the event
   * (recorded dead, or processed already) or has no handler for it (the
   * inbox would ignore it); false when it cannot store it. Rejects while the
   * store does not answer (the consumer retries).
   */
  async recordDead(received: OutboxEvent, reason: string): Promise<boolean> {
    const admitted = this.#admit(received);
    if ('outcome' in admitted) return admitted.outcome.status === 'ignored';
    const event = admitted.event;
    const error = storableText(reason);
    let recorded: { attempts: number; dead: boolean } | undefined;
    const refused = await this.#refused(
      event,
      async () => {
        recorded = await this.#store.recordFailure(this.consumer, event, error, 1);
      },
      'recording it dead',
    );
    if (refused) return false;
    if (!recorded!.dead) return true; // processed (or dead) already
    this.events.fire('failed', { id: event.id, type: event.type, attempts: recorded!.attempts, dead: true, error });
    this.#logger.warn({ consumer: this.consumer, id: event.id, type: event.type, err: error }, 'txbox inbox: recorded dead without running the handler');
    return true;
  }

  #enqueue(event: OutboxEvent, trace: ConsumerTrace | undefined): Promise<InboxOutcome> {
    return new Promise((resolve, reject) => this.#push([{ event, trace, resolve, reject }]));
  }

  #push(entry: Pending[]): void {
    this.#queue.push(entry);
    this.#queued += entry.length;
    if (this.#queued >= this.#batchMax) this.#pump();
    else if (!this.#scheduled) {
      this.#scheduled = true;
      setImmediate(() => {
        this.#scheduled = false;
        this.#pump();
      });
    }
  }

  /**
   * The boundary: an event the inbox can never store (an id that is not a
   * UUID, NUL in a text field, `\u0000` in the payload) is dead at once with
   * a reason naming the field, without a row; the id is made canonical (lower
   * case, hyphenated), the form the table compares and the handler sees.
   */
  #admit(event: OutboxEvent): { event: OutboxEvent } | { outcome: InboxOutcome } {
    if (!this.#handlers.has(event.type)) return { outcome: { status: 'ignored' } };
    const problem = inboundEventProblem(event);
    if (problem !== null) {
      const id = String(event.id).slice(0, 60);
      this.events.fire('failed', { id, type: event.type, attempts: 0, dead: true, error: problem });
      this.#logger.warn({ consumer: this.consumer, type: event.type, err: problem }, 'txbox inbox: event cannot be stored; dead without running the handler');
      return { outcome: { status: 'dead', attempts: 0, error: problem } };
    }
    const id = canonicalEventId(event.id)!;
    return { event: id === event.id ? event : { ...event, id } };
  }

  #pump(): void {
    while (this.#queue.length > 0 && this.#flushing < this.#batchConcurrency) {
      // Up to batchMax events; one key's run from processInOrder stays whole (a batch may exceed batchMax by it).
      const batch: Pending[] = [];
      while (this.#queue.length > 0 && (batch.length === 0 || batch.length + this.#queue[0]!.length <= this.#batchMax)) batch.push(...this.#queue.shift()!);
      this.#queued -= batch.length;
      this.#flushing++;
      this.#flush(batch)
        .catch((err: unknown) => {
          for (const item of batch) item.reject(err);
        })
        .finally(() => {
          this.#flushing--;
          this.#pump();
        });
    }
  }

  /** One transaction for the whole batch (holds included); if a handler throws, the batch is redone one event at a time. */
  async #flush(batch: Pending[]): Promise<void> {
    if (batch.length === 1) {
      const item = batch[0]!;
      item.resolve(await this.#processAlone(item.event, item.trace));
      return;
    }
    const started = performance.now();
    const prepared: { item: Pending; typed: OutboxEvent; handler: InboxHandler<any, string, Tx> }[] = [];
    const alone: Pending[] = [];
    for (const item of batch) {
      const entry = this.#handlers.get(item.event.type);
      if (!entry) {
        item.resolve({ status: 'ignored' });
        continue;
      }
      const typed = await this.#validate(entry, item.event).catch(() => null);
      if (typed === null) alone.push(item); // invalid payload: the single path records it dead
      else prepared.push({ item, typed, handler: entry.handler });
    }
    let result: { ran: boolean[]; heldKeys: string[]; held?: boolean[] } | null = null;
    // Hold reasons in handler order (a batch's handlers run one after another): the i-th held event's is reasons[i].
    const reasons: string[] = [];
    if (prepared.length > 0) {
      // The store gets the events as received (a held one is kept so, and goes through the schema again when it
      // runs); the handlers get the schema's output.
      const byReceived = new Map(prepared.map((p) => [p.item.event, p]));
      const run = (options?: RunBatchOptions) =>
        this.#store.runBatch(
          this.consumer,
          prepared.map((p) => p.item.event),
          (tx, e) => {
            const p = byReceived.get(e)!;
            return this.#runHandler(p.item.trace, () => p.handler(p.typed, tx));
          },
          { ...options, ...this.#handlersTimeout(prepared.length) },
        );
      try {
        result = await run();
      } catch (thrown) {
        // A version gap: the batch once more with each handler in a savepoint, the held ones kept in the same
        // transaction (savepoints cost two statements an event, hence not on the first try). Anything else,
        // or a failure of that second run: one by one below, where each failure gets its own outcome.
        if (thrown instanceof InboxBatchError && thrown.cause instanceof HoldEvent) {
          result = await run({ holdReason: holdReasonsInto(reasons) }).catch(() => null);
        }
      }
    }
    if (result) {
      const durationMs = performance.now() - started;
      // Held events of these keys run before the callers hear back: a caller then sends the
      // key's next event, which must find the released ones applied, not race them.
      // Also a key whose event was held in this very transaction while another of its events applied
      // (v3 held, then v2, in one run): the claim's look for held rows came before either.
      const release = new Set(result.heldKeys);
      if (result.held?.some(Boolean)) {
        const heldHere = new Set(prepared.filter((_, i) => result!.held![i]).map((p) => p.item.event.key));
        prepared.forEach((p, i) => {
          if (!result!.held![i] && result!.ran[i] && heldHere.has(p.item.event.key)) release.add(p.item.event.key);
        });
      }
      for (const key of release) await this.#releaseHeldSafely(key);
      let h = 0;
      prepared.forEach((p, i) => {
        const e = p.item.event;
        if (result!.held?.[i]) {
          this.#refusals.delete(e.id);
          this.events.fire('held', { id: e.id, type: e.type, keyHash: keyHash(e.key), reason: reasons[h++] ?? '' });
          p.item.resolve({ status: 'held' });
        } else if (result!.ran[i]) {
          this.events.fire('processed', { id: e.id, type: e.type, durationMs, occurredAt: e.occurredAt });
          p.item.resolve({ status: 'processed' });
        } else {
          this.events.fire('duplicate', { id: e.id, type: e.type });
          p.item.resolve({ status: 'duplicate' });
        }
      });
    } else {
      alone.push(...prepared.map((p) => p.item));
    }
    await this.#processEachInOrder(batch.filter((b) => alone.includes(b)));
  }

  /**
   * Each event in its own transaction, each key's in submission order (up to
   * ALONE_KEYS keys at once). A key whose event
   * must be retried (or whose store call failed: an outage, only its caller
   * retries) stops: its later events (processInOrder) get the same outcome or
   * error and wait for the retry; the other keys go on.
   */
  async #processEachInOrder(items: readonly Pending[]): Promise<void> {
    // Keys are independent: up to ALONE_KEYS of them at once, each key's events one after another.
    const byKey = new Map<string, Pending[]>();
    for (const item of items) {
      const run = byKey.get(item.event.key);
      if (run) run.push(item);
      else byKey.set(item.event.key, [item]);
    }
    const runs = [...byKey.values()];
    const worker = async (): Promise<void> => {
      for (let run = runs.shift(); run; run = runs.shift()) {
        let stopped: { outcome: InboxOutcome } | { error: unknown } | undefined;
        for (const item of run) {
          if (stopped) {
            if ('outcome' in stopped) item.resolve(stopped.outcome);
            else item.reject(stopped.error);
            continue;
          }
          try {
            const outcome = await this.#processAlone(item.event, item.trace);
            if (outcome.status === 'retry') stopped = { outcome };
            item.resolve(outcome);
          } catch (err) {
            stopped = { error: err };
            item.reject(err);
          }
        }
      }
    };
    await Promise.all(Array.from({ length: Math.min(ALONE_KEYS, runs.length) }, worker));
  }

  /** `acked`: the event's broker message is acked already (a redrive): see #failed. */
  async #processAlone(event: OutboxEvent, trace: ConsumerTrace | undefined, acked = false): Promise<InboxOutcome> {
    const { outcome, heldKeys } = await this.#processOne(event, false, trace, acked);
    for (const key of heldKeys) await this.#releaseHeldSafely(key);
    return outcome;
  }

  /** Releases after a commit; an error (an outage) is logged, the periodic re-check catches up later. */
  async #releaseHeldSafely(key: string): Promise<void> {
    try {
      await this.#releaseHeld(key);
    } catch (err) {
      this.#logger.warn({ consumer: this.consumer, keyHash: keyHash(key), err: thrownText(err) }, 'txbox inbox: releasing held events failed; the held re-check will retry');
    }
  }

  /** The handlers' total allowance for a batch of `events`, for the store's transaction bound (none with the timeout off). */
  #handlersTimeout(events: number): { handlersTimeoutMs?: number } {
    return this.#handlerTimeoutMs === 0 ? {} : { handlersTimeoutMs: this.#handlerTimeoutMs * events };
  }

  /**
   * Runs a handler in its span, failing with HandlerTimeoutError when it has not finished within
   * handlerTimeoutMs (the store then abandons the transaction and discards its connection). What
   * the handler does after that is ignored, a rejection included.
   */
  #runHandler(trace: ConsumerTrace | undefined, handler: () => Promise<void> | void): Promise<void> {
    let running: Promise<void>;
    try {
      running = Promise.resolve(runTraced(trace, handler));
    } catch (err) {
      return Promise.reject(err);
    }
    const ms = this.#handlerTimeoutMs;
    if (ms === 0) return running;
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new HandlerTimeoutError(ms)), ms);
      running.then(
        () => {
          clearTimeout(timer);
          resolve();
        },
        (err: unknown) => {
          clearTimeout(timer);
          reject(err);
        },
      );
    });
  }

  async #validate(entry: { definition?: EventDefinition<string, any, any> }, event: OutboxEvent): Promise<OutboxEvent> {
    if (!entry.definition?.schema) return event;
    let result = entry.definition.schema['~standard'].validate(event.payload);
    if (result instanceof Promise) result = await result;
    if (result.issues) throw new InvalidPayload(`payload failed ${event.type} schema validation: ${result.issues[0]?.message ?? 'invalid'}`);
    // The validated value may differ from the stored text (a schema can transform): drop the text.
    return { ...withoutPayloadText(event), payload: result.value };
  }

  /**
   * One event in its own transaction. A HoldEvent is written in the handler's
   * transaction (a second run with `holdReason`, which the store serializes
   * with the other transactions of the key), so the hold cannot commit after
   * the missing version looked for held events and found none. `expectHold`
   * (re-running held events) goes to that second kind of run at once.
   */
  async #processOne(event: OutboxEvent, expectHold: boolean, trace: ConsumerTrace | undefined, acked = expectHold): Promise<{ outcome: InboxOutcome; heldKeys: string[] }> {
    const entry = this.#handlers.get(event.type);
    if (!entry) return { outcome: { status: 'ignored' }, heldKeys: [] };
    const started = performance.now();
    let holding = expectHold;
    for (;;) {
      try {
        const typed = await this.#validate(entry, event);
        const reasons: string[] = [];
        const options = { ...(holding ? { holdReason: holdReasonsInto(reasons) } : {}), ...this.#handlersTimeout(1) };
        // The event as received to the store (a held row keeps it so), the schema's output to the handler.
        const { ran, heldKeys, held } = await this.#store.runBatch(this.consumer, [event], (tx) => this.#runHandler(trace, () => entry.handler(typed, tx)), options);
        if (held?.[0]) {
          this.#refusals.delete(event.id);
          this.events.fire('held', { id: event.id, type: event.type, keyHash: keyHash(event.key), reason: reasons[0] ?? '' });
          return { outcome: { status: 'held' }, heldKeys: [] };
        }
        if (!ran[0]) {
          this.events.fire('duplicate', { id: event.id, type: event.type });
          return { outcome: { status: 'duplicate' }, heldKeys: [] };
        }
        this.events.fire('processed', { id: event.id, type: event.type, durationMs: performance.now() - started, occurredAt: event.occurredAt });
        return { outcome: { status: 'processed' }, heldKeys };
      } catch (thrown) {
        const err = thrown instanceof InboxBatchError ? thrown.cause : thrown;
        if (err instanceof HoldEvent && !holding) {
          holding = true;
          continue;
        }
        return this.#failed(event, err, acked);
      }
    }
  }

  /**
   * Records a failed attempt: `retry` with backoff, or `dead` at `maxAttempts` (at once for an invalid
   * payload). `acked`: the event runs from the inbox's own rows (a held event released, an operator's
   * retry redriven), its broker message acked already, so no broker will deliver it again: a failure
   * short of `dead` holds it again, and the held re-check runs it (a `failed` row nothing looks at would
   * leave it, and every later version of its key, waiting for good).
   */
  async #failed(event: OutboxEvent, err: unknown, acked = false): Promise<{ outcome: InboxOutcome; heldKeys: string[] }> {
    // A MySQL server error quotes the value it refused (a key, a payload field): its text is scrubbed.
    const message = storableText(mysqlErrno(err) !== 0 ? storeErrorText(err, 2000) : thrownText(err));
    // An invalid payload, or an event txbox's own code refused (applyVersioned's version): the same every time.
    const max = err instanceof InvalidPayload || err instanceof InvalidEventError ? 1 : this.#retry.maxAttempts;
    let recorded: { attempts: number; dead: boolean } | undefined;
    const refused = await this.#refused(
      event,
      async () => {
        recorded = await this.#store.recordFailure(this.consumer, event, message, max);
      },
      `recording its failure (${message})`,
    );
    if (refused) return { outcome: refused, heldKeys: [] };
    this.#refusals.delete(event.id);
    const { attempts, dead } = recorded!;
    if (acked && !dead) await this.#store.hold(this.consumer, event, `run again by the held re-check after attempt ${attempts} failed: ${message}`);
    this.events.fire('failed', { id: event.id, type: event.type, attempts, dead, error: message });
    this.#logger.warn({ consumer: this.consumer, id: event.id, type: event.type, attempts, dead, err: message }, 'txbox inbox: handler failed');
    const outcome: InboxOutcome = dead
      ? { status: 'dead', attempts, error: message }
      : { status: 'retry', attempts, error: message, delayMs: retryDelay(this.#retry, attempts) };
    return { outcome, heldKeys: [] };
  }

  /**
   * Runs a write of the inbox's own row. An outage rethrows (the consumer
   * retries in place as long as it lasts). A deterministic refusal (SQLSTATE
   * 22xxx, 23xxx: the same event is refused every time) is counted per event:
   * a `retry` outcome until STORE_REFUSAL_ATTEMPTS, then `dead`, so the
   * consumer dead-letters it and its key, partition or stream flows again.
   * Undefined when the write succeeded.
   */
  async #refused(event: OutboxEvent, write: () => Promise<void>, doing: string): Promise<InboxOutcome | undefined> {
    try {
      await write();
      return undefined;
    } catch (err) {
      if (classifyStoreError(err) !== 'deterministic') throw err;
      const attempts = (this.#refusals.get(event.id) ?? 0) + 1;
      this.#refusals.delete(event.id);
      if (attempts < STORE_REFUSAL_ATTEMPTS) {
        this.#refusals.set(event.id, attempts);
        if (this.#refusals.size > REFUSALS_TRACKED) this.#refusals.delete(this.#refusals.keys().next().value!);
      }
      const dead = attempts >= STORE_REFUSAL_ATTEMPTS;
      const error = `the inbox store refused ${doing}: ${storeErrorText(err)}`;
      this.events.fire('failed', { id: event.id, type: event.type, attempts, dead, error });
      this.#logger.warn({ consumer: this.consumer, id: event.id, type: event.type, attempts, dead, err: error }, 'txbox inbox: the store refused the event');
      return dead ? { status: 'dead', attempts, error, unrecorded: true } : { status: 'retry', attempts, error, delayMs: retryDelay(this.#retry, attempts) };
    }
  }

  /**
   * After an event of `key` was processed (or when the re-check picks the
   * key), runs the held events of that key in version order. One that is
   * still held (or failed) keeps the later events of its aggregate waiting
   * (versions count per aggregate); other aggregates sharing the key go on.
   * A held row of a type without a handler here is passed over (it stays
   * held, for an operator to see).
   */
  async #releaseHeld(key: string): Promise<void> {
    let limit = HELD_RELEASE_PAGE;
    for (let round = 0; round < 1000; round++) {
      const held = await this.#store.redrivable(this.consumer, limit, key);
      const waiting = new Set<string>();
      let progressed = false;
      for (const e of held) {
        const aggregate = `${e.aggregateType}\u0000${e.aggregateId}`;
        if (waiting.has(aggregate) || !this.#handlers.has(e.type)) continue;
        const trace = startInboxTrace(e, this.consumer);
        const { status } = await settleInboxTrace(
          trace,
          this.#processOne(e, true, trace).then((r) => r.outcome),
        );
        if (status === 'processed' || status === 'duplicate') progressed = true;
        else waiting.add(aggregate);
      }
      // A page that was not full held every held row of the key: all that could run has run.
      if (held.length < limit) return;
      if (!progressed) {
        // A full page of rows that cannot run yet: look further, once per size.
        if (limit >= HELD_RELEASE_PAGE * 100) return;
        limit *= 10;
      }
    }
  }

  /**
   * Runs again the held events of keys nobody looked at for
   * `heldRecheckIntervalMs` (at most HELD_RECHECK_ROWS held rows' keys per
   * call, oldest first): a held event whose missing version was applied
   * without releasing it (a hold that committed too late, a process killed
   * between a commit and its release) applies now. Returns how many keys
   * were looked at. `start()` calls it every `heldRecheckIntervalMs`.
   */
  async recheckHeld(): Promise<number> {
    if (this.#rechecking) return 0;
    this.#rechecking = true;
    try {
      const keys = await this.#store.recheckHeld(this.consumer, this.#heldRecheckMs, HELD_RECHECK_ROWS);
      for (const key of keys) await this.#releaseHeld(key);
      return keys.length;
    } finally {
      this.#rechecking = false;
    }
  }

  /** Runs the events operators asked to retry (`txbox inbox dead retry`) now. Returns how many ran. */
  async redrive(): Promise<number> {
    if (this.#redriving) return 0;
    this.#redriving = true;
    try {
      if (this.#handlers.size === 0) return 0;
      const events = await this.#store.redrivable(this.consumer, 100, undefined, [...this.#handlers.keys()]);
      for (const e of events) {
        const trace = startInboxTrace(e, this.consumer);
        await settleInboxTrace(trace, this.#processAlone(e, trace, true));
      }
      return events.length;
    } finally {
      this.#redriving = false;
    }
  }

  /**
   * Starts the redrive loop for operator retries and the periodic re-check of
   * held events (a consumer killed between its commit and the release of the
   * events it unblocked leaves them held until a re-check). `process` calls it
   * by itself unless `autoStart: false`. The timers do not keep the process alive.
   */
  start(): void {
    this.#autoStart = false;
    this.#timer ??= setInterval(() => {
      this.redrive().catch((err: Error) => this.#logger.error({ err: err.message }, 'txbox inbox: redrive failed'));
    }, this.#redriveMs).unref();
    this.#recheckTimer ??= setInterval(() => {
      this.recheckHeld().catch((err: Error) => this.#logger.error({ err: err.message }, 'txbox inbox: held re-check failed'));
    }, this.#heldRecheckMs).unref();
  }

  /** Ends the redrive loop and the held re-check; `process` does not start them again (call `start()` for that). */
  stop(): void {
    this.#autoStart = false;
    clearInterval(this.#timer);
    clearInterval(this.#recheckTimer);
    this.#timer = undefined;
    this.#recheckTimer = undefined;
  }
}

class InvalidPayload extends Error {}

/** What a delivery that came while the same event ran here gets: what it would have got after it. */
function asLaterDelivery(first: InboxOutcome): InboxOutcome {
  return first.status === 'processed' || (first.status === 'dead' && !first.unrecorded) ? { status: 'duplicate' } : first;
}

/** Creates an inbox. See `Inbox`. The handlers' `tx` type is inferred from the store. */
export function createInbox<Tx = SqlExecutor>(options: InboxOptions<Tx>): Inbox<Tx> {
  return new Inbox(options);
}
