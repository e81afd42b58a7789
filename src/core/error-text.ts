/** Longest error text txbox stores in a row (`last_error`), in UTF-16 code units. */
export const MAX_ERROR_TEXT = 2000;

/**
 * Makes an error message safe to store in a PostgreSQL `text` column and to
 * log: NUL (which PostgreSQL text refuses) and lone UTF-16 surrogates (which
 * are not valid Unicode) become U+FFFD, and the text is cut to `max` code
 * units without splitting a surrogate pair. Other characters are kept.
 */
export function scrubErrorText(text: string, max: number = MAX_ERROR_TEXT): string {
  let s = text.length > max ? text.slice(0, max) : text;
  if (s.length < text.length && isHighSurrogate(s.charCodeAt(s.length - 1))) s = s.slice(0, -1);
  return s.replace(UNSAFE, '\uFFFD');
}

/** NUL, a high surrogate not followed by a low one, or a low surrogate not preceded by a high one. */
const UNSAFE = /\u0000|[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/g;

function isHighSurrogate(code: number): boolean {
  return code >= 0xd800 && code <= 0xdbff;
}

/**
 * The text of anything thrown, never throwing itself: a handler or a user's
 * function may throw an Error whose `message` is not a string, an object
 * without a prototype (no `toString`), a Symbol, or an object whose
 * `toString` throws.
 */
export function thrownText(err: unknown): string {
  if (err instanceof Error) {
    const message: unknown = err.message;
    if (typeof message === 'string') return message;
    return `${typeof err.name === 'string' && err.name !== '' ? err.name : 'Error'} (its message is not a string)`;
  }
  try {
    return String(err);
  } catch {
    return Object.prototype.toString.call(err);
  }
}
