import type { OutboxEvent } from '../../core/envelope.ts';
import type { InboxProcessor } from '../../core/inbox-ports.ts';
import type { InboxQueue } from '../inbox-worker.ts';
import { KeyedDispatcher } from '../keyed-dispatcher.ts';
import type { ConsumerCore } from './consumer-core.ts';
import type { ConsumerHandler } from './consumer-handler.ts';
import { receiveQueued, settleEvent, type SettledOutcome } from './settle-event.ts';

export type SettledStatus = SettledOutcome['status'] | 'queued';

/**
 * The broker adapter's port: what the core asks of one received message.
 * Each method settles the message once; none may throw.
 */
export interface DeliveryPort<M> {
  /** The event committed (inbox or queue): acknowledge the message. */
  ack(message: M): Promise<void> | void;
  /**
   * The message can never be handled (dead event, unreadable, refused by the
   * queue): copy it to the dead-letter destination and acknowledge it. False:
   * the copy failed until stop; the message is left for redelivery.
   * `attempts`: the handler's attempts for a dead event, null otherwise.
   * `kept`: the inbox keeps the event (a dead row that `txbox inbox dead
   * retry` runs again, or processed already); false when nothing but the
   * broker holds it (unreadable, refused by the queue, an event the inbox
   * store refused to record): such a message must not be deleted or acked
   * without a copy.
   */
  deadLetter(message: M, reason: string, event: OutboxEvent | null, attempts: number | null, kept: boolean): Promise<boolean> | boolean;
  /** Not settled (stopping, or a retry due later): leave it for redelivery. */
  release(message: M): void;
  /**
   * True when releasing this message unhandled is its last chance: the broker
   * will not deliver it again but move it to its own dead letters (SQS: its
   * receive count reached the queue's `maxReceiveCount`; Pub/Sub: its
   * delivery attempt reached the subscription's `maxDeliveryAttempts`;
   * RabbitMQ: a quorum queue's delivery limit). The core then records the
   * event dead in the inbox as it releases it, so that the inbox keeps it
   * (`txbox inbox dead retry` runs it) and its key's held versions are not
   * left waiting on a copy nobody replays.
   */
  lastDelivery?(message: M): boolean;
  /** Aborted when this message can no longer be settled (its channel closed); default: the core's stop signal. */
  signal?(message: M): AbortSignal;
  /**
   * Asked when a message's turn comes (after its key's earlier messages),
   * before the inbox or the queue sees it (`event` null: unreadable, about to
   * be dead-lettered): `handle` (the default), `release` (leave it for
   * redelivery: NATS after a release of its key, Kafka once its batch
   * stopped taking records), or dead-letter it with that reason without
   * handling it (delivered too often).
   */
  admit?(message: M, event: OutboxEvent | null): Admission;
  /**
   * A handler retry of this message is due in `delayMs`: true leaves the
   * message for the adapter to redeliver then (Kafka pauses the partition),
   * false waits in place, the key's later messages behind it (the default).
   */
  retryLater?(message: M, event: OutboxEvent, attempts: number, delayMs: number): boolean;
}

/** What `DeliveryPort.admit` decides for a message whose turn came. */
export type Admission = 'handle' | 'release' | { readonly deadLetter: string };

/** What the core reports back, for the adapter's events and stats. */
export interface DeliveryCoreHooks<M> {
  /** The inbox or the queue committed (status `dead`: the handler failed for good); called before the ack or the dead letter. */
  settled?(message: M, event: OutboxEvent, status: SettledStatus, durationMs: number): void;
  deadLettered?(message: M, event: OutboxEvent | null, reason: string, attempts: number | null): void;
  rejected?(message: M, reason: string): void;
  released?(message: M, event: OutboxEvent | null): void;
}

export interface DeliveryCoreOptions<M> {
  readonly core: ConsumerCore;
  readonly handler: ConsumerHandler;
  /** Handlers running at once (different keys); one key's messages always run one at a time. */
  readonly concurrency: number;
  /** Worker mode: most events stored per queue transaction. */
  readonly batch: number;
  readonly port: DeliveryPort<M>;
  readonly hooks?: DeliveryCoreHooks<M>;
  /**
   * What stop() does with a received message whose handling has not begun:
   * `release` it for redelivery (the default), or `finish` it: it is handled
   * once (or stored, in worker mode) and acked; a retry wait still ends at
   * stop and releases it (NATS, Redis: what was received is settled).
   */
  readonly onStop?: 'release' | 'finish';
  /** What the broker calls a message, in dead-letter reasons (`unreadable entry: ...`); default `message`. */
  readonly noun?: string;
  /**
   * With an inbox: a key's messages received while its turn has not come run
   * together, up to this many, through `Inbox.processInOrder` (one commit
   * for the run instead of one each, in the same order). For brokers that
   * hand out a key's messages in bursts (SQS FIFO returns a message group's
   * messages together). Not with `admit`, `retryLater` or `signal` hooks.
   * Default 1: one message per turn.
   */
  readonly keyRun?: number;
}

