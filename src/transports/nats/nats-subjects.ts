/**
 * Subject and stream-name rules of the NATS transport, and how an ordering
 * key becomes one subject token (`keyInSubject`).
 */
import { createHash } from 'node:crypto';

/** Characters a subject must not contain anywhere: whitespace and control characters break the protocol line, `*` and `>` are wildcards. */
const SUBJECT_FORBIDDEN = /[\s\x00-\x1f\x7f*>]/;
/** The server refuses these in stream names (they become file names). */
const STREAM_FORBIDDEN = /[\s.*>/\\\x00-\x1f\x7f]/;

/** Why `subject` cannot be published to, or null when it is fine. Never quotes the subject. */
export function subjectProblem(subject: string): string | null {
  if (subject === '') return 'is empty; a subject is dot-separated tokens such as "shop.orders"';
  if (SUBJECT_FORBIDDEN.test(subject)) return 'must not contain spaces, control characters or the wildcards * and >';
  if (subject.startsWith('.') || subject.endsWith('.') || subject.includes('..')) return 'has an empty token (a leading, trailing or double dot)';
  return null;
}

/** Why `name` cannot be a JetStream stream name, or null when it is fine. */
export function streamNameProblem(name: string): string | null {
  if (name === '' || name.length > 255) return 'must be 1 to 255 characters long';
  if (STREAM_FORBIDDEN.test(name)) return 'must not contain spaces, dots, *, >, / or \\ (stream names become file names)';
  return null;
}

/** Key characters kept as they are in a subject token. */
const SAFE_KEY = /^[A-Za-z0-9_:=-]+$/;
const KEEP = /[A-Za-z0-9_:=-]/;
/** Longest key token; longer ones are shortened with a hash. The whole subject must fit the server's 4 KiB control line. */
export const MAX_KEY_TOKEN_LENGTH = 128;
const HASHED_PREFIX_LENGTH = 88;

/**
 * The ordering key as one subject token. `A-Z a-z 0-9 _ - : =` stay; every
 * other character becomes `%XX` per UTF-8 byte (so `.`, `*`, `>`, spaces and
 * `%` itself cannot split or widen the subject, and different keys give
 * different tokens); the empty key is `%`. A token longer than 128
 * characters keeps its first 88 and appends `~` and 32 hex digits of the
 * key's SHA-256 (`~` never appears otherwise).
 *
 * @example
 * keyToken('Order:17')     // 'Order:17'
 * keyToken('tenant a.b/7') // 'tenant%20a%2Eb%2F7'
 */
export function keyToken(key: string): string {
  let token: string;
  if (key === '') token = '%';
  else if (SAFE_KEY.test(key)) token = key;
  else {
    token = '';
    for (const ch of key) {
      if (KEEP.test(ch)) token += ch;
      else for (const byte of Buffer.from(ch, 'utf8')) token += `%${byte < 16 ? '0' : ''}${byte.toString(16).toUpperCase()}`;
    }
  }
  if (token.length <= MAX_KEY_TOKEN_LENGTH) return token;
  const digest = createHash('sha256').update(key, 'utf8').digest('hex').slice(0, 32);
  return `${token.slice(0, HASHED_PREFIX_LENGTH)}~${digest}`;
}
