import { nanos } from '@nats-io/transport-node';
import { AckPolicy, DeliverPolicy, type ConsumerConfig } from '@nats-io/jetstream';
import { ConfigError } from '../../core/errors.ts';
import type { Logger } from '../../core/logger.ts';
import { silentLogger } from '../../core/logger.ts';
import type { InboxProcessor } from '../../core/inbox-ports.ts';
import type { InboxQueue } from '../../inbox/inbox-worker.ts';
import { int } from '../../inbox/consumer/consumer-options.ts';
import { streamNameProblem, subjectProblem } from './nats-subjects.ts';
import { resolveNatsTransportOptions, type NatsTransportOptions, type ResolvedNatsTransportOptions } from './nats-transport-options.ts';

type ConnectionFields = 'servers' | 'user' | 'pass' | 'token' | 'authenticator' | 'tls' | 'name' | 'connection' | 'connectTimeoutMs' | 'reconnectTimeWaitMs';

/**
 * Options of `new NatsConsumer(...)`. Give `stream`, `durable` and exactly
 * one of `inbox` or `queue`; every other field has a default. The connection
 * fields (`servers`, `user`/`pass`, `token`, `authenticator`, `tls`, `name`,
 * `connection`, `connectTimeoutMs`, `reconnectTimeWaitMs`) mean what they
 * mean for NatsTransport.
 *
 * @example
 * const options: NatsConsumerOptions = { servers: 'nats://127.0.0.1:4222', stream: 'ORDERS', durable: 'billing', inbox };
 */
export interface NatsConsumerOptions extends Pick<NatsTransportOptions, ConnectionFields> {
  /** The stream to consume, e.g. `'ORDERS'`. It must exist: txbox never creates streams. Required. */
  readonly stream: string;
  /**
   * The durable pull consumer, one per consuming service (e.g. `'billing'`):
   * every process of the service uses the same name and shares its messages.
   * Created when missing; its ack policy, ack wait, max deliver, max ack
   * pending and filter are set to these options. Required.
   */
  readonly durable: string;
  /**
   * Only messages on these subjects (wildcards allowed), e.g.
   * `'txbox.orders.>'`. Several subjects need nats-server 2.10 or later.
   * Default: the whole stream.
   */
  readonly filterSubjects?: string | readonly string[];
  /** Most messages asked for per pull request (a pull asks only for what the process has room for); in worker mode also the most stored per transaction. Default: 100. */
  readonly batch?: number;
  /**
   * Events handed to the inbox at once (different keys; one key's messages
   * run one at a time, in stream order). The inbox commits events handed to
   * it together in one transaction: for throughput, use at least its
   * `batch.maxSize × batch.concurrency` (128 by default). Default: 128.
   */
  readonly concurrency?: number;
  /**
   * The consumer's `max_deliver`. A message delivered this many times (its
   * earlier deliveries were never acked: crashes, stops, timeouts) is
   * dead-lettered without running the handler again. At least 2. Default: 12.
   */
  readonly maxDeliveries?: number;
  /**
   * The consumer's `ack_wait`, in ms: a message not acked (nor extended)
   * within it is delivered again. The consumer extends the deadline of every
   * message it holds (`working()`), so this bounds how fast a crashed
   * process's messages come back, not how long a handler may take. Default: 30000.
   */
  readonly ackWaitMs?: number;
  /**
   * The consumer's `max_ack_pending`: messages delivered and not yet acked,
   * across all processes of the durable. Each process holds at most
   * `batch + concurrency` of them (worker mode: `2 × batch`), received and
   * not yet acked, and pulls more as it acks. Default: 1000.
   */
  readonly maxAckPending?: number;
  /**
   * Where dead messages go (a copy with the original headers and body plus
   * `txbox-dead-*` headers, then `term()`): a subject that a stream other
   * than `stream` captures, checked by `start()`. `null` terms dead messages
   * without a copy (the inbox still keeps them as dead). Default:
   * `txbox-dead.<stream>.<durable>`, outside the `txbox.` subjects the
   * transport publishes to, so a stream capturing `txbox.>` never takes it back.
   */
  readonly deadLetterSubject?: string | null;
  /** How long `stop()` lets received messages finish (commit and ack), in ms; the rest is left for redelivery. Default: 30000. */
  readonly stopTimeoutMs?: number;
  /** Timeout of JetStream API requests and dead-letter publishes, in ms. Default: 5000. */
  readonly requestTimeoutMs?: number;
  /** Runs handlers at once: messages are acked after the inbox committed. Give this or `queue`. */
  readonly inbox?: InboxProcessor;
  /** Worker mode: messages are stored in the inbox queue (in arrival order, batched) and acked; inbox workers run the handlers. */
  readonly queue?: InboxQueue;
  /** Logs ids, sequences and key hashes, never payloads or credentials. Default: silent. */
  readonly logger?: Logger;
}

