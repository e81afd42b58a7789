import { ConfigError } from '../../core/errors.ts';
import type { Logger } from '../../core/logger.ts';
import type { InboxProcessor } from '../../core/inbox-ports.ts';
import type { InboxQueue } from '../../inbox/inbox-worker.ts';
import { int, pick } from '../../inbox/consumer/consumer-options.ts';
import { resolveRabbitMqTransportOptions, type RabbitMqTransportOptions, type ResolvedRabbitMqTransportOptions } from './rabbitmq-transport-options.ts';

/** The connection settings a consumer shares with RabbitMqTransport (same meaning, same defaults unless noted). */
type ConnectionOptions = Pick<
  RabbitMqTransportOptions,
  'url' | 'connectTimeoutMs' | 'heartbeatSeconds' | 'reconnectInitialDelayMs' | 'reconnectMaxDelayMs' | 'connectionName' | 'socket'
>;

/**
 * Options of `new RabbitMqConsumer(...)`. Give `url`, `queues` and exactly
 * one of `inbox` or `queue`; every other field has a default. `url`,
 * `connectTimeoutMs`, `heartbeatSeconds`, `reconnectInitialDelayMs`,
 * `reconnectMaxDelayMs`, `socket` and `connectionName` (default `'txbox-consumer'`)
 * mean what they mean for RabbitMqTransport.
 *
 * @example
 * const options: RabbitMqConsumerOptions = { url: 'amqp://billing:secret@rabbit.internal:5672/shop', queues: ['billing.orders'], inbox };
 */
export interface RabbitMqConsumerOptions extends ConnectionOptions {
  /** The queues to consume, all on one channel: a name or a list of names. Required. */
  readonly queues: string | readonly string[];
  /**
   * Unacknowledged messages the broker may push per queue (`basic.qos`, per
   * consumer). Messages wait in the consumer until their key is free and a
   * handler slot is; a message waiting on a retry holds its place. With the
   * inbox's group commit, about 2 x batch.maxSize x batch.concurrency (256 with
   * the inbox defaults) keeps its transactions full. Default: 256.
   */
  readonly prefetch?: number;
  /** Handlers running at once (different keys; one key runs one at a time). At most prefetch x queues. Default: `prefetch`. */
  readonly concurrency?: number;
  /**
   * With `assertQueues`: the dead-letter exchange of each queue, a name or a
   * function of the queue name. Default: `<queue>.dlx`. Without
   * `assertQueues` the queue's own dead-letter settings apply (an argument or
   * a policy, see docs/transports/rabbitmq.md#dead-letters) and this option
   * is only shown in logs.
   */
  readonly deadLetterExchange?: string | ((queue: string) => string);
  /**
   * Declare at `start()` (and after each reconnect) every queue, durable,
   * with `x-dead-letter-exchange` = its dead-letter exchange and
   * `x-dead-letter-routing-key` = `<queue>.dead`; the exchange (direct,
   * durable); and the queue `<queue>.dead` bound to it. A queue that exists
   * with other arguments makes `start()` throw. Default: false (the queues
   * must exist; `start()` checks them).
   */
  readonly assertQueues?: boolean;
  /** Extra arguments for queues declared by `assertQueues`, e.g. `{ 'x-queue-type': 'quorum', 'x-delivery-limit': 20 }`. Default: none. */
  readonly queueArguments?: Readonly<Record<string, unknown>>;
  /**
   * Longest wait in `stop()` for handlers in progress to commit and ack, in
   * ms; messages not acked by then are redelivered by the broker (and
   * skipped by the inbox if they did commit). Default: 30000.
   */
  readonly stopTimeoutMs?: number;
  /** Handles each message at once: acked after the handler's transaction committed. Give this or `queue`. */
  readonly inbox?: InboxProcessor;
  /** Worker mode: stores messages in the inbox queue (one transaction per batch) and acks; inbox workers run the handlers. Give this or `inbox`. */
  readonly queue?: InboxQueue;
  /** Receives connection events, rejected messages and dead letters (message ids, types, key hashes; never payloads or credentials). Default: silent. */
  readonly logger?: Logger;
}

/** One consumed queue. */
export interface ResolvedRabbitMqConsumerQueue {
  readonly name: string;
  readonly deadLetterExchange: string;
  /** The queue `assertQueues` binds to the dead-letter exchange, and the dead-letter routing key: `<queue>.dead`. */
  readonly deadLetterQueue: string;
}

/** RabbitMqConsumerOptions after `resolveRabbitMqConsumerOptions()`: checked, defaults filled, frozen. Holds credentials in `connection.url`: do not log it. */
export interface ResolvedRabbitMqConsumerOptions {
  /** The connection settings in the transport's shape (for the shared connection code). */
  readonly connection: ResolvedRabbitMqTransportOptions;
  readonly queues: readonly ResolvedRabbitMqConsumerQueue[];
  readonly prefetch: number;
  readonly concurrency: number;
  readonly assertQueues: boolean;
  readonly queueArguments: Readonly<Record<string, unknown>>;
  readonly stopTimeoutMs: number;
  readonly handler: { readonly kind: 'inbox'; readonly inbox: InboxProcessor } | { readonly kind: 'queue'; readonly queue: InboxQueue };
  readonly logger: Logger;
}

/** RabbitMQ's own prefix: such queues cannot be declared by clients. */
const RESERVED = 'amq.';

