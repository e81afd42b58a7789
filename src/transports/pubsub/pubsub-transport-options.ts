import type { ClientConfig, PubSub } from '@google-cloud/pubsub';
import { ConfigError } from '../../core/errors.ts';
import { silentLogger, type Logger } from '../../core/logger.ts';

/**
 * How to reach Pub/Sub, shared by the transport and the consumer. Give
 * `client`, or `projectId` (with `emulatorHost` for the emulator, or
 * `clientConfig` for credentials other than Application Default Credentials).
 */
export interface PubSubConnectionOptions {
  /** The Google Cloud project of the topics and subscriptions. Required unless `client` is given. */
  readonly projectId?: string;
  /**
   * `host:port` of Google's Pub/Sub emulator, e.g. `127.0.0.1:8085`:
   * plain-text gRPC, no credentials. The CLI reads it from
   * `PUBSUB_EMULATOR_HOST`; the library itself never reads the environment.
   * Default: none (Google's endpoint, with Application Default Credentials).
   */
  readonly emulatorHost?: string;
  /**
   * More settings for `new PubSub(...)`: `keyFilename`, `credentials`,
   * `apiEndpoint` (a regional or private endpoint), ... Never logged.
   * Default: none.
   */
  readonly clientConfig?: Omit<ClientConfig, 'projectId'>;
  /** Your own `PubSub` client instead of the settings above; txbox never closes it. Default: none. */
  readonly client?: PubSub;
  /** Longest wait for an administrative call (topic and subscription checks at start), in ms. Default: 10000. */
  readonly connectTimeoutMs?: number;
}

/**
 * Options of `new PubSubTransport(...)`.
 *
 * @example
 * const options: PubSubTransportOptions = { projectId: 'shop', topics: { orders: 'shop-orders' } };
 */
export interface PubSubTransportOptions extends PubSubConnectionOptions {
  /** The topic of a destination not listed in `topics` is `topicPrefix + destination`. Default: `''`. */
  readonly topicPrefix?: string;
  /** Topic names (or `projects/<p>/topics/<t>`) for some destinations, e.g. `{ orders: 'shop-orders' }`; these are checked at start. Default: none. */
  readonly topics?: Readonly<Record<string, string>>;
  /**
   * Publish with ordering key = the event key, so that a subscription with
   * message ordering delivers one key's events in order. After a failed
   * publish the client stops the key; the transport resumes it once the
   * call's outcomes are in (the relay then retries the key in order).
   * Default: true.
   */
  readonly messageOrdering?: boolean;
  /**
   * The client's publish batching. The transport flushes at the end of every
   * publish call, so `maxMilliseconds` only matters for calls larger than
   * `maxMessages`. Default: `{ maxMessages: 1000, maxBytes: 9000000, maxMilliseconds: 10 }`
   * (docs/performance.md#pubsub measures it against the client's defaults).
   */
  readonly batching?: { readonly maxMessages?: number; readonly maxBytes?: number; readonly maxMilliseconds?: number };
  /**
   * Publisher flow control: at most this many messages and bytes outstanding
   * (sent, not yet acked by Pub/Sub) per topic; more waits. Default:
   * `{ maxOutstandingMessages: 10000, maxOutstandingBytes: 104857600 }`.
   */
  readonly flowControl?: { readonly maxOutstandingMessages?: number; readonly maxOutstandingBytes?: number };
  /** Longest wait for Pub/Sub to ack one publish call (client retries included), in ms; then its unacked events are retriable. Default: 10000. */
  readonly publishTimeoutMs?: number;
  /** Receives topic checks and failures (names only, never payloads or credentials). Default: silent. */
  readonly logger?: Logger;
}

