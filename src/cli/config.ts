/**
 * CLI configuration: flags, then environment (TXBOX_*), then a JSON config
 * file, then defaults. This module and main.ts are the only places that read
 * process.env and argv.
 */
import { existsSync, readFileSync } from 'node:fs';
import { CliError } from './cli-error.ts';
import { parseDuration } from '../core/duration.ts';

export interface TransportConfig {
  readonly type: string;
  /** http: destination -> URL. */
  readonly endpoints?: Readonly<Record<string, string>>;
  /** http: Standard Webhooks secret (whsec_...). */
  readonly secret?: string;
  /** http: send unsigned requests when there is no secret (`--unsigned`, or the config file's transport.allowUnsigned). */
  readonly allowUnsigned?: boolean;
  /** The broker address: kafka brokers, nats servers (comma-separated), rabbitmq or redis URL. */
  readonly url?: string;
  readonly timeoutMs?: number;
  readonly [option: string]: unknown;
}

export interface CliConfig {
  readonly databaseUrl: string | undefined;
  readonly schema: string;
  readonly table: string;
  readonly relay: {
    readonly batchSize?: number;
    readonly lanes?: number;
    readonly leaseTtlMs?: number;
    readonly pollIntervalMs?: number;
    readonly maxAttempts?: number;
    readonly skipParkedDestinations?: readonly string[];
    readonly deleteOnPublish?: boolean;
    /** PostgreSQL: wait for the WAL flush of every mark (the relay store's synchronousMarks). */
    readonly synchronousMarks?: boolean;
    /** Keep published rows this long, in milliseconds, from "90s", "15m", "24h", "7d"; false for "off" (no retention). */
    readonly keepPublishedMs?: number | false;
    /** The destination circuit breaker's first pause and longest pause, in milliseconds, from durations with a unit. */
    readonly breakerBaseDelayMs?: number;
    readonly breakerMaxDelayMs?: number;
    /** How an idle relay is woken: notify (LISTEN/NOTIFY and polling) or wal (a logical replication slot). */
    readonly wake?: 'notify' | 'wal';
  };
  readonly transport: TransportConfig | undefined;
  readonly logLevel: 'debug' | 'info' | 'warn' | 'error' | 'silent';
  /** `txbox dashboard`'s access token: --token or TXBOX_DASHBOARD_TOKEN (never from the config file: keep secrets out of files). */
  readonly dashboardToken: string | undefined;
  /** Where each setting came from, for messages: field -> "--flag" | "TXBOX_X" | "file.json". */
  readonly sources: Readonly<Record<string, string>>;
}

type Flags = Record<string, string | boolean | string[] | undefined>;

const ENV = {
  databaseUrl: 'TXBOX_DATABASE_URL',
  schema: 'TXBOX_SCHEMA',
  table: 'TXBOX_TABLE',
  transport: 'TXBOX_TRANSPORT',
  endpoints: 'TXBOX_HTTP_ENDPOINTS',
  secret: 'TXBOX_WEBHOOK_SECRET',
  transportUrl: 'TXBOX_TRANSPORT_URL',
  batchSize: 'TXBOX_BATCH_SIZE',
  lanes: 'TXBOX_LANES',
  leaseTtlMs: 'TXBOX_LEASE_TTL_MS',
  pollIntervalMs: 'TXBOX_POLL_INTERVAL_MS',
  maxAttempts: 'TXBOX_MAX_ATTEMPTS',
  keepPublished: 'TXBOX_KEEP_PUBLISHED',
  breakerBaseDelay: 'TXBOX_BREAKER_BASE_DELAY',
  breakerMaxDelay: 'TXBOX_BREAKER_MAX_DELAY',
  wake: 'TXBOX_WAKE',
  logLevel: 'TXBOX_LOG_LEVEL',
  config: 'TXBOX_CONFIG',
  dashboardToken: 'TXBOX_DASHBOARD_TOKEN',
} as const;

