/**
 * One `publish()` call of the SQS or SNS transport: every event is checked and
 * encoded, grouped by queue (or topic) into batches of at most 10 entries and
 * `maxBatchBytes`, and the batches are sent at once. Each entry's result
 * becomes its event's outcome. The relay passes at most one event per key in
 * a call, so two events of one key are never in flight together, and so never
 * in two requests that could land out of order on a FIFO queue.
 *
 * A request refused as a whole for a permanent reason (for example the batch
 * as a whole too large) is sent again one entry per request, so that only the
 * culprit parks.
 */
import type { OutboxEvent } from '../../core/envelope.ts';
import { InvalidEventError, TransportError } from '../../core/errors.ts';
import type { PublishOutcome } from '../../core/ports.ts';
import { encodeSqsMessage, type EncodedSqsMessage } from './sqs-message.ts';
import { abortedOutcome, ACK, classifyEntryError, classifyRequestError, failedOutcome, unroutableOutcome } from './sqs-outcomes.ts';
import { thrownText } from '../../core/error-text.ts';

/** SQS and SNS take at most 10 entries per batch request. */
export const MAX_BATCH_ENTRIES = 10;

export interface BatchEntry {
  readonly Id: string;
  readonly message: EncodedSqsMessage;
}

export interface BatchResult {
  readonly Successful?: readonly { readonly Id?: string | undefined }[] | undefined;
  readonly Failed?: readonly { readonly Id?: string | undefined; readonly Code?: string | undefined; readonly Message?: string | undefined; readonly SenderFault?: boolean | undefined }[] | undefined;
}

/** A queue or a topic: where a destination's events go, and how one batch request is sent there. */
export interface BatchTarget {
  /** For messages: `queue "https://..." (destination "orders")`. */
  readonly where: string;
  readonly fifo: boolean;
  send(entries: readonly BatchEntry[], signal: AbortSignal): Promise<BatchResult>;
}

export interface PublishCallOptions {
  readonly maxMessageBytes: number;
  readonly maxBatchBytes: number;
  readonly requestTimeoutMs: number;
  /** `queues` or `topics`: the option that maps destinations, named in the unroutable error. */
  readonly mapField: 'queues' | 'topics';
}

/**
 * What SqsTransport and SnsTransport share around publishBatched: each
 * destination's target (made once, until close), the publishes in flight,
 * close() (waits for them, then releases the client) and reopening.
 *
 * @example
 * readonly #publisher = new BatchPublisher('SQS', { maxMessageBytes, maxBatchBytes, requestTimeoutMs, mapField: 'queues' });
 * publish(events, signal) { return this.#publisher.publish(events, (d) => targetOf(d), signal); }
 */
export class BatchPublisher {
  readonly #targets = new Map<string, BatchTarget>();
  readonly #inFlight = new Set<Promise<unknown>>();
  readonly #service: string;
  readonly #options: PublishCallOptions;
  #closing: Promise<void> | null = null;

  /** `service`: `SQS` or `SNS`, for the closed transport's error. */
  constructor(service: string, options: PublishCallOptions) {
    this.#service = service;
    this.#options = options;
  }

