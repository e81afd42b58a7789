/**
 * Cheaper forms of two conversions `pg` does on every relay batch, with the
 * same results: array parameters (the complete statement sends several
 * arrays of 500 values) and the empty `text[]` column of every claimed row
 * (`routes_done`). Used by `pgConnection` only.
 */
import pg from 'pg';

/**
 * The text `pg` sends for an array parameter of strings, numbers, bigints,
 * booleans and nulls (`{"1","2",NULL}`: each element quoted and escaped as
 * pg's `arrayString` does), built without a regular expression per element;
 * `undefined` when an element is of another kind (nested array, Buffer, Date,
 * object): pg converts those itself.
 */
export function arrayParamText(values: readonly unknown[]): string | undefined {
  let out = '{';
  for (let i = 0; i < values.length; i++) {
    if (i > 0) out += ',';
    const v = values[i];
    if (v === null || v === undefined) {
      out += 'NULL';
    } else if (typeof v === 'string') {
      out += v.includes('\\') || v.includes('"') ? `"${v.replace(/\\/g, '\\\\').replace(/"/g, '\\"')}"` : `"${v}"`;
    } else if (typeof v === 'number' || typeof v === 'bigint' || typeof v === 'boolean') {
      out += `"${v.toString()}"`;
    } else {
      return undefined;
    }
  }
  return `${out}}`;
}

/** The parameters as pg would send them, arrays of plain values already turned into their text. */
export function preparedParams(params: readonly unknown[]): unknown[] {
  const out = new Array<unknown>(params.length);
  for (let i = 0; i < params.length; i++) {
    const p = params[i];
    out[i] = Array.isArray(p) ? (arrayParamText(p) ?? p) : p;
  }
  return out;
}

const TEXT_ARRAY_OID = 1009;
const EMPTY_TEXT_ARRAY = '{}';

/**
 * pg's type parsers (the global ones, `pg.types.setTypeParser` included, looked up at each
 * query as pg does), except that an empty `text[]` is not run through the array parser when
 * that parser reads `{}` as an empty array anyway: the same `[]`, a new one each time.
 */
export function relayTypes(): { getTypeParser(oid: number, format?: string): (value: string) => unknown } {
  const overrides = new pg.TypeOverrides();
  const parserOf = (oid: number, format: string): ((value: string) => unknown) =>
    (overrides.getTypeParser as unknown as (oid: number, format: string) => (value: string) => unknown).call(overrides, oid, format);
  return {
    getTypeParser(oid: number, format: string = 'text') {
      const parse = parserOf(oid, format);
      if (oid !== TEXT_ARRAY_OID || format !== 'text') return parse;
      const empty = parse(EMPTY_TEXT_ARRAY);
      if (!Array.isArray(empty) || empty.length !== 0) return parse;
      return (value: string): unknown => (value === EMPTY_TEXT_ARRAY ? [] : parse(value));
    },
  };
}
