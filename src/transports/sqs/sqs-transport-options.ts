import type { SQSClient } from '@aws-sdk/client-sqs';
import { ConfigError } from '../../core/errors.ts';
import { silentLogger, type Logger } from '../../core/logger.ts';

/**
 * Settings both AWS transports (SQS and SNS) and the SQS consumer share: how
 * the SDK client is made. Credentials come from the SDK's default chain
 * (environment, shared config, SSO, container or instance role) unless given.
 */
export interface AwsClientOptions {
  /** The AWS region, e.g. `eu-west-1`. Default: the SDK's chain (AWS_REGION, shared config). Ignored with `client`. */
  readonly region?: string;
  /** Another endpoint than AWS's, e.g. `http://127.0.0.1:9324` for ElasticMQ. Default: AWS's. Ignored with `client`. */
  readonly endpoint?: string;
  /**
   * Static credentials or a credentials provider. Default: the SDK's default
   * chain. Never logged. Ignored with `client`.
   */
  readonly credentials?: { readonly accessKeyId: string; readonly secretAccessKey: string; readonly sessionToken?: string } | (() => Promise<{ readonly accessKeyId: string; readonly secretAccessKey: string; readonly sessionToken?: string }>);
  /** Longest wait for one request, in ms; then its events are retriable. Default: 10000. */
  readonly requestTimeoutMs?: number;
  /** Receives start-up warnings (a queue missing). Default: silent. */
  readonly logger?: Logger;
}

/**
 * Options of `new SqsTransport(...)`.
 *
 * @example
 * const options: SqsTransportOptions = {
 *   queues: { orders: 'https://sqs.eu-west-1.amazonaws.com/123456789012/orders.fifo' },
 *   region: 'eu-west-1',
 * };
 */
export interface SqsTransportOptions extends AwsClientOptions {
  /**
   * The queue URL of each destination. A URL ending in `.fifo` is a FIFO queue
   * (MessageGroupId = key, MessageDeduplicationId = event id); any other is a
   * standard queue (no order promise). An event whose destination is not
   * listed parks as unroutable. Required.
   */
  readonly queues: Readonly<Record<string, string>>;
  /** An SQSClient of your own (the transport does not destroy it). Default: one made from region, endpoint and credentials. */
  readonly client?: SQSClient;
  /**
   * Largest message, in bytes (UTF-8 body plus attribute names, types and
   * values, as SQS counts); larger events park. SQS's limit was 262144
   * (256 KiB) for years and is 1 MiB on AWS since 2025; ElasticMQ and other
   * emulators keep 256 KiB. Default: 262144.
   */
  readonly maxMessageBytes?: number;
  /** Largest batch request, in bytes of its messages (SQS's limit on a SendMessageBatch equals its message limit). Default: `maxMessageBytes`. */
  readonly maxBatchBytes?: number;
}

export interface ResolvedAwsClientOptions {
  readonly region: string | undefined;
  readonly endpoint: string | undefined;
  readonly credentials: AwsClientOptions['credentials'];
  readonly requestTimeoutMs: number;
  readonly logger: Logger;
}

/** SqsTransportOptions after `resolveSqsTransportOptions()`: checked, defaults filled, frozen. May hold credentials: do not log it. */
export interface ResolvedSqsTransportOptions extends ResolvedAwsClientOptions {
  readonly queues: ReadonlyMap<string, string>;
  readonly client: SQSClient | undefined;
  readonly maxMessageBytes: number;
  readonly maxBatchBytes: number;
}

/**
 * Validates SqsTransport options, fills defaults and freezes them. Throws
 * ConfigError naming the field (`queues.orders`, `endpoint`, ...) and the fix.
 *
 * @example
 * resolveSqsTransportOptions({ queues: { orders: 'http://127.0.0.1:9324/000000000000/orders.fifo' }, region: 'us-east-1' }).maxMessageBytes; // 262144
 */
export function resolveSqsTransportOptions(options: SqsTransportOptions): ResolvedSqsTransportOptions {
  if (options === null || typeof options !== 'object') throw new ConfigError('options', 'must be an object such as { queues: { orders: "https://sqs.<region>.amazonaws.com/<account>/orders.fifo" } }');
  const client = options.client;
  if (client !== undefined && (client === null || typeof client !== 'object' || typeof (client as { send?: unknown }).send !== 'function')) {
    throw new ConfigError('client', 'must be an SQSClient from @aws-sdk/client-sqs');
  }
  const maxMessageBytes = int('maxMessageBytes', options.maxMessageBytes, 262_144, 1024, 1_048_576);
  return Object.freeze({
    ...resolveAwsClientOptions(options),
    queues: resolveMap('queues', options.queues, queueUrl, 'a queue URL such as "https://sqs.eu-west-1.amazonaws.com/123456789012/orders.fifo"'),
    client,
    maxMessageBytes,
    maxBatchBytes: int('maxBatchBytes', options.maxBatchBytes, maxMessageBytes, 1024, 1_048_576),
  });
}

