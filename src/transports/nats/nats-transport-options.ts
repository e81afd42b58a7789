import { silentLogger, type Logger } from '../../core/logger.ts';
import type { Authenticator, NatsConnection, NodeConnectionOptions } from '@nats-io/transport-node';
import { ConfigError } from '../../core/errors.ts';
import { streamNameProblem, subjectProblem } from './nats-subjects.ts';

/** TLS settings passed to nats.js as they are (`ca`/`caFile`, `cert`/`certFile`, `key`/`keyFile`, `handshakeFirst`, `rejectUnauthorized`). */
export type NatsTransportTlsOptions = NonNullable<NodeConnectionOptions['tls']>;

/**
 * Options of `new NatsTransport(...)`; every field has a default.
 *
 * @example
 * const options: NatsTransportOptions = {
 *   servers: ['nats://10.0.0.5:4222', 'nats://10.0.0.6:4222'],
 *   user: 'relay', pass: process.env.NATS_PASS,
 *   streams: { orders: 'ORDERS' },
 * };
 */
export interface NatsTransportOptions {
  /**
   * The servers to connect to: `host:port`, `nats://host:port` or
   * `tls://host:port`, one or several (the client picks one and fails over).
   * Userinfo in a URL is redacted in every message. Default: `'127.0.0.1:4222'`.
   */
  readonly servers?: string | readonly string[];
  /** User name, with `pass`. Default: none. */
  readonly user?: string;
  /** Password, with `user`. Never appears in messages. Default: none. */
  readonly pass?: string;
  /** Auth token (instead of user/pass). Default: none. */
  readonly token?: string;
  /**
   * nats.js authenticators (`credsAuthenticator`, `nkeyAuthenticator`,
   * `jwtAuthenticator`, ...), passed through. Default: none.
   */
  readonly authenticator?: Authenticator | readonly Authenticator[];
  /** TLS options passed through to nats.js (`ca`/`caFile`, `cert`, `key`, `handshakeFirst`, ...). Default: none (plain TCP unless a `tls://` server or the server requires TLS). */
  readonly tls?: NatsTransportTlsOptions | null;
  /** The connection name shown in the server's monitoring (`/connz`). Default: `'txbox'`. */
  readonly name?: string;
  /**
   * An existing connection to publish on instead of opening one. The
   * transport never closes it (its owner does) and leaves its reconnect
   * settings alone. Cannot be combined with `servers`, credentials, `tls`,
   * `name`, `connectTimeoutMs` or `reconnectTimeWaitMs`. Default: none.
   */
  readonly connection?: NatsConnection;
  /**
   * A destination without an entry in `subjects` publishes to
   * `<subjectPrefix>.<destination>`; `''` means the destination itself is the
   * subject. Default: `'txbox'`.
   */
  readonly subjectPrefix?: string;
  /** Explicit subject per destination, e.g. `{ orders: 'shop.orders' }`. No wildcards. Default: none. */
  readonly subjects?: Readonly<Record<string, string>>;
  /**
   * The stream expected to capture each destination's subject, e.g.
   * `{ orders: 'ORDERS' }`. Sent as `Nats-Expected-Stream`: a message that
   * another stream would capture is refused (permanent). Destinations
   * without an entry are stored by whichever stream captures the subject.
   * Default: none.
   */
  readonly streams?: Readonly<Record<string, string>>;
  /**
   * Appends the ordering key as one more subject token:
   * `<subject>.<encoded key>`. Characters other than `A-Z a-z 0-9 _ - : =`
   * become `%XX` (UTF-8 bytes); a token over 128 characters is shortened with
   * a SHA-256 suffix. Streams must then capture `<subject>.>`. Default: false.
   */
  readonly keyInSubject?: boolean;
  /**
   * How long to wait for each message's JetStream ack, in ms. Past it the
   * event is retriable; this is also the bound for publishes during an outage
   * (they wait for the reconnect and fail at this deadline). Default: 5000.
   */
  readonly publishTimeoutMs?: number;
  /** How long `start()` waits for the TCP, TLS and auth handshake, in ms. Default: 5000. */
  readonly connectTimeoutMs?: number;
  /**
   * Pause between reconnect attempts to the same server, in ms (plus up to
   * 100 ms jitter). Reconnects never give up. Default: 1000.
   */
  readonly reconnectTimeWaitMs?: number;
  /** Where the transport logs (a warning when no server answers at start). Default: silent. */
  readonly logger?: Logger;
}

