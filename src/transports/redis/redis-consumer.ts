import { setTimeout as sleep } from 'node:timers/promises';
import type { Redis } from 'ioredis';
import { FiringEmitter, type TypedEmitter } from '../../core/emitter.ts';
import type { OutboxEvent } from '../../core/envelope.ts';
import { ConfigError } from '../../core/errors.ts';
import type { HealthReport } from '../../core/health.ts';
import type { Consumer } from '../../core/inbox-ports.ts';
import { ConsumerCore, type ConsumerCounts, type ConsumerErrorEvent } from '../../inbox/consumer/consumer-core.ts';
import { DeliveryCore } from '../../inbox/consumer/delivery-core.ts';
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
  error: ConsumerErrorEvent;
}

/** Counters since construction. */
export interface RedisConsumerStats extends ConsumerCounts {
  reclaimed: number;
  acked: number;
}

/** One entry this process holds (read or claimed, not yet acked or released). */
interface Held {
  readonly stream: ConsumerStream;
  readonly entryId: string;
  readonly fields: readonly string[];
  /** Deliveries counted by the group when this process took the entry over; 0 when read. */
  readonly deliveries: number;
  touchedAt: number;
}

type RawEntry = readonly [entryId: string, fields: string[] | null];

class ConsumerEmitter extends FiringEmitter<RedisConsumerEvents> {}

