import { setTimeout as sleep } from 'node:timers/promises';
import type { Redis } from 'ioredis';
import { TypedEmitter } from '../../core/emitter.ts';
import type { OutboxEvent } from '../../core/envelope.ts';
import { ConfigError } from '../../core/errors.ts';
import type { Consumer } from '../../core/inbox-ports.ts';
import type { Inbox } from '../../inbox/inbox.ts';
import type { InboxQueue, QueueRefusal } from '../../inbox/inbox-worker.ts';
import { KeyedDispatcher } from '../../inbox/keyed-dispatcher.ts';
import { processUntilSettled } from '../../inbox/process-until-settled.ts';
import { resolveRedisConsumerOptions, type ConsumerStream, type RedisConsumerOptions, type ResolvedRedisConsumerOptions } from './redis-consumer-options.ts';
import { connectAndVerify, createClient } from './redis-connection.ts';
import { connectionProblem, replyCode, safeCause, startFailure, type StartContext } from './redis-outcomes.ts';
import { parseStreamEntry } from './redis-stream-fields.ts';

export { resolveRedisConsumerOptions, type ConsumerStream, type RedisConsumerOptions, type ResolvedRedisConsumerOptions } from './redis-consumer-options.ts';

export type RedisSettledStatus = 'processed' | 'duplicate' | 'ignored' | 'held' | 'dead' | 'queued';

export interface RedisConsumerEvents {
  /** An entry's event was settled (then acked, or dead-lettered when dead). `durationMs`: from handing it to the inbox or queue until that committed. */
  settled: { readonly stream: string; readonly entryId: string; readonly id: string; readonly type: string; readonly status: RedisSettledStatus; readonly durationMs: number };
  /** An entry that is not a readable txbox event; it is moved to the dead-letter stream. */
  rejected: { readonly stream: string; readonly entryId: string; readonly reason: string };
  /** An entry was added to the dead-letter stream and acked. `id` is the event id when the entry was readable. */
  deadLettered: { readonly stream: string; readonly entryId: string; readonly id: string | null; readonly deadLetterStream: string; readonly reason: string };
  /** Entries of consumers presumed dead were taken over with XAUTOCLAIM. */
  reclaimed: { readonly stream: string; readonly count: number };
  /** A Redis or inbox operation failed; it is retried (or the entry stays pending and is reclaimed later). */
  error: { readonly operation: string; readonly message: string };
}

/** Counters since construction. */
export interface RedisConsumerStats {
  received: number;
  processed: number;
  duplicate: number;
  ignored: number;
  held: number;
  dead: number;
  queued: number;
  rejected: number;
  reclaimed: number;
  acked: number;
}

/** One entry this process holds (read or claimed, not yet acked or released). */
interface Held {
  readonly stream: ConsumerStream;
  readonly entryId: string;
  readonly fields: readonly string[];
  /** Aborts the handler's retry waits: the entry then stays pending. */
  readonly controller: AbortController;
  touchedAt: number;
  retrying: boolean;
}

type RawEntry = readonly [entryId: string, fields: string[] | null];

const QUEUE_KEY = '\u0000queue';

class ConsumerEmitter extends TypedEmitter<RedisConsumerEvents> {
  fire<K extends keyof RedisConsumerEvents>(name: K, payload: RedisConsumerEvents[K]): void {
    this.emit(name, payload);
  }
}

/**
 * Reads Redis streams with a consumer group (XREADGROUP, one consumer name
 * per process) and hands each entry's event to an inbox, acking (XACK) only
 * after the inbox committed: one key's events run in order, different keys in
 * parallel. Dead events and unreadable entries are added to a dead-letter
 * stream and acked in one MULTI. Entries left pending by a dead consumer are
 * taken over with XAUTOCLAIM after `claimIdleMs`; the inbox skips those it
 * already committed. See docs/transports/redis.md#consuming.
 *
 * @example
 * const consumer = new RedisConsumer({ url: 'redis://127.0.0.1:6379', streams: ['txbox:orders'], group: 'billing', inbox });
 * await consumer.start();
 * process.once('SIGTERM', () => void consumer.stop());
 */
