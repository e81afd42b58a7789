import { ConfigError } from './errors.ts';

/** The length is checked on its own (`maxLength`: 63 on PostgreSQL, 64 on MySQL). */
const IDENTIFIER_RE = /^[A-Za-z_][A-Za-z0-9_]*$/;

/**
 * Longest table name: every name the migrations derive from it must still fit
 * in 63 bytes, the longest being `<table>_blocking_key_idx` (17 more).
 * test/integration/migrate.test.ts migrates a table of this length.
 */
export const MAX_TABLE_NAME_LENGTH = 46;

/**
 * Checks a schema or table name from configuration and returns it quoted for SQL.
 * Throws a ConfigError naming `field` when the name is not a plain identifier.
 */
export function checkIdentifier(field: string, value: unknown, maxLength = 63): string {
  if (typeof value !== 'string' || !IDENTIFIER_RE.test(value) || value.length > maxLength) {
    const example = /schema/i.test(field) ? '"txbox" or "billing"' : '"outbox" or "order_outbox"';
    throw new ConfigError(
      field,
      `${JSON.stringify(value)} is not a valid name${whyNot(value, maxLength)}; use letters, digits and underscores, starting with a letter or underscore, at most ${maxLength} characters; e.g. ${example}`,
    );
  }
  return value;
}

/** The first reason a name is refused, for the message. */
function whyNot(value: unknown, maxLength: number): string {
  if (typeof value !== 'string') return ` (it is a ${value === null ? 'null' : typeof value}, not a string)`;
  if (value.length === 0) return ' (it is empty)';
  if (value.length > maxLength) return ` (it has ${value.length} characters)`;
  if (/^[0-9]/.test(value)) return ' (it starts with a digit)';
  const bad = /[^A-Za-z0-9_]/.exec(value)?.[0];
  return bad === undefined ? '' : ` (it contains ${JSON.stringify(bad)})`;
}

/** Quotes an identifier that has already passed checkIdentifier. */
export function quoteIdent(name: string): string {
  return `"${name}"`;
}
