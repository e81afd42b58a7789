import type { SNSClient } from '@aws-sdk/client-sns';
import type { OutboxEvent } from '../../core/envelope.ts';
import { ConfigError, TransportError } from '../../core/errors.ts';
import type { PublishOutcome, Transport } from '../../core/ports.ts';
import { checkAtStart } from './sqs-outcomes.ts';
import { BatchPublisher, type BatchTarget } from './sqs-publish-call.ts';
import { int, isFifo, resolveAwsClientOptions, resolveMap, sdkClientConfig, type AwsClientOptions, type ResolvedAwsClientOptions } from './sqs-transport-options.ts';

/**
 * Options of `new SnsTransport(...)`.
 *
 * @example
 * const options: SnsTransportOptions = { topics: { orders: 'arn:aws:sns:eu-west-1:123456789012:orders.fifo' }, region: 'eu-west-1' };
 */
export interface SnsTransportOptions extends AwsClientOptions {
  /**
   * The topic ARN of each destination. An ARN ending in `.fifo` is a FIFO
   * topic (MessageGroupId = key, MessageDeduplicationId = event id); any other
   * is a standard topic (no order promise). Required.
   */
  readonly topics: Readonly<Record<string, string>>;
  /** An SNSClient of your own (not destroyed by the transport). Default: one made from region, endpoint and credentials. */
  readonly client?: SNSClient;
  /** Largest message in bytes (body plus attributes); larger events park. SNS's limit is 262144. Default: 262144. */
  readonly maxMessageBytes?: number;
}

export interface ResolvedSnsTransportOptions extends ResolvedAwsClientOptions {
  readonly topics: ReadonlyMap<string, string>;
  readonly client: SNSClient | undefined;
  readonly maxMessageBytes: number;
}

const TOPIC_ARN = /^arn:aws[a-z-]*:sns:[a-z0-9-]+:\d{12}:[A-Za-z0-9_-]{1,256}(\.fifo)?$/;

/** Validates SnsTransport options, fills defaults and freezes them. Throws ConfigError naming the field (`topics.orders`, ...) and the fix. */
export function resolveSnsTransportOptions(options: SnsTransportOptions): ResolvedSnsTransportOptions {
  if (options === null || typeof options !== 'object') throw new ConfigError('options', 'must be an object such as { topics: { orders: "arn:aws:sns:<region>:<account>:orders.fifo" } }');
  const client = options.client;
  if (client !== undefined && (client === null || typeof client !== 'object' || typeof (client as { send?: unknown }).send !== 'function')) {
    throw new ConfigError('client', 'must be an SNSClient from @aws-sdk/client-sns');
  }
  return Object.freeze({
    ...resolveAwsClientOptions(options),
    topics: resolveMap('topics', options.topics, (v) => TOPIC_ARN.test(v), 'a topic ARN such as "arn:aws:sns:eu-west-1:123456789012:orders.fifo"'),
    client,
    maxMessageBytes: int('maxMessageBytes', options.maxMessageBytes, 262_144, 1024, 262_144),
  });
}

type SnsModule = typeof import('@aws-sdk/client-sns');

/**
 * Publishes events to Amazon SNS topics (fan-out to their subscriptions),
 * one topic ARN per destination, with PublishBatch (up to 10 entries per
 * request). Same message form, batching and error classification as
 * SqsTransport: on a FIFO topic MessageGroupId is the key and
 * MessageDeduplicationId the event id; a standard topic promises no order.
 * Subscribe SQS queues with raw message delivery on, so that the message
 * attributes (the envelope) arrive as attributes and `decodeSqsMessage` reads
 * them. Needs `@aws-sdk/client-sns`, loaded when the transport starts.
 *
 * Tested against fauxqs, an SNS/SQS emulator (test/integration/sns-transport.test.ts:
 * FIFO topic fanned out to a FIFO queue), and against a stubbed client for the
 * request mapping and error classification (docs/transports/sqs.md).
 *
 * @example
 * const transport = new SnsTransport({ topics: { orders: 'arn:aws:sns:eu-west-1:123456789012:orders.fifo' }, region: 'eu-west-1' });
 */
