import { ConfigError } from '../core/errors.ts';
import { silentLogger, type Logger } from '../core/logger.ts';
import type { DashboardInboxSource, DashboardOutboxSource } from './dashboard-source.ts';

/**
 * Options of `createDashboardHandler(...)`: `admin` and one of `token` or
 * `allowNoAuth` are required.
 *
 * @example
 * const options: DashboardOptions = { admin: new PostgresAdmin(connection), token: process.env.DASHBOARD_TOKEN, basePath: '/ops/txbox' };
 */
export interface DashboardOptions {
  /** The outbox to show and act on: a `PostgresAdmin` (txbox/postgres) or a `MysqlAdmin` (txbox/mysql). */
  readonly admin: DashboardOutboxSource;
  /** The inbox to show (dead and held events, with retry): a `PostgresInboxAdmin` or a `MysqlInboxAdmin`. Default: none, the inbox section is hidden. */
  readonly inboxAdmin?: DashboardInboxSource | undefined;
  /**
   * The access token (at least 16 characters; e.g. `openssl rand -hex 32`),
   * or several by name (`{ alice: '...', bob: '...' }`): the audit table
   * records the name of the token that acted (`dashboard:alice@10.0.0.5`).
   * Accepted as `Authorization: Bearer <token>` or through the login form.
   */
  readonly token?: string | Readonly<Record<string, string>> | undefined;
  /**
   * Serve without a token. Only requests from loopback addresses with a
   * loopback Host header are answered (the others get 403), which also stops
   * DNS rebinding. POSTs still need the page's CSRF token. Default false.
   */
  readonly allowNoAuth?: boolean | undefined;
  /** Show event payloads of parked events. Default false: keys, types, errors and attempts only. */
  readonly showPayloads?: boolean | undefined;
  /** The path the handler is mounted under, e.g. `/ops/txbox`. Default `''` (the root). */
  readonly basePath?: string | undefined;
  /** How often the status is sampled for the charts and the live view, in ms. Default 5000. */
  readonly sampleIntervalMs?: number | undefined;
  /** How much history the charts keep, in ms. Default 3600000 (1 hour). */
  readonly historyMs?: number | undefined;
  /** Login sessions expire after this long without a request, in ms. Default 43200000 (12 hours). */
  readonly sessionTtlMs?: number | undefined;
  /** Parked, dead and held events listed, newest last. Default 100. */
  readonly listLimit?: number | undefined;
  /** Origins besides the request's own Host allowed to POST (a reverse proxy that rewrites Host), e.g. `['https://ops.example.com']`. Default none. */
  readonly allowedOrigins?: readonly string[] | undefined;
  /** Mark the session cookie Secure (served over HTTPS, also behind a TLS proxy). Default: true when the request came over TLS. */
  readonly secureCookie?: boolean | undefined;
  /** Logs sampling errors and actions (ids and counts, never tokens or payloads). Default silent. */
  readonly logger?: Logger | undefined;
}

export interface ResolvedDashboardOptions {
  readonly admin: DashboardOutboxSource;
  readonly inboxAdmin: DashboardInboxSource | null;
  /** Token name -> token; empty with allowNoAuth. */
  readonly tokens: ReadonlyMap<string, string>;
  readonly allowNoAuth: boolean;
  readonly showPayloads: boolean;
  readonly basePath: string;
  readonly sampleIntervalMs: number;
  readonly historyMs: number;
  readonly sessionTtlMs: number;
  readonly listLimit: number;
  readonly allowedOrigins: readonly string[];
  readonly secureCookie: boolean | null;
  readonly logger: Logger;
}

const positive = (field: string, value: number | undefined, fallback: number, example: string): number => {
  if (value === undefined) return fallback;
  if (!Number.isSafeInteger(value) || value <= 0) throw new ConfigError(field, `must be a positive whole number, e.g. ${example}`);
  return value;
};

export function resolveDashboardOptions(options: DashboardOptions): ResolvedDashboardOptions {
  if (!options || typeof options.admin?.status !== 'function') throw new ConfigError('admin', 'pass the outbox admin, e.g. new PostgresAdmin(connection) from txbox/postgres or new MysqlAdmin(connection) from txbox/mysql');
  const tokens = new Map<string, string>();
  if (typeof options.token === 'string') tokens.set('token', options.token);
  else if (options.token !== undefined && options.token !== null) for (const [name, value] of Object.entries(options.token)) tokens.set(name, value);
  for (const [name, value] of tokens) {
    if (typeof value !== 'string' || value.length < 16) throw new ConfigError('token', `${name === 'token' ? 'the token' : `token ${JSON.stringify(name)}`} is shorter than 16 characters; generate one with \`openssl rand -hex 32\``);
    if (!/^[\x21-\x7e]+$/.test(value)) throw new ConfigError('token', 'use printable ASCII without spaces (it travels in an Authorization header)');
    if (!/^[A-Za-z0-9_.-]{1,64}$/.test(name)) throw new ConfigError('token', `token name ${JSON.stringify(name)}: use letters, digits, _ . - (it is written to the audit table)`);
  }
  const allowNoAuth = options.allowNoAuth === true;
  if (tokens.size === 0 && !allowNoAuth) throw new ConfigError('token', 'the dashboard refuses to run without an access token; pass token, or allowNoAuth: true to serve loopback clients only');
  if (tokens.size > 0 && allowNoAuth) throw new ConfigError('allowNoAuth', 'give a token or allowNoAuth, not both');
  const basePath = (options.basePath ?? '').replace(/\/+$/, '');
  if (basePath !== '' && !/^(\/[A-Za-z0-9._~-]+)+$/.test(basePath)) throw new ConfigError('basePath', `${JSON.stringify(options.basePath)} is not a path; use e.g. /ops/txbox`);
  for (const origin of options.allowedOrigins ?? []) {
    if (!/^https?:\/\/[^/\s]+$/.test(origin)) throw new ConfigError('allowedOrigins', `${JSON.stringify(origin)} is not an origin; use scheme://host[:port], e.g. https://ops.example.com`);
  }
  const sampleIntervalMs = positive('sampleIntervalMs', options.sampleIntervalMs, 5000, '5000');
  return Object.freeze({
    admin: options.admin,
    inboxAdmin: options.inboxAdmin ?? null,
    tokens,
    allowNoAuth,
    showPayloads: options.showPayloads === true,
    basePath,
    sampleIntervalMs,
    historyMs: Math.max(positive('historyMs', options.historyMs, 3_600_000, '3600000'), sampleIntervalMs),
    sessionTtlMs: positive('sessionTtlMs', options.sessionTtlMs, 43_200_000, '43200000'),
    listLimit: positive('listLimit', options.listLimit, 100, '100'),
    allowedOrigins: [...(options.allowedOrigins ?? [])],
    secureCookie: options.secureCookie ?? null,
    logger: options.logger ?? silentLogger,
  });
}