export class RedisConsumer implements Consumer {
  readonly name = 'redis';
  readonly #emitter = new ConsumerEmitter();
  /** Typed lifecycle events for metrics and logs: `consumer.events.on('settled', ...)`. */
  readonly events: TypedEmitter<RedisConsumerEvents> = this.#emitter;
  readonly stats: RedisConsumerStats = { received: 0, processed: 0, duplicate: 0, ignored: 0, held: 0, dead: 0, queued: 0, rejected: 0, reclaimed: 0, acked: 0 };
  readonly #o: ResolvedRedisConsumerOptions;
  readonly #ctx: StartContext & { readonly password: string | undefined };
  readonly #dispatcher: KeyedDispatcher;
  readonly #held = new Map<string, Held>();
  readonly #byEventId = new Map<string, Held>();
  readonly #side = new Set<Promise<unknown>>();
  readonly #failing = new Set<string>();
  #acks = new Map<ConsumerStream, Held[]>();
  #flushing: Promise<void> | null = null;
  #commands: Redis | null = null;
  #reader: Redis | null = null;
  #readerId: number | null = null;
  #state: 'stopped' | 'starting' | 'running' | 'stopping' = 'stopped';
  #starting: Promise<void> | null = null;
  #stopping: Promise<void> | null = null;
  #stop = new AbortController();
  #reading: Promise<void> | null = null;
  #claimTimer: NodeJS.Timeout | undefined;
  #claiming: Promise<void> | null = null;
  #cursors = new Map<string, string>();
  #room: (() => void) | null = null;
  #unlisten: (() => void) | null = null;

  /** Throws ConfigError naming the field when an option is invalid. Connects nothing until start(). */
  constructor(options: RedisConsumerOptions) {
    this.#o = resolveRedisConsumerOptions(options);
    this.#dispatcher = new KeyedDispatcher(this.#o.concurrency);
    const c = this.#o.connection;
    this.#ctx =
      c.kind === 'url'
        ? { address: c.display, addressField: 'url', userField: c.userField, passwordField: c.passwordField, username: c.username, password: c.password }
        : { address: c.display, addressField: 'client', userField: 'client', passwordField: 'client', username: undefined, password: undefined };
  }

  /** Entries read or claimed and not yet acked or released. */
  get inFlight(): number {
    return this.#held.size;
  }

  /**
   * Connects (PING), creates the group on every stream when missing
   * (`XGROUP CREATE <stream> <group> <startId> MKSTREAM`) and starts reading:
   * first this consumer name's own pending entries, then new ones. Throws
   * ConfigError naming `url`, `username`, `password`, `tls`, `client` or
   * `streams.<destination>` (a key that is not a stream).
   */
  async start(): Promise<void> {
    if (this.#stopping) await this.#stopping;
    if (this.#state === 'running') return;
    this.#starting ??= this.#start().finally(() => {
      this.#starting = null;
    });
    return this.#starting;
  }