export class SnsTransport implements Transport {
  readonly name = 'sns';
  readonly #options: ResolvedSnsTransportOptions;
  readonly #publisher: BatchPublisher;
  #sdk: SnsModule | null = null;
  #client: SNSClient | null = null;

  constructor(options: SnsTransportOptions) {
    const o = (this.#options = resolveSnsTransportOptions(options));
    this.#publisher = new BatchPublisher('SNS', { maxMessageBytes: o.maxMessageBytes, maxBatchBytes: o.maxMessageBytes, requestTimeoutMs: o.requestTimeoutMs, mapField: 'topics' });
  }

  /**
   * Loads the SDK and checks every mapped topic with GetTopicAttributes.
   * Throws ConfigError naming `credentials` when they are refused; a missing
   * topic and an endpoint where nothing answers are only logged (their events
   * wait as destination-down).
   */
  async start(signal?: AbortSignal): Promise<void> {
    signal?.throwIfAborted();
    await this.#publisher.reopen();
    const sdk = await this.#load();
    const client = this.#ensureClient(sdk);
    const o = this.#options;
    await checkAtStart(o.topics, (arn, abortSignal) => client.send(new sdk.GetTopicAttributesCommand({ TopicArn: arn }), { abortSignal }), {
      signal,
      requestTimeoutMs: o.requestTimeoutMs,
      logger: o.logger,
      transport: 'sns',
      describe: describeTopic,
    });
  }

  /** Like SqsTransport.publish: one outcome per event, in input order, each after SNS answered for its entry. */
  async publish(events: readonly OutboxEvent[], signal: AbortSignal): Promise<PublishOutcome[]> {
    const closed = this.#publisher.closedOutcomes(events);
    if (closed) return closed;
    let sdk: SnsModule;
    try {
      sdk = await this.#load();
    } catch (err) {
      const error = new TransportError('destination-down', (err as Error).message);
      return events.map(() => ({ ok: false, error }));
    }
    this.#ensureClient(sdk);
    return this.#publisher.publish(events, (d) => this.#target(sdk, d), signal);
  }

  /** Like SqsTransport.close: waits for in-flight publishes, then destroys its own client. */
  close(): Promise<void> {
    return this.#publisher.close(() => {
      if (this.#options.client === undefined) this.#client?.destroy();
      this.#client = null;
    });
  }

  async #load(): Promise<SnsModule> {
    if (this.#sdk) return this.#sdk;
    try {
      this.#sdk = await import('@aws-sdk/client-sns');
    } catch (err) {
      throw new ConfigError('topics', 'SnsTransport needs the @aws-sdk/client-sns package: npm install @aws-sdk/client-sns', { cause: err });
    }
    return this.#sdk;
  }

  #ensureClient(sdk: SnsModule): SNSClient {
    this.#client ??= this.#options.client ?? new sdk.SNSClient(sdkClientConfig(this.#options));
    return this.#client;
  }

  #target(sdk: SnsModule, destination: string): BatchTarget | null {
    const arn = this.#options.topics.get(destination);
    if (arn === undefined) return null;
    const client = this.#client!;
    return {
      where: describeTopic(arn, destination),
      fifo: isFifo(arn),
      send: (entries, signal) =>
        client.send(
          new sdk.PublishBatchCommand({
            TopicArn: arn,
            PublishBatchRequestEntries: entries.map(({ Id, message }) => ({
              Id,
              Message: message.body,
              MessageAttributes: message.attributes,
              ...(message.groupId === undefined ? {} : { MessageGroupId: message.groupId, MessageDeduplicationId: message.deduplicationId }),
            })),
          }),
          { abortSignal: signal },
        ),
    };
  }
}

function describeTopic(arn: string, destination: string): string {
  return `topic ${JSON.stringify(arn)} (destination ${JSON.stringify(destination)})`;
}