/**
 * Reads Redis streams with a consumer group (XREADGROUP, one consumer name
 * per process) and hands each entry's event to an inbox, acking (XACK) only
 * after the inbox committed: one key's events run in order, different keys in
 * parallel. Dead events and unreadable entries are added to a dead-letter
 * stream and acked in one MULTI. Entries left pending by a dead consumer are
 * taken over with XAUTOCLAIM after `claimIdleMs`; the inbox skips those it
 * already committed. Only the adapter lives here; the settle and ack loop is
 * the shared DeliveryCore. See docs/transports/redis.md#consuming.
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
  readonly #deliveries: DeliveryCore<Held>;
  /** Entries read or claimed and not yet acked or released (also those whose XACK is on its way), by stream and entry id. */
  readonly #held = new Map<string, Held>();
  readonly #core: ConsumerCore;
  #acks = new Map<ConsumerStream, Held[]>();
  #flushing: Promise<void> | null = null;
  #commands: Redis | null = null;
  #reader: Redis | null = null;
  #readerId: number | null = null;
  #reading: Promise<void> | null = null;
  #claimTimer: NodeJS.Timeout | undefined;
  #claiming: Promise<void> | null = null;
  #cursors = new Map<string, string>();

  /** Throws ConfigError naming the field when an option is invalid. Connects nothing until start(). */
  constructor(options: RedisConsumerOptions) {
    this.#o = resolveRedisConsumerOptions(options);
    const c = this.#o.connection;
    this.#ctx =
      c.kind === 'url'
        ? { address: c.display, addressField: 'url', userField: c.userField, passwordField: c.passwordField, username: c.username, password: c.password }
        : { address: c.display, addressField: 'client', userField: 'client', passwordField: 'client', username: undefined, password: undefined };
    this.#core = new ConsumerCore({
      name: 'redis',
      prefix: 'redis consumer',
      logger: this.#o.logger,
      context: () => ({ consumer: 'redis', address: this.#ctx.address }),
      onError: (operation, message) => this.#emitter.fire('error', { operation, message }),
      connected: () => this.#reader?.status === 'ready' && this.#commands?.status === 'ready',
      describe: connectionProblem,
      logOncePerOutage: true,
    });
    const o = this.#o;
    this.#deliveries = new DeliveryCore<Held>({
      core: this.#core,
      handler: o.handler,
      concurrency: o.concurrency,
      batch: o.count,
      // What was read is settled at stop (one try each); an entry waiting to retry stays pending.
      onStop: 'finish',
      noun: 'entry',
      port: {
        ack: (held) => this.#ack(held),
        deadLetter: (held, reason, event) => this.#deadLetter(held, event, reason),
        release: (held) => this.#release(held),
        // An entry delivered too often crashed or stalled every consumer that took it: dead-letter it, not again.
        admit: (held) =>
          held.deliveries <= o.maxDeliveries ? 'handle' : { deadLetter: `delivered ${held.deliveries} times without an ack (maxDeliveries ${o.maxDeliveries}): its consumers crashed or stalled while handling it` },
      },
      hooks: {
        settled: (held, event, status, durationMs) => {
          this.stats[status]++;
          this.#emitter.fire('settled', { stream: held.stream.key, entryId: held.entryId, id: event.id, type: event.type, status, durationMs });
        },
        rejected: (held, reason) => {
          this.stats.rejected++;
          o.logger.warn({ consumer: 'redis', stream: held.stream.key, entryId: held.entryId, reason }, 'redis consumer: unreadable or refused entry, moved to the dead-letter stream');
          this.#emitter.fire('rejected', { stream: held.stream.key, entryId: held.entryId, reason });
        },
      },
    });
  }

  get #state(): ConsumerCore['state'] {
    return this.#core.state;
  }

  /** Running, both connections ready, and the last failure if it has not recovered. */
  health(): Promise<HealthReport> {
    return this.#core.health();
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
   * While the broker does not answer (refused, unknown host, timeout) it
   * keeps trying with capped backoff (0.5 s doubling to 15 s), a warning and
   * an `error` event per attempt, until connected or stop(); stop() makes it
   * reject with AbortedError.
   */
  start(): Promise<void> {
    return this.#core.start(
      () => this.#start(),
      () => {
        this.#reading = this.#readLoop();
        this.#scheduleClaim(0);
      },
    );
  }

  /**
   * Stops reading, lets handlers in progress finish and ack (a handler
   * waiting to retry is not waited for: its entry stays pending), then
   * disconnects. Entries not finished within `stopTimeoutMs` stay pending and
   * are redelivered (to this consumer name's next start, or claimed by another).
   */
  stop(): Promise<void> {
    return this.#core.stop(() => this.#stopNow());
  }

  async #start(): Promise<void> {
    const o = this.#o;
    const c = o.connection;
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
      throw err;
    }
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
      // Fewer entries held than one read may add.
      await this.#deliveries.whenBelow(Math.max(o.count, o.concurrency), this.#core.signal);
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
        await this.#core.pause(Math.min(2000, 100 * 2 ** Math.min(failures++, 5)));
        continue;
      }
      const answered = new Set<number>();
      for (const [key, entries] of streamsOf(reply)) {
        const i = keys.indexOf(key);
        if (i < 0) continue;
        answered.add(i);
        if (ids[i] !== '>') {
          ids[i] = entries.length === 0 ? '>' : entries[entries.length - 1]![0];
          // This name's own pending entries (a restart with a stable name): their delivery counts, so that one
          // that crashed every process taking it is dead-lettered, as when another consumer takes it over.
          if (entries.length > 0) this.#accept(o.streams[i]!, entries, await this.#deliveryCounts(o.streams[i]!, entries));
          continue;
        }
        this.#accept(o.streams[i]!, entries);
      }
      for (let i = 0; i < ids.length; i++) if (backlog && !answered.has(i)) ids[i] = '>';
    }
  }

  /** Hands entries to the shared core (a deleted or trimmed one is acked: nothing left to handle). */
  #accept(stream: ConsumerStream, entries: readonly RawEntry[], deliveries: readonly number[] = []): void {
    entries.forEach(([entryId, fields], i) => {
      const id = `${stream.key}\u0000${entryId}`;
      if (this.#held.has(id)) return; // ours already (a slow handler's entry claimed again)
      const held: Held = { stream, entryId, fields: fields ?? [], deliveries: deliveries[i] ?? 0, touchedAt: Date.now() };
      this.#held.set(id, held);
      if (fields === null) return this.#ack(held);
      this.stats.received++;
      this.#deliveries.accept(held, parseStreamEntry(fields, stream.destination));
    });
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

  /**
   * Adds the entry to the dead-letter stream, then acks it; retried a few
   * times, else left pending (false). Not one MULTI: Redis does not roll a
   * MULTI back when a command fails as it runs (XADD to a key of another
   * type), so the XACK applied without the copy. A crash between the two
   * leaves a second copy later (at-least-once into the dead-letter stream).
   */
  async #deadLetter(held: Held, event: OutboxEvent | null, reason: string): Promise<boolean> {
    const { stream, entryId } = held;
    const o = this.#o;
    const fields = [...held.fields, 'dead.reason', reason.slice(0, 2000), 'dead.stream', stream.key, 'dead.entryId', entryId, 'dead.group', o.group, 'dead.consumer', o.consumer, 'dead.at', new Date().toISOString()];
    let copied = false;
    try {
      for (let attempt = 1; ; attempt++) {
        if (this.#commands === null) return false; // stopped: stays pending for redelivery
        try {
          if (!copied) await this.#commands.call('XADD', [stream.deadLetter, '*', ...fields]);
          copied = true;
          await this.#commands.call('XACK', [stream.key, o.group, entryId]);
          break;
        } catch (err) {
          this.#report('dead letter', err);
          if (attempt >= 3) return false;
          await sleep(200 * attempt);
        }
      }
      this.stats.acked++;
      o.logger.warn({ consumer: 'redis', stream: stream.key, entryId, id: event?.id, type: event?.type, deadLetterStream: stream.deadLetter }, 'redis consumer: entry dead-lettered');
      this.#emitter.fire('deadLettered', { stream: stream.key, entryId, id: event?.id ?? null, deadLetterStream: stream.deadLetter, reason });
      return true;
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
      const sent: ConsumerStream[] = [];
      for (const s of o.streams) {
        const ids = stale.filter((h) => h.stream === s).map((h) => h.entryId);
        // JUSTID: resets the idle time without counting a delivery.
        if (ids.length > 0) {
          pipeline.call('XCLAIM', [s.key, o.group, o.consumer, 0, ...ids, 'JUSTID']);
          sent.push(s);
        }
      }
      // A refused refresh (an ACL, a group gone) lets the entries' idle time grow: another consumer may take them
      // over after claimIdleMs while their handlers run. Reported, and tried again next round.
      const replies = (await pipeline.exec()) ?? [];
      const refused = new Set<ConsumerStream>();
      for (const [i, s] of sent.entries()) {
        const err = replies[i]?.[0];
        if (err) {
          refused.add(s);
          this.#report('XCLAIM', err);
        }
      }
      for (const h of stale) if (!refused.has(h.stream)) h.touchedAt = now;
      if (refused.size === 0) this.#recovered('XCLAIM');
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
    this.#accept(s, entries, await this.#deliveryCounts(s, entries));
  }

  /** Each entry's delivery count (XPENDING), 0 where unknown (the entry is no longer pending, or the call failed). */
  async #deliveryCounts(s: ConsumerStream, entries: readonly RawEntry[]): Promise<number[]> {
    const pipeline = this.#commands!.pipeline();
    for (const [id] of entries) pipeline.call('XPENDING', [s.key, this.#o.group, id, id, 1]);
    const replies = await pipeline.exec().catch(() => null);
    return entries.map((_, i) => Number((replies?.[i]?.[1] as [[string, string, number, number]] | null | undefined)?.[0]?.[3] ?? 0));
  }

  async #stopNow(): Promise<void> {
    const o = this.#o;
    clearTimeout(this.#claimTimer);
    // UNBLOCK goes over the other connection and may overtake the read it should end: repeat until the loop is out.
    const reading = this.#reading?.then(() => true);
    while (this.#readerId !== null && reading) {
      await this.#commands!.call('CLIENT', ['UNBLOCK', this.#readerId]).catch(() => {});
      if (await Promise.race([reading, sleep(100, false)])) break;
    }
    await this.#reading;
    await this.#claiming;
    const settled = async (): Promise<void> => {
      await this.#deliveries.onIdle();
      while (this.#flushing) await this.#flushing;
    };
    const timer = sleep(o.stopTimeoutMs, 'timeout' as const, { ref: false });
    if ((await Promise.race([settled().then(() => 'done' as const), timer])) === 'timeout') {
      o.logger.warn({ consumer: 'redis', inFlight: this.#held.size }, 'redis consumer: stop timed out; unfinished entries stay pending for redelivery');
      this.#deliveries.releaseAll();
      await Promise.race([settled(), sleep(1000, undefined, { ref: false })]);
    }
    const commands = this.#commands;
    const reader = this.#reader;
    this.#commands = this.#reader = null;
    this.#readerId = null;
    reader?.disconnect();
    if (commands && o.connection.kind === 'url') {
      await commands.quit().catch(() => {});
      commands.disconnect();
    }
  }

  /** The entry is no longer this process's: acked, or left pending for redelivery. */
  #release(held: Held): void {
    this.#held.delete(`${held.stream.key}\u0000${held.entryId}`);
  }

  /** Reports a failure: an `error` event each time, a log line once per outage of that operation. */
  #report(operation: string, err: unknown): void {
    this.#core.failed(operation, err);
  }

  #recovered(operation: string): void {
    this.#core.recovered(operation);
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