  /**
   * Stops reading, lets handlers in progress finish and ack (a handler
   * waiting to retry is not waited for: its entry stays pending), then
   * disconnects. Entries not finished within `stopTimeoutMs` stay pending and
   * are redelivered (to this consumer name's next start, or claimed by another).
   */
  stop(): Promise<void> {
    if (this.#state === 'stopped' && !this.#starting) return Promise.resolve();
    this.#stopping ??= this.#stopNow().finally(() => {
      this.#stopping = null;
    });
    return this.#stopping;
  }

  async #start(): Promise<void> {
    const o = this.#o;
    const c = o.connection;
    this.#state = 'starting';
    this.#stop = new AbortController();
    const signal = AbortSignal.timeout(o.transport.connectTimeoutMs * 2 + o.commandTimeoutMs);
    const readerTimeout = o.blockMs + o.commandTimeoutMs;
    const commands = c.kind === 'url' ? createClient(c, o.transport) : c.client;
    const reader =
      c.kind === 'url'
        ? createClient(c, { ...o.transport, commandTimeoutMs: readerTimeout })
        : c.client.duplicate({ lazyConnect: true, enableOfflineQueue: false, maxRetriesPerRequest: 0, autoResendUnfulfilledCommands: false, commandTimeout: readerTimeout });
    if (c.kind === 'url') this.#watch(commands, 'commands');
    this.#watch(reader, 'reader');
    try {
      await connectAndVerify(commands, c.kind === 'url', this.#ctx, o.transport.connectTimeoutMs, signal);
      await connectAndVerify(reader, true, this.#ctx, o.transport.connectTimeoutMs, signal);
      this.#commands = commands;
      this.#reader = reader;
      await this.#createGroups(true);
      // CLIENT UNBLOCK lets stop() end a blocked read at once; without +client, stop waits up to blockMs.
      this.#readerId = await reader.call('CLIENT', ['ID']).then(Number, () => null);
    } catch (err) {
      reader.disconnect();
      if (c.kind === 'url') commands.disconnect();
      this.#commands = this.#reader = null;
      this.#state = 'stopped';
      throw err;
    }
    if (o.handler.kind === 'inbox') {
      // A handler that failed waits to retry; stop() does not wait for it (the entry stays pending).
      this.#unlisten = o.handler.inbox.events.on('failed', ({ id, dead }) => {
        const held = this.#byEventId.get(id);
        if (!held || dead) return;
        held.retrying = true;
        if (this.#state === 'stopping') held.controller.abort();
      });
    }
    this.#state = 'running';
    this.#reading = this.#readLoop();
    this.#scheduleClaim(0);
  }

  async #createGroups(atStart: boolean): Promise<void> {
    for (const s of this.#o.streams) {
      try {
        await this.#commands!.call('XGROUP', ['CREATE', s.key, this.#o.group, this.#o.startId, 'MKSTREAM']);
      } catch (err) {
        const code = replyCode(err);
        if (code === 'BUSYGROUP') continue;
        if (!atStart) throw err;
        if (code === 'WRONGTYPE') throw new ConfigError(s.field, `key ${JSON.stringify(s.key)} at ${this.#ctx.address} holds another data type, not a stream; map the destination to another key`);
        if (code === 'NOPERM') throw new ConfigError(this.#ctx.userField, `the user may not create the consumer group on ${JSON.stringify(s.key)}; grant +xgroup +xreadgroup +xack +xautoclaim +xclaim +xpending +xadd on the stream keys`, { cause: safeCause(err) });
        throw startFailure(err, this.#ctx);
      }
    }
  }

  async #readLoop(): Promise<void> {
    const o = this.#o;
    const keys = o.streams.map((s) => s.key);
    // '0' reads this consumer name's own pending entries (a restart with a stable name), then '>' new ones.
    const ids = keys.map(() => '0');
    let failures = 0;
    while (this.#state === 'running') {
      await this.#waitForRoom();
      if (this.#state !== 'running') break;
      const backlog = ids.some((id) => id !== '>');
      let reply: unknown;
      try {
        reply = await this.#reader!.call('XREADGROUP', ['GROUP', o.group, o.consumer, 'COUNT', o.count, ...(backlog ? [] : ['BLOCK', o.blockMs]), 'STREAMS', ...keys, ...ids]);
        failures = 0;
        this.#recovered('XREADGROUP');
      } catch (err) {
        if (this.#state !== 'running') break;
        if (replyCode(err) === 'NOGROUP') {
          // The stream or group was deleted under us: recreate it (with startId) and go on.
          await this.#createGroups(false).catch((e: unknown) => this.#report('XGROUP CREATE', e));
        } else this.#report('XREADGROUP', err);
        await sleep(Math.min(2000, 100 * 2 ** Math.min(failures++, 5)), undefined, { signal: this.#stop.signal }).catch(() => {});
        continue;
      }
      const answered = new Set<number>();
      for (const [key, entries] of streamsOf(reply)) {
        const i = keys.indexOf(key);
        if (i < 0) continue;
        answered.add(i);
        if (ids[i] !== '>') ids[i] = entries.length === 0 ? '>' : entries[entries.length - 1]![0];
        this.#accept(o.streams[i]!, entries);
      }
      for (let i = 0; i < ids.length; i++) if (backlog && !answered.has(i)) ids[i] = '>';
    }
  }

  /** Hands entries to the inbox (or the queue, one batch), or to the dead-letter stream when unreadable. */
  #accept(stream: ConsumerStream, entries: readonly RawEntry[]): void {
    const handler = this.#o.handler;
    const batch: { held: Held; event: OutboxEvent }[] = [];
    for (const [entryId, fields] of entries) {
      const id = `${stream.key}\u0000${entryId}`;
      if (this.#held.has(id)) continue; // ours already (a slow handler's entry claimed again)
      const held: Held = { stream, entryId, fields: fields ?? [], controller: new AbortController(), touchedAt: Date.now(), retrying: false };
      this.#held.set(id, held);
      if (fields === null) {
        this.#ack(held); // deleted or trimmed while pending: nothing left to handle
        continue;
      }
      this.stats.received++;
      const parsed = parseStreamEntry(fields, stream.destination);
      if (!parsed.ok) {
        this.stats.rejected++;
        this.#o.logger.warn({ consumer: 'redis', stream: stream.key, entryId, reason: parsed.message }, 'redis consumer: unreadable entry, moved to the dead-letter stream');
        this.#emitter.fire('rejected', { stream: stream.key, entryId, reason: parsed.message });
        this.#track(this.#deadLetter(held, null, `unreadable entry: ${parsed.message}`));
      } else if (handler.kind === 'queue') {
        batch.push({ held, event: parsed.event });
      } else {
        const event = parsed.event;
        this.#dispatcher.push(event.key, () => this.#handle(held, event, handler.inbox)).catch((err: unknown) => this.#report('handle', err));
      }
    }
    if (handler.kind === 'queue' && batch.length > 0) {
      this.#dispatcher.push(QUEUE_KEY, () => this.#receive(batch, handler.queue)).catch((err: unknown) => this.#report('queue', err));
    }
  }

  async #handle(held: Held, event: OutboxEvent, inbox: Inbox): Promise<void> {
    this.#byEventId.set(event.id, held);
    const started = performance.now();
    let outcome: Awaited<ReturnType<typeof processUntilSettled>> = null;
    try {
      for (let failures = 0; ; failures++) {
        try {
          outcome = await processUntilSettled(inbox, event, held.controller.signal);
          break;
        } catch (err) {
          // The inbox store itself failed (database down): retry in place, holding the key's order.
          this.#report('inbox', err);
          held.retrying = true;
          if (this.#state === 'stopping') held.controller.abort();
          const waited = await sleep(Math.min(5000, 100 * 2 ** Math.min(failures, 6)), true, { signal: held.controller.signal }).catch(() => false);
          if (!waited) break;
        }
      }
    } finally {
      this.#byEventId.delete(event.id);
    }
    if (outcome === null) return this.#release(held);
    this.stats[outcome.status]++;
    this.#emitter.fire('settled', { stream: held.stream.key, entryId: held.entryId, id: event.id, type: event.type, status: outcome.status, durationMs: performance.now() - started });
    if (outcome.status === 'dead') this.#track(this.#deadLetter(held, event, `handler failed ${outcome.attempts} times: ${outcome.error}`));
    else this.#ack(held);
  }

  /** Worker mode: one transaction stores the batch in the inbox queue (a redelivered id is ignored), then it is acked. */
  async #receive(batch: readonly { held: Held; event: OutboxEvent }[], queue: InboxQueue): Promise<void> {
    const started = performance.now();
    let refused: QueueRefusal[] = [];
    for (let failures = 0; ; failures++) {
      try {
        refused = await queue.receive(batch.map((b) => b.event));
        break;
      } catch (err) {
        this.#report('queue', err);
        const waited = await sleep(Math.min(5000, 100 * 2 ** Math.min(failures, 6)), true, { signal: this.#stop.signal }).catch(() => false);
        if (!waited) return batch.forEach((b) => this.#release(b.held));
      }
    }
    const durationMs = performance.now() - started;
    const reasons = new Map(refused.map((r) => [r.index, r.reason]));
    for (const [n, { held, event }] of batch.entries()) {
      const reason = reasons.get(n);
      if (reason !== undefined) {
        // The queue can never hold it: to the dead-letter stream, never retried.
        this.stats.rejected++;
        this.#emitter.fire('rejected', { stream: held.stream.key, entryId: held.entryId, reason });
        this.#track(this.#deadLetter(held, event, reason));
        continue;
      }
      this.stats.queued++;
      this.#emitter.fire('settled', { stream: held.stream.key, entryId: held.entryId, id: event.id, type: event.type, status: 'queued', durationMs });
      this.#ack(held);
    }
  }

  /** Queues an XACK; acks collected meanwhile go out together, one XACK per stream in one pipeline. */
  #ack(held: Held): void {
    const list = this.#acks.get(held.stream);
    if (list) list.push(held);
    else this.#acks.set(held.stream, [held]);
    this.#flushing ??= Promise.resolve()
      .then(() => this.#flushAcks())
      .finally(() => {
        this.#flushing = null;
      });
  }

  async #flushAcks(): Promise<void> {
    while (this.#acks.size > 0) {
      const acks = this.#acks;
      this.#acks = new Map();
      const all = [...acks.values()].flat();
      if (this.#commands === null) {
        // Stopped (a handler outlived stopTimeoutMs): the entries stay pending for redelivery.
        all.forEach((held) => this.#release(held));
        continue;
      }
      const pipeline = this.#commands.pipeline();
      for (const [stream, list] of acks) pipeline.call('XACK', [stream.key, this.#o.group, ...list.map((h) => h.entryId)]);
      // A failed XACK leaves the entry pending: it is reclaimed after claimIdleMs, and the inbox skips it.
      const replies = await pipeline.exec().catch((err: unknown) => [[err, null]] as [unknown, unknown][]);
      const failed = replies?.find(([err]) => err)?.[0];
      if (failed) this.#report('XACK', failed);
      else this.#recovered('XACK');
      all.forEach((held) => this.#release(held));
      if (!failed) this.stats.acked += all.length;
    }
  }

  /** Adds the entry to the dead-letter stream and acks it, in one MULTI; retried a few times, else left pending. */
  async #deadLetter(held: Held, event: OutboxEvent | null, reason: string): Promise<void> {
    const { stream, entryId } = held;
    const o = this.#o;
    const fields = [...held.fields, 'dead.reason', reason.slice(0, 2000), 'dead.stream', stream.key, 'dead.entryId', entryId, 'dead.group', o.group, 'dead.consumer', o.consumer, 'dead.at', new Date().toISOString()];
    try {
      for (let attempt = 1; ; attempt++) {
        if (this.#commands === null) return; // stopped: stays pending for redelivery
        try {
          const replies = await this.#commands.multi().call('XADD', [stream.deadLetter, '*', ...fields]).call('XACK', [stream.key, o.group, entryId]).exec();
          const failed = replies?.find(([err]) => err)?.[0];
          if (replies === null || failed) throw failed ?? new Error('MULTI was discarded');
          break;
        } catch (err) {
          this.#report('dead letter', err);
          if (attempt >= 3) return;
          await sleep(200 * attempt);
        }
      }
      this.stats.acked++;
      o.logger.warn({ consumer: 'redis', stream: stream.key, entryId, id: event?.id, type: event?.type, deadLetterStream: stream.deadLetter }, 'redis consumer: entry dead-lettered');
      this.#emitter.fire('deadLettered', { stream: stream.key, entryId, id: event?.id ?? null, deadLetterStream: stream.deadLetter, reason });
    } finally {
      this.#release(held);
    }
  }

  #scheduleClaim(delayMs: number): void {
    if (this.#state !== 'running') return;
    this.#claimTimer = setTimeout(() => {
      this.#claiming = this.#claimRound()
        .catch((err: unknown) => this.#report('XAUTOCLAIM', err))
        .finally(() => {
          this.#claiming = null;
          this.#scheduleClaim(this.#o.claimIntervalMs);
        });
    }, delayMs);
  }

  /** Keeps this process's entries fresh (so nobody claims them), then takes over entries idle longer than claimIdleMs. */
  async #claimRound(): Promise<void> {
    const o = this.#o;
    const now = Date.now();
    const stale = [...this.#held.values()].filter((h) => now - h.touchedAt >= o.claimIntervalMs);
    if (stale.length > 0) {
      const pipeline = this.#commands!.pipeline();
      for (const s of o.streams) {
        const ids = stale.filter((h) => h.stream === s).map((h) => h.entryId);
        // JUSTID: resets the idle time without counting a delivery.
        if (ids.length > 0) pipeline.call('XCLAIM', [s.key, o.group, o.consumer, 0, ...ids, 'JUSTID']);
      }
      await pipeline.exec();
      for (const h of stale) h.touchedAt = now;
    }
    for (const s of o.streams) {
      for (let round = 0; round < 10 && this.#state === 'running' && this.#held.size < Math.max(o.count, o.concurrency); round++) {
        const reply = (await this.#commands!.call('XAUTOCLAIM', [s.key, o.group, o.consumer, o.claimIdleMs, this.#cursors.get(s.key) ?? '0-0', 'COUNT', o.count])) as [string, RawEntry[]];
        const [next, entries] = reply;
        this.#cursors.set(s.key, next);
        const fresh = entries.filter(([id]) => !this.#held.has(`${s.key}\u0000${id}`));
        if (fresh.length > 0) await this.#takeOver(s, fresh);
        if (next === '0-0') break;
      }
    }
  }

  async #takeOver(s: ConsumerStream, entries: readonly RawEntry[]): Promise<void> {
    const o = this.#o;
    this.stats.reclaimed += entries.length;
    o.logger.info({ consumer: 'redis', stream: s.key, count: entries.length }, 'redis consumer: took over entries pending too long');
    this.#emitter.fire('reclaimed', { stream: s.key, count: entries.length });
    // An entry delivered too often crashed or stalled every consumer that took it: dead-letter it, not again.
    const pipeline = this.#commands!.pipeline();
    for (const [id] of entries) pipeline.call('XPENDING', [s.key, o.group, id, id, 1]);
    const counts = ((await pipeline.exec()) ?? []).map(([, r]) => Number((r as [[string, string, number, number]] | null)?.[0]?.[3] ?? 0));
    const keep: RawEntry[] = [];
    entries.forEach((entry, i) => {
      const deliveries = counts[i] ?? 0;
      if (deliveries <= o.maxDeliveries || entry[1] === null) return void keep.push(entry);
      const held: Held = { stream: s, entryId: entry[0], fields: entry[1], controller: new AbortController(), touchedAt: Date.now(), retrying: false };
      this.#held.set(`${s.key}\u0000${entry[0]}`, held);
      const parsed = parseStreamEntry(entry[1], s.destination);
      this.#track(this.#deadLetter(held, parsed.ok ? parsed.event : null, `delivered ${deliveries} times without an ack (maxDeliveries ${o.maxDeliveries}): its consumers crashed or stalled while handling it`));
    });
    this.#accept(s, keep);
  }

  async #stopNow(): Promise<void> {
    await this.#starting?.catch(() => {});
    if (this.#state !== 'running') return;
    const o = this.#o;
    this.#state = 'stopping';
    this.#stop.abort();
    clearTimeout(this.#claimTimer);
    this.#room?.();
    // UNBLOCK goes over the other connection and may overtake the read it should end: repeat until the loop is out.
    const reading = this.#reading?.then(() => true);
    while (this.#readerId !== null && reading) {
      await this.#commands!.call('CLIENT', ['UNBLOCK', this.#readerId]).catch(() => {});
      if (await Promise.race([reading, sleep(100, false)])) break;
    }
    await this.#reading;
    await this.#claiming;
    for (const held of this.#held.values()) if (held.retrying) held.controller.abort();
    const settled = async (): Promise<void> => {
      await this.#dispatcher.onIdle();
      while (this.#side.size > 0 || this.#flushing) await Promise.allSettled([...this.#side, this.#flushing]);
    };
    const timer = sleep(o.stopTimeoutMs, 'timeout' as const, { ref: false });
    if ((await Promise.race([settled().then(() => 'done' as const), timer])) === 'timeout') {
      o.logger.warn({ consumer: 'redis', inFlight: this.#held.size }, 'redis consumer: stop timed out; unfinished entries stay pending for redelivery');
      for (const held of this.#held.values()) held.controller.abort();
      await Promise.race([settled(), sleep(1000, undefined, { ref: false })]);
    }
    this.#unlisten?.();
    this.#unlisten = null;
    const commands = this.#commands;
    const reader = this.#reader;
    this.#commands = this.#reader = null;
    this.#readerId = null;
    this.#state = 'stopped';
    reader?.disconnect();
    if (commands && o.connection.kind === 'url') {
      await commands.quit().catch(() => {});
      commands.disconnect();
    }
  }

  /** Waits until fewer entries are held than one read may add. */
  async #waitForRoom(): Promise<void> {
    const limit = Math.max(this.#o.count, this.#o.concurrency);
    while (this.#held.size >= limit && this.#state === 'running') {
      await new Promise<void>((resolve) => (this.#room = resolve));
    }
  }

  #release(held: Held): void {
    this.#held.delete(`${held.stream.key}\u0000${held.entryId}`);
    const wake = this.#room;
    this.#room = null;
    wake?.();
  }

  #track(work: Promise<unknown>): void {
    this.#side.add(work);
    void work.finally(() => this.#side.delete(work));
  }

  /** Reports a failure: an `error` event each time, a log line once per outage of that operation. */
  #report(operation: string, err: unknown): void {
    const message = connectionProblem(err);
    this.#emitter.fire('error', { operation, message });
    if (this.#failing.has(operation)) return;
    this.#failing.add(operation);
    this.#o.logger.warn({ consumer: 'redis', address: this.#ctx.address, operation, err: message }, 'redis consumer: operation failed; retrying');
  }

  #recovered(operation: string): void {
    if (this.#failing.delete(operation)) this.#o.logger.info({ consumer: 'redis', address: this.#ctx.address, operation }, 'redis consumer: operation works again');
  }

  /** Our own clients need an error listener, or ioredis prints every reconnect failure to stderr. */
  #watch(client: Redis, role: string): void {
    client.on('error', (err: Error & { code?: string }) => {
      if (this.#state === 'running') this.#o.logger.debug({ consumer: 'redis', role, address: this.#ctx.address, code: err.code ?? err.name }, 'redis consumer: connection error');
    });
  }
}

/**
 * The per-stream entries of an XREADGROUP reply in any of its shapes: RESP2
 * `[[key, entries], ...]`, RESP3 maps as ioredis gives them by default (flat
 * `[key, entries, ...]`) or as objects (`replyMapping: 'resp3'`), a Map.
 */
function streamsOf(reply: unknown): [string, RawEntry[]][] {
  if (reply === null || reply === undefined) return [];
  if (reply instanceof Map) return [...(reply as Map<unknown, RawEntry[]>)].map(([k, v]) => [String(k), v]);
  if (!Array.isArray(reply)) return Object.entries(reply as Record<string, RawEntry[]>);
  if (reply.length === 0 || Array.isArray(reply[0])) return (reply as [unknown, RawEntry[]][]).map(([k, v]) => [String(k), v]);
  const pairs: [string, RawEntry[]][] = [];
  for (let i = 0; i + 1 < reply.length; i += 2) pairs.push([String(reply[i]), reply[i + 1] as RawEntry[]]);
  return pairs;
}