/** Which option the credentials came from, for messages about authorization failures. */
export type NatsCredentialSetting = 'user/pass' | 'token' | 'authenticator' | 'servers' | null;

/** NatsTransportOptions after `resolveNatsTransportOptions()`: checked, defaults filled, frozen. Holds credentials: do not log it. */
export interface ResolvedNatsTransportOptions {
  /** What `connect()` is called with; null with `connection`. */
  readonly connect: Readonly<NodeConnectionOptions> | null;
  readonly connection: NatsConnection | null;
  /** The servers with userinfo removed, for messages. */
  readonly serversDisplay: string;
  readonly credentials: NatsCredentialSetting;
  readonly subjectPrefix: string;
  readonly subjects: ReadonlyMap<string, string>;
  readonly streams: ReadonlyMap<string, string>;
  readonly keyInSubject: boolean;
  readonly publishTimeoutMs: number;
  readonly logger: Logger;
}

const EXAMPLE = 'e.g. { servers: "nats://127.0.0.1:4222", streams: { orders: "ORDERS" } }';
const CONNECTION_EXCLUSIVE = ['servers', 'user', 'pass', 'token', 'authenticator', 'tls', 'name', 'connectTimeoutMs', 'reconnectTimeWaitMs'] as const;

/**
 * Validates NatsTransport options, fills defaults and freezes them. Throws
 * ConfigError naming the field (`subjects.orders`, `user/pass`, ...) and the
 * fix; values that may hold credentials are never quoted.
 *
 * @example
 * const resolved = resolveNatsTransportOptions({ servers: '127.0.0.1:4222', keyInSubject: true });
 */
export function resolveNatsTransportOptions(options: NatsTransportOptions = {}): ResolvedNatsTransportOptions {
  if (options === null || typeof options !== 'object') throw new ConfigError('options', `must be an object, ${EXAMPLE}`);
  const subjectPrefix = options.subjectPrefix ?? 'txbox';
  if (typeof subjectPrefix !== 'string') throw new ConfigError('subjectPrefix', 'must be a string such as "txbox" (or "" to use destinations as subjects)');
  const prefixProblem = subjectPrefix === '' ? null : subjectProblem(subjectPrefix);
  if (prefixProblem) throw new ConfigError('subjectPrefix', `${prefixProblem}, e.g. "txbox" or "shop.events"`);
  const common = {
    subjectPrefix,
    subjects: stringMap('subjects', options.subjects, (s) => subjectProblem(s), 'e.g. { orders: "shop.orders" }'),
    streams: stringMap('streams', options.streams, (s) => streamNameProblem(s), 'e.g. { orders: "ORDERS" }'),
    keyInSubject: bool('keyInSubject', options.keyInSubject, false),
    publishTimeoutMs: int('publishTimeoutMs', options.publishTimeoutMs, 5000, 1, 3_600_000),
    logger: options.logger ?? silentLogger,
  };
  if (options.connection !== undefined) {
    const c = options.connection as Partial<NatsConnection> | null;
    if (c === null || typeof c !== 'object' || typeof c.request !== 'function' || typeof c.isClosed !== 'function') {
      throw new ConfigError('connection', 'must be a NatsConnection from connect() of @nats-io/transport-node');
    }
    for (const field of CONNECTION_EXCLUSIVE) {
      if (options[field] !== undefined) throw new ConfigError(field, 'cannot be combined with connection: configure the connection you pass instead');
    }
    return Object.freeze({ ...common, connect: null, connection: options.connection, serversDisplay: 'the given connection', credentials: null });
  }
  const servers = resolveServers(options.servers);
  const connect: NodeConnectionOptions = {
    servers: [...servers],
    name: nonEmpty('name', options.name ?? 'txbox'),
    timeout: int('connectTimeoutMs', options.connectTimeoutMs, 5000, 1, 600_000),
    reconnectTimeWait: int('reconnectTimeWaitMs', options.reconnectTimeWaitMs, 1000, 0, 600_000),
    reconnectJitter: 100,
    maxReconnectAttempts: -1,
    // Detects a half-open TCP connection within about a minute instead of the default four.
    pingInterval: 20_000,
    maxPingOut: 3,
    // nats.js otherwise builds two Error objects (stack traces) per request: about a quarter of the CPU of a publish.
    noAsyncTraces: true,
  };
  const credentials = resolveCredentials(options, connect, servers);
  if (options.tls !== undefined) {
    if (options.tls !== null && typeof options.tls !== 'object') throw new ConfigError('tls', 'must be an object of TLS options (ca, caFile, cert, key, handshakeFirst, ...) or null');
    connect.tls = options.tls === null ? null : { ...options.tls };
  }
  return Object.freeze({
    ...common,
    connect: Object.freeze(connect),
    connection: null,
    serversDisplay: servers.map(redactServer).join(', '),
    credentials,
  });
}

