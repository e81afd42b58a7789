import type { SQSClient } from '@aws-sdk/client-sqs';
import { ConfigError } from '../../core/errors.ts';
import { resolveConsumerHandler, type ConsumerHandler } from '../../inbox/consumer/consumer-handler.ts';
import type { InboxProcessor } from '../../core/inbox-ports.ts';
import type { InboxQueue } from '../../inbox/inbox-worker.ts';
import { int, resolveAwsClientOptions, type AwsClientOptions, type ResolvedAwsClientOptions } from './sqs-transport-options.ts';

/**
 * Options of `new SqsConsumer(...)`: the queue, exactly one of `inbox` or
 * `queue`, and how to reach SQS; every other field has a default.
 *
 * @example
 * const options: SqsConsumerOptions = { queueUrl: 'https://sqs.eu-west-1.amazonaws.com/123456789012/orders.fifo', region: 'eu-west-1', inbox };
 */
export interface SqsConsumerOptions extends AwsClientOptions {
  /** The queue to receive from; it must exist. A URL ending in `.fifo` is a FIFO queue. Required. */
  readonly queueUrl: string;
  /** An SQSClient of your own (not destroyed by the consumer). Default: one made from region, endpoint and credentials. */
  readonly client?: SQSClient;
  /** The destination of events whose message does not name one. Default: the queue's name. */
  readonly destination?: string;
  /** Handles each event at once: the message is deleted after the handler's transaction committed. Give this or `queue`. */
  readonly inbox?: InboxProcessor;
  /** Worker mode: stores what arrives in the inbox queue (a batch per transaction) and deletes; inbox workers run the handlers. Give this or `inbox`. */
  readonly queue?: InboxQueue;
  /**
   * Handlers running at once (different keys; one key's events run one at a
   * time, in order; at most `maxInFlight` are held). The inbox commits the
   * events waiting at once in one transaction, so more in flight means fewer,
   * larger commits (docs/transports/sqs.md#tuning). Default: 64.
   */
  readonly concurrency?: number;
  /** Worker mode: most events stored per queue transaction. Default: 100. */
  readonly batch?: number;
  /** Long polling: how long one ReceiveMessage waits for messages, in seconds (0-20). Default: 20. */
  readonly waitTimeSeconds?: number;
  /** Messages asked for per ReceiveMessage (1-10). Default: 10. */
  readonly maxMessagesPerReceive?: number;
  /**
   * ReceiveMessage calls (long polls) in flight at once; each asks for
   * `maxMessagesPerReceive` while room remains under `maxInFlight`. More
   * hide the round trip of each call behind the others' handlers
   * (docs/transports/sqs.md#tuning). On a FIFO queue SQS returns a message
   * group to one call at a time, so per-key order holds. Default: 3.
   */
  readonly receiveConcurrency?: number;
  /** Most messages this process holds at once (received, not yet deleted); receiving pauses at this many. Default: 100. */
  readonly maxInFlight?: number;
  /**
   * The visibility timeout given to received messages, in seconds; while a
   * handler runs, the consumer extends it (ChangeMessageVisibilityBatch) every
   * third of it. Default: the queue's own (read at start).
   */
  readonly visibilityTimeoutSeconds?: number;
  /**
   * Where a dead event (dead in the inbox) or an unreadable message is copied
   * (body and attributes, plus `txbox-dead-reason` when a slot is free) before
   * it is deleted; checked at start. Null: the message is left to the
   * queue's redrive policy (it becomes visible again, and SQS moves it to the
   * queue's dead-letter queue after `maxReceiveCount` receives); start() then
   * requires the queue to have a RedrivePolicy. Default: null.
   */
  readonly deadLetterQueueUrl?: string | null;
  /** Longest wait in `stop()` for handlers in progress, in ms; messages not finished by then are made visible again. Default: 30000. */
  readonly stopTimeoutMs?: number;
}

