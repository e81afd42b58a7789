import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import pg from 'pg';
import { arrayParamText, preparedParams, relayTypes } from '../../src/stores/postgres/pg-values.ts';

// pg's own conversion, to compare against: the text it sends for a parameter.
// pg's global parsers, by oid (its typings list only some oids).
const globalTypes = pg.types as unknown as { getTypeParser(oid: number, format?: string): (v: string) => unknown; setTypeParser(oid: number, parse: (v: string) => unknown): void };
const { prepareValue } = createRequire(import.meta.url)('pg/lib/utils.js') as { prepareValue(v: unknown): unknown };

describe('pg values: the same text and rows as pg, cheaper', () => {
  it('turns arrays of plain values into the text pg sends for them', () => {
    const cases: unknown[][] = [
      [],
      [1, 2, 3],
      [0, -0, 1.5, -2e-7, Number.MAX_SAFE_INTEGER, 2n ** 70n],
      ['plain', '', ' spaced ', 'a,b', '{braces}', 'NULL', 'null', 'quote"inside', 'back\\slash', '\\"both\\"', 'é ☃ \u{1F600}', 'line\nbreak'],
      [null, undefined, 'x', null],
      [true, false],
      ['9223372036854775807', '1'],
    ];
    for (const values of cases) assert.equal(arrayParamText(values), prepareValue(values), JSON.stringify(values, (_k, v: unknown) => (typeof v === 'bigint' ? `${v}n` : v)));
  });

  it('leaves arrays of other values to pg', () => {
    assert.equal(arrayParamText([[1, 2]]), undefined);
    assert.equal(arrayParamText([new Date(0)]), undefined);
    assert.equal(arrayParamText([Buffer.from('a')]), undefined);
    assert.equal(arrayParamText([{ a: 1 }]), undefined);
    const nested = [[1], [2]];
    const params = preparedParams(['relay-1', [1, 2], nested, null, 5]);
    assert.deepEqual(params, ['relay-1', '{"1","2"}', nested, null, 5]);
    assert.equal(params[2], nested, 'the same array, for pg to convert');
  });

  it('reads an empty text[] as [] and every other value with pg parsers', () => {
    const types = relayTypes();
    const textArray = types.getTypeParser(1009, 'text');
    const a = textArray('{}');
    const b = textArray('{}');
    assert.deepEqual(a, []);
    assert.notEqual(a, b, 'a new array each time');
    for (const text of ['{a,b}', '{"x,y",NULL,""}', '{{a},{b}}']) assert.deepEqual(textArray(text), globalTypes.getTypeParser(1009, 'text')(text));
    for (const oid of [20, 23, 25, 114, 1082, 1114, 1184, 3802]) assert.equal(types.getTypeParser(oid, 'text'), globalTypes.getTypeParser(oid, 'text'), `oid ${oid}`);
  });

  it('follows parsers set globally with pg.types.setTypeParser, also after it was made', () => {
    const before = globalTypes.getTypeParser(1009, 'text');
    const types = relayTypes();
    const custom = (v: string): unknown => `custom ${v}`;
    globalTypes.setTypeParser(1009, custom);
    try {
      assert.equal(types.getTypeParser(1009, 'text')('{}'), 'custom {}', 'a parser that does not read {} as [] is used for {} too');
      assert.equal(types.getTypeParser(1009, 'text')('{a}'), 'custom {a}');
    } finally {
      globalTypes.setTypeParser(1009, before);
    }
  });
});