/** `nats://user:pass@host:4222` -> `nats://host:4222`: safe for messages. */
export function redactServer(server: string): string {
  return server.replace(/^([a-z][a-z0-9+.-]*:\/\/)?[^@/]*@/i, '$1');
}

function resolveServers(value: string | readonly string[] | undefined): readonly string[] {
  const list = value === undefined ? ['127.0.0.1:4222'] : typeof value === 'string' ? [value] : value;
  if (!Array.isArray(list) || list.length === 0) throw new ConfigError('servers', 'must be a server address or a non-empty array of them, e.g. "nats://127.0.0.1:4222"');
  list.forEach((s: unknown, i) => {
    // The value is not quoted: it may hold credentials.
    if (typeof s !== 'string' || s.trim() === '' || /\s/.test(s)) {
      throw new ConfigError(list.length > 1 ? `servers[${i}]` : 'servers', 'must be an address such as "127.0.0.1:4222" or "nats://host:4222", without spaces');
    }
  });
  return Object.freeze([...list]);
}

function resolveCredentials(o: NatsTransportOptions, connect: NodeConnectionOptions, servers: readonly string[]): NatsCredentialSetting {
  const given: NatsCredentialSetting[] = [];
  if (o.user !== undefined || o.pass !== undefined) {
    if (o.user === undefined) throw new ConfigError('user', 'is required with pass');
    if (o.pass === undefined) throw new ConfigError('pass', 'is required with user');
    connect.user = nonEmpty('user', o.user);
    if (typeof o.pass !== 'string') throw new ConfigError('pass', 'must be a string');
    connect.pass = o.pass;
    given.push('user/pass');
  }
  if (o.token !== undefined) {
    connect.token = nonEmpty('token', o.token);
    given.push('token');
  }
  if (o.authenticator !== undefined) {
    const list = Array.isArray(o.authenticator) ? o.authenticator : [o.authenticator];
    if (list.length === 0 || list.some((a) => typeof a !== 'function')) {
      throw new ConfigError('authenticator', 'must be a nats.js Authenticator (e.g. credsAuthenticator(...)) or an array of them');
    }
    connect.authenticator = list.length === 1 ? list[0] : [...list];
    given.push('authenticator');
  }
  if (given.length > 1) throw new ConfigError(given[1]!, `cannot be combined with ${given[0]!}: choose one way to authenticate`);
  if (given.length === 1) return given[0]!;
  return servers.some((s) => redactServer(s) !== s) ? 'servers' : null;
}

function stringMap(
  field: string,
  value: Readonly<Record<string, string>> | undefined,
  problem: (v: string) => string | null,
  example: string,
): ReadonlyMap<string, string> {
  const map = new Map<string, string>();
  if (value === undefined) return map;
  if (value === null || typeof value !== 'object' || Array.isArray(value)) throw new ConfigError(field, `must be an object of destination names to strings, ${example}`);
  for (const [destination, v] of Object.entries(value)) {
    if (destination === '') throw new ConfigError(field, `has an empty destination name; ${example}`);
    if (typeof v !== 'string') throw new ConfigError(`${field}.${destination}`, `must be a string, ${example}`);
    const p = problem(v);
    if (p) throw new ConfigError(`${field}.${destination}`, `${p}; ${example}`);
    map.set(destination, v);
  }
  return map;
}

function nonEmpty(field: string, value: unknown): string {
  if (typeof value !== 'string' || value === '') throw new ConfigError(field, 'must be a non-empty string');
  return value;
}

function bool(field: string, value: boolean | undefined, fallback: boolean): boolean {
  if (value === undefined) return fallback;
  if (typeof value !== 'boolean') throw new ConfigError(field, `must be true or false, got ${typeof value}`);
  return value;
}

function int(field: string, value: number | undefined, fallback: number, min: number, max: number): number {
  if (value === undefined) return fallback;
  if (!Number.isSafeInteger(value) || value < min || value > max) {
    throw new ConfigError(field, `must be an integer from ${min} to ${max}, got ${String(value)}`);
  }
  return value;
}
