import { InvalidEventError } from './errors.ts';
import { thrownText } from './error-text.ts';

/** A UTF-16 surrogate without its pair: not valid Unicode, refused by PostgreSQL's json and silently replaced in text columns. */
export const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;
export const LONE_SURROGATE_MESSAGE = 'contains a lone UTF-16 surrogate (half of an emoji or other character cut in two), which is not valid Unicode; fix how the string was sliced';

/** Any character that may need a closer look: NUL, or either half of a surrogate pair. One cheap scan rules most strings out. */
const SUSPECT = /[\u0000\uD800-\uDFFF]/;

/**
 * Why `value` cannot be stored as text by PostgreSQL (a NUL character, or a
 * lone surrogate: `LONE_SURROGATE_MESSAGE`), or undefined when it can.
 */
export function textProblem(value: string): 'nul' | 'surrogate' | undefined {
  if (!SUSPECT.test(value)) return undefined;
  if (value.includes('\u0000')) return 'nul';
  return LONE_SURROGATE.test(value) ? 'surrogate' : undefined;
}

/**
 * Serializes a payload to JSON, refusing what JSON would silently change or drop:
 * functions, symbols, bigints, NaN and Infinity, `undefined` array items, Map,
 * Set and other class instances (Date and objects with toJSON are allowed),
 * and cycles. The error names the path of the bad value.
 */
export function serializePayload(field: string, payload: unknown): string {
  if (payload === undefined) {
    throw new InvalidEventError(field, 'payload is undefined; pass a JSON value (an object, array, string, number, boolean or null)');
  }
  // The fast walk checks values' types only. Strings are checked in the JSON text instead, in one
  // scan: JSON.stringify writes NUL and lone surrogates (never a valid pair) as \u0000 and \ud800-\udfff
  // escapes. Anything suspect runs the full walk, which finds the first problem in payload order
  // (the error callers always got) or clears a false alarm (a string holding a backslash and "u0000").
  let json: string | undefined;
  if (walks(payload, false)) {
    try {
      json = JSON.stringify(payload);
    } catch {
      // Cannot happen after the walk (no bigint, no cycle) unless a toJSON throws: the full walk or stringify says why.
    }
    if (json !== undefined && !SUSPECT_ESCAPE.test(json)) return json;
  }
  try {
    checkJson(payload, [], true);
  } catch (err) {
    if (!(err instanceof JsonProblem)) throw err;
    let path = field;
    for (let i = err.keys.length - 1; i >= 0; i--) {
      const key = err.keys[i]!;
      path += typeof key === 'number' ? `[${key}]` : `.${key}`;
    }
    throw new InvalidEventError(path, err.message);
  }
  if (json !== undefined) return json;
  try {
    json = JSON.stringify(payload);
  } catch (err) {
    throw new InvalidEventError(field, `cannot be serialized to JSON: ${thrownText(err)}`);
  }
  if (json === undefined) throw new InvalidEventError(field, 'serializes to nothing (undefined); pass a JSON value');
  return json;
}

/** In JSON text: the escape of NUL or of a surrogate (JSON.stringify escapes only lone ones). */
const SUSPECT_ESCAPE = /\\u(?:0000|d[89a-f])/;

/** Whether checkJson passes (`strings`: also checks strings and property names). */
function walks(payload: unknown, strings: boolean): boolean {
  try {
    checkJson(payload, [], strings);
    return true;
  } catch (err) {
    if (err instanceof JsonProblem) return false;
    throw err;
  }
}

/**
 * What checkJson throws: the problem, and the keys from the bad value up to
 * the payload, added as the recursion unwinds, so that the walk builds no
 * path text unless something is wrong.
 */
class JsonProblem {
  readonly keys: (string | number)[] = [];
  constructor(readonly message: string) {}
}

/**
 * `parents`: the objects and arrays around `value`, for the cycle check (a
 * payload's depth is small). `strings`: also check strings and property names.
 */
function checkJson(value: unknown, parents: object[], strings: boolean, callToJSON = true): void {
  switch (typeof value) {
    case 'string': {
      if (!strings) return;
      const problem = textProblem(value);
      if (problem === 'nul') throw new JsonProblem('contains a NUL character (\\u0000), which PostgreSQL cannot store in JSON; remove it or encode the data');
      if (problem === 'surrogate') throw new JsonProblem(LONE_SURROGATE_MESSAGE);
      return;
    }
    case 'boolean':
      return;
    case 'number':
      if (!Number.isFinite(value)) throw new JsonProblem(`${value} is not representable in JSON`);
      return;
    case 'bigint':
      throw new JsonProblem('a bigint is not representable in JSON; convert it to a string');
    case 'undefined':
      throw new JsonProblem('undefined is not representable in JSON; use null or omit the field');
    case 'function':
    case 'symbol':
      throw new JsonProblem(`a ${typeof value} is not representable in JSON`);
  }
  if (value === null) return;
  const obj = value as object;
  if (parents.includes(obj)) throw new JsonProblem('the payload contains a cycle');
  const toJSON = (obj as { toJSON?: unknown }).toJSON;
  if (callToJSON && typeof toJSON === 'function') {
    if (obj instanceof Date) return;
    // What JSON.stringify stores is what toJSON returns (its own toJSON is not called again): check that.
    let out: unknown;
    try {
      out = (toJSON as (this: object, key: string) => unknown).call(obj, '');
    } catch (err) {
      throw new JsonProblem(`its toJSON() threw: ${thrownText(err)}`);
    }
    if (out === undefined) {
      if (parents.length > 0) return; // JSON omits it (null in an array), as callers expect
      throw new JsonProblem('its toJSON() returned undefined: nothing to store; pass a JSON value');
    }
    parents.push(obj);
    checkJson(out, parents, strings, false);
    parents.pop();
    return;
  }
  parents.push(obj);
  if (Array.isArray(obj)) {
    for (let i = 0; i < obj.length; i++) {
      const item: unknown = obj[i];
      if (item === undefined && !(i in obj)) continue; // a hole: JSON.stringify writes null, as before
      try {
        checkJson(item, parents, strings);
      } catch (err) {
        if (err instanceof JsonProblem) err.keys.push(i);
        throw err;
      }
    }
  } else {
    const proto: unknown = Object.getPrototypeOf(obj);
    if (proto !== Object.prototype && proto !== null) {
      const name = (obj as { constructor?: { name?: string } }).constructor?.name ?? 'object';
      throw new JsonProblem(`a ${name} instance does not serialize to JSON faithfully; convert it to a plain object or array`);
    }
    for (const k of Object.keys(obj)) {
      const v: unknown = (obj as Record<string, unknown>)[k];
      if (v === undefined) continue; // JSON omits undefined properties, as callers expect
      const problem = strings ? textProblem(k) : undefined;
      if (problem === 'nul') throw new JsonProblem('has a property name with a NUL character, which PostgreSQL cannot store in JSON');
      if (problem === 'surrogate') throw new JsonProblem(`has a property name with ${LONE_SURROGATE_MESSAGE.slice('contains '.length)}`);
      try {
        checkJson(v, parents, strings);
      } catch (err) {
        if (err instanceof JsonProblem) err.keys.push(k);
        throw err;
      }
    }
  }
  parents.pop();
}