interface Held<M> {
  readonly message: M;
  readonly event: OutboxEvent;
}

const QUEUE_KEY = '\u0000queue';
/** How long a dead record of a message released on its last delivery may take (the consumer is usually stopping). */
const RECORD_RELEASED_MS = 5000;

/** Whether an inbox row keeps a dead event: not when the store refused it, nor when the inbox could never store it (dead at its boundary, 0 attempts). */
function keptDead(outcome: { readonly attempts: number; readonly unrecorded?: boolean }): boolean {
  return outcome.attempts > 0 && outcome.unrecorded !== true;
}

/**
 * Whether the broker's copy of a dead event is the only one: an inbox
 * consumer's readable event that no inbox row keeps (the store refused it: a
 * constraint, a column too small), which a store may yet take once that is
 * fixed. An adapter without a dead-letter destination leaves such a message
 * for redelivery instead of acking it. Not an event dead at the inbox's
 * boundary (0 attempts: no inbox can ever store it), nor in worker mode (an
 * adapter there may release every message behind a released one).
 */
export function keptNowhere(handler: ConsumerHandler, event: OutboxEvent | null, attempts: number | null, kept: boolean): boolean {
  return handler.kind === 'inbox' && event !== null && !kept && attempts !== 0;
}

/**
 * The receive → settle → ack loop every broker consumer runs. The adapter
 * receives (pushed one by one, pulled, or read in batches), parses each
 * message and calls `accept`; the core runs one key's events in order and
 * several keys at once, settles each in the inbox (retrying in place),
 * acks only after the inbox committed, dead-letters dead and unreadable
 * events, stores batches in worker mode, and leaves unfinished messages for
 * redelivery on stop. What a broker does differently is a port hook:
 * `admit` (NATS releases a key's later messages after a release and
 * dead-letters a message delivered too often; Redis the same for entries it
 * took over; Kafka stops taking a batch's records after a rebalance or a
 * pause), `retryLater` (Kafka pauses the partition instead of waiting),
 * `signal` (RabbitMQ: the channel closed), plus `onStop` for NATS and Redis,
 * which settle what they received before stopping. Kafka runs one
 * DeliveryCore per fetched partition batch, a record being its index; its
 * acks finish records and only the finished prefix of offsets is committed.
 *
 * @example
 * const deliveries = new DeliveryCore({ core, handler, concurrency: 16, batch: 100, port: { ack: (m) => m.ack(), deadLetter, release: (m) => m.nack() } });
 * subscription.on('message', (m) => deliveries.accept(m, parse(m)));
 */
export class DeliveryCore<M> {
  readonly #o: DeliveryCoreOptions<M>;
  readonly #dispatcher: KeyedDispatcher;
  /** Held messages and their events (null: unreadable). */
  readonly #held = new Map<M, OutboxEvent | null>();
  /** Dead records of messages released on their last delivery, still being written. */
  readonly #recording = new Set<Promise<void>>();
  #queued: Held<M>[] = [];
  #queueScheduled = false;
  #unreadable = 0;
  /** Per key, the run of messages waiting for its turn (keyRun > 1). */
  readonly #runs = new Map<string, Held<M>[]>();
  readonly #rooms = new Set<{ readonly limit: number; readonly resolve: () => void }>();

  constructor(options: DeliveryCoreOptions<M>) {
    this.#o = options;
    this.#dispatcher = new KeyedDispatcher(options.concurrency);
    const { admit, retryLater, signal } = options.port;
    // A run is settled together: a hook deciding message by message would need the run split at each decision.
    if ((options.keyRun ?? 1) > 1 && (admit || retryLater || signal)) throw new TypeError('DeliveryCore: keyRun > 1 cannot be combined with the admit, retryLater or signal hooks');
  }

  /** Messages received and not yet acked, dead-lettered or released. */
  get inFlight(): number {
    return this.#held.size;
  }

  /** The messages this process holds (for ack-deadline extension). */
  held(): IterableIterator<M> {
    return this.#held.keys();
  }

