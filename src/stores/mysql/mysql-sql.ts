import { createHash } from 'node:crypto';
/**
 * Table names and statement texts of the MySQL / MariaDB backend. Names are
 * validated identifiers quoted with backticks; every value is a `?`
 * placeholder. Times are the server's UTC_TIMESTAMP(6), never the relay's
 * clock nor the session time zone.
 */
import { checkIdentifier } from '../../core/identifiers.ts';

export interface MysqlNamesOptions {
  /** Database holding the tables. Default: the connection's current database. */
  readonly database?: string;
  /** The outbox table; the buckets, relays and audit tables take it as a prefix. Default: `outbox`. */
  readonly table?: string;
}

export interface MysqlNames {
  readonly database: string | undefined;
  readonly table: string;
  readonly outbox: string;
  readonly buckets: string;
  readonly relays: string;
  readonly audit: string;
  readonly migrations: string;
  /** The GET_LOCK name that serializes migrations of these tables. */
  readonly lockName: string;
}

const tick = (name: string): string => `\`${name}\``;

/** `txbox_migrate.<database>.<table>`, or its SHA-1 when longer than the 64 characters MySQL 5.7+ allows a GET_LOCK name. */
function migrationLockName(database: string | undefined, table: string): string {
  const name = `txbox_migrate.${database ?? ''}.${table}`;
  return name.length <= 64 ? name : `txbox_migrate.${createHash('sha1').update(name).digest('hex')}`;
}

/** Validates and quotes the names (`database`, `table` named in the error). */
export function mysqlNames(options: MysqlNamesOptions = {}): MysqlNames {
  const database = options.database === undefined ? undefined : checkIdentifier('database', options.database, 64);
  const table = checkIdentifier('table', options.table ?? 'outbox', 50);
  const q = (suffix: string) => (database ? `${tick(database)}.` : '') + tick(table + suffix);
  return Object.freeze({
    database,
    table,
    outbox: q(''),
    buckets: q('_buckets'),
    relays: q('_relays'),
    audit: q('_audit'),
    migrations: q('_migrations'),
    lockName: migrationLockName(database, table),
  });
}

export interface MysqlInboxNames {
  readonly database: string | undefined;
  readonly table: string;
  readonly inbox: string;
  /** The per-key lock rows of versioned events. */
  readonly keys: string;
  readonly audit: string;
  readonly migrations: string;
  /** The GET_LOCK name that serializes migrations of these tables. */
  readonly lockName: string;
}

/** Names of an inbox table and its companions (`<table>_keys`, `<table>_audit`, `<table>_migrations`); `database`, `table` validated and named in the error. Default table: `inbox`. */
export function mysqlInboxNames(options: MysqlNamesOptions = {}): MysqlInboxNames {
  const database = options.database === undefined ? undefined : checkIdentifier('database', options.database, 64);
  const table = checkIdentifier('table', options.table ?? 'inbox', 50);
  const q = (suffix: string) => (database ? `${tick(database)}.` : '') + tick(table + suffix);
  return Object.freeze({
    database,
    table,
    inbox: q(''),
    keys: q('_keys'),
    audit: q('_audit'),
    migrations: q('_migrations'),
    lockName: migrationLockName(database, table),
  });
}

export const NOW = 'UTC_TIMESTAMP(6)';

/** The outbox columns the relay reads, as `rowToEvent` takes them. JSON columns go through CONCAT so that they arrive as text (mysql2 parses columns the server labels JSON, which drops the payload's stored text). */
export const EVENT_COLUMNS =
  "o.seq, o.id, o.type, o.aggregate_type, o.aggregate_id, o.`key`, o.bucket, o.destination, CONCAT('', o.payload) AS payload, CONCAT('', o.headers) AS headers, " +
  "DATE_FORMAT(o.occurred_at, '%Y-%m-%dT%H:%i:%s.%fZ') AS occurred_at, o.version, o.attempts, CONCAT('', o.routes_done) AS routes_done";

/** One VALUES row of the insert: 10 placeholders, the bucket computed from the key by the server. */
const ROW = '(?, ?, ?, ?, ?, CRC32(?) & 255, ?, ?, ?, ?, ?)';

/** INSERT of `count` events, in array order (AUTO_INCREMENT gives increasing seq in VALUES order). */
export function insertEventsSql(n: MysqlNames, count: number): string {
  return `INSERT INTO ${n.outbox} (id, type, aggregate_type, aggregate_id, \`key\`, bucket, destination, payload, headers, occurred_at, version) VALUES ${Array.from({ length: count }, () => ROW).join(', ')}`;
}

/**
 * Publishable events of the leased buckets, in outbox order: pending, not
 * backing off, and no earlier event of its key backing off (or deferred) or
 * parked (unless its destination is in the skip list, `?` x skip).
 * Params: buckets..., skip destinations..., limit.
 */
export function claimSql(n: MysqlNames, buckets: number, skip: number): string {
  const inList = (k: number) => Array.from({ length: k }, () => '?').join(', ');
  const parkedBlocks = skip === 0 ? "b.state = 'parked'" : `(b.state = 'parked' AND b.destination NOT IN (${inList(skip)}))`;
  return `SELECT ${EVENT_COLUMNS} FROM ${n.outbox} o
WHERE o.bucket IN (${inList(buckets)}) AND o.state = 'pending' AND (o.next_attempt_at IS NULL OR o.next_attempt_at <= ${NOW})
  AND NOT EXISTS (
    SELECT 1 FROM ${n.outbox} b
    WHERE b.\`key\` = o.\`key\` AND b.seq < o.seq AND b.bucket = o.bucket
      AND ((b.state = 'pending' AND b.next_attempt_at > ${NOW}) OR ${parkedBlocks})
  )
ORDER BY o.seq
LIMIT ?`;
}

/**
 * Deletes the given seqs (`?` x count, then the `where` condition's
 * parameters) by primary key. The index hint matters: on a small table the
 * server would rather scan, and a scan locks every row it passes, waiting for
 * a producer's uncommitted insert; a hint needs the multi-table form.
 */
export function deleteFinishedSql(outbox: string, count: number, where: string): string {
  return `DELETE o FROM ${outbox} o FORCE INDEX (PRIMARY) WHERE o.seq IN (${Array.from({ length: count }, () => '?').join(', ')}) AND ${where}`;
}