export const ENV_HELP = `Environment:
  TXBOX_DATABASE_URL     PostgreSQL URL (postgres://user@host:5432/db), or MySQL/MariaDB
                         (mysql://user@host:3306/db) for migrate, relay, status, parked, replay,
                         or Firestore (firestore://PROJECT_ID[/DATABASE_ID])
  TXBOX_SCHEMA           schema of the txbox tables (default txbox; PostgreSQL only)
  TXBOX_TABLE            outbox table name (default outbox)
  TXBOX_CONFIG           path of a JSON config file (default ./txbox.config.json if present)
  TXBOX_TRANSPORT        transport type: http, kafka, rabbitmq, nats, redis, pubsub, sqs, sns
  TXBOX_TRANSPORT_URL    broker address: kafka brokers or nats servers (comma-separated),
                         an amqp:// or redis:// URL (pubsub: none; PUBSUB_EMULATOR_HOST
                         for the emulator, GOOGLE_CLOUD_PROJECT for the project; sqs/sns:
                         an endpoint URL, default AWS's own)
  TXBOX_HTTP_ENDPOINTS   destination=url pairs, comma separated
  TXBOX_WEBHOOK_SECRET   Standard Webhooks signing secret (whsec_...)
  TXBOX_DASHBOARD_TOKEN  access token of txbox dashboard (16+ characters)
  TXBOX_BATCH_SIZE, TXBOX_LANES, TXBOX_LEASE_TTL_MS, TXBOX_POLL_INTERVAL_MS,
  TXBOX_MAX_ATTEMPTS, TXBOX_KEEP_PUBLISHED, TXBOX_BREAKER_BASE_DELAY,
  TXBOX_BREAKER_MAX_DELAY, TXBOX_WAKE, TXBOX_LOG_LEVEL
Durations carry a unit (500ms, 30s, 15m, 24h, 7d, 1h30m); a bare number is refused.
Settings named *_MS / --*-ms take milliseconds.`;