export function resolveAwsClientOptions(options: AwsClientOptions): ResolvedAwsClientOptions {
  for (const field of ['region', 'endpoint'] as const) {
    const value = options[field];
    if (value !== undefined && (typeof value !== 'string' || value.trim() === '')) throw new ConfigError(field, 'must be a non-empty string');
  }
  if (options.endpoint !== undefined) {
    let url: URL;
    try {
      url = new URL(options.endpoint);
    } catch (err) {
      throw new ConfigError('endpoint', 'is not a valid URL; write it as "http://127.0.0.1:9324" or "https://sqs.eu-west-1.amazonaws.com"', { cause: err });
    }
    if (url.protocol !== 'http:' && url.protocol !== 'https:') throw new ConfigError('endpoint', `uses ${url.protocol}; only http: and https: are supported`);
    if (url.username !== '' || url.password !== '') throw new ConfigError('endpoint', 'must not hold credentials; set credentials instead');
  }
  const c = options.credentials;
  if (c !== undefined && typeof c !== 'function') {
    if (c === null || typeof c !== 'object' || typeof c.accessKeyId !== 'string' || typeof c.secretAccessKey !== 'string' || c.accessKeyId === '' || c.secretAccessKey === '') {
      throw new ConfigError('credentials', 'must be { accessKeyId, secretAccessKey, sessionToken? } with non-empty strings, or a provider function; leave it out to use the SDK\'s default chain');
    }
  }
  const logger = options.logger ?? silentLogger;
  if (typeof logger !== 'object' || logger === null || typeof logger.warn !== 'function') {
    throw new ConfigError('logger', 'must have debug, info, warn and error methods (a pino logger fits)');
  }
  return {
    region: options.region,
    endpoint: options.endpoint,
    credentials: c,
    requestTimeoutMs: int('requestTimeoutMs', options.requestTimeoutMs, 10_000, 1, 3_600_000),
    logger,
  };
}

/** The SDK client settings: no retries inside the SDK (the relay retries with backoff, the breaker handles outages). */
export function sdkClientConfig(o: ResolvedAwsClientOptions): Record<string, unknown> {
  const config: Record<string, unknown> = { maxAttempts: 1 };
  if (o.region !== undefined) config['region'] = o.region;
  if (o.endpoint !== undefined) config['endpoint'] = o.endpoint;
  // A copy: the SDK marks the object it is given (and a frozen one makes it throw).
  if (o.credentials !== undefined) config['credentials'] = typeof o.credentials === 'function' ? o.credentials : { ...o.credentials };
  return config;
}

export function resolveMap(field: string, map: Readonly<Record<string, string>> | undefined, check: (value: string) => boolean, example: string): ReadonlyMap<string, string> {
  if (map === undefined || map === null || typeof map !== 'object' || Array.isArray(map)) {
    throw new ConfigError(field, `is required: an object of destination names to ${example.replace(/^an? /, '')}s, e.g. { orders: ${example.replace(/^.* such as /, '')} }`);
  }
  const out = new Map<string, string>();
  for (const [destination, value] of Object.entries(map)) {
    if (typeof value !== 'string' || !check(value)) throw new ConfigError(`${field}.${destination}`, `must be ${example}`);
    out.set(destination, value);
  }
  if (out.size === 0) throw new ConfigError(field, `maps no destination; add at least one, e.g. { orders: ${example.replace(/^.* such as /, '')} }`);
  return out;
}

function queueUrl(value: string): boolean {
  try {
    const url = new URL(value);
    return (url.protocol === 'https:' || url.protocol === 'http:') && url.pathname.split('/').filter(Boolean).length >= 2;
  } catch {
    return false;
  }
}

/** A FIFO queue's URL and a FIFO topic's ARN end in `.fifo`. */
export function isFifo(urlOrArn: string): boolean {
  return urlOrArn.endsWith('.fifo');
}

export function int(field: string, value: number | undefined, fallback: number, min: number, max: number): number {
  if (value === undefined) return fallback;
  if (!Number.isSafeInteger(value) || value < min || value > max) throw new ConfigError(field, `must be an integer from ${min} to ${max}, got ${String(value)}`);
  return value;
}
