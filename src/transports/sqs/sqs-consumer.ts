import {
  ChangeMessageVisibilityBatchCommand,
  DeleteMessageBatchCommand,
  GetQueueAttributesCommand,
  ReceiveMessageCommand,
  SendMessageCommand,
  SQSClient,
  type Message,
} from '@aws-sdk/client-sqs';
import { keyHash, TypedEmitter } from '../../core/emitter.ts';
import type { OutboxEvent } from '../../core/envelope.ts';
import { ConfigError } from '../../core/errors.ts';
import type { HealthReport, HealthSource } from '../../core/health.ts';
import type { Consumer } from '../../core/inbox-ports.ts';
import { backoffMs, ConsumerCore, within, type ConsumerCounts, type ConsumerErrorEvent } from '../../inbox/consumer/consumer-core.ts';
import { DeliveryCore, type SettledStatus } from '../../inbox/consumer/delivery-core.ts';
import { SqsBatcher } from './sqs-batcher.ts';
import { resolveSqsConsumerOptions, type ResolvedSqsConsumerOptions, type SqsConsumerOptions } from './sqs-consumer-options.ts';
import { decodeSqsMessage, MAX_ATTRIBUTES } from './sqs-message.ts';
import { classifyRequestError, startError } from './sqs-outcomes.ts';
import { sdkClientConfig } from './sqs-transport-options.ts';

export { resolveSqsConsumerOptions, type ResolvedSqsConsumerOptions, type SqsConsumerOptions } from './sqs-consumer-options.ts';

/** Events of an SqsConsumer, for metrics and logs. Never carry payloads. */
export interface SqsConsumerEvents {
  /** A message's event committed (inbox or queue) and the message was deleted. `receiveCount`: SQS's ApproximateReceiveCount. */
  settled: { readonly messageId: string; readonly id: string; readonly type: string; readonly status: SettledStatus; readonly receiveCount: number; readonly durationMs: number };
  /** A message that is not a readable txbox event (or that the inbox queue refused). */
  rejected: { readonly messageId: string; readonly reason: string };
  /** A dead event or unreadable message: copied to `deadLetterQueueUrl` and deleted, or (null) left to the queue's redrive policy. */
  deadLettered: { readonly messageId: string; readonly id: string | null; readonly deadLetterQueueUrl: string | null; readonly reason: string };
  /** A message was made visible again (stop, or its handler was waiting to retry): SQS delivers it again. */
  released: { readonly messageId: string };
  /** An SQS, inbox or queue operation failed; it is retried. */
  error: ConsumerErrorEvent;
}

export class SqsConsumerEmitter extends TypedEmitter<SqsConsumerEvents> {
  /** @internal */
  fire<K extends keyof SqsConsumerEvents>(name: K, payload: SqsConsumerEvents[K]): void {
    this.emit(name, payload);
  }
}

/** Counters since construction (`dead`: events dead in the inbox; `rejected`: unreadable messages; both dead-lettered). */
export interface SqsConsumerStats extends ConsumerCounts {
  released: number;
  deleted: number;
  extended: number;
}

/**
 * Receives from an SQS queue (long polling) and hands each message's event
 * to an inbox, deleting the message only after the inbox committed. One
 * key's messages run one at a time in arrival order, different keys in
 * parallel; on a FIFO queue SQS itself holds a message group's next messages
 * until the ones in flight are deleted, so per-key order holds across
 * consumers. While a handler runs, its message's visibility timeout is
 * extended every third of it. Dead events and unreadable messages go to
 * `deadLetterQueueUrl`, or are left to the queue's redrive policy. Only the
 * adapter lives here; the settle and delete loop is the shared DeliveryCore.
 * See docs/transports/sqs.md#consuming.
 *
 * @example
 * const consumer = new SqsConsumer({ queueUrl, region: 'eu-west-1', inbox });
 * await consumer.start();
 * process.once('SIGTERM', () => void consumer.stop());
 */
