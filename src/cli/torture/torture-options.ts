/**
 * The settings of one `txbox torture` run, from its flags. Every error names
 * the flag and the fix.
 */
import { CliError } from '../cli-error.ts';
import { parseDuration } from '../../core/duration.ts';

export const TORTURE_TRANSPORTS = ['http', 'nats', 'redis', 'kafka', 'rabbitmq', 'pubsub', 'sqs'] as const;
export type TortureTransport = (typeof TORTURE_TRANSPORTS)[number];

export interface TortureOptions {
  /** Events to commit (producers stop there or at `durationMs`, whichever comes first). */
  readonly events: number;
  /** Distinct ordering keys; their use is skewed (Zipf, s = 1). */
  readonly keys: number;
  /** Relay kills (SIGKILL, or abort() on PGlite) to inflict at least. */
  readonly kills: number;
  /** Longest time producers write; 0 = until `events`. */
  readonly durationMs: number;
  readonly transport: TortureTransport;
  /** The broker's address; default: its usual port on 127.0.0.1. */
  readonly transportUrl: string | undefined;
  /** PostgreSQL; undefined = embedded PGlite with in-process relays. */
  readonly databaseUrl: string | undefined;
  /** Relay processes at once (2 or 3 in the issue; 1..8 accepted). */
  readonly relays: number;
  /** Concurrent producer connections. */
  readonly writers: number;
  readonly rollbackRate: number;
  /** Receiving side: consumer processes with an inbox and a version-guarded projection, killed mid-handler. */
  readonly inbox: boolean;
  /** Consumer processes at once with `inbox`. */
  readonly consumers: number;
  readonly leaseTtlMs: number;
  /** How the relays wake: LISTEN/NOTIFY (producers notify) or the WAL wake mode (producers without NOTIFY; PostgreSQL with wal_level=logical). */
  readonly wake: 'notify' | 'wal';
  /** How long to wait, after the producers and the faults stopped, for everything to arrive. */
  readonly drainTimeoutMs: number;
  readonly seed: number;
  /** Keep the schema (and print its name) instead of dropping it. */
  readonly keep: boolean;
}

type Flags = Record<string, string | boolean | string[] | undefined>;

/** `wake`: the relays' wake mode as the CLI's configuration resolved it (--wake, TXBOX_WAKE, the config file; checked there). */
export function resolveTortureOptions(flags: Flags, databaseUrl: string | undefined, wake: 'notify' | 'wal' = 'notify'): TortureOptions {
  const int = (name: string, fallback: number, min: number, max = Number.MAX_SAFE_INTEGER): number => {
    const v = flags[name];
    if (v === undefined) return fallback;
    const n = Number(v);
    if (typeof v !== 'string' || !Number.isSafeInteger(n) || n < min || n > max) {
      throw new CliError(`--${name}: must be an integer from ${min} to ${max}, got ${JSON.stringify(v)}`);
    }
    return n;
  };
  const duration = (name: string, fallbackMs: number): number => {
    const v = flags[name];
    if (v === undefined) return fallbackMs;
    if (typeof v !== 'string' || !/^\d+(\.\d+)?(ms|s|m|h)$/.test(v.trim())) {
      throw new CliError(`--${name}: must be a duration with its unit, e.g. 90s or 2m, got ${JSON.stringify(v)}`);
    }
    return parseDuration(v, `--${name}`);
  };
  if (flags.minutes !== undefined && flags.duration !== undefined) {
    throw new CliError('--minutes and --duration: give one of them (--minutes 2 is --duration 2m)');
  }
  let durationMs = duration('duration', 0);
  if (flags.minutes !== undefined) {
    const m = Number(flags.minutes);
    if (typeof flags.minutes !== 'string' || !(m > 0) || !Number.isFinite(m)) {
      throw new CliError(`--minutes: must be a positive number of minutes, e.g. 2 or 0.5, got ${JSON.stringify(flags.minutes)}`);
    }
    durationMs = Math.round(m * 60_000);
  }
  const transport = flags.transport ?? 'http';
  if (typeof transport !== 'string' || !(TORTURE_TRANSPORTS as readonly string[]).includes(transport)) {
    throw new CliError(`--transport: unknown ${JSON.stringify(transport)}; choose one of ${TORTURE_TRANSPORTS.join(', ')}`);
  }
  const rollback = flags['rollback-rate'] === undefined ? 0.1 : Number(flags['rollback-rate']);
  if (!(rollback >= 0 && rollback < 1)) throw new CliError('--rollback-rate: must be a number from 0 to below 1, e.g. 0.1');
  const seedFlag = flags.seed;
  const seed = seedFlag === undefined ? Math.floor(Math.random() * 2 ** 31) : int('seed', 0, 0, 2 ** 31 - 1);
  const inbox = flags.inbox === true;
  if (inbox && databaseUrl === undefined) {
    throw new CliError('--inbox: needs PostgreSQL (consumer processes share the database); pass --database-url or TXBOX_DATABASE_URL');
  }
  if (wake === 'wal' && databaseUrl === undefined) {
    throw new CliError('--wake wal: needs PostgreSQL with wal_level=logical (the relays follow a replication slot); pass --database-url or TXBOX_DATABASE_URL');
  }
  return {
    events: int('events', 20_000, 1),
    keys: int('keys', 500, 1, 1_000_000),
    kills: int('kills', 20, 0, 100_000),
    durationMs,
    transport: transport as TortureTransport,
    transportUrl: typeof flags['transport-url'] === 'string' ? flags['transport-url'] : undefined,
    databaseUrl,
    relays: int('relays', 3, 1, 8),
    writers: int('writers', 8, 1, 64),
    rollbackRate: rollback,
    inbox,
    consumers: int('consumers', 2, 1, 8),
    leaseTtlMs: duration('lease-ttl', 2000),
    wake,
    drainTimeoutMs: duration('drain-timeout', 120_000),
    seed,
    keep: flags.keep === true,
  };
}
