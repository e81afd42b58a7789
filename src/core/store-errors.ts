/**
 * Tells a store error that the same input will always get (a value
 * PostgreSQL or MySQL refuses, a constraint on txbox's own row) from an outage (the
 * connection refused or dropped, the server shutting down, a timeout, a
 * deadlock). Consumers retry an outage in place for as long as it lasts; a
 * deterministic error would wedge them, so the inbox dead-letters the event
 * after a bounded number of tries instead. One place for every consumer.
 */

/** SQLSTATE classes that depend on the data sent, not on the server's state: data exception (22), integrity constraint violation (23). */
const DETERMINISTIC_CLASSES = new Set(['22', '23']);
import { thrownText } from './error-text.ts';
import { brokerOutage } from './broker-outage.ts';
/** Single codes of other classes that are deterministic too: program limit exceeded (54000: e.g. a value too large), statement too complex (54001). */
const DETERMINISTIC_CODES = new Set(['54000', '54001']);

/**
 * MySQL / MariaDB server errors that depend on the data sent, matched on
 * errno (mysql2's `code` names differ between servers and versions):
 * duplicate entry (1062), column cannot be null (1048), out of range (1264,
 * 1690), data truncated or too long (1265, 1406), incorrect value for the
 * column's type, charset or date (1292, 1366, 1367, 1411), a foreign key
 * (1451, 1452, 1216, 1217), a CHECK constraint (MariaDB 4025, MySQL 3819),
 * invalid JSON (MySQL 3140, 3141, 3146), division by zero in strict mode
 * (1365). Everything else (deadlock 1213, lock wait timeout 1205, server
 * gone 2006/2013, too many connections 1040, shutdown 1053, killed 1927,
 * a missing table 1146, connection errors) is an outage.
 */
const MYSQL_DETERMINISTIC_ERRNOS = new Set([1048, 1062, 1216, 1217, 1264, 1265, 1292, 1365, 1366, 1367, 1406, 1411, 1451, 1452, 1690, 3140, 3141, 3146, 3819, 4025]);

export type StoreErrorKind = 'deterministic' | 'outage';

/** The MySQL / MariaDB server errno in an error or its cause chain (an error with `errno` and mysql2's `sqlMessage`), or 0. */
export function mysqlErrno(err: unknown): number {
  for (let e: unknown = err, depth = 0; e !== null && typeof e === 'object' && depth < 8; e = (e as { cause?: unknown }).cause, depth++) {
    const { errno, sqlMessage } = e as { errno?: unknown; sqlMessage?: unknown };
    if (typeof errno === 'number' && errno > 0 && typeof sqlMessage === 'string') return errno;
  }
  return 0;
}

/** The SQLSTATE in an error or its cause chain, or ''. */
export function sqlState(err: unknown): string {
  for (let e: unknown = err, depth = 0; e !== null && typeof e === 'object' && depth < 8; e = (e as { cause?: unknown }).cause, depth++) {
    const code = (e as { code?: unknown }).code;
    if (typeof code === 'string' && /^[0-9A-Z]{5}$/.test(code)) return code;
  }
  return '';
}

/**
 * `deterministic` for SQLSTATE classes 22 and 23 and codes 54000/54001
 * (e.g. 22P05 untranslatable character, 22021 NUL in text, 22P02 invalid
 * text representation, 23505 on txbox's own row); `outage` for everything
 * else: connection errors (08xxx, ECONNREFUSED, terminated), admin shutdown
 * (57P01), cancelled or timed out (57014), serialization failures and
 * deadlocks (40xxx), a missing table (42P01: fix the migration, the event
 * is fine) and errors without a SQLSTATE. MySQL / MariaDB errors are told
 * by errno (MYSQL_DETERMINISTIC_ERRNOS).
 */
export function classifyStoreError(err: unknown): StoreErrorKind {
  const errno = mysqlErrno(err);
  if (errno !== 0) return MYSQL_DETERMINISTIC_ERRNOS.has(errno) ? 'deterministic' : 'outage';
  const code = sqlState(err);
  if (code === '') return 'outage';
  return DETERMINISTIC_CLASSES.has(code.slice(0, 2)) || DETERMINISTIC_CODES.has(code) ? 'deterministic' : 'outage';
}

/**
 * MySQL's data errors quote the refused value (`Incorrect string value:
 * '\xF0...' for column`, `Duplicate entry 'a-b' for key`, `Truncated
 * incorrect DOUBLE value: 'x'`): the quoted text is replaced, so that no
 * payload or key reaches a dead-letter reason or a log.
 */
export function scrubMysqlMessage(message: string): string {
  // The value runs from the quote after "entry"/"value:" to the last quote before "for key|column" (or the end):
  // greedy, so that a quote inside the value does not end it early.
  const named = /^(.*?\b(?:entry|value:?)\s)'.*'(\s+for\s+(?:key|column)\b.*)$/s.exec(message);
  if (named) return `${named[1]}(value not shown)${named[2]}`;
  const last = /^(.*?\b(?:entry|value:?)\s)'.*'\s*$/s.exec(message);
  return last ? `${last[1]}(value not shown)` : message;
}

/** The error's message with its SQLSTATE (or MySQL errno), for a dead-letter reason (never a payload: PostgreSQL's data errors name the type, not the value, except 22P02 which quotes the bad input; MySQL's quoted values are scrubbed; cut to `max`). */
export function storeErrorText(err: unknown, max = 500): string {
  const errno = mysqlErrno(err);
  const code = errno === 0 ? sqlState(err) : '';
  const raw = thrownText(err);
  const message = errno === 0 ? raw : scrubMysqlMessage(raw);
  const text = `${errno !== 0 ? `MySQL error ${errno}: ` : code ? `SQLSTATE ${code}: ` : ''}${message}`.replace(/\u0000/g, '\ufffd');
  return text.length > max ? `${text.slice(0, max - 3)}...` : text;
}

/** SQLSTATEs of a server that cannot be used right now: connection (08), shutting down or crashed (57P01-57P03), out of resources (53). */
const UNREACHABLE_STATE = /^(08|53|57P0[123])/;
/** Client-side texts of a connection that failed without a code (pg, mysql2). */
const UNREACHABLE_TEXT = /connection terminated|timeout exceeded when trying to connect|connection (?:is in closed state|lost)|server has gone away|PROTOCOL_CONNECTION_LOST/i;
/** MySQL/MariaDB: too many connections, can't connect, server gone away, lost connection. */
const UNREACHABLE_ERRNOS = new Set([1040, 2002, 2003, 2006, 2013]);

/**
 * True when `err` says the store cannot be reached or used right now (nothing
 * answers, the connection broke, the server is shutting down or full, gRPC
 * UNAVAILABLE), as opposed to a failure of this one call. A receiver answers
 * such failures "unavailable" (503), which senders wait out without counting
 * attempts; anything else stays a failure of the event.
 */
export function isStoreUnreachable(err: unknown): boolean {
  if (brokerOutage(err) !== null) return true;
  if (UNREACHABLE_STATE.test(sqlState(err)) || UNREACHABLE_ERRNOS.has(mysqlErrno(err))) return true;
  for (let e: unknown = err, depth = 0; e !== null && typeof e === 'object' && depth < 8; e = (e as { cause?: unknown }).cause, depth++) {
    const { code, message } = e as { code?: unknown; message?: unknown };
    if (code === 14 || code === 'PROTOCOL_CONNECTION_LOST') return true; // gRPC UNAVAILABLE (Firestore), mysql2
    if (typeof message === 'string' && UNREACHABLE_TEXT.test(message)) return true;
  }
  return false;
}