/** NatsConsumerOptions after `resolveNatsConsumerOptions()`: checked, defaults filled, frozen. Holds credentials: do not log it. */
export interface ResolvedNatsConsumerOptions {
  readonly transport: ResolvedNatsTransportOptions;
  readonly stream: string;
  readonly durable: string;
  readonly filterSubjects: readonly string[];
  readonly batch: number;
  readonly concurrency: number;
  readonly maxDeliveries: number;
  readonly ackWaitMs: number;
  readonly maxAckPending: number;
  readonly deadLetterSubject: string | null;
  readonly stopTimeoutMs: number;
  readonly requestTimeoutMs: number;
  readonly handler: { readonly kind: 'inbox'; readonly inbox: InboxProcessor } | { readonly kind: 'queue'; readonly queue: InboxQueue };
  readonly logger: Logger;
}

/**
 * Validates NatsConsumer options, fills defaults and freezes them. Throws
 * ConfigError naming the field and the fix; values that may hold
 * credentials are never quoted.
 *
 * @example
 * const resolved = resolveNatsConsumerOptions({ stream: 'ORDERS', durable: 'billing', inbox });
 */
export function resolveNatsConsumerOptions(options: NatsConsumerOptions): ResolvedNatsConsumerOptions {
  if (options === null || typeof options !== 'object') throw new ConfigError('options', 'must be an object such as { servers, stream, durable, inbox }');
  const { inbox, queue } = options;
  if (!inbox === !queue) throw new ConfigError('inbox', 'give exactly one of inbox (handle at once) or queue (worker mode)');
  if (inbox && typeof inbox.process !== 'function') throw new ConfigError('inbox', 'must be an Inbox (createInbox(...))');
  if (queue && typeof queue.receive !== 'function') throw new ConfigError('queue', 'must be an InboxQueue');
  const stream = jsName('stream', options.stream, 'e.g. "ORDERS"');
  const durable = jsName('durable', options.durable, 'e.g. "billing", one per consuming service');
  const requestTimeoutMs = int('requestTimeoutMs', options.requestTimeoutMs, 5000, 1, 3_600_000);
  const connection: NatsTransportOptions = { publishTimeoutMs: requestTimeoutMs };
  for (const field of ['servers', 'user', 'pass', 'token', 'authenticator', 'tls', 'name', 'connection', 'connectTimeoutMs', 'reconnectTimeWaitMs'] as const) {
    if (options[field] !== undefined) (connection as Record<string, unknown>)[field] = options[field];
  }
  if (options.connection === undefined && options.name === undefined) (connection as { name?: string }).name = `txbox-consumer-${durable}`;
  // The transport's resolver checks the connection fields and names them the same way.
  const transport = resolveNatsTransportOptions(connection);
  const dead = options.deadLetterSubject === undefined ? `txbox-dead.${stream}.${durable}` : options.deadLetterSubject;
  if (dead !== null) {
    const problem = typeof dead === 'string' ? subjectProblem(dead) : 'must be a subject string or null';
    if (problem) throw new ConfigError('deadLetterSubject', `${problem}; e.g. "txbox-dead.${stream}.${durable}", or null to term dead messages without a copy`);
  }
  const ackWaitMs = int('ackWaitMs', options.ackWaitMs, 30_000, 1000, 86_400_000);
  return Object.freeze({
    transport,
    stream,
    durable,
    filterSubjects: Object.freeze(filters(options.filterSubjects)),
    batch: int('batch', options.batch, 100, 1, 10_000),
    concurrency: int('concurrency', options.concurrency, 128, 1, 10_000),
    maxDeliveries: int('maxDeliveries', options.maxDeliveries, 12, 2, 1_000_000),
    ackWaitMs,
    maxAckPending: int('maxAckPending', options.maxAckPending, 1000, 1, 1_000_000),
    deadLetterSubject: dead,
    stopTimeoutMs: int('stopTimeoutMs', options.stopTimeoutMs, 30_000, 0, 3_600_000),
    requestTimeoutMs,
    handler: inbox ? Object.freeze({ kind: 'inbox' as const, inbox }) : Object.freeze({ kind: 'queue' as const, queue: queue! }),
    logger: options.logger ?? silentLogger,
  });
}

/**
 * The durable pull consumer these options describe: explicit acks, from the
 * first message of the stream, with ack wait, max deliver, max ack pending
 * and the filter from the options.
 */