/**
 * Validates RabbitMqConsumer options, fills defaults and freezes them.
 * Throws ConfigError naming the field (`url`, `queues`, `prefetch`, ...) and
 * the fix; never quotes the URL.
 *
 * @example
 * resolveRabbitMqConsumerOptions({ url: 'amqp://127.0.0.1', queues: 'orders', inbox }).queues[0].deadLetterExchange; // 'orders.dlx'
 */
export function resolveRabbitMqConsumerOptions(options: RabbitMqConsumerOptions): ResolvedRabbitMqConsumerOptions {
  if (options === null || typeof options !== 'object') throw new ConfigError('options', 'must be an object such as { url, queues: ["orders"], inbox }');
  const { inbox, queue } = options;
  if (!inbox === !queue) throw new ConfigError('inbox', 'give exactly one of inbox (handle at once) or queue (worker mode)');
  if (inbox && typeof inbox.process !== 'function') throw new ConfigError('inbox', 'must be an Inbox (createInbox(...))');
  if (queue && typeof queue.receive !== 'function') throw new ConfigError('queue', 'must be an InboxQueue');
  // The transport's resolver checks the URL, timeouts, socket and logger the same way, and adds the heartbeat to the URL.
  const connection = resolveRabbitMqTransportOptions({
    ...pick(options, ['url', 'connectTimeoutMs', 'heartbeatSeconds', 'reconnectInitialDelayMs', 'reconnectMaxDelayMs', 'socket', 'logger']),
    connectionName: options.connectionName ?? 'txbox-consumer',
  });
  const assertQueues = options.assertQueues ?? false;
  if (typeof assertQueues !== 'boolean') throw new ConfigError('assertQueues', 'must be true or false');
  const queues = resolveQueues(options.queues, options.deadLetterExchange);
  const prefetch = int('prefetch', options.prefetch, 256, 1, 65_535);
  const limit = prefetch * queues.length;
  const concurrency = int('concurrency', options.concurrency, Math.min(prefetch, limit), 1, 100_000);
  if (concurrency > limit) {
    throw new ConfigError('concurrency', `is ${concurrency} but at most prefetch x queues (${limit}) messages are ever unacked, so the extra handlers would never run; raise prefetch or lower concurrency`);
  }
  const args = options.queueArguments ?? {};
  if (args === null || typeof args !== 'object' || Array.isArray(args)) throw new ConfigError('queueArguments', "must be an object of queue arguments, e.g. { 'x-queue-type': 'quorum' }");
  for (const name of ['x-dead-letter-exchange', 'x-dead-letter-routing-key']) {
    if (name in args) throw new ConfigError('queueArguments', `must not set ${name}: assertQueues sets it from deadLetterExchange`);
  }
  return Object.freeze({
    connection,
    queues,
    prefetch,
    concurrency,
    assertQueues,
    queueArguments: Object.freeze({ ...args }),
    stopTimeoutMs: int('stopTimeoutMs', options.stopTimeoutMs, 30_000, 0, 3_600_000),
    handler: inbox ? Object.freeze({ kind: 'inbox' as const, inbox }) : Object.freeze({ kind: 'queue' as const, queue: queue! }),
    logger: connection.logger,
  });
}

function resolveQueues(raw: RabbitMqConsumerOptions['queues'], dlx: RabbitMqConsumerOptions['deadLetterExchange']): readonly ResolvedRabbitMqConsumerQueue[] {
  const example = 'e.g. "billing.orders" or ["billing.orders", "billing.payments"]';
  if (raw === undefined || raw === null) throw new ConfigError('queues', `is required: the queues to consume, ${example}`);
  const list: readonly unknown[] = typeof raw === 'string' ? [raw] : Array.isArray(raw) ? raw : [];
  if (list.length === 0) throw new ConfigError('queues', `names no queue: ${example}`);
  if (dlx !== undefined && typeof dlx !== 'function' && !isName(dlx)) {
    throw new ConfigError('deadLetterExchange', 'must be an exchange name (1-255 bytes) or a function of the queue name');
  }
  const seen = new Set<string>();
  return Object.freeze(
    list.map((name, i) => {
      const field = typeof raw === 'string' ? 'queues' : `queues[${i}]`;
      if (!isName(name)) throw new ConfigError(field, `must be a queue name of 1 to 250 bytes, ${example}`);
      if (name.startsWith(RESERVED)) throw new ConfigError(field, `names ${JSON.stringify(name)}; names starting with "amq." belong to the broker`);
      if (seen.has(name)) throw new ConfigError('queues', `lists ${JSON.stringify(name)} twice`);
      seen.add(name);
      const exchange = dlx === undefined ? `${name}.dlx` : typeof dlx === 'string' ? dlx : dlx(name);
      if (!isName(exchange) || exchange.startsWith(RESERVED)) throw new ConfigError('deadLetterExchange', `gave no usable exchange name for queue ${JSON.stringify(name)}`);
      return Object.freeze({ name, deadLetterExchange: exchange, deadLetterQueue: `${name}.dead` });
    }),
  );
}

/** AMQP short strings hold 255 bytes; 250 leaves room for the `.dead` and `.dlx` suffixes. */
function isName(value: unknown): value is string {
  return typeof value === 'string' && value.length > 0 && Buffer.byteLength(value) <= 250;
}