export interface ResolvedSqsConsumerOptions extends ResolvedAwsClientOptions {
  readonly queueUrl: string;
  readonly client: SQSClient | undefined;
  readonly destination: string;
  readonly handler: ConsumerHandler;
  readonly concurrency: number;
  readonly batch: number;
  readonly waitTimeSeconds: number;
  readonly maxMessagesPerReceive: number;
  readonly receiveConcurrency: number;
  readonly maxInFlight: number;
  readonly visibilityTimeoutSeconds: number | null;
  readonly deadLetterQueueUrl: string | null;
  readonly stopTimeoutMs: number;
}

/**
 * Validates SqsConsumer options, fills defaults and freezes them. Throws
 * ConfigError naming the field and the fix.
 *
 * @example
 * resolveSqsConsumerOptions({ queueUrl: 'http://127.0.0.1:9324/000000000000/orders.fifo', region: 'us-east-1', inbox }).waitTimeSeconds; // 20
 */
export function resolveSqsConsumerOptions(options: SqsConsumerOptions): ResolvedSqsConsumerOptions {
  if (options === null || typeof options !== 'object') throw new ConfigError('options', 'must be an object such as { queueUrl, region, inbox }');
  const queueUrl = checkUrl('queueUrl', options.queueUrl, true)!;
  const deadLetterQueueUrl = checkUrl('deadLetterQueueUrl', options.deadLetterQueueUrl ?? undefined, false);
  if (deadLetterQueueUrl !== null && deadLetterQueueUrl.endsWith('.fifo') !== queueUrl.endsWith('.fifo')) {
    throw new ConfigError('deadLetterQueueUrl', 'must be a FIFO queue when queueUrl is one, and a standard queue when it is not (SQS requires the same type)');
  }
  const destination = options.destination ?? decodeURIComponent(new URL(queueUrl).pathname.split('/').filter(Boolean).at(-1) ?? '');
  if (typeof destination !== 'string') throw new ConfigError('destination', 'must be a string, e.g. "orders"');
  const client = options.client;
  if (client !== undefined && (client === null || typeof client !== 'object' || typeof (client as { send?: unknown }).send !== 'function')) {
    throw new ConfigError('client', 'must be an SQSClient from @aws-sdk/client-sqs');
  }
  return Object.freeze({
    ...resolveAwsClientOptions(options),
    queueUrl,
    client,
    destination,
    handler: resolveConsumerHandler(options.inbox, options.queue),
    concurrency: int('concurrency', options.concurrency, 64, 1, 10_000),
    batch: int('batch', options.batch, 100, 1, 10_000),
    waitTimeSeconds: int('waitTimeSeconds', options.waitTimeSeconds, 20, 0, 20),
    maxMessagesPerReceive: int('maxMessagesPerReceive', options.maxMessagesPerReceive, 10, 1, 10),
    receiveConcurrency: int('receiveConcurrency', options.receiveConcurrency, 3, 1, 100),
    maxInFlight: int('maxInFlight', options.maxInFlight, 100, 1, 100_000),
    visibilityTimeoutSeconds: options.visibilityTimeoutSeconds === undefined ? null : int('visibilityTimeoutSeconds', options.visibilityTimeoutSeconds, 30, 1, 43_200),
    deadLetterQueueUrl,
    stopTimeoutMs: int('stopTimeoutMs', options.stopTimeoutMs, 30_000, 0, 3_600_000),
  });
}

function checkUrl(field: string, value: string | undefined, required: boolean): string | null {
  if (value === undefined) {
    if (required) throw new ConfigError(field, 'is required: the queue URL, e.g. "https://sqs.eu-west-1.amazonaws.com/123456789012/orders.fifo"');
    return null;
  }
  try {
    if (typeof value !== 'string') throw new TypeError('not a string');
    const url = new URL(value);
    if ((url.protocol === 'http:' || url.protocol === 'https:') && url.pathname.split('/').filter(Boolean).length >= 2) return value;
  } catch {
    // fall through
  }
  throw new ConfigError(field, 'must be a queue URL such as "https://sqs.eu-west-1.amazonaws.com/123456789012/orders.fifo"');
}
