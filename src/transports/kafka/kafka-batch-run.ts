/**
 * The Kafka consumer's bookkeeping of one fetched partition batch: which
 * records finished, the offset committed after the contiguous finished
 * prefix, heartbeats while handlers run, and whether the batch goes on
 * taking records (not after stop, a rebalance, a seek or a pause).
 */
import type { EachBatchPayload, KafkaMessage } from 'kafkajs';
import { parseKafkaMessage, type ParsedKafkaMessage } from './kafka-message.ts';
import { thrownText } from '../../core/error-text.ts';

/** During a long batch, progress is committed at least this often. */
const COMMIT_EVERY_MS = 1000;

/** One group generation as this process sees it: revoked once a heartbeat or commit says the group is rebalancing. */
export class Generation {
  revoked = false;
  readonly abort = new AbortController();
  revoke(): void {
    this.revoked = true;
    this.abort.abort();
  }
}

export interface BatchHost {
  readonly heartbeatIntervalMs: number;
  /** A heartbeat or commit failed: a rebalance revokes the generation, anything else is logged. */
  failed(operation: string, err: unknown, generation: Generation): void;
  committed(topic: string, partition: number, offset: string): void;
}

/** One fetched batch of one partition: which records finished, what is committed, and whether to go on. */
export class BatchRun {
  readonly topic: string;
  readonly partition: number;
  readonly messages: readonly KafkaMessage[];
  readonly signal: AbortSignal;
  /** Why the batch stopped taking records; null while it goes on. */
  halt: 'stopping' | 'revoked' | 'stale' | 'backoff' | null = null;
  backoffMs = 0;
  readonly #p: EachBatchPayload;
  readonly #generation: Generation;
  readonly #host: BatchHost;
  readonly #destination: string;
  readonly #parsed: (ParsedKafkaMessage | undefined)[] = [];
  readonly #done: boolean[] = [];
  /** Index of the first record not finished: everything before it may be committed. */
  #next = 0;
  #committedIndex = -1;
  #lastCommit = performance.now();
  #committing: Promise<void> = Promise.resolve();
  readonly #timer: NodeJS.Timeout;
  readonly #detach: (() => void)[] = [];

  constructor(p: EachBatchPayload, generation: Generation, stop: AbortSignal, host: BatchHost, destination: string) {
    this.#p = p;
    this.topic = p.batch.topic;
    this.partition = p.batch.partition;
    this.messages = p.batch.messages;
    this.#generation = generation;
    this.#host = host;
    this.#destination = destination;
    // Not AbortSignal.any: its dependants stay attached to a long-lived source signal on Node 20.
    const controller = new AbortController();
    const abort = (): void => controller.abort();
    this.signal = controller.signal;
    for (const source of [stop, generation.abort.signal]) {
      if (source.aborted) controller.abort();
      source.addEventListener('abort', abort, { once: true });
      this.#detach.push(() => source.removeEventListener('abort', abort));
    }
    // Heartbeats go on while a handler runs or waits; a rebalance seen by one revokes the generation.
    this.#timer = setInterval(() => void this.beat(), host.heartbeatIntervalMs);
  }

  parsed(i: number): ParsedKafkaMessage {
    return (this.#parsed[i] ??= parseGuarded(this.messages[i]!, this.#destination));
  }

  /** Whether to start another record: not while stopping, after a rebalance, after a seek, or after a backoff. */
  take(): boolean {
    if (this.halt !== null) return false;
    if (this.signal.aborted || !this.#p.isRunning()) this.halt = this.#generation.revoked ? 'revoked' : 'stopping';
    else if (this.#p.isStale()) this.halt = 'stale';
    return this.halt === null;
  }

  /** Stops the batch at a record whose retry is due later: the partition is paused for `ms`. */
  backoff(ms: number): void {
    this.halt ??= 'backoff';
    this.backoffMs = Math.max(this.backoffMs, ms);
  }

  finish(i: number): void {
    this.#done[i] = true;
    const before = this.#next;
    while (this.#done[this.#next]) this.#next++;
    // The fetch position: the next fetch of this partition starts after the last contiguous finished record.
    if (this.#next > before) this.#p.resolveOffset(this.messages[this.#next - 1]!.offset);
  }

  commitDue(): boolean {
    return performance.now() - this.#lastCommit >= COMMIT_EVERY_MS;
  }

  /** Commits offset + 1 of the last record below which all finished (never throws). */
  commit(): Promise<void> {
    this.#committing = this.#committing.then(() => this.#commitNow());
    return this.#committing;
  }

  async #commitNow(): Promise<void> {
    const last = this.#next - 1;
    if (last <= this.#committedIndex) return;
    const offset = (BigInt(this.messages[last]!.offset) + 1n).toString();
    try {
      // The payload's commit has no "is running" check, so progress is committed while stopping too.
      await this.#p.commitOffsetsIfNecessary({ topics: [{ topic: this.topic, partitions: [{ partition: this.partition, offset }] }] });
      this.#committedIndex = last;
      this.#lastCommit = performance.now();
      this.#host.committed(this.topic, this.partition, offset);
    } catch (err) {
      this.#host.failed('commit', err, this.#generation);
    }
  }

  async beat(): Promise<void> {
    try {
      await this.#p.heartbeat();
    } catch (err) {
      this.#host.failed('heartbeat', err, this.#generation);
    }
  }

  end(): void {
    clearInterval(this.#timer);
    for (const detach of this.#detach) detach();
  }
}

/** A record the parser throws on is unreadable, never a batch that throws: kafkajs would fetch it again for ever. */
function parseGuarded(message: Parameters<typeof parseKafkaMessage>[0], destination: string): ParsedKafkaMessage {
  try {
    return parseKafkaMessage(message, destination);
  } catch (err) {
    return { ok: false, message: `the record cannot be read (${thrownText(err)})` };
  }
}