  /**
   * Resolves once fewer than `limit` messages are held, or when `signal`
   * aborts: a pulling adapter bounds what it holds with it (several pulls
   * may wait at once, each with its own limit).
   */
  whenBelow(limit: number, signal: AbortSignal): Promise<void> {
    if (this.#held.size < limit || signal.aborted) return Promise.resolve();
    return new Promise((resolve) => {
      const room = {
        limit,
        resolve: (): void => {
          signal.removeEventListener('abort', room.resolve);
          this.#rooms.delete(room);
          resolve();
        },
      };
      this.#rooms.add(room);
      signal.addEventListener('abort', room.resolve, { once: true });
    });
  }

  /** Takes one received message: its event, or why it is unreadable. */
  accept(message: M, parsed: { readonly ok: true; readonly event: OutboxEvent } | { readonly ok: false; readonly message: string }): void {
    const { core, handler } = this.#o;
    this.#held.set(message, parsed.ok ? parsed.event : null);
    if (!parsed.ok) {
      this.#o.hooks?.rejected?.(message, parsed.message);
      // A key of its own: waits for nothing, and stop() waits for its dead letter.
      const reason = `unreadable ${this.#o.noun ?? 'message'}: ${parsed.message}`;
      this.#dispatcher.push(`\u0000unreadable${++this.#unreadable}`, () => this.#unreadableTurn(message, reason)).catch((err: unknown) => core.failed('dead-letter', err));
      return;
    }
    const event = parsed.event;
    if (handler.kind === 'inbox') {
      if ((this.#o.keyRun ?? 1) > 1) return this.#joinRun(message, event, handler.inbox);
      this.#dispatcher.push(event.key, () => this.#handle(message, event, handler.inbox)).catch((err: unknown) => core.failed('handle', err));
      return;
    }
    this.#queued.push({ message, event });
    if (this.#queueScheduled) return;
    this.#queueScheduled = true;
    // One receive at a time keeps arrival order per key; messages arriving meanwhile form the next batch.
    this.#dispatcher.push(QUEUE_KEY, () => this.#receive(handler.queue)).catch((err: unknown) => core.failed('queue', err));
  }

  /** Resolves when every accepted message was settled or released. */
  onIdle(): Promise<void> {
    return this.#dispatcher.onIdle();
  }

  #signal(message: M): AbortSignal {
    return this.#o.port.signal?.(message) ?? this.#o.core.signal;
  }

  /** Whether a message is left for redelivery without a try: stop began (unless finishing), or its signal aborted. */
  #stopped(message: M): boolean {
    return this.#o.port.signal?.(message).aborted === true || (this.#o.onStop !== 'finish' && this.#o.core.signal.aborted);
  }

  /** True when the message's turn ended here: released (by releaseAll or admit) or dead-lettered by admit. */
  async #turnEnded(message: M, event: OutboxEvent): Promise<boolean> {
    if (!this.#held.has(message)) return true;
    if (this.#stopped(message)) return this.#release(message, event), true;
    return this.#refusedByAdmit(message, event);
  }

  /** An unreadable message is dead-lettered, even while stopping, unless admit releases it. */
  async #unreadableTurn(message: M, reason: string): Promise<void> {
    if (!this.#held.has(message) || (await this.#refusedByAdmit(message, null))) return;
    await this.#deadLetter(message, null, reason, null, false);
  }

  async #refusedByAdmit(message: M, event: OutboxEvent | null): Promise<boolean> {
    const admission = this.#o.port.admit?.(message, event) ?? 'handle';
    if (admission === 'handle') return false;
    if (admission === 'release') this.#release(message, event);
    else await this.#deadLetterUnhandled(message, event, admission.deadLetter);
    return true;
  }

  /**
   * A message given up on without handling it (delivered too often) is
   * recorded dead in the inbox first, retried while the store does not
   * answer (released at stop), so that the inbox's dead events show it and
   * can run it again; then dead-lettered.
   */
  async #deadLetterUnhandled(message: M, event: OutboxEvent | null, reason: string): Promise<void> {
    const { core, handler } = this.#o;
    const inbox = handler.kind === 'inbox' ? handler.inbox : null;
    let kept = false;
    if (event !== null && inbox?.recordDead) {
      const recorded = await core.retrying('inbox', () => inbox.recordDead!(event, reason));
      if (recorded === null) return this.#release(message, event);
      kept = recorded;
    }
    await this.#deadLetter(message, event, reason, null, kept);
  }

  /** Adds the message to its key's waiting run, or starts a run whose turn comes after the key's earlier ones. */
  #joinRun(message: M, event: OutboxEvent, inbox: InboxProcessor): void {
    const waiting = this.#runs.get(event.key);
    if (waiting !== undefined && waiting.length < this.#o.keyRun!) {
      waiting.push({ message, event });
      return;
    }
    const run: Held<M>[] = [{ message, event }];
    this.#runs.set(event.key, run);
    this.#dispatcher
      .push(event.key, () => {
        // Its turn: what arrives from now on waits for the next turn.
        if (this.#runs.get(event.key) === run) this.#runs.delete(event.key);
        return this.#handleRun(run, inbox);
      })
      .catch((err: unknown) => this.#o.core.failed('handle', err));
  }

  /**
   * A key's run, in order, in one inbox call: each message is acked (or
   * dead-lettered) as its outcome comes. From the first that must be retried
   * (or whose store call failed) on, the rest go one by one as #handle would.
   */
  async #handleRun(run: readonly Held<M>[], inbox: InboxProcessor): Promise<void> {
    const { core } = this.#o;
    const live: Held<M>[] = [];
    for (const h of run) if (!(await this.#turnEnded(h.message, h.event))) live.push(h);
    if (live.length <= 1) return live[0] && this.#settle(live[0].message, live[0].event, inbox);
    // An inbox without processInOrder (another implementation of process): the run goes one by one, in order.
    if (typeof inbox.processInOrder !== 'function') return this.#finishOneByOne(live, [], inbox, 0);
    const started = performance.now();
    const outcomes = inbox.processInOrder(live.map((h) => h.event));
    // Awaited one at a time below, with an ack or a dead-letter copy between: a later one that rejects
    // meanwhile (the store went down) must not be an unhandled rejection. Each is still awaited.
    for (const p of outcomes) p.catch(() => {});
    for (const [i, { message, event }] of live.entries()) {
      let outcome: Awaited<(typeof outcomes)[number]>;
      try {
        outcome = await outcomes[i]!;
        core.recovered('inbox');
      } catch (err) {
        core.failed('inbox', err);
        return this.#finishOneByOne(live.slice(i), outcomes.slice(i + 1), inbox, 0);
      }
      if (outcome.status === 'retry') return this.#finishOneByOne(live.slice(i), outcomes.slice(i + 1), inbox, outcome.delayMs);
      this.#o.hooks?.settled?.(message, event, outcome.status, performance.now() - started);
      if (outcome.status === 'dead') await this.#deadLetter(message, event, `handler failed ${outcome.attempts} times: ${outcome.error}`, outcome.attempts, keptDead(outcome));
      else await this.#ack(message);
    }
  }

  /** The rest of a run after a retry (its delay waited first) or a store failure: one by one, in order; released at stop. */
  async #finishOneByOne(rest: readonly Held<M>[], unread: readonly Promise<unknown>[], inbox: InboxProcessor, delayMs: number): Promise<void> {
    for (const p of unread) p.catch(() => {}); // the same retry or failure as the first; not acted on
    if (delayMs > 0 && !(await this.#o.core.pause(delayMs))) {
      for (const h of rest) this.#release(h.message, h.event);
      return;
    }
    for (const h of rest) {
      if (this.#stopped(h.message)) this.#release(h.message, h.event);
      else await this.#settle(h.message, h.event, inbox);
    }
  }

  async #handle(message: M, event: OutboxEvent, inbox: InboxProcessor): Promise<void> {
    if (await this.#turnEnded(message, event)) return;
    await this.#settle(message, event, inbox);
  }

  /** Settles one message whose turn came: the inbox (retried in place), then the ack or the dead letter. */
  async #settle(message: M, event: OutboxEvent, inbox: InboxProcessor): Promise<void> {
    const { core, port } = this.#o;
    const started = performance.now();
    const outcome = await settleEvent(inbox, event, {
      signal: this.#signal(message),
      onStoreError: (err) => core.failed('inbox', err),
      onStoreOk: () => core.recovered('inbox'),
      firstAttemptWhileStopping: this.#o.onStop === 'finish',
      ...(port.retryLater ? { onRetry: (r: { attempts: number; delayMs: number }) => !port.retryLater!(message, event, r.attempts, r.delayMs) } : {}),
    });
    if (outcome === null) return this.#release(message, event);
    this.#o.hooks?.settled?.(message, event, outcome.status, performance.now() - started);
    if (outcome.status === 'dead') return void (await this.#deadLetter(message, event, `handler failed ${outcome.attempts} times: ${outcome.error}`, outcome.attempts, keptDead(outcome)));
    await this.#ack(message);
  }

  /** Worker mode: stores what arrived, in arrival order, `batch` events per transaction, then acks them. */
  async #receive(queue: InboxQueue): Promise<void> {
    const { core } = this.#o;
    await new Promise((resolve) => setImmediate(resolve)); // lets the rest of a pull or a push burst arrive: one batch
    this.#queueScheduled = false;
    while (this.#queued.length > 0) {
      const batch: Held<M>[] = [];
      for (const h of this.#queued.splice(0, this.#o.batch)) if (!(await this.#turnEnded(h.message, h.event))) batch.push(h);
      if (batch.length === 0) continue;
      const started = performance.now();
      const refused = await receiveQueued(queue, batch.map((h) => h.event), core.signal, (err) => core.failed('queue', err));
      if (refused === null) {
        for (const h of batch) this.#release(h.message, h.event);
        continue;
      }
      core.recovered('queue');
      const durationMs = performance.now() - started;
      for (const [n, { message, event }] of batch.entries()) {
        const reason = refused.get(n);
        if (reason !== undefined) {
          // The queue can never hold it: dead-lettered, never retried.
          this.#o.hooks?.rejected?.(message, reason);
          await this.#deadLetter(message, event, reason, null, false);
          continue;
        }
        this.#o.hooks?.settled?.(message, event, 'queued', durationMs);
        await this.#ack(message);
      }
    }
  }

  /** Acks a message still held; one released meanwhile (releaseAll at a stop's deadline) is the broker's again. */
  async #ack(message: M): Promise<void> {
    if (!this.#forget(message)) return;
    await this.#o.port.ack(message);
  }

  #forget(message: M): boolean {
    if (!this.#held.delete(message)) return false;
    for (const room of this.#rooms) if (this.#held.size < room.limit) room.resolve();
    return true;
  }

  async #deadLetter(message: M, event: OutboxEvent | null, reason: string, attempts: number | null, kept: boolean): Promise<boolean> {
    if (!this.#held.has(message)) return false; // released meanwhile: redelivered, and dead-lettered then if it still fails
    const done = await this.#o.port.deadLetter(message, reason, event, attempts, kept);
    if (!done) {
      this.#release(message, event);
      return false;
    }
    this.#forget(message);
    this.#o.hooks?.deadLettered?.(message, event, reason, attempts);
    return true;
  }

  #release(message: M, event: OutboxEvent | null): void {
    const known = event ?? this.#held.get(message) ?? null;
    if (!this.#forget(message)) return;
    this.#giveBack(message, known, event);
  }

  /** Leaves a message for redelivery, recording `known` dead first when this is its last delivery. */
  #giveBack(message: M, known: OutboxEvent | null, event: OutboxEvent | null): void {
    if (known !== null && this.#o.port.lastDelivery?.(message) === true) this.#recordReleased(known);
    this.#o.port.release(message);
    this.#o.hooks?.released?.(message, event);
  }

  /**
   * The broker moves `event`'s message to its dead letters instead of
   * delivering it again: the inbox records it dead (bounded; a store that does
   * not answer in time leaves the broker's copy only, as before), so the
   * inbox's dead events show it. `recordsSettled()` waits for these writes.
   */
  #recordReleased(event: OutboxEvent): void {
    const { core, handler } = this.#o;
    const inbox = handler.kind === 'inbox' ? handler.inbox : null;
    if (inbox?.recordDead === undefined) return;
    const reason = `released unhandled on its last delivery (stopping, or behind its key): the broker's redrive limit moves it to the broker's dead letters; run it with txbox inbox dead retry`;
    let timer: NodeJS.Timeout | undefined;
    const bound = new Promise<void>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`recording event ${event.id} dead did not finish within ${RECORD_RELEASED_MS} ms`)), RECORD_RELEASED_MS);
    });
    const write: Promise<void> = Promise.race([inbox.recordDead(event, reason).then(() => undefined), bound])
      .catch((err: unknown) => core.failed('inbox', err))
      .finally(() => {
        clearTimeout(timer);
        this.#recording.delete(write);
      });
    this.#recording.add(write);
  }

  /** Resolves when the dead records of messages released on their last delivery are written (each bounded). */
  async recordsSettled(): Promise<void> {
    while (this.#recording.size > 0) await Promise.allSettled([...this.#recording]);
  }

  /**
   * A message received once stopping had begun, never accepted: released for
   * redelivery, and recorded dead first when this is its last delivery (as a
   * held message released at stop is).
   */
  releaseUnaccepted(message: M, parsed: { readonly ok: true; readonly event: OutboxEvent } | { readonly ok: false }): void {
    const event = parsed.ok ? parsed.event : null;
    this.#giveBack(message, event, event);
  }

  /** stop() ran out of time: every message still held is released now. */
  releaseAll(): void {
    for (const m of [...this.#held.keys()]) this.#release(m, null);
  }
}