export function durableConfig(o: ResolvedNatsConsumerOptions): Partial<ConsumerConfig> {
  const f = o.filterSubjects;
  return {
    durable_name: o.durable,
    ack_policy: AckPolicy.Explicit,
    deliver_policy: DeliverPolicy.All,
    ack_wait: nanos(o.ackWaitMs),
    max_deliver: o.maxDeliveries,
    max_ack_pending: o.maxAckPending,
    ...(f.length === 1 ? { filter_subject: f[0]! } : f.length > 1 ? { filter_subjects: [...f] } : {}),
  };
}

/**
 * What to update on an existing durable so that it matches the options, or
 * null when it does. Throws ConfigError for what cannot be updated: a push
 * consumer, or an ack policy other than explicit.
 */
export function durableChanges(o: ResolvedNatsConsumerOptions, existing: ConsumerConfig): Partial<ConsumerConfig> | null {
  const where = `${o.durable} on stream ${o.stream}`;
  if (existing.deliver_subject) throw new ConfigError('durable', `${where} is a push consumer (it has a deliver subject); use another durable name, or delete it`);
  if (existing.ack_policy !== AckPolicy.Explicit) {
    throw new ConfigError('durable', `${where} has ack policy ${existing.ack_policy}, which cannot be changed to explicit; use another durable name, or delete it`);
  }
  const f = o.filterSubjects;
  const current = existing.filter_subjects?.length ? existing.filter_subjects : existing.filter_subject ? [existing.filter_subject] : [];
  const sameFilter = current.length === f.length && [...current].sort().join('\n') === [...f].sort().join('\n');
  const want = { ack_wait: nanos(o.ackWaitMs), max_deliver: o.maxDeliveries, max_ack_pending: o.maxAckPending };
  if (sameFilter && existing.ack_wait === want.ack_wait && existing.max_deliver === want.max_deliver && existing.max_ack_pending === want.max_ack_pending) return null;
  if (sameFilter) return want;
  // nats.js merges the change into the stored config: undefined removes filter_subjects (JSON drops it), '' clears filter_subject.
  return { ...want, filter_subject: f.length === 1 ? f[0]! : '', filter_subjects: f.length > 1 ? [...f] : (undefined as unknown as string[]) };
}

/**
 * How long each pull request waits (nats.js `expires`): half of ack_wait,
 * 1 to 30 s. A crashed process's last pull request lives on in the server
 * until it expires, and JetStream may hand a redelivery to it (lost again
 * until the next ack_wait, and overtaken meanwhile by later messages of its
 * key); requests shorter than ack_wait are gone before redeliveries start.
 */
export function pullExpiresMs(o: ResolvedNatsConsumerOptions): number {
  return Math.min(30_000, Math.max(1000, Math.floor(o.ackWaitMs / 2)));
}

/** Why `subject` cannot be a consumer filter, or null: like a subject, but `*` and `>` may be whole tokens (`>` only last). */
export function filterSubjectProblem(subject: string): string | null {
  if (subject === '') return 'is empty; a filter is dot-separated tokens such as "txbox.orders.>"';
  if (/[\s\x00-\x1f\x7f]/.test(subject)) return 'must not contain spaces or control characters';
  const tokens = subject.split('.');
  for (let i = 0; i < tokens.length; i++) {
    const t = tokens[i]!;
    if (t === '') return 'has an empty token (a leading, trailing or double dot)';
    if ((t.includes('*') || t.includes('>')) && t !== '*' && t !== '>') return 'may use * and > only as whole tokens';
    if (t === '>' && i !== tokens.length - 1) return 'may use > only as the last token';
  }
  return null;
}

function filters(value: string | readonly string[] | undefined): string[] {
  if (value === undefined) return [];
  const list: readonly unknown[] = typeof value === 'string' ? [value] : Array.isArray(value) ? value : [null];
  const out: string[] = [];
  list.forEach((s, i) => {
    const field = typeof value === 'string' ? 'filterSubjects' : `filterSubjects[${i}]`;
    const problem = typeof s === 'string' ? filterSubjectProblem(s) : 'must be a subject string such as "txbox.orders.>"';
    if (problem) throw new ConfigError(field, problem);
    if (out.includes(s as string)) throw new ConfigError(field, 'is listed twice');
    out.push(s as string);
  });
  return out;
}

function jsName(field: string, value: unknown, example: string): string {
  if (typeof value !== 'string') throw new ConfigError(field, `is required: a JetStream name, ${example}`);
  const problem = streamNameProblem(value);
  if (problem) throw new ConfigError(field, `${problem}; ${example}`);
  return value;
}