export class SqsConsumer implements Consumer, HealthSource {
  readonly name = 'sqs';
  readonly events = new SqsConsumerEmitter();
  readonly stats: SqsConsumerStats = { received: 0, processed: 0, duplicate: 0, ignored: 0, held: 0, queued: 0, dead: 0, rejected: 0, released: 0, deleted: 0, extended: 0 };
  readonly #o: ResolvedSqsConsumerOptions;
  readonly #core: ConsumerCore;
  readonly #deliveries: DeliveryCore<Message>;
  #client: SQSClient | null = null;
  #visibilitySeconds = 30;
  /** The queue's redrive policy's maxReceiveCount, or null without one. */
  #maxReceiveCount: number | null = null;
  #loops: Promise<void>[] = [];
  /** Messages asked for by the ReceiveMessage calls in flight (they count toward maxInFlight). */
  #requested = 0;
  /** Resolved (and replaced) each time a ReceiveMessage call ends: what it had asked for no longer counts. */
  #receiveEnded = deferred();
  #extender: NodeJS.Timeout | undefined;
  /** Messages released while stopping, made visible once the long polls in flight ended (see #release). */
  readonly #releasedWhilePolling: Message[] = [];
  /** The extension round in progress, if any. */
  #extending: Promise<void> | null = null;
  #connected = false;
  readonly #deletes = new SqsBatcher<Message>((batch) => this.#deleteBatch(batch));
  readonly #releases = new SqsBatcher<Message>((batch) => this.#releaseBatch(batch));

