import { GetQueueAttributesCommand, SendMessageBatchCommand, SQSClient } from '@aws-sdk/client-sqs';
import type { OutboxEvent } from '../../core/envelope.ts';
import type { PublishOutcome, Transport } from '../../core/ports.ts';
import { checkAtStart } from './sqs-outcomes.ts';
import { BatchPublisher, type BatchTarget } from './sqs-publish-call.ts';
import { isFifo, resolveSqsTransportOptions, sdkClientConfig, type ResolvedSqsTransportOptions, type SqsTransportOptions } from './sqs-transport-options.ts';

export { resolveSqsTransportOptions, type AwsClientOptions, type ResolvedSqsTransportOptions, type SqsTransportOptions } from './sqs-transport-options.ts';

/**
 * Publishes events to Amazon SQS queues, one queue URL per destination, with
 * SendMessageBatch (up to 10 entries per request, batches to several queues
 * at once). Each entry's result is its event's outcome. On a FIFO queue
 * (URL ending in `.fifo`) MessageGroupId is the event's key, so SQS keeps
 * per-key order, and MessageDeduplicationId is the event id, so a re-publish
 * within SQS's 5-minute window is dropped. A standard queue promises no order
 * and may deliver twice: use FIFO queues when consumers need per-key order.
 *
 * Throttling, 5xx and network errors are retriable; a queue that does not
 * exist, refused credentials and an unusable KMS key are destination-down
 * (the relay pauses that destination); an oversize message or invalid
 * content is permanent (parked).
 *
 * @example
 * const transport = new SqsTransport({
 *   queues: { orders: 'https://sqs.eu-west-1.amazonaws.com/123456789012/orders.fifo' },
 *   region: 'eu-west-1',
 * });
 * const relay = createRelay({ store, transport });
 */
export class SqsTransport implements Transport {
  readonly name = 'sqs';
  readonly #options: ResolvedSqsTransportOptions;
  readonly #publisher: BatchPublisher;
  #client: SQSClient | null = null;

  /** Throws ConfigError naming the field when an option is invalid. Sends nothing until start() or publish(). */
  constructor(options: SqsTransportOptions) {
    const o = (this.#options = resolveSqsTransportOptions(options));
    this.#publisher = new BatchPublisher('SQS', { maxMessageBytes: o.maxMessageBytes, maxBatchBytes: o.maxBatchBytes, requestTimeoutMs: o.requestTimeoutMs, mapField: 'queues' });
  }

  /**
   * Checks every mapped queue with GetQueueAttributes. Throws ConfigError
   * naming `credentials` when they are refused; a queue that does not exist
   * and an endpoint where nothing answers are only logged (their events wait
   * as destination-down until they answer). Reopens after close().
   */
  async start(signal?: AbortSignal): Promise<void> {
    signal?.throwIfAborted();
    await this.#publisher.reopen();
    const client = this.#ensureClient();
    const o = this.#options;
    await checkAtStart(o.queues, (url, abortSignal) => client.send(new GetQueueAttributesCommand({ QueueUrl: url, AttributeNames: ['QueueArn'] }), { abortSignal }), {
      signal,
      requestTimeoutMs: o.requestTimeoutMs,
      logger: o.logger,
      transport: 'sqs',
      describe: describeQueue,
    });
  }

  /**
   * Sends the events in batches and resolves with one outcome per event in
   * input order, each after SQS answered for its entry. Never rejects for a
   * failed event. Aborting `signal` cancels the requests in flight (outcomes
   * retriable; SQS may still have stored them, which at-least-once allows).
   */
  publish(events: readonly OutboxEvent[], signal: AbortSignal): Promise<PublishOutcome[]> {
    return this.#publisher.publish(events, (d) => this.#target(d), signal);
  }

  /** Waits for in-flight publishes (each bounded by requestTimeoutMs), then destroys the transport's own client; a `client` passed in is left as it is. */
  close(): Promise<void> {
    return this.#publisher.close(() => {
      if (this.#options.client === undefined) this.#client?.destroy();
      this.#client = null;
    });
  }

  #ensureClient(): SQSClient {
    this.#client ??= this.#options.client ?? new SQSClient(sdkClientConfig(this.#options));
    return this.#client;
  }

  #target(destination: string): BatchTarget | null {
    const url = this.#options.queues.get(destination);
    if (url === undefined) return null;
    const client = this.#ensureClient();
    return {
      where: describeQueue(url, destination),
      fifo: isFifo(url),
      send: (entries, signal) =>
        client.send(
          new SendMessageBatchCommand({
            QueueUrl: url,
            Entries: entries.map(({ Id, message }) => ({
              Id,
              MessageBody: message.body,
              MessageAttributes: message.attributes,
              ...(message.groupId === undefined ? {} : { MessageGroupId: message.groupId, MessageDeduplicationId: message.deduplicationId }),
            })),
          }),
          { abortSignal: signal },
        ),
    };
  }
}

function describeQueue(url: string, destination: string): string {
  return `queue ${JSON.stringify(url)} (destination ${JSON.stringify(destination)})`;
}