  /** Waits for a close() in progress; publishing works again after. */
  async reopen(): Promise<void> {
    if (!this.#closing) return;
    await this.#closing;
    this.#closing = null;
  }

  /** Closed: every event's outcome is a retriable error (start() reopens); null while open. */
  closedOutcomes(events: readonly OutboxEvent[]): PublishOutcome[] | null {
    if (!this.#closing) return null;
    const error = new TransportError('retriable', `the ${this.#service} transport is closed; call start() to reopen it`);
    return events.map(() => ({ ok: false, error }));
  }

  /** publishBatched with the cached targets (`make` is asked once per destination; null: not mapped), tracked until it resolves. */
  publish(events: readonly OutboxEvent[], make: (destination: string) => BatchTarget | null, signal: AbortSignal): Promise<PublishOutcome[]> {
    const closed = this.closedOutcomes(events);
    if (closed) return Promise.resolve(closed);
    const targetOf = (destination: string): BatchTarget | null => {
      const cached = this.#targets.get(destination);
      if (cached !== undefined) return cached;
      const target = make(destination);
      if (target !== null) this.#targets.set(destination, target);
      return target;
    };
    const done = publishBatched(events, targetOf, this.#options, signal);
    this.#inFlight.add(done);
    void done.finally(() => this.#inFlight.delete(done));
    return done;
  }

  /** Waits for the publishes in flight (each bounded by requestTimeoutMs), then runs `release` and forgets the targets. Calls coalesce. */
  close(release: () => void): Promise<void> {
    this.#closing ??= (async () => {
      await Promise.allSettled([...this.#inFlight]);
      release();
      this.#targets.clear();
    })();
    return this.#closing;
  }
}

export async function publishBatched(
  events: readonly OutboxEvent[],
  targetOf: (destination: string) => BatchTarget | null,
  options: PublishCallOptions,
  signal: AbortSignal,
): Promise<PublishOutcome[]> {
  const outcomes = new Array<PublishOutcome>(events.length);
  const byTarget = new Map<BatchTarget, { index: number; entry: BatchEntry }[]>();
  for (let i = 0; i < events.length; i++) {
    const event = events[i]!;
    const target = targetOf(event.destination);
    if (target === null) {
      outcomes[i] = unroutableOutcome(event.destination, options.mapField);
      continue;
    }
    if (signal.aborted) {
      outcomes[i] = abortedOutcome(target.where);
      continue;
    }
    const encoded = encode(event, target, options.maxMessageBytes);
    if ('ok' in encoded) {
      outcomes[i] = encoded;
      continue;
    }
    const list = byTarget.get(target) ?? [];
    list.push({ index: i, entry: { Id: `e${i}`, message: encoded } });
    byTarget.set(target, list);
  }
  const requests: Promise<void>[] = [];
  for (const [target, entries] of byTarget) {
    for (const chunk of chunks(entries, options.maxBatchBytes)) {
      requests.push(sendChunk(target, chunk, options, signal, outcomes));
    }
  }
  await Promise.all(requests);
  return outcomes;
}

function encode(event: OutboxEvent, target: BatchTarget, maxBytes: number): EncodedSqsMessage | PublishOutcome {
  let message: EncodedSqsMessage;
  try {
    message = encodeSqsMessage(event, target.fifo);
  } catch (err) {
    const why = thrownText(err);
    const field = err instanceof InvalidEventError ? '' : 'its payload cannot be serialized to JSON: ';
    return { ok: false, error: new TransportError('permanent', `event ${event.id} for ${target.where}: ${field}${why}`) };
  }
  if (message.bytes > maxBytes) {
    const error = new TransportError(
      'permanent',
      `event ${event.id} for ${target.where} is ${message.bytes} bytes (payload plus message attributes), over maxMessageBytes (${maxBytes}); SQS and SNS refuse larger messages: store large data elsewhere (S3) and put a reference in the event, or raise maxMessageBytes up to the service's limit`,
    );
    return { ok: false, error };
  }
  return message;
}

/** Batches of at most 10 entries and `maxBytes` in total, keeping input order. */
function chunks<T extends { entry: BatchEntry }>(entries: readonly T[], maxBytes: number): T[][] {
  const out: T[][] = [];
  let current: T[] = [];
  let bytes = 0;
  for (const item of entries) {
    const size = item.entry.message.bytes;
    if (current.length > 0 && (current.length === MAX_BATCH_ENTRIES || bytes + size > maxBytes)) {
      out.push(current);
      current = [];
      bytes = 0;
    }
    current.push(item);
    bytes += size;
  }
  if (current.length > 0) out.push(current);
  return out;
}

async function sendChunk(
  target: BatchTarget,
  chunk: readonly { index: number; entry: BatchEntry }[],
  options: PublishCallOptions,
  signal: AbortSignal,
  outcomes: PublishOutcome[],
): Promise<void> {
  if (signal.aborted) {
    for (const { index } of chunk) outcomes[index] = abortedOutcome(target.where);
    return;
  }
  const timeout = AbortSignal.timeout(options.requestTimeoutMs);
  let result: BatchResult;
  try {
    result = await target.send(
      chunk.map((c) => c.entry),
      AbortSignal.any([signal, timeout]),
    );
  } catch (err) {
    if (signal.aborted) {
      for (const { index } of chunk) outcomes[index] = abortedOutcome(target.where);
      return;
    }
    if (timeout.aborted) {
      // No answer at all: the service or the path to it is silent (nothing about a batch makes it that slow).
      // Destination-down: the relay pauses the destination, so a silence of any length spends no attempts.
      const error = new TransportError('destination-down', `send to ${target.where} got no answer within ${options.requestTimeoutMs} ms (requestTimeoutMs): the service is not answering; it may still have been stored (at-least-once)`);
      for (const { index } of chunk) outcomes[index] = { ok: false, error };
      return;
    }
    const failure = classifyRequestError(err);
    if (failure.kind === 'permanent' && chunk.length > 1) {
      await Promise.all(chunk.map((one) => sendChunk(target, [one], options, signal, outcomes)));
      return;
    }
    const outcome = failedOutcome(failure, target.where);
    for (const { index } of chunk) outcomes[index] = outcome;
    return;
  }
  const byId = new Map(chunk.map((c) => [c.entry.Id, c.index]));
  for (const ok of result.Successful ?? []) {
    const index = ok.Id === undefined ? undefined : byId.get(ok.Id);
    if (index !== undefined) outcomes[index] = ACK;
  }
  for (const failed of result.Failed ?? []) {
    const index = failed.Id === undefined ? undefined : byId.get(failed.Id);
    if (index !== undefined) outcomes[index] = failedOutcome(classifyEntryError(failed), target.where);
  }
  for (const { index } of chunk) {
    outcomes[index] ??= { ok: false, error: new TransportError('retriable', `send to ${target.where}: the answer did not list this entry as stored or failed; sending it again`) };
  }
}
