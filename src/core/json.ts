import { InvalidEventError } from './errors.ts';

/** A UTF-16 surrogate without its pair: not valid Unicode, refused by PostgreSQL's json and silently replaced in text columns. */
export const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;
export const LONE_SURROGATE_MESSAGE = 'contains a lone UTF-16 surrogate (half of an emoji or other character cut in two), which is not valid Unicode; fix how the string was sliced';

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
  checkJson(payload, field, new Set());
  return JSON.stringify(payload);
}

function checkJson(value: unknown, path: string, seen: Set<object>): void {
  switch (typeof value) {
    case 'string':
      if (value.includes('\u0000')) fail(path, 'contains a NUL character (\\u0000), which PostgreSQL cannot store in JSON; remove it or encode the data');
      if (LONE_SURROGATE.test(value)) fail(path, LONE_SURROGATE_MESSAGE);
      return;
    case 'boolean':
      return;
    case 'number':
      if (!Number.isFinite(value)) fail(path, `${value} is not representable in JSON`);
      return;
    case 'bigint':
      fail(path, 'a bigint is not representable in JSON; convert it to a string');
      return;
    case 'undefined':
      fail(path, 'undefined is not representable in JSON; use null or omit the field');
      return;
    case 'function':
    case 'symbol':
      fail(path, `a ${typeof value} is not representable in JSON`);
      return;
  }
  if (value === null) return;
  const obj = value as object;
  if (seen.has(obj)) fail(path, 'the payload contains a cycle');
  if (typeof (obj as { toJSON?: unknown }).toJSON === 'function') return; // Date and friends
  seen.add(obj);
  if (Array.isArray(obj)) {
    obj.forEach((item: unknown, i) => checkJson(item, `${path}[${i}]`, seen));
  } else {
    const proto: unknown = Object.getPrototypeOf(obj);
    if (proto !== Object.prototype && proto !== null) {
      const name = (obj as { constructor?: { name?: string } }).constructor?.name ?? 'object';
      fail(path, `a ${name} instance does not serialize to JSON faithfully; convert it to a plain object or array`);
    }
    for (const [k, v] of Object.entries(obj)) {
      if (v === undefined) continue; // JSON omits undefined properties, as callers expect
      if (k.includes('\u0000')) fail(path, 'has a property name with a NUL character, which PostgreSQL cannot store in JSON');
      if (LONE_SURROGATE.test(k)) fail(path, `has a property name with ${LONE_SURROGATE_MESSAGE.slice('contains '.length)}`);
      checkJson(v, `${path}.${k}`, seen);
    }
  }
  seen.delete(obj);
}

function fail(path: string, message: string): never {
  throw new InvalidEventError(path, message);
}