export function loadConfig(flags: Flags, env: NodeJS.ProcessEnv): CliConfig {
  const sources: Record<string, string> = {};
  const configPath = str(flags.config) ?? env[ENV.config] ?? (existsSync('txbox.config.json') ? 'txbox.config.json' : undefined);
  const file = configPath ? readConfigFile(configPath) : {};
  const fileName = configPath ?? '';

  function pick(field: string, flag: string, envName: string | undefined, fromFile: unknown): string | undefined {
    const f = str(flags[flag]);
    if (f !== undefined) {
      sources[field] = `--${flag}`;
      return f;
    }
    const e = envName ? env[envName] : undefined;
    if (e !== undefined && e !== '') {
      sources[field] = envName!;
      return e;
    }
    if (fromFile !== undefined) {
      sources[field] = `${fileName} (${field})`;
      return typeof fromFile === 'string' ? fromFile : JSON.stringify(fromFile);
    }
    return undefined;
  }
  const fileRelay = (file.relay ?? {}) as Record<string, unknown>;
  const fileTransport = file.transport as Record<string, unknown> | undefined;

  const intField = (field: string, flag: string, envName: string, fromFile: unknown): number | undefined => {
    const v = pick(field, flag, envName, fromFile);
    if (v === undefined) return undefined;
    const n = Number(v);
    if (Number.isSafeInteger(n) && n >= 0 && v.trim() !== '') return n;
    const source = sources[field]!;
    const shown = source.startsWith('--') ? `${source} ${v}` : source.startsWith('TXBOX_') ? `${source}=${v}` : `${source} ${JSON.stringify(v)}`;
    const example = `${source.startsWith('--') ? `${source} ` : source.startsWith('TXBOX_') ? `${source}=` : ''}${EXAMPLE_INTS[field] ?? 10}`;
    if (field.endsWith('Ms')) throw new CliError(`${shown}: give milliseconds as a whole number (the name says the unit), e.g. ${example}`);
    throw new CliError(`${shown}: must be a whole number >= 0, e.g. ${example}`);
  };

  const transportType = pick('transport', 'transport', ENV.transport, fileTransport?.type);
  let transport: TransportConfig | undefined;
  if (transportType !== undefined) {
    const endpointFlags = Array.isArray(flags.endpoint) ? flags.endpoint : typeof flags.endpoint === 'string' ? [flags.endpoint] : [];
    let endpoints = (fileTransport?.endpoints as Record<string, string> | undefined) ?? undefined;
    if (env[ENV.endpoints]) {
      endpoints = parsePairs(env[ENV.endpoints]!.split(',').filter((p) => p.trim() !== ''), ENV.endpoints);
      sources.endpoints = ENV.endpoints;
    }
    if (endpointFlags.length > 0) {
      endpoints = parsePairs(endpointFlags, '--endpoint');
      sources.endpoints = '--endpoint';
    }
    const secret = pick('secret', 'secret', ENV.secret, fileTransport?.secret);
    const url = pick('transportUrl', 'transport-url', ENV.transportUrl, fileTransport?.url);
    transport = {
      ...(fileTransport ?? {}),
      type: transportType,
      ...(endpoints ? { endpoints } : {}),
      ...(secret !== undefined ? { secret } : {}),
      ...(url !== undefined ? { url } : {}),
      ...(flags.unsigned === true ? { allowUnsigned: true } : {}),
    };
  }

  /** A duration setting through the one parser, named as the user gave it: `--flag 7`, `NAME=7`, or the file's field. */
  const durationOrOff = (field: string, value: string | undefined): number | false | undefined => {
    if (value === undefined) return undefined;
    if (value.trim() === 'off') return false;
    return duration(field, value);
  };
  const duration = (field: string, value: string | undefined): number | undefined => {
    if (value === undefined) return undefined;
    const source = sources[field] ?? field;
    return parseDuration(value, source.includes('(') ? `${source.replace(/ \(.*\)$/, '')} relay.${field}` : source);
  };

  const logLevel = pick('logLevel', 'log-level', ENV.logLevel, file.logLevel) ?? 'info';
  if (!['debug', 'info', 'warn', 'error', 'silent'].includes(logLevel)) {
    const source = sources.logLevel!;
    const shown = source.startsWith('--') ? `${source} ${logLevel}` : source.startsWith('TXBOX_') ? `${source}=${logLevel}` : `${source} ${JSON.stringify(logLevel)}`;
    throw new CliError(`${shown}: choose debug, info, warn, error or silent`);
  }
  const wake = pick('wake', 'wake', ENV.wake, fileRelay.wake);
  if (wake !== undefined && wake !== 'notify' && wake !== 'wal') {
    const source = sources.wake!;
    const shown = source.startsWith('--') ? `${source} ${wake}` : source.startsWith('TXBOX_') ? `${source}=${wake}` : `${source} ${JSON.stringify(wake)}`;
    throw new CliError(`${shown}: choose notify (LISTEN/NOTIFY and polling) or wal (logical replication; needs wal_level=logical and REPLICATION)`);
  }
  const skip = pick('skipParkedDestinations', 'skip-parked', undefined, fileRelay.skipParkedDestinations);
  const deleteOnPublish = flags['delete-on-publish'] === true || fileRelay.deleteOnPublish === true;
  const synchronousMarks = flags['synchronous-marks'] === true || fileRelay.synchronousMarks === true;
  const relay = clean({
    batchSize: intField('batchSize', 'batch-size', ENV.batchSize, fileRelay.batchSize),
    lanes: intField('lanes', 'lanes', ENV.lanes, fileRelay.lanes),
    leaseTtlMs: intField('leaseTtlMs', 'lease-ttl-ms', ENV.leaseTtlMs, fileRelay.leaseTtlMs),
    pollIntervalMs: intField('pollIntervalMs', 'poll-interval-ms', ENV.pollIntervalMs, fileRelay.pollIntervalMs),
    maxAttempts: intField('maxAttempts', 'max-attempts', ENV.maxAttempts, fileRelay.maxAttempts),
    skipParkedDestinations: skip === undefined ? undefined : parseList(skip, sources.skipParkedDestinations ?? 'skipParkedDestinations'),
    deleteOnPublish,
    synchronousMarks,
    keepPublishedMs: durationOrOff('keepPublished', pick('keepPublished', 'keep-published', ENV.keepPublished, fileRelay.keepPublished)),
    breakerBaseDelayMs: duration('breakerBaseDelay', pick('breakerBaseDelay', 'breaker-base-delay', ENV.breakerBaseDelay, fileRelay.breakerBaseDelay)),
    breakerMaxDelayMs: duration('breakerMaxDelay', pick('breakerMaxDelay', 'breaker-max-delay', ENV.breakerMaxDelay, fileRelay.breakerMaxDelay)),
    wake: wake as 'notify' | 'wal' | undefined,
  });
  // The relay names these settings by its option (circuitBreaker.baseDelayMs); messages name the flag, variable or file field.
  if (sources.breakerBaseDelay) sources['circuitBreaker.baseDelayMs'] = sources.breakerBaseDelay;
  if (sources.breakerMaxDelay) sources['circuitBreaker.maxDelayMs'] = sources.breakerMaxDelay;
  const { breakerBaseDelayMs: base, breakerMaxDelayMs: max } = relay as CliConfig['relay'];
  if (base !== undefined && max !== undefined && max < base) {
    throw new CliError(`${sources.breakerMaxDelay}: the longest pause (${max} ms) is shorter than ${sources.breakerBaseDelay} (${base} ms); give a max delay at least the base delay`);
  }
  return {
    databaseUrl: pick('databaseUrl', 'database-url', ENV.databaseUrl, file.databaseUrl),
    schema: pick('schema', 'schema', ENV.schema, file.schema) ?? 'txbox',
    table: pick('table', 'table', ENV.table, file.table) ?? 'outbox',
    relay,
    transport,
    logLevel: logLevel as CliConfig['logLevel'],
    dashboardToken: pick('dashboardToken', 'token', ENV.dashboardToken, undefined),
    sources,
  };
}