/** The connection settings after validation. Holds credentials in `clientConfig`: do not log it. */
export interface ResolvedPubSubConnection {
  readonly projectId: string | null;
  readonly emulatorHost: string | null;
  readonly clientConfig: Readonly<Omit<ClientConfig, 'projectId'>>;
  readonly client: PubSub | null;
  readonly connectTimeoutMs: number;
  /** Where Pub/Sub is, for messages: `emulator 127.0.0.1:8085`, `pubsub.googleapis.com`. */
  readonly display: string;
  /** The setting to name when the address is wrong. */
  readonly addressField: string;
}

export interface ResolvedPubSubTransportOptions {
  readonly connection: ResolvedPubSubConnection;
  readonly topicPrefix: string;
  readonly topics: ReadonlyMap<string, string>;
  readonly messageOrdering: boolean;
  readonly batching: { readonly maxMessages: number; readonly maxBytes: number; readonly maxMilliseconds: number };
  readonly flowControl: { readonly maxOutstandingMessages: number; readonly maxOutstandingBytes: number };
  readonly publishTimeoutMs: number;
  readonly logger: Logger;
}

/**
 * Validates PubSubTransport options, fills defaults and freezes them. Throws
 * ConfigError naming the field and the fix.
 *
 * @example
 * resolvePubSubTransportOptions({ projectId: 'shop', emulatorHost: '127.0.0.1:8085' }).messageOrdering; // true
 */
export function resolvePubSubTransportOptions(options: PubSubTransportOptions): ResolvedPubSubTransportOptions {
  if (options === null || typeof options !== 'object') throw new ConfigError('options', 'must be an object such as { projectId: "my-project" }');
  const topicPrefix = options.topicPrefix ?? '';
  if (typeof topicPrefix !== 'string') throw new ConfigError('topicPrefix', 'must be a string, e.g. "shop-"');
  const b = options.batching ?? {};
  const f = options.flowControl ?? {};
  if (options.messageOrdering !== undefined && typeof options.messageOrdering !== 'boolean') throw new ConfigError('messageOrdering', 'must be true or false');
  return Object.freeze({
    connection: resolvePubSubConnection(options),
    topicPrefix,
    topics: resolveNames('topics', options.topics, 'topic'),
    messageOrdering: options.messageOrdering ?? true,
    batching: Object.freeze({
      maxMessages: int('batching.maxMessages', b.maxMessages, 1000, 1, 1000),
      maxBytes: int('batching.maxBytes', b.maxBytes, 9_000_000, 1024, 10_000_000),
      maxMilliseconds: int('batching.maxMilliseconds', b.maxMilliseconds, 10, 0, 60_000),
    }),
    flowControl: Object.freeze({
      maxOutstandingMessages: int('flowControl.maxOutstandingMessages', f.maxOutstandingMessages, 10_000, 1, 10_000_000),
      maxOutstandingBytes: int('flowControl.maxOutstandingBytes', f.maxOutstandingBytes, 100 * 1024 * 1024, 1024, Number.MAX_SAFE_INTEGER),
    }),
    publishTimeoutMs: int('publishTimeoutMs', options.publishTimeoutMs, 10_000, 100, 3_600_000),
    logger: loggerOf(options.logger),
  });
}

