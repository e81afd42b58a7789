import { ConfigError } from './errors.ts';

const IDENTIFIER_RE = /^[A-Za-z_][A-Za-z0-9_]{0,62}$/;

/** Longest table name: suffixed names such as `<table>_buckets` must still fit in 63 bytes. */
export const MAX_TABLE_NAME_LENGTH = 48;

/**
 * Checks a schema or table name from configuration and returns it quoted for SQL.
 * Throws a ConfigError naming `field` when the name is not a plain identifier.
 */
export function checkIdentifier(field: string, value: unknown, maxLength = 63): string {
  if (typeof value !== 'string' || !IDENTIFIER_RE.test(value) || value.length > maxLength) {
    throw new ConfigError(
      field,
      `${JSON.stringify(value)} is not a valid name; use letters, digits and underscores, starting with a letter or underscore, at most ${maxLength} characters${typeof value === 'string' && value.length > maxLength ? ` (this one has ${value.length})` : ''}; e.g. "txbox" or "order_events"`,
    );
  }
  return value;
}

/** Quotes an identifier that has already passed checkIdentifier. */
export function quoteIdent(name: string): string {
  return `"${name}"`;
}