/** Example values in the messages for bad whole-number settings: the defaults. */
const EXAMPLE_INTS: Record<string, number> = { batchSize: 500, lanes: 2, leaseTtlMs: 30000, pollIntervalMs: 1000, maxAttempts: 12 };

/** `line L, column C` (both from 1) of a character offset. */
function lineColumn(text: string, offset: number): string {
  const before = text.slice(0, offset).split('\n');
  return `line ${before.length}, column ${before.at(-1)!.length + 1}`;
}

function readConfigFile(path: string): Record<string, unknown> {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (err) {
    throw new CliError(`config file ${path}: cannot read it (${(err as NodeJS.ErrnoException).code ?? 'error'}); check --config or TXBOX_CONFIG`);
  }
  try {
    const value: unknown = JSON.parse(text);
    if (value === null || typeof value !== 'object' || Array.isArray(value)) throw new Error('not an object');
    return value as Record<string, unknown>;
  } catch (err) {
    // Not the parser's message: V8 quotes the text around the error, which may be a secret.
    const at = /position (\d+)/.exec((err as Error).message);
    const where = at ? ` at ${lineColumn(text, Number(at[1]))}` : '';
    if ((err as Error).message === 'not an object') throw new CliError(`config file ${path}: not a JSON object (the top level must be { ... })`);
    throw new CliError(`config file ${path}: not valid JSON${where}; jq . ${path} shows where (its text is not quoted here: it may hold secrets)`);
  }
}

/** A destination name as the CLI takes it: what comes before the first `=` of a DEST=URL pair. */
const DESTINATION_NAME = /^[A-Za-z0-9_.:-]+$/;

/**
 * DEST=URL pairs: one per `--endpoint` flag (the URL may hold commas), or
 * comma-separated in the environment variable. Errors name the pair by its position and
 * never quote it: a pair without `DEST=` is a URL whose userinfo, path or
 * query may be a secret.
 */
function parsePairs(items: readonly string[], source: string): Record<string, string> {
  const out: Record<string, string> = {};
  items.forEach((raw, i) => {
    const pair = raw.trim();
    const eq = pair.indexOf('=');
    const name = pair.slice(0, Math.max(eq, 0));
    if (eq <= 0 || !DESTINATION_NAME.test(name)) {
      throw new CliError(`${source} #${i + 1}: expected DEST=URL, e.g. orders=https://hooks.example.com/orders (the destination name holds letters, digits and _ . : -); the value is not shown, as it may hold credentials`);
    }
    out[name] = pair.slice(eq + 1);
  });
  return out;
}

function parseList(text: string, source: string): string[] {
  if (!text.startsWith('[')) return text.split(',').map((x) => x.trim()).filter(Boolean);
  try {
    const v: unknown = JSON.parse(text);
    if (Array.isArray(v) && v.every((x) => typeof x === 'string')) return v;
  } catch {
    // fall through to the error below
  }
  throw new CliError(`${source}: expected a comma-separated list or a JSON array of destination names`);
}

function str(v: unknown): string | undefined {
  return typeof v === 'string' ? v : undefined;
}

function clean<T extends object>(o: T): { [K in keyof T]: Exclude<T[K], undefined> } {
  return Object.fromEntries(Object.entries(o).filter(([, v]) => v !== undefined)) as never;
}