/** Checks the connection settings shared by the transport and the consumer. */
export function resolvePubSubConnection(options: PubSubConnectionOptions): ResolvedPubSubConnection {
  const connectTimeoutMs = int('connectTimeoutMs', options.connectTimeoutMs, 10_000, 100, 3_600_000);
  if (options.client !== undefined) {
    for (const field of ['projectId', 'emulatorHost', 'clientConfig'] as const) {
      if (options[field] !== undefined) throw new ConfigError(field, 'cannot be combined with client: configure the PubSub client itself');
    }
    const c = options.client as Partial<PubSub> | null;
    if (c === null || typeof c !== 'object' || typeof c.topic !== 'function' || typeof c.subscription !== 'function') {
      throw new ConfigError('client', 'must be a PubSub instance from @google-cloud/pubsub (new PubSub({ projectId }))');
    }
    return Object.freeze({ projectId: null, emulatorHost: null, clientConfig: {}, client: options.client, connectTimeoutMs, display: 'the given PubSub client', addressField: 'client' });
  }
  if (typeof options.projectId !== 'string' || !/^[a-z][a-z0-9-]{4,28}[a-z0-9]$|^[a-z][a-z0-9.:-]{0,99}$/.test(options.projectId)) {
    throw new ConfigError('projectId', 'is required (or pass client): the Google Cloud project id, e.g. "my-project" (lowercase letters, digits and hyphens)');
  }
  const clientConfig = options.clientConfig ?? {};
  if (typeof clientConfig !== 'object' || clientConfig === null) throw new ConfigError('clientConfig', 'must be an object of @google-cloud/pubsub ClientConfig settings (keyFilename, credentials, apiEndpoint, ...)');
  let emulatorHost: string | null = null;
  if (options.emulatorHost !== undefined) {
    if (typeof options.emulatorHost !== 'string' || !/^(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9.-]+):\d{1,5}$/.test(options.emulatorHost)) {
      throw new ConfigError('emulatorHost', 'must be host:port of the Pub/Sub emulator, e.g. "127.0.0.1:8085"');
    }
    emulatorHost = options.emulatorHost;
  }
  const endpoint = (clientConfig as { apiEndpoint?: unknown }).apiEndpoint;
  const display = emulatorHost !== null ? `the emulator at ${emulatorHost}` : typeof endpoint === 'string' ? endpoint : 'pubsub.googleapis.com';
  const addressField = emulatorHost !== null ? 'emulatorHost' : typeof endpoint === 'string' ? 'clientConfig.apiEndpoint' : 'projectId';
  return Object.freeze({ projectId: options.projectId, emulatorHost, clientConfig: Object.freeze({ ...clientConfig }), client: null, connectTimeoutMs, display, addressField });
}

/** A name of the project's topics or subscriptions: `name` or `projects/<project>/<kind>s/<name>`. */
export function resolveNames(field: string, names: Readonly<Record<string, string>> | undefined, kind: 'topic' | 'subscription'): ReadonlyMap<string, string> {
  const map = new Map<string, string>();
  if (names === undefined) return map;
  if (names === null || typeof names !== 'object' || Array.isArray(names)) throw new ConfigError(field, `must be an object of destination names to ${kind} names, e.g. { orders: "shop-orders" }`);
  for (const [destination, name] of Object.entries(names)) {
    const problem = nameProblem(name, kind);
    if (problem !== null) throw new ConfigError(`${field}.${destination}`, problem);
    map.set(destination, name);
  }
  return map;
}

/** Why `name` is not a valid topic or subscription name (Pub/Sub's rules), or null. */
export function nameProblem(name: unknown, kind: 'topic' | 'subscription'): string | null {
  if (typeof name !== 'string') return `must be a ${kind} name, e.g. "shop-orders"`;
  const short = name.replace(new RegExp(`^projects/[^/]+/${kind}s/`), '');
  if (!/^[A-Za-z][A-Za-z0-9\-_.~+%]{2,254}$/.test(short) || short.toLowerCase().startsWith('goog')) {
    return `${JSON.stringify(name.slice(0, 80))} is not a valid ${kind} name: 3 to 255 characters, starting with a letter, of letters, digits and - _ . ~ + %, not starting with "goog"`;
  }
  return null;
}

export function loggerOf(logger: Logger | undefined): Logger {
  const l = logger ?? silentLogger;
  if (typeof l !== 'object' || l === null || typeof l.warn !== 'function') throw new ConfigError('logger', 'must have debug, info, warn and error methods (a pino logger fits)');
  return l;
}

export function int(field: string, value: number | undefined, fallback: number, min: number, max: number): number {
  if (value === undefined) return fallback;
  if (!Number.isSafeInteger(value) || value < min || value > max) throw new ConfigError(field, `must be an integer from ${min} to ${max}, got ${String(value)}`);
  return value;
}