  /** Throws ConfigError naming the field when an option is invalid. Sends nothing until start(). */
  constructor(options: SqsConsumerOptions) {
    const o = (this.#o = resolveSqsConsumerOptions(options));
    this.#core = new ConsumerCore({
      name: 'sqs',
      logger: o.logger,
      context: () => ({ queue: o.queueUrl }),
      onError: (operation, message) => this.events.fire('error', { operation, message }),
      connected: () => this.#connected,
      describe: (err) => classifyRequestError(err).reason,
      logOncePerOutage: true,
    });
    this.#deliveries = new DeliveryCore<Message>({
      core: this.#core,
      handler: o.handler,
      concurrency: o.concurrency,
      batch: o.batch,
      // SQS FIFO hands out a message group's messages together: a key's run commits in one transaction.
      keyRun: 10,
      port: {
        ack: (m) => this.#delete(m),
        deadLetter: (m, reason, event, attempts, kept) => this.#deadLetter(m, reason, event, attempts, kept),
        release: (m) => this.#release(m),
        // Received maxReceiveCount times: on its next receive SQS moves it to the dead-letter queue instead.
        lastDelivery: (m) => this.#maxReceiveCount !== null && receiveCount(m) >= this.#maxReceiveCount,
      },
      hooks: {
        settled: (m, event, status, durationMs) => {
          this.stats[status]++;
          // A dead event is reported by deadLettered once it was copied (or left to the redrive policy).
          if (status === 'dead') return;
          this.events.fire('settled', { messageId: m.MessageId ?? '', id: event.id, type: event.type, status, receiveCount: receiveCount(m), durationMs });
        },
        rejected: (m, reason) => {
          this.stats.rejected++;
          this.events.fire('rejected', { messageId: m.MessageId ?? '', reason });
        },
        deadLettered: (m, event, reason) => {
          const deadLetterQueueUrl = o.deadLetterQueueUrl;
          o.logger.warn({ queue: o.queueUrl, messageId: m.MessageId, id: event?.id, type: event?.type, keyHash: event ? keyHash(event.key) : undefined, deadLetterQueueUrl }, deadLetterQueueUrl ? 'txbox sqs consumer: dead-lettered; deleted' : 'txbox sqs consumer: dead; left to the queue\'s redrive policy');
          this.events.fire('deadLettered', { messageId: m.MessageId ?? '', id: event?.id ?? null, deadLetterQueueUrl, reason });
        },
        released: (m) => {
          this.stats.released++;
          this.events.fire('released', { messageId: m.MessageId ?? '' });
        },
      },
    });
  }

  /** Messages received and not yet deleted, dead-lettered or released. */
  get inFlight(): number {
    return this.#deliveries.inFlight;
  }

  /**
   * Checks the queue (and `deadLetterQueueUrl`), reads its visibility timeout
   * and redrive policy, and starts receiving. Throws ConfigError naming
   * `queueUrl`, `deadLetterQueueUrl`, `endpoint` or `credentials`.
   * While the broker does not answer (refused, unknown host, timeout) it
   * keeps trying with capped backoff (0.5 s doubling to 15 s), a warning and
   * an `error` event per attempt, until connected or stop(); stop() makes it
   * reject with AbortedError.
   */
  start(): Promise<void> {
    return this.#core.start(
      () => this.#open(),
      () => {
        this.#loops = Array.from({ length: this.#o.receiveConcurrency }, () => this.#receiveLoop());
        const every = Math.max(1000, Math.floor((this.#visibilitySeconds * 1000) / 3));
        this.#extender = setInterval(() => void this.#extend(), every);
      },
    );
  }

  /**
   * Stops receiving (the long poll in progress is waited for, at most
   * `waitTimeSeconds`; what it returns is made visible again at once), lets
   * handlers in progress commit and delete within `stopTimeoutMs` (the rest
   * become visible again), then flushes the deletes.
   */
  stop(): Promise<void> {
    return this.#core.stop(() => this.#close());
  }

  /** Running, the last receive succeeded, and the last failure if it has not recovered. */
  health(): Promise<HealthReport> {
    return this.#core.health();
  }

  async #open(): Promise<void> {
    const o = this.#o;
    const client = o.client ?? new SQSClient(sdkClientConfig(o));
    try {
      const attributes = await this.#queueAttributes(client, o.queueUrl, 'queueUrl');
      this.#visibilitySeconds = o.visibilityTimeoutSeconds ?? Number(attributes['VisibilityTimeout'] ?? 30);
      this.#maxReceiveCount = maxReceiveCountOf(attributes['RedrivePolicy']);
      if (o.deadLetterQueueUrl !== null) await this.#queueAttributes(client, o.deadLetterQueueUrl, 'deadLetterQueueUrl');
      else if (!attributes['RedrivePolicy']) {
        throw new ConfigError('deadLetterQueueUrl', `is not set and queue ${o.queueUrl} has no RedrivePolicy: dead events and unreadable messages would come back forever; give the queue a redrive policy (a dead-letter queue and maxReceiveCount) or set deadLetterQueueUrl`);
      }
    } catch (err) {
      if (o.client === undefined) client.destroy();
      throw err;
    }
    this.#client = client;
    this.#connected = true;
    o.logger.info({ queue: o.queueUrl, visibilityTimeoutSeconds: this.#visibilitySeconds, deadLetterQueueUrl: o.deadLetterQueueUrl }, 'txbox sqs consumer: started');
  }

  async #queueAttributes(client: SQSClient, url: string, field: 'queueUrl' | 'deadLetterQueueUrl'): Promise<Record<string, string>> {
    try {
      const out = await client.send(new GetQueueAttributesCommand({ QueueUrl: url, AttributeNames: ['VisibilityTimeout', 'RedrivePolicy'] }), { abortSignal: AbortSignal.timeout(this.#o.requestTimeoutMs) });
      return out.Attributes ?? {};
    } catch (err) {
      const failure = classifyRequestError(err);
      const error = startError(failure, `queue ${url}`, err);
      if (error) throw error;
      if (failure.kind === 'destination-down') throw new ConfigError(field, `queue ${url} does not exist (${failure.reason}); create it or fix ${field}`, { cause: err });
      throw new ConfigError(field, `cannot read queue ${url} (${failure.reason})`, { cause: err });
    }
  }

  async #receiveLoop(): Promise<void> {
    const o = this.#o;
    const core = this.#core;
    let failures = 0;
    // A receive asks for a full batch (fewer only when maxInFlight is smaller): a call per message costs as much as one per ten.
    const ask = Math.min(o.maxMessagesPerReceive, o.maxInFlight);
    while (core.running) {
      const room = o.maxInFlight - this.#deliveries.inFlight - this.#requested;
      if (room < ask) {
        // Room comes back when held messages settle or another receive ends (its unused reservation returns).
        const waited = new AbortController();
        try {
          await Promise.race([this.#receiveEnded.promise, this.#deliveries.whenBelow(o.maxInFlight - this.#requested - ask + 1, AbortSignal.any([core.signal, waited.signal]))]);
        } finally {
          waited.abort();
        }
        continue;
      }
      let messages: Message[] | null = null;
      this.#requested += ask;
      try {
        const out = await this.#client!.send(
          new ReceiveMessageCommand({
            QueueUrl: o.queueUrl,
            MaxNumberOfMessages: ask,
            WaitTimeSeconds: o.waitTimeSeconds,
            MessageAttributeNames: ['All'],
            MessageSystemAttributeNames: ['ApproximateReceiveCount', 'MessageGroupId'],
            ...(o.visibilityTimeoutSeconds === null ? {} : { VisibilityTimeout: o.visibilityTimeoutSeconds }),
          }),
          // Not aborted by stop(): a long poll abandoned by the client still takes messages on the server, which
          // would then stay invisible for their whole visibility timeout. stop() waits for it instead.
          { abortSignal: AbortSignal.timeout(o.waitTimeSeconds * 1000 + o.requestTimeoutMs) },
        );
        messages = out.Messages ?? [];
        failures = 0;
        this.#connected = true;
        core.recovered('receive');
      } catch (err) {
        if (core.running) {
          this.#connected = false;
          core.failed('receive', err);
        }
      } finally {
        // What this call asked for no longer counts (also during the backoff below).
        this.#requested -= ask;
        const ended = this.#receiveEnded;
        this.#receiveEnded = deferred();
        ended.resolve();
      }
      if (messages === null) {
        if (!core.running) break;
        await core.pause(backoffMs(failures++, 200, 30_000));
        continue;
      }
      for (const m of messages) {
        const parsed = decodeSqsMessage(m, o.destination);
        // Arrived while stopping: visible again at once, for another consumer (recorded dead first on its last receive).
        if (!core.running) {
          this.#deliveries.releaseUnaccepted(m, parsed);
          continue;
        }
        this.stats.received++;
        this.#deliveries.accept(m, parsed);
      }
    }
  }

  /**
   * Deletes after commit, in DeleteMessageBatch requests of up to 10 collected
   * across settles (SqsBatcher: a partial batch waits for the request in
   * flight). Returns at once; stop() waits for the requests.
   */
  #delete(m: Message): void {
    this.#deletes.add(m);
  }

  async #deleteBatch(chunk: readonly Message[]): Promise<void> {
    const client = this.#client;
    try {
      if (!client) throw new Error('the consumer is stopped');
      const out = await client.send(new DeleteMessageBatchCommand({ QueueUrl: this.#o.queueUrl, Entries: chunk.map((m, n) => ({ Id: `d${n}`, ReceiptHandle: m.ReceiptHandle! })) }), {
        abortSignal: AbortSignal.timeout(this.#o.requestTimeoutMs),
      });
      this.stats.deleted += out.Successful?.length ?? 0;
      // A receipt handle that expired (visibility lost): SQS delivers the message again and the inbox skips it.
      for (const f of out.Failed ?? []) this.#core.failed('delete', `${f.Code ?? 'Error'}: ${f.Message ?? ''}`);
      if ((out.Failed ?? []).length === 0) this.#core.recovered('delete');
    } catch (err) {
      this.#core.failed('delete', err);
    }
  }

  /**
   * Visible again at once, for this or another consumer (a FIFO group resumes
   * with it); batched like deletes. While stopping, not before this
   * consumer's long polls in flight ended: one of them would take it again,
   * spending a receive of the redrive policy's `maxReceiveCount` each time.
   */
  #release(m: Message): void {
    if (!this.#client || !m.ReceiptHandle) return;
    if (!this.#core.running && this.#loops.length > 0) return void this.#releasedWhilePolling.push(m);
    this.#releases.add(m);
  }

  async #releaseBatch(chunk: readonly Message[]): Promise<void> {
    const client = this.#client;
    if (!client) return;
    try {
      const out = await client.send(
        new ChangeMessageVisibilityBatchCommand({ QueueUrl: this.#o.queueUrl, Entries: chunk.map((m, n) => ({ Id: `r${n}`, ReceiptHandle: m.ReceiptHandle!, VisibilityTimeout: 0 })) }),
        { abortSignal: AbortSignal.timeout(this.#o.requestTimeoutMs) },
      );
      for (const f of out.Failed ?? []) this.#core.failed('release', `${f.Code ?? 'Error'}: ${f.Message ?? ''}`);
    } catch (err) {
      this.#core.failed('release', err);
    }
  }

  /**
   * Extends the visibility of every held message, so a long handler keeps it.
   * One round at a time (a round still running when the next is due skips
   * it), up to EXTEND_REQUESTS requests of 10 at once, each given up after
   * `requestTimeoutMs`: against an SQS gone silent, rounds would otherwise
   * pile up requests that the SDK gives up only after 15 minutes, holding the
   * client's connections (50) meanwhile, and with them every receive and delete.
   */
  #extend(): Promise<void> {
    if (this.#extending) return this.#extending;
    const client = this.#client;
    if (!client || !this.#core.running) return Promise.resolve();
    const held = [...this.#deliveries.held()];
    let next = 0;
    const worker = async (): Promise<void> => {
      while (next < held.length && this.#core.running) {
        const chunk = held.slice(next, (next += 10));
        await this.#extendChunk(client, chunk);
      }
    };
    const round = Promise.all(Array.from({ length: Math.min(EXTEND_REQUESTS, Math.ceil(held.length / 10)) }, worker)).then(() => undefined);
    this.#extending = round.finally(() => (this.#extending = null));
    return this.#extending;
  }

  async #extendChunk(client: SQSClient, chunk: readonly Message[]): Promise<void> {
    try {
      const out = await client.send(
        new ChangeMessageVisibilityBatchCommand({ QueueUrl: this.#o.queueUrl, Entries: chunk.map((m, n) => ({ Id: `v${n}`, ReceiptHandle: m.ReceiptHandle!, VisibilityTimeout: this.#visibilitySeconds })) }),
        { abortSignal: AbortSignal.timeout(this.#o.requestTimeoutMs) },
      );
      this.stats.extended += out.Successful?.length ?? 0;
      // A receipt handle that no longer works: the message's visibility ran out, SQS delivers it again (the inbox
      // skips it once this delivery committed). Reported, like a delete's.
      const failed = out.Failed ?? [];
      for (const f of failed) this.#core.failed('extend', `${f.Code ?? 'Error'}: ${f.Message ?? ''}`);
      if (failed.length === 0) this.#core.recovered('extend');
    } catch (err) {
      if (this.#core.running) this.#core.failed('extend', err);
    }
  }

  /**
   * Copies to deadLetterQueueUrl (retrying until stop) and deletes. Without
   * one: an event the inbox keeps as dead (its handler failed `attempts`
   * times) is deleted, as the inbox keeps it with its reason (`txbox inbox
   * dead`, `retry`; left in the queue it would come back as a duplicate of
   * that dead row and be deleted anyway, a visibility timeout later, its FIFO
   * group waiting); anything else (unreadable, refused by the queue, an event
   * the inbox store refused to record) is left to the queue's redrive policy,
   * never deleted: nothing else holds it.
   */
  async #deadLetter(m: Message, reason: string, event: OutboxEvent | null, attempts: number | null, kept: boolean): Promise<boolean> {
    const o = this.#o;
    const client = this.#client;
    if (!client) return false;
    if (o.deadLetterQueueUrl === null) {
      if (event !== null && attempts !== null && kept) this.#delete(m);
      return true; // otherwise visible again after its timeout; SQS moves it after maxReceiveCount
    }
    const attributes: Record<string, { DataType: string; StringValue?: string; BinaryValue?: Uint8Array }> = {};
    for (const [name, value] of Object.entries(m.MessageAttributes ?? {})) {
      if (value.DataType !== undefined) attributes[name] = { DataType: value.DataType, ...(value.StringValue !== undefined ? { StringValue: value.StringValue } : {}), ...(value.BinaryValue !== undefined ? { BinaryValue: value.BinaryValue } : {}) };
    }
    if (Object.keys(attributes).length < MAX_ATTRIBUTES) attributes['txbox-dead-reason'] = { DataType: 'String', StringValue: reason.replace(/[^\t\n\r\x20-\uD7FF\uE000-\uFFFD]/g, '?').slice(0, 1000) || 'unknown' };
    const fifo = o.deadLetterQueueUrl.endsWith('.fifo');
    const send = (): Promise<unknown> =>
      client.send(
        new SendMessageCommand({
          QueueUrl: o.deadLetterQueueUrl!,
          MessageBody: m.Body ?? '',
          MessageAttributes: attributes,
          ...(fifo ? { MessageGroupId: m.Attributes?.MessageGroupId ?? event?.key ?? 'txbox-dead', MessageDeduplicationId: m.MessageId } : {}),
        }),
      );
    if ((await this.#core.retrying('dead-letter', send)) === null) return false;
    this.#delete(m);
    return true;
  }

  async #close(): Promise<void> {
    const o = this.#o;
    clearInterval(this.#extender);
    await Promise.allSettled([...this.#loops, this.#extending]);
    this.#loops = [];
    for (const m of this.#releasedWhilePolling.splice(0)) this.#releases.add(m);
    if (!(await within(this.#deliveries.onIdle(), o.stopTimeoutMs))) {
      o.logger.warn({ queue: o.queueUrl, inFlight: this.#deliveries.inFlight }, `txbox sqs consumer: stop timed out after ${o.stopTimeoutMs} ms (stopTimeoutMs); unfinished messages are made visible again`);
      this.#deliveries.releaseAll();
    }
    // Deletes and releases waiting or in flight go out before the client closes (each request bounded by requestTimeoutMs),
    // and the inbox records messages released on their last receive dead (each bounded).
    await Promise.all([this.#deletes.flush(), this.#releases.flush(), this.#deliveries.recordsSettled()]);
    const client = this.#client;
    this.#client = null;
    this.#connected = false;
    if (client && o.client === undefined) client.destroy();
    o.logger.info({ queue: o.queueUrl }, 'txbox sqs consumer: stopped');
  }
}

/** ChangeMessageVisibilityBatch requests (10 messages each) of one extension round at once. */
const EXTEND_REQUESTS = 4;

function deferred(): { readonly promise: Promise<void>; readonly resolve: () => void } {
  let resolve!: () => void;
  const promise = new Promise<void>((r) => (resolve = r));
  return { promise, resolve };
}

/** `maxReceiveCount` of a queue's RedrivePolicy attribute (JSON; the count may be a string), or null. */
function maxReceiveCountOf(policy: string | undefined): number | null {
  if (policy === undefined) return null;
  try {
    const n = Number((JSON.parse(policy) as { maxReceiveCount?: unknown }).maxReceiveCount);
    return Number.isSafeInteger(n) && n > 0 ? n : null;
  } catch {
    return null;
  }
}

function receiveCount(m: Message): number {
  const n = Number(m.Attributes?.ApproximateReceiveCount ?? 0);
  return Number.isFinite(n) ? n : 0;
}
