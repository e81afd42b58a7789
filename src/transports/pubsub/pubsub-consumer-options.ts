import { ConfigError } from '../../core/errors.ts';
import type { Logger } from '../../core/logger.ts';
import { resolveConsumerHandler, type ConsumerHandler } from '../../inbox/consumer/consumer-handler.ts';
import type { InboxProcessor } from '../../core/inbox-ports.ts';
import type { InboxQueue } from '../../inbox/inbox-worker.ts';
import { int, loggerOf, nameProblem, resolvePubSubConnection, type PubSubConnectionOptions, type ResolvedPubSubConnection } from './pubsub-transport-options.ts';

/**
 * Options of `new PubSubConsumer(...)`: how to reach Pub/Sub, `subscription`,
 * and exactly one of `inbox` or `queue`; every other field has a default.
 *
 * @example
 * const options: PubSubConsumerOptions = { projectId: 'shop', subscription: 'billing-orders', destination: 'orders', inbox };
 */
export interface PubSubConsumerOptions extends PubSubConnectionOptions {
  /** The subscription to pull (name or `projects/<p>/subscriptions/<s>`); it must exist. Required. */
  readonly subscription: string;
  /** The destination of events whose message lacks `txbox-destination` (not from PubSubTransport). Default: `''`. */
  readonly destination?: string;
  /** Handles each event at once: the message is acked after the handler's transaction committed. Give this or `queue`. */
  readonly inbox?: InboxProcessor;
  /** Worker mode: stores what arrives in the inbox queue (a batch per transaction) and acks; inbox workers run the handlers. Give this or `inbox`. */
  readonly queue?: InboxQueue;
  /**
   * Handlers running at once (different keys; one key's events run one at a
   * time, in order). The inbox commits the events waiting at once in one
   * transaction, so more in flight means fewer, larger commits
   * (docs/transports/pubsub.md#tuning). Default: 64.
   */
  readonly concurrency?: number;
  /** Worker mode: most events stored per queue transaction. Default: 500. */
  readonly batch?: number;
  /**
   * StreamingPull flow control: most messages this process leases at once
   * (received, not yet acked). Default: 1000.
   */
  readonly maxMessages?: number;
  /**
   * The client extends the ack deadline of every leased message
   * (modAckDeadline) while its handler runs, up to this long in all; a
   * handler running longer lets the message be redelivered (and the inbox
   * skips it once the first run committed). Default: 3600000 (an hour).
   */
  readonly maxExtensionMs?: number;
  /**
   * Where a dead event (dead in the inbox) or an unreadable message is copied
   * (original data and attributes plus `txbox-dead-*` attributes) before it
   * is acked; checked at start. Null: not copied (the inbox keeps dead events;
   * an unreadable message is only logged). This is txbox's dead-letter
   * topic; a subscription's own dead-letter policy is separate: Pub/Sub
   * forwards a message there after `maxDeliveryAttempts` deliveries without
   * an ack (consumers that crashed or stopped while holding it). Default: null.
   */
  readonly deadLetterTopic?: string | null;
  /** Longest wait in `stop()` for handlers in progress, in ms; messages not finished by then are nacked for redelivery. Default: 30000. */
  readonly stopTimeoutMs?: number;
  /** Receives start, stop, dead letters and failures (names and ids only, never payloads). Default: silent. */
  readonly logger?: Logger;
}

export interface ResolvedPubSubConsumerOptions {
  readonly connection: ResolvedPubSubConnection;
  readonly subscription: string;
  readonly destination: string;
  readonly handler: ConsumerHandler;
  readonly concurrency: number;
  readonly batch: number;
  readonly maxMessages: number;
  readonly maxExtensionMs: number;
  readonly deadLetterTopic: string | null;
  readonly stopTimeoutMs: number;
  readonly logger: Logger;
}

/**
 * Validates PubSubConsumer options, fills defaults and freezes them. Throws
 * ConfigError naming the field and the fix.
 *
 * @example
 * resolvePubSubConsumerOptions({ projectId: 'shop', subscription: 'billing-orders', inbox }).concurrency; // 64
 */
export function resolvePubSubConsumerOptions(options: PubSubConsumerOptions): ResolvedPubSubConsumerOptions {
  if (options === null || typeof options !== 'object') throw new ConfigError('options', 'must be an object such as { projectId, subscription, inbox }');
  const subscriptionProblem = nameProblem(options.subscription, 'subscription');
  if (subscriptionProblem !== null) throw new ConfigError('subscription', options.subscription === undefined ? 'is required: the subscription to pull, e.g. "billing-orders"' : subscriptionProblem);
  const deadLetterTopic = options.deadLetterTopic ?? null;
  if (deadLetterTopic !== null) {
    const problem = nameProblem(deadLetterTopic, 'topic');
    if (problem !== null) throw new ConfigError('deadLetterTopic', `${problem}; or null to keep dead events only in the inbox`);
  }
  const destination = options.destination ?? '';
  if (typeof destination !== 'string') throw new ConfigError('destination', 'must be a string, e.g. "orders"');
  return Object.freeze({
    connection: resolvePubSubConnection(options),
    subscription: options.subscription,
    destination,
    handler: resolveConsumerHandler(options.inbox, options.queue),
    concurrency: int('concurrency', options.concurrency, 64, 1, 10_000),
    batch: int('batch', options.batch, 500, 1, 10_000),
    maxMessages: int('maxMessages', options.maxMessages, 1000, 1, 1_000_000),
    maxExtensionMs: int('maxExtensionMs', options.maxExtensionMs, 3_600_000, 10_000, 24 * 3_600_000),
    deadLetterTopic,
    stopTimeoutMs: int('stopTimeoutMs', options.stopTimeoutMs, 30_000, 0, 3_600_000),
    logger: loggerOf(options.logger),
  });
}
