/**
 * Tells a store error that the same input will always get (a value
 * PostgreSQL refuses, a constraint on txbox's own row) from an outage (the
 * connection refused or dropped, the server shutting down, a timeout, a
 * deadlock). Consumers retry an outage in place for as long as it lasts; a
 * deterministic error would wedge them, so the inbox dead-letters the event
 * after a bounded number of tries instead. One place for every consumer.
 */

/** SQLSTATE classes that depend on the data sent, not on the server's state: data exception (22), integrity constraint violation (23). */
const DETERMINISTIC_CLASSES = new Set(['22', '23']);
/** Single codes of other classes that are deterministic too: program limit exceeded (54000: e.g. a value too large), statement too complex (54001). */
const DETERMINISTIC_CODES = new Set(['54000', '54001']);

export type StoreErrorKind = 'deterministic' | 'outage';

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
 * is fine) and errors without a SQLSTATE.
 */
export function classifyStoreError(err: unknown): StoreErrorKind {
  const code = sqlState(err);
  if (code === '') return 'outage';
  return DETERMINISTIC_CLASSES.has(code.slice(0, 2)) || DETERMINISTIC_CODES.has(code) ? 'deterministic' : 'outage';
}

/** The error's message with its SQLSTATE, for a dead-letter reason (never a payload: PostgreSQL's data errors name the type, not the value, except 22P02 which quotes the bad input; cut to `max`). */
export function storeErrorText(err: unknown, max = 500): string {
  const code = sqlState(err);
  const message = err instanceof Error ? err.message : String(err);
  const text = `${code ? `SQLSTATE ${code}: ` : ''}${message}`.replace(/\u0000/g, '\ufffd');
  return text.length > max ? `${text.slice(0, max - 3)}...` : text;
}
